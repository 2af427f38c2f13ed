"""Shared fixtures: tokenizers for the vocabularies shipped in tests/data."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

import bpetok
from helpers import QWEN3, SMOLLM2, VOCABS

# Property tests draw the same examples on every run, so a run's result depends on the code,
# not on luck (CI once failed on a fresh draw that found a real bug: the draw is now a test
# of its own). HYPOTHESIS_PROFILE=explore draws new examples each run, to look for more.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def qwen3() -> bpetok.Tokenizer:
    return bpetok.from_gguf(QWEN3)


@pytest.fixture(scope="session")
def smollm2() -> bpetok.Tokenizer:
    return bpetok.from_gguf(SMOLLM2)


@pytest.fixture(scope="session", params=sorted(VOCABS))
def vocab_tokenizer(request) -> tuple[str, bpetok.Tokenizer]:
    return request.param, bpetok.from_gguf(VOCABS[request.param])
