"""Exporting SentencePiece-style (llama model) and Gemma 4 GGUFs: transformers loads the folder and
gives llama.cpp's recorded ids (tests/data/<name>.jsonl.gz)."""

from __future__ import annotations

import functools
import json
import pathlib

import pytest

import bpetok

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPM = {
    "llama-spm": "ggml-vocab-llama-spm.gguf.gz",
    "phi-3": "ggml-vocab-phi-3.gguf.gz",
    "baichuan": "ggml-vocab-baichuan.gguf.gz",
    "gemma-4": "ggml-vocab-gemma-4.gguf.gz",
}


def _gguf(name: str) -> pathlib.Path:
    return ROOT / "tests" / "data" / "llama.cpp-tests" / SPM[name]


@pytest.fixture(scope="module")
def exported_spm(cli_export):
    return functools.cache(lambda name: cli_export(_gguf(name), f"hf-{name}"))


@pytest.mark.parametrize("name", sorted(SPM))
def test_transformers_gives_llama_cpp_ids(name, exported_spm, oracle_texts):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(exported_spm(name)))
    cases = oracle_texts(name)
    assert len(cases) >= 2900
    differ = [c["text"] for c in cases if hf(c["text"], add_special_tokens=False)["input_ids"] != c["ids"]]
    assert not differ, f"{len(differ)} of {len(cases)} differ, e.g. {differ[0]!r:.200}"


@pytest.mark.parametrize("name", sorted(SPM))
def test_special_tokens_and_bos_as_llama_cpp(name, exported_spm):
    from transformers import AutoTokenizer

    folder = exported_spm(name)
    tok = bpetok.from_file(_gguf(name))
    hf = AutoTokenizer.from_pretrained(str(folder))
    for text in ("Hello world", " two  spaces", "<s>inside</s> text"):
        assert hf(text)["input_ids"] == tok.encode(text, add_special=True), text
    assert hf.bos_token_id == tok.special_ids["bos"] and hf.eos_token_id == tok.special_ids["eos"]
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["add_bos_token"] is True and config["add_eos_token"] is False
    tokens_map = json.loads((folder / "special_tokens_map.json").read_text(encoding="utf-8"))
    for role in ("bos", "eos"):
        assert tokens_map[f"{role}_token"] == tok.vocabulary.tokens[tok.special_ids[role]].decode()


def test_decode_gives_the_text(exported_spm):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(exported_spm("llama-spm")))
    for text in ("Hello world", "  leading spaces and émoji 🦙", "tabs\tand\nnewlines"):
        ids = hf(text, add_special_tokens=False)["input_ids"]
        assert hf.decode(ids) == text


def test_gemma4_newline_runs_are_tokens_in_hf(exported_spm):
    # llama.cpp takes a run of newlines that is a token whole; the exported merges make each one.
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(exported_spm("gemma-4")))
    tok = bpetok.from_file(_gguf("gemma-4"))
    for n in range(1, 40):
        text = "a" + "\n" * n + "b"
        assert hf(text, add_special_tokens=False)["input_ids"] == tok.encode(text), n
