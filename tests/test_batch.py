"""encode_batch's forked workers (bpetok/batch.py): same ids in the same order as encode, on every
path (children storing ids in the shared map, a slot too small, several rounds, no fork, no map),
and nothing left behind (processes, descriptors) when a worker or this process fails.
"""

from __future__ import annotations

import mmap
import os
import signal
import threading
import time
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bpetok
import bpetok.batch
import bpetok.tokenizer
from bpetok.batch import encode_batch_forked, group_bounds
from helpers import QWEN3, load_cases

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forked workers need os.fork (POSIX)")

EXTRA = [
    "",
    "Hello <|im_end|> world",
    "<think>\nmaybe</think> <|im_start|>user\nHi<|im_end|>",
    "<|im_end|><|im_end|>",
    " " * 40,
    "\U0001f600" * 30,
    "lone \ud800 surrogate",
]


@pytest.fixture(scope="module")
def cases() -> list[dict]:
    return load_cases("qwen3")


@pytest.fixture(scope="module")
def texts(cases) -> list[str]:
    return [c["text"] for c in cases] + EXTRA


@pytest.fixture
def cold() -> bpetok.Tokenizer:
    """A tokenizer with empty caches: the children fill their own."""
    return bpetok.from_gguf(QWEN3)


def _open_fds() -> set[str] | None:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None


@pytest.fixture
def forks(monkeypatch):
    """The pids encode_batch forks; on leaving, every one of them must already be reaped, and
    no descriptor may be left open."""
    pids: list[int] = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    before = _open_fds()
    yield pids
    bpetok.batch.wait_for_workers()
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    assert _open_fds() == before


def _in_child(parent: int, then):
    """A stand-in for Tokenizer._encode_many that runs ``then`` in a child and the real one here.
    This process waits a little before its first group, so the children surely take some."""
    first = [True]

    def encode_many(tok, texts, parse_special):
        if os.getpid() != parent:
            then()
        elif first[0]:
            first[0] = False
            time.sleep(0.3)
        return type(tok)._encode_many(tok, texts, parse_special)

    return encode_many


# -- same ids, same order ------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [2, 3])
def test_forked_gives_llama_cpp_ids_in_order(cold, cases, workers, forks):
    for special in (False, True):
        chosen = [c for c in cases if c["special"] == special]
        got = encode_batch_forked(cold, [c["text"] for c in chosen], special, workers)
        assert got == [c["ids"] for c in chosen]
    assert forks  # the children did run


def test_forked_gives_llama_cpp_ids_for_smollm2(smollm2, forks):
    cases = load_cases("smollm2")
    for special in (False, True):
        chosen = [c for c in cases if c["special"] == special]
        assert encode_batch_forked(smollm2, [c["text"] for c in chosen], special, 2) == [c["ids"] for c in chosen]


def test_forked_equals_encode_warm_and_cold(qwen3, cold, texts, forks):
    for special in (True, False):
        expected = [qwen3.encode(t, parse_special=special) for t in texts]
        assert encode_batch_forked(qwen3, texts, special, 2) == expected  # warm caches
        assert encode_batch_forked(cold, texts[::-1], special, 2) == expected[::-1]


def test_encode_batch_goes_through_the_workers(qwen3, texts, monkeypatch, forks):
    monkeypatch.setattr(bpetok.tokenizer, "_BATCH_MIN_CHARS", 0)
    assert qwen3.encode_batch(iter(texts), workers=2) == [qwen3.encode(t) for t in texts]
    assert len(forks) == 1
    assert qwen3.encode_batch([], workers=2) == []
    assert qwen3.encode_batch(["one text <|im_end|>"], workers=2) == [qwen3.encode("one text <|im_end|>")]
    assert len(forks) == 1  # nothing to share out: no fork


def test_tiny_batches(qwen3, forks):
    assert encode_batch_forked(qwen3, [], True, 2) == []
    assert encode_batch_forked(qwen3, [""], True, 2) == [[]]
    assert encode_batch_forked(qwen3, ["Hi <|im_end|>"], False, 4) == [qwen3.encode("Hi <|im_end|>", parse_special=False)]
    assert encode_batch_forked(qwen3, ["", "a", "", "b c"], True, 2) == [[], qwen3.encode("a"), [], qwen3.encode("b c")]


def test_more_workers_than_groups(qwen3, texts, forks):
    assert encode_batch_forked(qwen3, texts[:5], True, 8) == [qwen3.encode(t) for t in texts[:5]]


# -- the other paths -----------------------------------------------------------------------------


def test_a_slot_too_small_is_encoded_here(qwen3, texts, monkeypatch, forks):
    monkeypatch.setattr(bpetok.batch, "_SLOT_PER_TEXT", 0)
    monkeypatch.setattr(bpetok.batch, "_SLOT_PER_CHAR", 0)
    assert encode_batch_forked(qwen3, texts, True, 2) == [qwen3.encode(t) for t in texts]


def test_rounds(qwen3, texts, monkeypatch, forks):
    monkeypatch.setattr(bpetok.batch, "_ROUND_CHARS", 20_000)
    assert encode_batch_forked(qwen3, texts, True, 2) == [qwen3.encode(t) for t in texts]
    assert len(forks) > 5


def test_no_fork_no_map_stays_in_process(qwen3, texts, monkeypatch):
    expected = [qwen3.encode(t) for t in texts]

    def no_fork():
        raise OSError("EAGAIN")

    monkeypatch.setattr(os, "fork", no_fork)
    assert encode_batch_forked(qwen3, texts, True, 2) == expected
    monkeypatch.undo()

    def no_map(*args, **kwargs):
        raise OSError("ENOMEM")

    monkeypatch.setattr(mmap, "mmap", no_map)
    assert encode_batch_forked(qwen3, texts, True, 2) == expected


def test_platform_without_fork_encodes_in_process(qwen3, texts, monkeypatch):
    import multiprocessing

    monkeypatch.setattr(bpetok.tokenizer, "_BATCH_MIN_CHARS", 0)
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    monkeypatch.delattr(os, "fork")  # however encode_batch asks

    def refuse(*args):
        raise AssertionError("forked on a platform without fork")

    monkeypatch.setattr(bpetok.batch, "encode_batch_forked", refuse)
    assert qwen3.encode_batch(texts, workers=2) == [qwen3.encode(t) for t in texts]


def test_a_program_that_ignores_sigchld(qwen3, texts, monkeypatch, forks):
    # Such children reap themselves: waiting for one finds no child, which must not fail,
    # neither here nor on the reaper thread.
    failures = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    parent = os.getpid()

    def fail_here(tok, texts, parse_special):
        if os.getpid() == parent:
            raise KeyboardInterrupt
        return type(tok)._encode_many(tok, texts, parse_special)

    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        assert encode_batch_forked(qwen3, texts, True, 3) == [qwen3.encode(t) for t in texts]
        bpetok.batch.wait_for_workers()
        monkeypatch.setattr(qwen3, "_encode_many", fail_here.__get__(qwen3))
        with pytest.raises(KeyboardInterrupt):
            encode_batch_forked(qwen3, texts, True, 2)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert failures == []


# -- failures ------------------------------------------------------------------------------------


def test_a_failing_worker_is_reported(cold, texts, monkeypatch, forks):
    def fail():
        raise RuntimeError("boom in the worker")

    monkeypatch.setattr(cold, "_encode_many", _in_child(os.getpid(), fail).__get__(cold))
    with pytest.raises(bpetok.BpetokError, match="worker process failed: RuntimeError: boom in the worker"):
        encode_batch_forked(cold, texts, True, 3)
    assert len(forks) == 2


def test_a_killed_worker_is_reported(qwen3, texts, monkeypatch, forks):
    monkeypatch.setattr(qwen3, "_encode_many", _in_child(os.getpid(), lambda: os.kill(os.getpid(), signal.SIGKILL)).__get__(qwen3))
    with pytest.raises(bpetok.BpetokError, match="killed by SIGKILL"):
        encode_batch_forked(qwen3, texts, True, 2)


def test_a_failure_here_kills_the_workers(qwen3, texts, monkeypatch, forks):
    parent = os.getpid()

    def encode_many(tok, texts, parse_special):
        if os.getpid() != parent:
            time.sleep(600)  # only a kill ends this in time
        raise KeyboardInterrupt

    monkeypatch.setattr(qwen3, "_encode_many", encode_many.__get__(qwen3))
    with pytest.raises(KeyboardInterrupt):
        encode_batch_forked(qwen3, texts, True, 3)
    assert len(forks) == 2


# -- groups --------------------------------------------------------------------------------------


def test_group_bounds_shrink():
    ends = list(accumulate([10] * 16))
    assert group_bounds(ends, 0, 16, 1) == [(0, 4), (4, 7), (7, 10), (10, 12), (12, 13), (13, 14), (14, 15), (15, 16)]
    assert group_bounds(ends, 4, 6, 2) == [(4, 5), (5, 6)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=400), st.integers(1, 300), st.data())
def test_group_bounds_cover_the_round_in_order(lengths, workers, data):
    ends = list(accumulate(lengths))
    lo = data.draw(st.integers(0, len(lengths) - 1))
    hi = data.draw(st.integers(lo + 1, len(lengths)))
    groups = group_bounds(ends, lo, hi, workers)
    assert groups[0][0] == lo and groups[-1][1] == hi
    assert all(start < stop for start, stop in groups)
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:]))
    assert len(groups) <= bpetok.batch._MAX_GROUPS + 8 * workers
