"""Token-identical to llama.cpp: every reference case, every token piece, llama.cpp's own vectors."""

from __future__ import annotations

import gzip
import json

import pytest

import bpetok
from helpers import DATA, LLAMA_TESTS, load_cases


@pytest.mark.parametrize("special", [False, True], ids=["parse_special=False", "parse_special=True"])
def test_reference_cases(vocab_tokenizer, special):
    name, tok = vocab_tokenizer
    cases = [c for c in load_cases(name) if c["special"] is special]
    assert len(cases) > 2000
    results = [(c["text"], tok.encode(c["text"], parse_special=special), c["ids"]) for c in cases]
    wrong = [r for r in results if r[1] != r[2]]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ from llama.cpp, first: {wrong[0]!r}"


def test_every_piece_matches_token_to_piece(vocab_tokenizer):
    name, tok = vocab_tokenizer
    with gzip.open(DATA / f"{name}.dump.json.gz", "rt") as f:
        dump = json.load(f)
    assert len(dump) == tok.n_tokens
    wrong = [i for i, special, plain in dump
             if tok.piece(i) != bytes.fromhex(special) or tok.token_bytes(i) != bytes.fromhex(plain)]
    assert not wrong, f"{len(wrong)} pieces differ, first id {wrong[0]}"


def _vectors(name):
    base = LLAMA_TESTS / f"ggml-vocab-{name}.gguf"
    # test-tokenizer-0's format: cases separated by this line, each followed by it; one .out line each.
    inputs = (base.with_suffix(".gguf.inp")).read_bytes().decode("utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    outputs = (base.with_suffix(".gguf.out")).read_text().split("\n")[: len(inputs)]
    return base.with_suffix(".gguf.gz"), list(zip(inputs, ([int(x) for x in o.split()] for o in outputs)))


@pytest.mark.parametrize("name", ["qwen2", "starcoder", "refact", "command-r", "llama-spm", "phi-3", "gemma-4"])
def test_llama_cpp_test_vectors(name):
    path, cases = _vectors(name)
    assert len(cases) == (45 if name == "gemma-4" else 46)
    tok = bpetok.from_gguf(path)
    for text, expected in cases:
        assert tok.encode(text, parse_special=False) == expected, text


def test_add_special_adds_bos_where_llama_cpp_does(vocab_tokenizer):
    """SentencePiece vocabularies add BOS by default, Gemma 4 always; the byte-level ones here do not."""
    name, tok = vocab_tokenizer
    text = "Hello world"
    bos = [tok.special_ids["bos"]] if name in ("llama-spm", "phi-3", "baichuan", "gemma-4") else []
    assert tok.encode(text, add_special=True) == bos + tok.encode(text)


def test_eog_sets_are_llama_cpp_s(qwen3, smollm2):
    assert qwen3.eog_ids == {128247, 151643, 151645, 151662, 151663, 151664}
    assert smollm2.eog_ids == {0, 2, 4}
