"""encode_batch: llama.cpp's ids in the same order as encode, on the kernel's threads (with its
splitter: the reference cases are several of the parts those threads take) or in this thread
(every other engine); and one tokenizer encoding from several threads at once gives what it
gives alone.
"""

from __future__ import annotations

import random
import threading

import pytest

import bpetok
import bpetok.tokenizer
from helpers import QWEN3, SMOLLM2, load_cases

EXTRA = [
    "",
    "Hello <|im_end|> world",
    "<think>\nmaybe</think> <|im_start|>user\nHi<|im_end|>",
    "<|im_end|><|im_end|>",
    " " * 40,
    "\U0001f600" * 30,
    "lone \ud800 surrogate",
]


def _threads_release_the_gil(tok: bpetok.Tokenizer) -> bool:
    """The engine whose work runs without the GIL: the C kernel with its own splitter."""
    return tok.engine == "C kernel" and tok.spec is not None and bool(tok.spec.kernel_split)


# -- same ids, same order ------------------------------------------------------------------------


@pytest.mark.parametrize("name, path", [("qwen3", QWEN3), ("smollm2", SMOLLM2)])
@pytest.mark.parametrize("workers", [2, 3])
def test_threads_give_llama_cpp_ids_in_order(name, path, workers):
    cold = bpetok.from_gguf(path)  # empty caches: the threads fill them together
    for special in (False, True):
        chosen = [c for c in load_cases(name) if c["special"] == special]
        assert cold.encode_batch([c["text"] for c in chosen], parse_special=special, workers=workers) == [
            c["ids"] for c in chosen
        ]


@pytest.mark.parametrize("name, path", [("qwen3", QWEN3), ("smollm2", SMOLLM2)])
@pytest.mark.parametrize("workers", [1, 2])
def test_to_numpy_gives_llama_cpp_ids_as_arrays(name, path, workers):
    """encode_batch_to_numpy: the same ids as machine words (the kernel's flat path, the texts that
    hold a special token spliced in), offsets one more than the texts."""
    import numpy as np

    tok = bpetok.from_gguf(path)
    for special in (False, True):
        chosen = [c for c in load_cases(name) if c["special"] == special]
        ids, offsets = tok.encode_batch_to_numpy([c["text"] for c in chosen], parse_special=special, workers=workers)
        assert ids.dtype == np.uint32 and offsets.dtype == np.int64 and len(offsets) == len(chosen) + 1
        assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [c["ids"] for c in chosen]
    ids, offsets = tok.encode_batch_to_numpy(EXTRA, workers=workers)
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [tok.encode(t) for t in EXTRA]
    ids[:1] = 7  # writable arrays of the caller's own


def test_to_numpy_of_nothing_and_bad_input(qwen3):
    ids, offsets = qwen3.encode_batch_to_numpy([])
    assert ids.tolist() == [] and offsets.tolist() == [0]
    ids, offsets = qwen3.encode_batch_to_numpy(["", ""])
    assert ids.tolist() == [] and offsets.tolist() == [0, 0, 0]
    with pytest.raises(TypeError, match="encode_batch_to_numpy"):
        qwen3.encode_batch_to_numpy("a str, not a list of them")
    with pytest.raises(TypeError, match="encode_batch_to_numpy\\(\\) takes str texts, not bytes"):
        qwen3.encode_batch_to_numpy(["fine", b"bytes"])
    with pytest.raises(ValueError, match="workers must be at least 1"):
        qwen3.encode_batch_to_numpy(["x"], workers=0)


def test_equals_encode_warm_and_cold(qwen3):
    texts = [c["text"] for c in load_cases("qwen3")] + EXTRA
    for special in (True, False):
        expected = [qwen3.encode(t, parse_special=special) for t in texts]
        assert qwen3.encode_batch(texts, parse_special=special, workers=2) == expected  # warm caches
        cold = bpetok.from_gguf(QWEN3)
        assert cold.encode_batch(texts[::-1], parse_special=special, workers=2) == expected[::-1]


def test_the_kernels_lists_are_left_out_of_the_cycle_collector(qwen3):
    """Lists of ints cannot be in a reference cycle: the kernel's batch lists are untracked, so a
    collection does not scan their ids; they are ordinary lists otherwise."""
    import gc

    texts = [f"plain text number {i}, no special token in it" for i in range(3000)]
    lists = qwen3.encode_batch(texts, parse_special=False)
    assert lists == [qwen3.encode(t, parse_special=False) for t in texts]
    if _threads_release_the_gil(qwen3):
        assert not any(map(gc.is_tracked, lists)) and gc.is_tracked(lists)
    lists[0].append([1])
    assert lists[0][-1] == [1]


def test_tiny_batches(qwen3):
    assert qwen3.encode_batch([], workers=2) == []
    assert qwen3.encode_batch([""], workers=2) == [[]]
    assert qwen3.encode_batch(iter(["a", "", "b c"]), workers=4) == [qwen3.encode("a"), [], qwen3.encode("b c")]
    assert qwen3.encode_batch(["Hi <|im_end|>"], parse_special=False, workers=4) == [
        qwen3.encode("Hi <|im_end|>", parse_special=False)
    ]
    texts = ["x" * 300_000, "y" * 300_000, "z"]  # two parts, more workers than parts
    assert qwen3.encode_batch(texts, workers=8) == [qwen3.encode(t) for t in texts]
    assert qwen3.encode_batch(texts, workers=10_000) == [qwen3.encode(t) for t in texts]  # the kernel uses 256


def test_a_special_token_only_across_two_texts_is_not_one(qwen3):
    """Texts without special tokens go to the kernel together, which looks for special tokens in
    each of them: one that straddles two texts is in neither and must not be cut out."""
    texts = ["Hello <|im_", "end|> world", "plain", "<|im_end|>"]
    for special in (True, False):
        assert qwen3.encode_batch(texts, parse_special=special, workers=1) == [
            qwen3.encode(t, parse_special=special) for t in texts
        ]
        assert qwen3.encode_batch(texts[:3], parse_special=special, workers=1) == [
            qwen3.encode(t, parse_special=special) for t in texts[:3]
        ]


# -- one tokenizer, several threads --------------------------------------------------------------


@pytest.mark.parametrize("cache_bytes", [300_000, None], ids=["small-caches", "default-caches"])
def test_one_tokenizer_hammered_from_threads(cache_bytes):
    """Four threads share one cold tokenizer (small caches fill up mid-run: the budget's edge),
    each encoding every text in its own order, by encode and by encode_batch; long texts take
    the kernel's GIL-free path. Each result must be llama.cpp's ids (the reference cases) or,
    for the long texts, what a tokenizer of its own gives them one after the other."""
    rng = random.Random(7)
    cases = rng.sample(load_cases("qwen3"), 1200)
    long_texts = [" ".join(rng.choice(cases)["text"] for _ in range(30)) for _ in range(20)]
    alone = bpetok.from_gguf(QWEN3)
    expected = {(c["text"], c["special"]): c["ids"] for c in cases}
    for text in long_texts:
        for special in (True, False):
            expected[text, special] = alone.encode(text, parse_special=special)
    jobs = list(expected)
    shared = bpetok.Tokenizer(bpetok.load_vocabulary(QWEN3), cache_bytes=cache_bytes)
    start = threading.Barrier(4)
    wrong: list[tuple[int, str]] = []
    failures: list[BaseException] = []

    def work(k: int) -> None:
        try:
            order = jobs[:]
            random.Random(k).shuffle(order)
            start.wait()
            for at in range(0, len(order), 50):
                block = order[at : at + 50]
                if (at // 50 + k) % 2:
                    got = [shared.encode(text, parse_special=special) for text, special in block]
                else:
                    got = [shared.encode_batch([text], parse_special=special, workers=1)[0] for text, special in block[:10]]
                    got += shared.encode_batch([t for t, s in block[10:] if s], parse_special=True, workers=2)
                    got += shared.encode_batch([t for t, s in block[10:] if not s], parse_special=False, workers=2)
                    block = block[:10] + [j for j in block[10:] if j[1]] + [j for j in block[10:] if not j[1]]
                wrong.extend((k, text) for (text, special), ids in zip(block, got) if ids != expected[text, special])
        except BaseException as e:  # noqa: BLE001 - reported below, in the test's thread
            failures.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert wrong == []
    assert len(jobs) > 1200
