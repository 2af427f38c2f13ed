"""Exporting a t5 (Unigram) GGUF: transformers loads the folder and gives llama.cpp's recorded ids
(tests/data/nomic-bert-moe.jsonl.gz) wherever HF's Precompiled normalizes as llama.cpp does."""

from __future__ import annotations

import gzip
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

import bpetok
from bpetok.vocab import CHARSMAP_KEY

from bpetok_hf.writer import export_hf

ROOT = pathlib.Path(__file__).resolve().parents[3]
# bpetok's CLI module (bpetok.apps.cli since the layout moved it; bpetok.cli before).
CLI = "bpetok.apps.cli" if importlib.util.find_spec("bpetok.apps") else "bpetok.cli"
T5 = ROOT / "tests" / "data" / "llama.cpp-tests" / "ggml-vocab-nomic-bert-moe.gguf.gz"


@pytest.fixture(scope="module")
def t5_gguf():
    return bpetok.from_file(T5)


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf-t5")
    result = subprocess.run([sys.executable, "-m", CLI, "export", str(T5), "--format", "hf", "-o", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def t5_hf(t5_folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(t5_folder))


def _cases() -> list[dict]:
    with gzip.open(ROOT / "tests" / "data" / "nomic-bert-moe.jsonl.gz", "rt", encoding="utf-8") as f:
        return [c for c in map(json.loads, f) if c["special"]]  # HF always cuts special tokens out


def test_transformers_gives_llama_cpp_ids_where_precompiled_agrees(t5_gguf, t5_hf, t5_folder):
    # HF's Precompiled replaces a short grapheme cluster that starts with a key whole (the mark after
    # "ä" goes); llama.cpp replaces the longest key. The export ends the cluster after each character
    # no longer key starts with (a U+0001 the map deletes); every case still differing must be one
    # where the exported normalizer's charsmap steps and llama.cpp's map disagree.
    from tokenizers import Regex, normalizers

    from bpetok.models.charsmap import CharsMap

    blob = bytes(t5_gguf.vocabulary.metadata[CHARSMAP_KEY])
    steps = json.loads((t5_folder / "tokenizer.json").read_text(encoding="utf-8"))["normalizer"]["normalizers"]
    assert steps[0]["type"] == "Replace" and steps[0]["content"] == "\x01" and steps[1]["type"] == "Precompiled"
    hf_map = normalizers.Sequence([normalizers.Replace(Regex(steps[0]["pattern"]["Regex"]), "\x01"),
                                   normalizers.Precompiled(blob)])
    llama_map = CharsMap(blob, "nomic-bert-moe")
    cases = _cases()
    assert len(cases) == 2900
    differ = [c for c in cases if t5_hf(c["text"], add_special_tokens=False)["input_ids"] != c["ids"]]
    unexplained = [c["text"] for c in differ
                   if hf_map.normalize_str(c["text"]) == llama_map.normalize(c["text"].encode()).decode()]
    assert not unexplained, f"{len(unexplained)} differ, e.g. {unexplained[0]!r:.200}"
    assert len(differ) <= 60  # 60 (97.93% equal): fuzz text full of combining marks
    # Without the breaker, Precompiled alone swallows more: the step is needed.
    plain = normalizers.Precompiled(blob)
    assert sum(plain.normalize_str(c["text"]) != llama_map.normalize(c["text"].encode()).decode() for c in cases) > 200


def test_transformers_gives_llama_cpp_ids_on_the_corpus_sample(t5_gguf, t5_hf, corpus):
    differ = [t for t in corpus if t5_hf(t, add_special_tokens=False)["input_ids"] != t5_gguf.encode(t)]
    assert not differ, f"{len(differ)} of {len(corpus)} differ, e.g. {differ[0]!r:.200}"


def test_special_tokens_as_llama_cpp(t5_gguf, t5_hf, t5_folder):
    for text in ("Hello world", "  two  spaces ", "<s>inside</s> text", ""):
        assert t5_hf(text)["input_ids"] == t5_gguf.encode(text, add_special=True), text
    config = json.loads((t5_folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["add_bos_token"] is True and config["add_eos_token"] is True
    assert t5_hf.unk_token_id == t5_gguf.special_ids["unk"] == 3


def test_the_export_loads_back_with_hf_ids(t5_hf, t5_folder, corpus):
    back = bpetok.from_file(t5_folder)
    assert back.vocabulary.model == "hf-unigram"
    texts = [c["text"] for c in _cases()[::4]] + corpus[:200]
    differ = [t for t in texts if back.encode(t) != t5_hf(t, add_special_tokens=False)["input_ids"]]
    assert not differ, f"{len(differ)} differ, e.g. {differ[0]!r:.200}"


def test_without_remove_extra_whitespaces_spaces_stay(t5_gguf, tmp_path):
    # llama.cpp: each space a ▁, one more before the first non-space; an all-space text gets none.
    from transformers import AutoTokenizer

    from bpetok.gguf import GGUFValueType, read_gguf
    from bpetok.gguf_writer import items_of, write_gguf

    key = "tokenizer.ggml.remove_extra_whitespaces"
    items = [item for item in items_of(read_gguf(T5)) if item[0] != key]
    write_gguf(tmp_path / "t5.gguf", items + [(key, GGUFValueType.BOOL, False, None)])
    tok = bpetok.from_file(tmp_path / "t5.gguf")
    assert tok.vocabulary.flags["remove_extra_whitespaces"] is False
    export_hf(tok, tmp_path / "out")
    hf = AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    for text in ("a  b", "  lead", "trail  ", "   ", "x\n y", ""):
        assert hf(text, add_special_tokens=False)["input_ids"] == tok.encode(text), repr(text)
