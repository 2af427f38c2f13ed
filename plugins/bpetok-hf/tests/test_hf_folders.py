"""Hugging Face model folders and tokenizer.json normalizers, against HF tokenizers and transformers.

The Qwen2 folder is what transformers' ``Qwen2TokenizerFast`` saves (``"normalizer": {"type":
"NFC"}``), built from the Qwen3 GGUF by scripts/make_hf_references.py; HF's ids on its
normalization texts are recorded in tests/data/qwen2-hf.jsonl.gz.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

import bpetok

SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "scripts"
DATA = pathlib.Path(__file__).parent / "data"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


references = _script("make_hf_references")


@pytest.fixture(scope="module")
def qwen2_folder(tmp_path_factory):
    return references.qwen2_folder(tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="module")
def qwen2(qwen2_folder):
    return bpetok.from_file(qwen2_folder)


def _hf(path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def test_qwen2_folder_gives_recorded_hf_ids(qwen2):
    with gzip.open(DATA / "qwen2-hf.jsonl.gz", "rt", encoding="utf-8") as f:
        cases = [json.loads(line) for line in f]
    assert len(cases) == len(references.NORMALIZATION_TEXTS)
    for case in cases:
        assert qwen2.encode(case["text"]) == case["ids"], case["text"]


def test_qwen2_folder_equals_hf_on_reference_texts_and_corpus(qwen2, qwen2_folder, oracle_texts, corpus):
    hf = _hf(qwen2_folder / "tokenizer.json")
    texts = [c["text"] for c in oracle_texts("qwen3")] + corpus + references.NORMALIZATION_TEXTS
    differ = [t for t in texts if qwen2.encode(t) != hf.encode(t, add_special_tokens=False).ids]
    assert not differ, f"{len(differ)} of {len(texts)} differ, e.g. {differ[0]!r:.200}"


def test_qwen2_folder_reads_the_configs(qwen2, qwen2_folder):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(qwen2_folder))
    assert qwen2.special_ids["eos"] == hf.eos_token_id == 151645
    assert qwen2.special_ids["pad"] == hf.pad_token_id == 151643
    assert qwen2.vocabulary.metadata["tokenizer.chat_template"] == hf.chat_template
    messages = [{"role": "user", "content": "Héllo"}]
    assert qwen2.apply_chat_template(messages, add_generation_prompt=True) == hf.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    assert qwen2.encode("Hi", add_special=True) == hf("Hi")["input_ids"]


def _with_files(tmp_path, folder, **files):
    out = tmp_path / "model"
    out.mkdir()
    (out / "tokenizer.json").write_bytes((folder / "tokenizer.json").read_bytes())
    for name, content in files.items():
        (out / f"{name}.json").write_text(json.dumps(content), encoding="utf-8")
    return out


def test_special_tokens_map_and_add_flags_as_transformers_reads_them(qwen2_folder, tmp_path):
    from transformers import AutoTokenizer

    config = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|endoftext|>", "bos_token": "<|im_start|>",
              "add_bos_token": True, "add_eos_token": True}
    folder = _with_files(tmp_path, qwen2_folder, tokenizer_config=config,
                         special_tokens_map={"eos_token": {"content": "<|im_end|>"}})
    tok = bpetok.from_file(folder)
    hf = AutoTokenizer.from_pretrained(str(folder))
    assert tok.special_ids["eos"] == hf.eos_token_id == 151645
    assert tok.special_ids["bos"] == hf.bos_token_id == 151644
    # transformers keeps the tokenizer.json's post-processor (no BOS/EOS here) over add_bos_token.
    assert tok.encode("Hi there", add_special=True) == hf("Hi there")["input_ids"] == [13048, 1052]


def test_folder_on_the_command_line(qwen2_folder):
    out = subprocess.run([sys.executable, "-m", "bpetok.apps.cli", "tokenize", str(qwen2_folder)], input="Cafe\u0301 <|im_end|>",
                         capture_output=True, text=True, timeout=120)
    hf = _hf(qwen2_folder / "tokenizer.json").encode("Cafe\u0301 <|im_end|>", add_special_tokens=False).ids
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["tokens"] == hf


def test_folder_without_tokenizer_json_is_refused(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(bpetok.VocabularyError, match="without tokenizer.json"):
        bpetok.from_file(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(bpetok.BpetokError, match="is a directory"):
        bpetok.from_file(other)


# -- normalizers ------------------------------------------------------------------------------------

NORMALIZERS = {
    "NFKC": {"type": "NFKC"},
    "NFD": {"type": "NFD"},
    "NFKD": {"type": "NFKD"},
    "lowercase_nfkc": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]},
    "strip_replace_prepend": {"type": "Sequence", "normalizers": [
        {"type": "Strip", "strip_left": True, "strip_right": True},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        {"type": "Replace", "pattern": {"Regex": "[0-9]+"}, "content": "#"},
        {"type": "Prepend", "prepend": "\u2581"},
    ]},
    "strip_left": {"type": "Strip", "strip_left": True, "strip_right": False},
    "lowercase": {"type": "Lowercase"},
}


@pytest.mark.parametrize("name", sorted(NORMALIZERS))
def test_normalizers_equal_hf(name, exported, oracle_texts, corpus, tmp_path):
    data = json.loads((exported("smollm2") / "tokenizer.json").read_text(encoding="utf-8"))
    data["normalizer"] = NORMALIZERS[name]
    for token in data["added_tokens"]:
        token["normalized"] = False
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    tok, hf = bpetok.from_file(path), _hf(path)
    texts = [c["text"] for c in oracle_texts("smollm2")][::4] + corpus[::4] + references.NORMALIZATION_TEXTS
    texts += ["  <|endoftext|>  x  <|endoftext|>", "<|endoftext|>", " 12 <|endoftext|>34 "]
    differ = [t for t in texts if tok.encode(t) != hf.encode(t, add_special_tokens=False).ids]
    assert not differ, f"{len(differ)} of {len(texts)} differ, e.g. {differ[0]!r:.200}"


@pytest.mark.parametrize("node, part", [
    ({"type": "BertNormalizer"}, "'BertNormalizer'"),
    ({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Precompiled", "precompiled_charsmap": ""}]},
     "normalizer.normalizers[1]"),
    ({"type": "Replace", "pattern": {"String": ""}, "content": "x"}, "normalizer.pattern"),
    ({"type": "Prepend", "prepend": 3}, "normalizer.prepend"),
    ({"type": "Strip", "left": True}, "normalizer.strip_left"),
])
def test_other_normalizers_are_refused_by_name(node, part, exported, tmp_path):
    data = json.loads((exported("smollm2") / "tokenizer.json").read_text(encoding="utf-8"))
    data["normalizer"] = node
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(bpetok.VocabularyError) as info:
        bpetok.from_file(path)
    assert part in str(info.value)
