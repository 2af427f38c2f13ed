"""The trainer's C merge loop (bpetok/_train.c) against its Python twin, _PairCounts.

Held equal step by step (every best pair, every word after every merge, the counts) and end to
end (train() writes byte-identical GGUF files, pins included), on Hypothesis-made words and text
and on real text: the oracle's recorded texts and bpetok's own docs and source.
"""

from __future__ import annotations

import gzip
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bpetok._train_merge import STRIDE, _add_chain, _PairCounts, _RecountedPairs, _Vocab
from bpetok.compiled import pure_python_forced
from bpetok.train import train

train_mod = importlib.import_module("bpetok.train")  # the module: bpetok.train is also the function
_train = pytest.importorskip("bpetok._train", reason="the C merge loop is not built (python setup.py build_ext --inplace)")
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

from test_train_twins import runs  # noqa: E402 - runs of letters, words and spaces, after the skips above

ROOT = Path(__file__).resolve().parent.parent

# Words over few symbols (many overlapping pairs: "a a a"), some above 255 as merged ids are.
words_and_freqs = st.lists(
    st.tuples(st.lists(st.sampled_from([97, 98, 99, 300, 2**24 - 1]), max_size=25), st.integers(0, 6)), max_size=30
)


def run_both(words, freqs, min_frequency, reuse=False):
    """Merge with the C loop, _PairCounts and _RecountedPairs side by side, checking each step.

    With ``reuse``, a merge whose pair has no 300 in it makes id 300, as a pin's chain can make a
    token whose text exists already (so a pair merged away can come back)."""
    loops = [_train.PairCounts(words, freqs), _PairCounts(words, freqs), _RecountedPairs(words, freqs)]
    fresh, merged = 5000, []
    while True:
        best = [loop.best(min_frequency) for loop in loops]
        assert best[0] == best[1] == best[2]
        if best[0] is None:
            break
        new = 300 if reuse and 300 not in divmod(best[0], STRIDE) else fresh
        for loop in loops:
            loop.merge(best[0], new)
        merged.append(best[0])
        assert loops[0].words == loops[1].words == loops[2].words
        fresh += 1
        assert len(merged) < 1000, "merging does not end"
    fast, twin = loops[0].counts, loops[1].counts
    assert {k: v for k, v in fast.items() if v} == {k: v for k, v in twin.items() if v}
    assert all(fast.get(k, 0) == v for k, v in twin.items())
    return merged


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(data=words_and_freqs, min_frequency=st.integers(1, 4), reuse=st.booleans())
def test_c_loop_is_the_python_loop_step_by_step(data, min_frequency, reuse):
    words = [w for w, _ in data]
    freqs = [f for _, f in data]
    run_both(words, freqs, min_frequency, reuse)
    run_both([bytes(w) for w in words if max(w, default=0) < 256], [f for w, f in data if max(w, default=0) < 256],
             min_frequency)


@pytest.mark.parametrize("seed", range(3))
def test_c_loop_is_the_python_loop_on_long_words(seed):
    # Pair lists of hundreds of positions, most gone stale as merges eat them.
    import random

    rng = random.Random(seed)
    words = [[rng.choice([97, 98, 99]) for _ in range(rng.randint(0, 300))] for _ in range(20)]
    merged = run_both(words, [rng.randint(1, 4) for _ in words], min_frequency=12)
    assert len(merged) > 50


def test_c_loop_merges_overlapping_runs_left_to_right():
    # "aaaaa": (a, a) merges into "aa aa a"; each of the 3 copies counts.
    loop = _train.PairCounts([b"aaaaa"], [3])
    assert loop.best(1) == 97 * STRIDE + 97 and loop.get(97 * STRIDE + 97) == 12
    loop.merge(97 * STRIDE + 97, 256)
    assert loop.words == [[256, 256, 97]]
    assert (loop.get(256 * STRIDE + 256), loop.get(256 * STRIDE + 97), loop.get(97 * STRIDE + 97, 0)) == (3, 3, 0)
    assert loop.best(1) == 256 * STRIDE + 97  # a tie of 3: the smaller right id wins
    assert loop.best(4) is None


real_pieces = [
    json.loads(line)["text"] for line in gzip.open(ROOT / "tests/data/qwen3.jsonl.gz", "rt", encoding="utf-8")
][:1500]
real_text = "\n".join(real_pieces) + "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))


@pytest.mark.parametrize("kwargs", [
    {"vocab_size": 3000},
    {"vocab_size": 2000, "pins": ["QLoRA", "tokenizer", "isinstance"], "special_tokens": ["<|endoftext|>"]},
    {"vocab_size": 1500, "min_frequency": 5, "pins": ["zzqx"]},
], ids=["plain", "pins and a special", "min_frequency 5"])
def test_c_training_writes_the_python_loops_file_on_real_text(tmp_path, monkeypatch, kwargs):
    code = [str(p) for p in sorted((ROOT / "bpetok").glob("*.py"))]
    fast = train(code, texts=[real_text], output=tmp_path / "c.gguf", progress=False, **kwargs)
    monkeypatch.setattr(train_mod, "_pair_counts", _PairCounts)
    twin = train(code, texts=[real_text], output=tmp_path / "py.gguf", progress=False, **kwargs)
    assert len(fast.merges) > 500
    assert (fast.tokens, fast.merges) == (twin.tokens, twin.merges)
    assert (tmp_path / "c.gguf").read_bytes() == (tmp_path / "py.gguf").read_bytes()


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(text=runs, pins=st.lists(st.text(alphabet="abéxQ", min_size=1, max_size=30), max_size=3),
                  extra=st.integers(0, 120), min_frequency=st.integers(1, 3))
def test_c_training_writes_the_python_loops_file(tmp_path_factory, text, pins, extra, min_frequency):
    tmp = tmp_path_factory.mktemp("c")
    kwargs = dict(texts=[text + " x"], pins=pins, min_frequency=min_frequency, progress=False)
    bytes_only = _Vocab()  # the fewest tokens the pins can take, as train() reckons it
    for term in dict.fromkeys(pins):
        _add_chain(bytes_only, term), _add_chain(bytes_only, " " + term)
    full = len(train(vocab_size=100_000, **kwargs).tokens)
    kwargs["vocab_size"] = max(len(bytes_only.tokens), full - extra)  # stop the merging early, or not
    fast = train(output=tmp / "c.gguf", **kwargs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train_mod, "_pair_counts", _PairCounts)
        twin = train(output=tmp / "py.gguf", **kwargs)
    assert (fast.tokens, fast.merges) == (twin.tokens, twin.merges)
    assert (tmp / "c.gguf").read_bytes() == (tmp / "py.gguf").read_bytes()


def test_the_c_loop_runs_by_default_when_built():
    expected = _PairCounts if pure_python_forced() else _train.PairCounts
    assert type(train_mod._pair_counts([b"ab"], [1])) is expected


@pytest.mark.parametrize("words, freqs, error", [
    ([[97, 2**24]], [1], r"symbol id 16777216 is outside"),
    ([[-1, 97]], [1], r"symbol id -1 is outside"),
    ([b"ab"], [-2], r"frequency -2 is negative"),
    ([b"ab", b"cd"], [1], r"more words than freqs"),
    ([b"ab"], [1, 1], r"fewer words than freqs"),
    ([b"abc", b"abc"], [2**62, 2**62], r"would pass 2\*\*63"),
])
def test_c_loop_refuses_bad_input_by_name(words, freqs, error):
    with pytest.raises((ValueError, OverflowError), match=error):
        _train.PairCounts(words, freqs)


def test_c_loop_refuses_a_bad_merge_and_a_second_init():
    loop = _train.PairCounts([b"ab"], [1])
    with pytest.raises(ValueError, match="outside"):
        loop.merge(97 * STRIDE + 98, 2**24)
    with pytest.raises(ValueError, match="outside"):
        loop.merge(-1, 256)
    with pytest.raises(TypeError, match="already initialised"):
        loop.__init__([b"cd"], [1])
    assert loop.words == [[97, 98]]


def test_c_loop_out_of_memory_is_memory_error_not_a_crash():
    # Under a 1 GiB address-space limit, 40 copies of one 8 MB word need ~5 GB of positions.
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from bpetok._train import PairCounts\n"
        "word = b'ab' * (4 << 20)\n"
        "try:\n"
        "    PairCounts((word for _ in range(40)), [1] * 40)\n"
        "except MemoryError as e:\n"
        "    print('MemoryError', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("MemoryError")
