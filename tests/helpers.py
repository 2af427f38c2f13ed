"""Paths and loaders for the vocabularies and llama.cpp reference cases kept in tests/data."""

from __future__ import annotations

import contextlib
import gzip
import json
import pathlib
import threading
from typing import Callable, TypeVar

T = TypeVar("T")


DATA = pathlib.Path(__file__).parent / "data"
QWEN3 = DATA / "ggml-vocab-qwen3.gguf.gz"
SMOLLM2 = DATA / "ggml-vocab-smollm2.gguf.gz"
LLAMA_TESTS = DATA / "llama.cpp-tests"
LLAMA_SPM = LLAMA_TESTS / "ggml-vocab-llama-spm.gguf.gz"
PHI3 = LLAMA_TESTS / "ggml-vocab-phi-3.gguf.gz"
BAICHUAN = LLAMA_TESTS / "ggml-vocab-baichuan.gguf.gz"
GEMMA4 = LLAMA_TESTS / "ggml-vocab-gemma-4.gguf.gz"
# Every vocabulary with llama.cpp's ids ({name}.jsonl.gz) and pieces ({name}.dump.json.gz) here.
VOCABS = {"qwen3": QWEN3, "smollm2": SMOLLM2, "llama-spm": LLAMA_SPM, "phi-3": PHI3, "baichuan": BAICHUAN,
          "gemma-4": GEMMA4}


def load_cases(name: str) -> list[dict]:
    """llama.cpp's ids for 5,800 texts: {"text", "special", "ids"} per case."""
    with gzip.open(DATA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def wrong_cases(encode: Callable[..., list[int]], cases: list[dict]) -> list[dict]:
    """The cases of :func:`load_cases` whose ids ``encode(text, parse_special=...)`` does not give."""
    return [c for c in cases if encode(c["text"], parse_special=c["special"]) != c["ids"]]


def read_vectors(name: str) -> list[tuple[str, list[int]]]:
    """llama.cpp's own tests/ggml-vocab-NAME.gguf.inp/.out (test-tokenizer-0's format): each input
    is followed by a separator line; one line of ids per input."""
    base = LLAMA_TESTS / f"ggml-vocab-{name}.gguf"
    inputs = base.with_suffix(".gguf.inp").read_bytes().decode("utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    outputs = base.with_suffix(".gguf.out").read_text(encoding="utf-8").split("\n")[: len(inputs)]
    return [(text, [int(x) for x in line.split()]) for text, line in zip(inputs, outputs)]


def gguf_with_pre(src: pathlib.Path, dst: pathlib.Path, pre: str) -> pathlib.Path:
    """A copy of the GGUF vocabulary ``src`` with only ``tokenizer.ggml.pre`` changed ("" drops the key).

    The same copy scripts/record_reference_cases.py --pretok records llama.cpp's ids on.
    """
    from bpetok.vocab.gguf import GGUFValueType, read_gguf
    from bpetok.vocab.gguf_writer import items_of, write_gguf

    items = [item for item in items_of(read_gguf(src)) if item[0] != "tokenizer.ggml.pre"]
    if pre:
        items.insert(1, ("tokenizer.ggml.pre", GGUFValueType.STRING, pre, None))
    write_gguf(dst, items)
    return dst


def on_threads(work: Callable[[int], T], n: int = 4) -> list[T]:
    """``work(k)`` on ``n`` threads at once (k = 0 .. n-1): what each returned, in k's order. The
    first exception a thread raised is raised here (a thread that fails gives no result to compare)."""
    results: list = [None] * n
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            results[k] = work(k)
        except BaseException as e:  # noqa: BLE001 - raised below, in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def read_inputs(path: pathlib.Path) -> list[str]:
    """Texts in llama.cpp's .inp format (each followed by a ``__ggml_vocab_test__`` line)."""
    return path.read_bytes().decode("utf-8").split("\n__ggml_vocab_test__\n")[:-1]


@contextlib.contextmanager
def sharing_bpe_models():
    """Within it, tokenizers built from the same token list share one BPE model per ignore_merges
    value. The model depends on the tokens and merges, not on the pre-tokenizer, and building it
    (0.8 s for 150k tokens) would otherwise dominate tests that try every pre-tokenizer family."""
    import bpetok.models.gpt2 as gpt2

    models = {}
    real = gpt2.BytePairModel

    def shared(tokens, merges, *, ignore_merges=False, **kwargs):
        key = (id(tokens), ignore_merges)
        if key not in models:
            models[key] = (tokens, real(tokens, merges, ignore_merges=ignore_merges, **kwargs))
        return models[key][1]

    gpt2.BytePairModel = shared
    try:
        yield
    finally:
        gpt2.BytePairModel = real


def with_pre(vocabulary, pre: str):
    """The vocabulary as loaded from a copy of its file with tokenizer.ggml.pre = ``pre`` (the
    load-time overrides that read pre only concern <mask> tokens, which the test vocabularies lack)."""
    import dataclasses

    return dataclasses.replace(vocabulary, pre=pre, special_ids=dict(vocabulary.special_ids))
