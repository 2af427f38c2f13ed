"""The vectorised batch BPE (``BytePairModel._merge_batch``) against the plain reference.

tests/test_fast.py compares ``encode_pieces`` with ``encode_piece_reference`` as the tokenizer
calls it; a batch there ends in the per-piece path once fewer than ``_BATCH_TAIL`` pieces are
left, which for small batches is all of them, and compacts every other round only when its
pieces are long and many. Here each path is forced to the end on its own: ``_BATCH_TAIL = 0``
keeps every round vectorised (compacting each round, or with ``_BATCH_SPLIT = 0`` every other
one), a huge one hands every piece over at once.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpetok.models.gpt2 import BYTE_TO_CHAR, BytePairModel
from helpers import load_cases

# (_BATCH_TAIL, _BATCH_SPLIT): all rounds vectorised, compacting each round or every other
# one; all pieces one by one after the first round.
MODES = {"vectorised": (0, 10**9), "split": (0, 0), "tail": (10**9, 10**9)}


def _set_mode(patch, mode: str) -> None:
    tail, split = MODES[mode]
    patch.setattr(BytePairModel, "_BATCH_TAIL", tail)
    patch.setattr(BytePairModel, "_BATCH_SPLIT", split)
    patch.setattr(BytePairModel, "_BATCH_SPLIT_MIN", split)


@pytest.fixture(params=sorted(MODES))
def tail(request, monkeypatch):
    _set_mode(monkeypatch, request.param)
    return request.param


def _reference(bpe, pieces):
    return [bpe.encode_piece_reference(p) for p in pieces]


@pytest.mark.parametrize("name", ["qwen3", "smollm2"])
def test_every_reference_piece(name, qwen3, smollm2, tail):
    tok = {"qwen3": qwen3, "smollm2": smollm2}[name]
    split = tok.model.pretokenizer.split
    pieces = sorted({p.encode("utf-8", "surrogatepass") for case in load_cases(name) for p in split(case["text"])})
    assert tok.model.bpe.encode_pieces(pieces) == _reference(tok.model.bpe, pieces)


def test_long_and_repetitive_pieces(qwen3, tail):
    # Runs of one symbol (overlapping pairs), long CJK and kana runs (a hundred merges each),
    # pieces of one and two bytes (most of their symbols dropped each round) side by side.
    rng = random.Random(5)
    kana = [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30A1, 0x30FB)]
    han = [chr(c) for c in range(0x4E00, 0x4E00 + 400)]
    pieces = [b"a" * n for n in range(1, 80)] + [b" " * n for n in range(1, 40)] + [b"ab" * n for n in range(1, 40)]
    pieces += ["".join(rng.choice(kana + han) for _ in range(rng.randrange(1, 60))).encode() for _ in range(300)]
    pieces += [bytes([rng.randrange(256)]) for _ in range(100)]
    pieces += [bytes(rng.randrange(256) for _ in range(2)) for _ in range(100)]
    assert qwen3.model.bpe.encode_pieces(pieces) == _reference(qwen3.model.bpe, pieces)


def _byte_tokens() -> list[bytes]:
    return [c.encode() for c in BYTE_TO_CHAR]


def test_merges_out_of_rank_order(tail):
    # "ab c" ranks below "a b", which makes "ab": a merge can make a pair ranked below itself,
    # and "xa b" is never reachable; the batch must still follow the sequential order.
    tokens = _byte_tokens() + [b"ab", b"abc", b"aa", b"aaa", b"ca", b"xa"]
    merges = [b"ab c", b"c a", b"a b", b"a a", b"aa a", b"x a", b"xa b"]
    bpe = BytePairModel(tokens, merges)
    rng = random.Random(7)
    pieces = ["".join(rng.choice("abcx") for _ in range(rng.randrange(1, 30))).encode() for _ in range(400)]
    assert bpe.encode_pieces(pieces) == _reference(bpe, pieces)


ATOMS = ["a", "b", "aa", " ", "  ", "\n", "e\u0301", "\u4e2d\u6587", "\u3053\u3093", "\u30c7\u30a3", "\U0001f600"]
ATOMS += ["'s", "42", "->"]
texts = st.one_of(st.lists(st.sampled_from(ATOMS), max_size=60).map("".join), st.text(max_size=80))


@settings(max_examples=40, deadline=None)
@given(batch=st.lists(texts, min_size=64, max_size=150))
def test_generated_batches(qwen3, smollm2, batch):
    pieces = [t.encode("utf-8", "surrogatepass") for t in batch if t]
    for tok in (qwen3, smollm2):
        expected = _reference(tok.model.bpe, pieces)
        for mode in MODES:
            with pytest.MonkeyPatch.context() as patch:
                _set_mode(patch, mode)
                assert tok.model.bpe.encode_pieces(pieces) == expected, mode


def test_the_hash_identifies_each_key(qwen3):
    # A slot holds a key's hash, not the key: the hash must be a bijection of the keys below
    # 2**hash_bits, and a key must not match the slot of another key with the same home slot.
    bpe = qwen3.model.bpe
    tables = bpe._batch_tables()
    keys = np.fromiter(bpe.ranks.keys(), np.int64, len(bpe.ranks))
    hashes = bpe._hash_keys(keys, tables.hash_bits)
    assert len(np.unique(hashes)) == len(keys)
    # Absent keys whose hashes share the top bits (the home slot) of present keys' hashes.
    rng = np.random.default_rng(11)
    low = rng.integers(0, 1 << (tables.hash_bits - tables.bits), len(keys))
    near = (hashes >> (tables.hash_bits - tables.bits) << (tables.hash_bits - tables.bits)) | low
    inverse = pow(0x9E3779B97F4A7C15 & ((1 << tables.hash_bits) - 1) | 1, -1, 1 << tables.hash_bits)
    candidates = [h * inverse % (1 << tables.hash_bits) for h in near.tolist()]
    absent = [k for k in candidates if k not in bpe.ranks and k < bpe.stride * bpe.stride]
    assert len(absent) > len(keys) // 2
    absent = np.array(absent, np.int64)
    shift = tables.hash_bits - tables.bits
    assert set((bpe._hash_keys(absent, tables.hash_bits) >> shift).tolist()) <= set((hashes >> shift).tolist())
    assert (bpe._pair_ranks(tables, absent) == tables.never).all()
