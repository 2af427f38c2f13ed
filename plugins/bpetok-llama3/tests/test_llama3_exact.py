"""Token-identical to llama.cpp on the llama-bpe vocabulary (Llama 3's tokenizer)."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest

import bpetok
import bpetok_llama3


@pytest.mark.parametrize("special", [False, True], ids=["parse_special=False", "parse_special=True"])
def test_reference_cases(llama_bpe, oracle_cases, special):
    cases = [c for c in oracle_cases if c["special"] is special]
    assert len(cases) == 2900
    wrong = [(c["text"], c["ids"]) for c in cases if llama_bpe.encode(c["text"], parse_special=special) != c["ids"]]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ from llama.cpp, first: {wrong[0]!r}"


def test_llama_cpp_test_vectors(llama_bpe, llama_cpp_vectors):
    # llama.cpp's test-tokenizer-0 tokenizes these with add_special=False, parse_special=False.
    assert len(llama_cpp_vectors) == 46
    for text, expected in llama_cpp_vectors:
        assert llama_bpe.encode(text, parse_special=False) == expected, text


def test_every_piece_matches_token_to_piece(llama_bpe, data_dir):
    # Recorded by scripts/record_pieces.py: [id, token_to_piece(special=True), (special=False)].
    with gzip.open(data_dir / "llama-bpe.dump.json.gz", "rt") as f:
        dump = json.load(f)
    assert len(dump) == llama_bpe.n_tokens == 128256
    wrong = [i for i, special, plain in dump
             if llama_bpe.piece(i) != bytes.fromhex(special) or llama_bpe.token_bytes(i) != bytes.fromhex(plain)]
    assert not wrong, f"{len(wrong)} pieces differ, first id {wrong[0]}"


def test_eog_set_is_llama_cpp_s(llama_bpe):
    # scripts/record_pieces.py prints llama_vocab_is_eog's ids: <|end_of_text|>, <|eot_id|>.
    assert llama_bpe.eog_ids == {128001, 128009}


def test_add_special_adds_bos_and_decode_cleans_spaces(llama_bpe, add_special_cases):
    # The file has no tokenizer.ggml.add_bos_token key: add_bos comes from the spec (True, as llama.cpp).
    assert "add_bos" not in llama_bpe.vocabulary.flags
    assert llama_bpe.add_bos is True
    assert len(add_special_cases) == 116
    for case in add_special_cases:
        ids = llama_bpe.encode(case["text"], parse_special=case["special"], add_special=True)
        assert ids == case["ids"], case["text"]
        assert ids[0] == 128000
        # llama_detokenize(remove_special=False, unparse_special=True), clean_spaces included.
        assert llama_bpe.decode_bytes(ids) == bytes.fromhex(case["detok"]), case["text"]


def test_clean_spaces_is_needed(llama_bpe, add_special_cases):
    assert llama_bpe.decode(llama_bpe.encode("Hello , world ! it 's")) == "Hello, world! it's"
    plain = bpetok.Tokenizer(llama_bpe.vocabulary, dataclasses.replace(llama_bpe.spec, clean_spaces=False))
    differ = [c for c in add_special_cases if plain.decode_bytes(c["ids"]) != bytes.fromhex(c["detok"])]
    assert len(differ) == 8


def test_ignore_merges_is_needed(llama_bpe, oracle_cases):
    # " Việt" is token 101798, but the merges alone reach " Vi" + "ệ" + "t".
    assert llama_bpe.encode(" Việt") == [101798]
    plain = bpetok.Tokenizer(llama_bpe.vocabulary, dataclasses.replace(llama_bpe.spec, ignore_merges=False))
    assert plain.encode(" Việt") == [11655, 26298, 83]
    differ = [c for c in oracle_cases if plain.encode(c["text"], parse_special=c["special"]) != c["ids"]]
    assert len(differ) == 14


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("1234567", ["123", "456", "7"]),  # numbers in runs of three, from the left
        ("x ١٢٣٤ ½½½½", ["x", " ", "١٢٣", "٤", " ", "½½½", "½"]),  # any \p{N}, not just ASCII digits
        ("y'ALL I'M it's", ["y", "'ALL", " I", "'M", " it", "'s"]),  # contractions in any case
        ("ab.\n\n  ", ["ab", ".\n\n", "  "]),  # punctuation keeps its newlines
        ("a\u3000\u3000b", ["a", "\u3000", "\u3000b"]),  # one non-letter prefix, even U+3000
        ("\U0002ebf0x", ["\U0002ebf0x"]),  # CJK Ext I (Unicode 15.1) is a letter, as in llama.cpp
    ],
)
def test_pretokenizer_pieces(text, pieces):
    assert bpetok_llama3.make_pretokenizer().split(text) == pieces
