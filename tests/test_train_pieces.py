"""The trainer's piece counter in C (PieceCounts, bpetok/_train_pieces.h) against its twin, a Counter of str.

Held equal on Hypothesis-made pieces (any str, lone surrogates and the empty one included): the
same counts in the same first-counted order, merging, popping, pickling (the workers' way back),
and the merge loop built from it in place; hostile pickled states give ValueError, never a crash;
and training with it writes the file that counting with a Counter (the pure-Python engine's way)
writes, so the words' order (first counted, or sorted) does not change the merges.
"""

from __future__ import annotations

import importlib
import pickle
from collections import Counter
from pathlib import Path

import pytest

from bpetok._train_merge import _PairCounts
from bpetok.train import train

train_mod = importlib.import_module("bpetok.train")  # the module: bpetok.train is also the function
_train = pytest.importorskip("bpetok._train", reason="the C trainer is not built (python setup.py build_ext --inplace)")
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

ROOT = Path(__file__).resolve().parent.parent

# Few distinct pieces (so they repeat), in several scripts, a lone surrogate and the empty piece.
pieces = st.lists(st.one_of(st.sampled_from(["", " the", "é", "\ud800", "日本", "a" * 9]), st.text(max_size=4)), max_size=60)


def counted(lists):
    ours, twin = _train.PieceCounts(), Counter()
    for part in lists:
        ours.update(part)
        twin.update(part)
    return ours, twin


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(lists=st.lists(pieces, max_size=4), popped=st.lists(st.text(max_size=3), max_size=3))
def test_piece_counts_are_a_counters(lists, popped):
    ours, twin = counted(lists)
    assert ours.items() == list(twin.items())  # same counts, same first-counted order
    assert (len(ours), ours.total()) == (len(twin), twin.total())
    assert list(ours) == [p.encode("utf-8", "surrogatepass") for p in twin]
    for piece in popped + list(twin)[:2]:
        assert ours.pop(piece, None) == twin.pop(piece, None)
        assert ours[piece] == twin[piece] == 0
    assert ours.items() == list(twin.items())
    again = pickle.loads(pickle.dumps(ours))
    assert again.items() == ours.items()
    again.update(ours)  # a PieceCounts' counts
    again.update(Counter({"new": 2, "é": 1}))  # a Counter's (a worker on the other engine)
    twin.update(twin)
    twin.update(Counter({"new": 2, "é": 1}))
    assert dict(again.items()) == twin
    before = ours.items()
    ours.update(ours)  # adding itself doubles every count
    assert ours.items() == [(p, 2 * c) for p, c in before]


def test_popped_piece_counted_again_starts_from_zero():
    ours = _train.PieceCounts()
    ours.update(["a", "b", "a"])
    assert ours.pop("a") == 2 and len(ours) == 1
    with pytest.raises(KeyError):
        ours.pop("a")
    ours.update(["a"])
    assert ours.items() == [("a", 1), ("b", 1)] and ours.total() == 2


@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(lists=st.lists(pieces, max_size=3))
def test_merge_loop_reads_piece_counts_in_place(lists):
    ours, _ = counted(lists)
    words, freqs = train_mod._words(ours)
    in_place = _train.PairCounts(words, freqs)
    from_bytes = _train.PairCounts(list(ours), [c for _, c in ours.items()])
    twin = _PairCounts(list(ours), list(freqs))
    assert in_place.words == from_bytes.words == twin.words
    assert sorted(in_place.items()) == sorted(from_bytes.items())
    assert {k: v for k, v in in_place.items() if v} == {k: v for k, v in twin.counts.items() if v}


@pytest.mark.parametrize("arg, error", [
    ([b"bytes"], TypeError),
    ([1], TypeError),
    (Counter({"a": -1}), ValueError),
    (Counter({1: 1}), TypeError),
    (42, TypeError),
])
def test_piece_counts_refuse_what_is_not_pieces(arg, error):
    ours = _train.PieceCounts()
    with pytest.raises(error):
        ours.update(arg)


def test_hostile_pickled_state_is_a_value_error():
    ours = _train.PieceCounts()
    ours.update(["ab", "c", "ab"])
    _, _, state = ours.__reduce__()
    cases = [b"", state[:-1], state + b"x", state[:15], b"\xff" * 16 + state[16:],
             state[:16] + b"\xff\xff\xff\xff" + state[20:],  # a length past the text
             state[:16 + 8] + b"\x00" * 8 + state[32:]]  # a zero count
    for bad in cases:
        with pytest.raises(ValueError):
            _train.PieceCounts().__setstate__(bad)
    with pytest.raises(ValueError, match="empty"):
        ours.__setstate__(state)
    fresh = _train.PieceCounts()
    fresh.__setstate__(state)
    assert fresh.items() == [("ab", 2), ("c", 1)]


@pytest.mark.parametrize("kwargs", [
    {"vocab_size": 2500},
    {"vocab_size": 1500, "pins": ["QLoRA", "tokenizer"], "special_tokens": ["<|endoftext|>"], "min_frequency": 3},
], ids=["plain", "pins"])
def test_training_with_piece_counts_writes_the_counters_file(tmp_path, monkeypatch, kwargs):
    code = [str(p) for p in sorted((ROOT / "bpetok").glob("*.py"))]
    fast = train(code, output=tmp_path / "c.gguf", progress=False, **kwargs)
    monkeypatch.setattr(train_mod, "new_counts", Counter)  # the pure-Python engine's counting: sorted words
    monkeypatch.setattr(train_mod, "_pair_counts", _PairCounts)
    twin = train(code, output=tmp_path / "py.gguf", progress=False, **kwargs)
    assert len(fast.merges) > 1000 and (fast.n_pieces, fast.n_unique) == (twin.n_pieces, twin.n_unique)
    assert (tmp_path / "c.gguf").read_bytes() == (tmp_path / "py.gguf").read_bytes()
