"""SentencePiece-style tokenizer.json files read into bpetok's llama model, against HF tokenizers.

The files are what transformers' LlamaTokenizer / GemmaTokenizer write when converting a
SentencePiece model of the llama-spm GGUF (scripts/make_hf_references.py), and bpetok's own export
of llama GGUFs (transformers' legacy layout) and Gemma 4, whose ids must stay llama.cpp's."""

from __future__ import annotations

import functools
import importlib.util
import json
import pathlib

import pytest

import bpetok

SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "scripts"
DATA = pathlib.Path(__file__).parent / "data"
ROOT = pathlib.Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("make_hf_references", SCRIPTS / "make_hf_references.py")
references = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(references)

FOLDERS = {"llama": ("LlamaTokenizer", "hf-metaspace"), "gemma": ("GemmaTokenizer", "llama")}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    @functools.cache
    def get(name):
        pytest.importorskip("sentencepiece", reason="the test extra's sentencepiece builds the SentencePiece model")
        return references.spm_folder(tmp_path_factory.mktemp(name) / name, FOLDERS[name][0])

    return get


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_transformers_files_give_hf_ids(name, folder, reference_texts, read_jsonl):
    from tokenizers import Tokenizer

    path = folder(name) / "tokenizer.json"
    tok, hf = bpetok.from_file(folder(name)), Tokenizer.from_file(str(path))
    assert tok.vocabulary.model == FOLDERS[name][1]
    recorded = read_jsonl(DATA / f"{name}-spm-hf.jsonl.gz")
    for case in recorded:
        assert tok.encode(case["text"]) == case["ids"], case["text"]
    texts = reference_texts("llama-spm")
    differ = [t for t in texts if tok.encode(t) != hf.encode(t, add_special_tokens=False).ids]
    assert not differ, f"{len(differ)} of {len(texts)} differ, e.g. {differ[0]!r:.200}"
    assert tok.decode(tok.encode(" Hello  world")) == hf.decode(hf.encode(" Hello  world", add_special_tokens=False).ids)


@pytest.mark.parametrize("name, gguf, model", [("llama-spm", "ggml-vocab-llama-spm.gguf.gz", "llama"),
                                               ("phi-3", "ggml-vocab-phi-3.gguf.gz", "llama"),
                                               ("gemma-4", "ggml-vocab-gemma-4.gguf.gz", "gemma4")])
def test_exported_files_read_back_with_llama_cpp_ids(name, gguf, model, tmp_path, oracle_texts):
    from bpetok_hf.writer import export_hf

    export_hf(bpetok.from_file(ROOT / "tests/data/llama.cpp-tests" / gguf), tmp_path)
    tok = bpetok.from_file(tmp_path)
    assert tok.vocabulary.model == model and tok.add_bos
    cases = oracle_texts(name)
    differ = [c["text"] for c in cases if tok.encode(c["text"]) != c["ids"]]
    assert not differ, f"{len(differ)} of {len(cases)} differ, e.g. {differ[0]!r:.200}"


def _move_second_cut_last(merges):
    """Move the second merge of the first token with two to the end: that token's merges apart."""
    made = ["".join(m) for m in merges]
    i = next(i for i in range(1, len(made)) if made[i] == made[i - 1])
    merges.append(merges.pop(i))


def _changed(folder, tmp_path, change):
    data = json.loads((folder("llama") / "tokenizer.json").read_text(encoding="utf-8"))
    change(data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


REFUSALS = {
    "prepend_odd": (lambda d: d["pre_tokenizer"].update(prepend_scheme="sometimes"), "prepend_scheme"),
    "split_true": (lambda d: d["pre_tokenizer"].update(split=True), "pre_tokenizer.split"),
    "whitespace": (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "'Whitespace'"),
    "normalizer_nfkc": (lambda d: d.update(normalizer={"type": "NFKC"}), "normalizer"),
    "missing_merge": (lambda d: d["model"]["merges"].pop(5), "model.merges"),
    "merges_apart": (lambda d: _move_second_cut_last(d["model"]["merges"]), "must be consecutive"),
    "missing_byte": (lambda d: d["model"]["vocab"].pop("<0x41>"), "<0x41>"),
    "decoder": (lambda d: d.update(decoder={"type": "WordPiece"}), "decoder"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_unreproducible_spm_files_are_refused_by_name(case, folder, tmp_path):
    change, part = REFUSALS[case]
    path = _changed(folder, tmp_path, change)
    with pytest.raises(bpetok.VocabularyError) as info:
        bpetok.from_file(path)
    assert str(path) in str(info.value) and part in str(info.value)
