"""Offsets on the models whose pieces are not simply the text's bytes: bert and t5 normalize (no
spans, a clear OffsetsError), whitespace and plamo2 drop text (spans with gaps), hybriddna's DNA
k-mers stand for upper-cased, padded letters (refused) while its BPE has spans, rwkv's pieces
are its escapes' bytes. Checked on llama.cpp's reference cases in tests/data."""

from __future__ import annotations

import gzip
import json

import pytest

import bpetok
from bpetok.offsets import OffsetsError
from helpers import DATA, LLAMA_TESTS
from test_more_models import MORE, bpe_variant
from test_offsets import check_spans, re_encode_between_specials

NORMALIZING = {
    "bert-bge": (LLAMA_TESTS / "ggml-vocab-bert-bge.gguf.gz", "bert model: its normalizer lowercases"),
    "nomic-bert-moe": (LLAMA_TESTS / "ggml-vocab-nomic-bert-moe.gguf.gz", "t5 model: its precompiled character map"),
}


def reference_cases(path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("name", sorted(NORMALIZING))
def test_normalizing_models_refuse_clearly(name):
    path, says = NORMALIZING[name]
    tok = bpetok.from_gguf(path)
    cases = reference_cases(DATA / f"{name}.jsonl.gz")
    # every text, even one whose pieces happen to spell it ("hello" is one token either way)
    for text in ["hello", "Hello World", cases[0]["text"], cases[-1]["text"]]:
        with pytest.raises(OffsetsError, match=f"{path}: bpetok gives no token offsets for a {says}"):
            tok.encode_with_offsets(text)
    with pytest.raises(OffsetsError, match="no token offsets"):
        tok.encode_batch_with_offsets(["a", "b"])
    # the ids themselves are unaffected
    assert tok.encode(cases[0]["text"], parse_special=cases[0]["special"]) == cases[0]["ids"]


@pytest.fixture(scope="module")
def more(tmp_path_factory) -> dict[str, bpetok.Tokenizer]:
    tmp = tmp_path_factory.mktemp("offsets-models")
    return {
        "rwkv-world": bpetok.from_gguf(MORE / "ggml-vocab-rwkv-world.gguf.gz"),
        "plamo2-synth": bpetok.from_gguf(MORE / "ggml-vocab-plamo2-synth.gguf.gz"),
        "whitespace": bpetok.from_gguf(bpe_variant(tmp / "whitespace.gguf", "whitespace", "whitespace", False)),
        "hybriddna": bpetok.from_gguf(bpe_variant(tmp / "hybriddna.gguf", "hybriddna", "llama-bpe", True)),
    }


@pytest.mark.parametrize("name", ["rwkv-world", "plamo2-synth", "whitespace", "hybriddna"])
def test_spans_on_reference_cases(name, more):
    tok = more[name]
    cases = reference_cases(MORE / f"{name}.jsonl.gz")[::4]
    for case in cases:
        text, parse_special = case["text"], case["special"]
        found = tok.encode_with_offsets(text, parse_special=parse_special)
        assert found.ids == case["ids"]  # llama.cpp's
        check_spans(tok, text, found, parse_special, spelling=tok.vocabulary.tokens.__getitem__ if name == "whitespace" else None)
        re_encode_between_specials(tok, text, found, parse_special)


def test_whitespace_fast_spans_equal_its_walk(more):
    # the running sums over the bytes that are not whitespace, held to the token-by-token walk
    tok = more["whitespace"]
    texts = [c["text"] for c in reference_cases(MORE / "whitespace.jsonl.gz")]
    texts += ["ab  cd\u3000\tef", "x\u00a0y", "  ", "", "é 🤗 日本 x", "a\x1cb"]
    fast = 0
    for k, text in enumerate(texts):
        for add_special in [k % 2 == 1]:
            try:
                ids = tok.encode(text, add_special=add_special)
            except bpetok.BpetokError:
                continue  # a space next to other whitespace: llama.cpp aborts, no ids
            found = tok.model.token_offsets(tok, text, ids, add_special)
            assert found == tok.model.walk_offsets(tok, text, ids, add_special), text
            fast += found._lists is None  # made by the fast path (arrays first)
    assert fast > len(texts) * 0.9


def test_whitespace_leaves_gaps_where_it_was(more):
    tok = more["whitespace"]
    text = "ab  cd\u3000\tef"
    found = tok.encode_with_offsets(text)
    assert found.ids == tok.encode("ab") + tok.encode("cd") + tok.encode("ef")
    covered = "".join(text[s:e] for s, e in found.offsets)
    assert covered == "abcdef"
    assert found.offsets[0][0] == 0 and found.offsets[-1][1] == len(text)


def test_plamo2_leaves_a_gap_where_it_dropped_a_special_token(more):
    tok = more["plamo2-synth"]
    text = "ab<|plamo:eos|>ab"
    found = tok.encode_with_offsets(text)
    assert found.ids == tok.encode(text) == tok.encode("ab") * 2
    half = tok.encode_with_offsets("ab").offsets
    gap = len("ab<|plamo:eos|>")
    assert found.offsets == half + [(s + gap, e + gap) for s, e in half]
    not_parsed = tok.encode_with_offsets(text, parse_special=False)  # the text is encoded, no gap
    assert "".join(text[s:e] for s, e in not_parsed.offsets) == text


def test_hybriddna_numpy_ids_are_its_ids(more):
    # encode_batch_to_numpy (which offsets encode through) takes the gpt2 kernel when no text has <dna>
    tok = more["hybriddna"]
    for special in (True, False):
        texts = [c["text"] for c in reference_cases(MORE / "hybriddna.jsonl.gz") if c["special"] == special][::3]
        texts += ["x<dna>acgtacGG</dna>y", "a <dna>ACG"]
        for batch in (texts, [t for t in texts if "<dna>" not in t]):
            ids, bounds = tok.encode_batch_to_numpy(batch, parse_special=special)
            assert [ids[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])] == [tok.encode(t, parse_special=special) for t in batch]


def test_hybriddna_bpe_has_spans_and_kmers_are_refused(more):
    tok = more["hybriddna"]
    text = "x<dna>acgtacGG</dna>y"
    found = tok.encode_with_offsets(text, parse_special=True)  # tags special, letters plain BPE
    assert found.ids == tok.encode(text, parse_special=True)
    assert "".join(text[s:e] for s, e in found.offsets) == text
    with pytest.raises(OffsetsError, match="DNA k-mers"):
        tok.encode_with_offsets(text, parse_special=False)
