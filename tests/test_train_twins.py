"""The trainer's fast merge loop and pin chains against their plain twins, on long runs and pins.

The C loop (bpetok/_train.c) against its Python twin: tests/test_train_c.py."""

from __future__ import annotations

import importlib
import random
import sys
import time

import pytest

from bpetok._train_merge import STRIDE, _add_chain, _PairCounts, _RecountedPairs, _reference_chain, _Vocab
from bpetok.train import train

train_mod = importlib.import_module("bpetok.train")  # the module: bpetok.train is also the function

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

# Text made of long runs of one or two letters (overlapping pairs such as (a, a)), words and spaces.
runs = st.lists(
    st.one_of(
        st.builds(lambda c, n: c * n, st.sampled_from(["a", "b", "ab", "aab", "é"]), st.integers(1, 60)),
        st.sampled_from([" ", "\n", " ba", " aa", "x", " xa", "."]),
    ),
    max_size=40,
).map("".join)
pin_terms = st.lists(st.text(alphabet="abéxQ", min_size=1, max_size=40), max_size=3)


def plainly(monkeypatch) -> None:
    """Make :func:`train` use the plain twins."""
    monkeypatch.setattr(train_mod, "_pair_counts", _RecountedPairs)
    monkeypatch.setattr(train_mod, "_add_chain", _reference_chain)


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(text=runs, pins=pin_terms, extra=st.integers(0, 120), min_frequency=st.integers(1, 3))
def test_fast_training_writes_the_plain_twins_file(tmp_path_factory, text, pins, extra, min_frequency):
    tmp = tmp_path_factory.mktemp("twins")
    kwargs = dict(texts=[text + " x"], pins=pins, min_frequency=min_frequency, progress=False)
    probe = train(vocab_size=100_000, **kwargs)  # room for every pin; then a size that stops the merging early
    bytes_only = _Vocab()  # the fewest tokens the pins can take, as train() reckons it
    for term in dict.fromkeys(pins):
        _add_chain(bytes_only, term), _add_chain(bytes_only, " " + term)
    size = max(len(bytes_only.tokens), len(probe.tokens) - extra)
    fast = train(vocab_size=size, output=tmp / "fast.gguf", **kwargs)
    with pytest.MonkeyPatch.context() as mp:
        plainly(mp)
        plain = train(vocab_size=size, output=tmp / "plain.gguf", **kwargs)
    assert (fast.tokens, fast.merges) == (plain.tokens, plain.merges)
    assert (tmp / "fast.gguf").read_bytes() == (tmp / "plain.gguf").read_bytes()


def learned_vocab(rng: random.Random) -> tuple[_Vocab, dict[int, int]]:
    """A vocabulary with some merges learned from random words, and the corpus counts left."""
    words = [[rng.choice(b"abc") for _ in range(rng.randint(1, 30))] for _ in range(60)]
    pairs, vocab = _PairCounts(words, [rng.randint(1, 5) for _ in words]), _Vocab()
    for _ in range(rng.randint(0, 40)):
        pair = pairs.best(1)
        if pair is None:
            break
        pairs.merge(pair, vocab.add_merge(*divmod(pair, STRIDE)))
    return vocab, pairs.counts


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**32), forms=st.lists(st.text(alphabet="abcé", min_size=1, max_size=80), min_size=1, max_size=4),
                  with_counts=st.booleans())
def test_fast_chain_is_the_plain_chain(seed, forms, with_counts):
    fast, counts = learned_vocab(random.Random(seed))
    plain, _ = learned_vocab(random.Random(seed))
    for form in forms:
        got = _add_chain(fast, form, counts if with_counts else None)
        assert got == _reference_chain(plain, form, counts if with_counts else None)
        assert len(fast.bpe(list(form.encode()))) == 1  # the chain makes the form one token
    assert (fast.tokens, fast.merges, fast.ranks) == (plain.tokens, plain.merges, plain.ranks)


def test_overlapping_pairs_merge_left_to_right():
    # (a, a) merges "aaaaa" into "aa aa a" (right to left would give "a aa aa"); then (aa, aa) and
    # (aa, a) tie and the smaller right id wins: "a" is byte 97, "aa" id 256.
    result = train(texts=["aaaaa"] * 3, vocab_size=259, min_frequency=1, progress=False)
    assert result.merges == [b"a a", b"aa a", b"aa aaa"]


# A generous bound that catches the quadratic trainer (93 s on one letter, minutes on a pin); it is
# not a timing test: benchmarks/train_pathological.py prints the figures.
@pytest.mark.parametrize("kwargs", [
    {"texts": ["a" * (1 << 20)], "vocab_size": 400},
    {"texts": ["the quick brown fox\n" * 50], "pins": ["".join(random.Random(0).choices("abcdefghij", k=5000))],
     "vocab_size": 256 + 10_300},
], ids=["one letter, 1 MiB", "pin of 5,000 letters"])
def test_one_long_piece_or_pin_trains_without_quadratic_time(kwargs):
    start = time.monotonic()
    result = train(progress=False, **kwargs)
    assert time.monotonic() - start < 30
    assert len(result.merges) > 10


def test_progress_falls_back_to_no_bar_without_tqdm(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm now raises ImportError
    result = train(texts=["low lower lowest newer wider\n"] * 20, vocab_size=270, min_frequency=1, progress=True)
    assert len(result.tokens) == 270 and capsys.readouterr().err == ""


def test_progress_bar_has_totals_with_tqdm(capsys):
    pytest.importorskip("tqdm")
    train(texts=["low lower lowest newer wider\n"] * 20, vocab_size=270, min_frequency=1, progress=True)
    err = capsys.readouterr().err
    assert "pre-tokenizing" in err and "merging" in err and "14/14" in err  # 270 - 256 merges of 14


def chunks_by_rescanning(text: str, block: int) -> list[str]:
    """The plain way to chunk: rescan all the text since the last cut after every block."""
    from bpetok.train import _piece_boundary

    out, carry = [], ""
    for start in range(0, len(text), block):
        carry += text[start : start + block]
        cut = _piece_boundary(carry)
        if cut:
            out.append(carry[:cut])
            carry = carry[cut:]
    return out + [carry] if carry else out


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(text=st.text(alphabet="ab \n\t", max_size=200), block=st.integers(1, 12))
def test_chunks_cut_where_rescanning_does(text, block):
    import io

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train_mod, "CHUNK_CHARS", block)
        assert list(train_mod._chunks(io.StringIO(text))) == chunks_by_rescanning(text, block)


def test_pin_whose_chain_needs_a_token_per_prefix_is_refused(tmp_path, monkeypatch):
    # 30k letters with no repeated pair: each merge grows one token from the left, so the chain's
    # texts would total ~450 MB. It is refused by name before that memory is spent.
    import bpetok._train_merge as train_merge
    from bpetok import BpetokError

    rng = random.Random(5)
    pin = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(30_000))
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n")
    monkeypatch.setattr(train_merge, "MAX_TEXT_BYTES", 16 * 2**20)  # the same refusal, sooner
    with pytest.raises(BpetokError, match=r"pinned term '[a-z]{40}'\.\.\. \(30000 characters\) cannot be one token"):
        train([str(corpus)], vocab_size=300, pins=[pin], output=str(tmp_path / "v.gguf"))
