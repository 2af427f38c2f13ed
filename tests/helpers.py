"""Paths and loaders for the vocabularies and llama.cpp reference cases kept in tests/data."""

from __future__ import annotations

import gzip
import json
import pathlib


DATA = pathlib.Path(__file__).parent / "data"
QWEN3 = DATA / "ggml-vocab-qwen3.gguf.gz"
SMOLLM2 = DATA / "ggml-vocab-smollm2.gguf.gz"
LLAMA_TESTS = DATA / "llama.cpp-tests"
VOCABS = {"qwen3": QWEN3, "smollm2": SMOLLM2}


def load_cases(name: str) -> list[dict]:
    """llama.cpp's ids for 5,800 texts: {"text", "special", "ids"} per case."""
    with gzip.open(DATA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]
