"""Shared fixtures: tokenizers for the vocabularies shipped in tests/data."""

from __future__ import annotations

import pytest

import bpetok
from helpers import QWEN3, SMOLLM2, VOCABS


@pytest.fixture(scope="session")
def qwen3() -> bpetok.Tokenizer:
    return bpetok.from_gguf(QWEN3)


@pytest.fixture(scope="session")
def smollm2() -> bpetok.Tokenizer:
    return bpetok.from_gguf(SMOLLM2)


@pytest.fixture(scope="session", params=sorted(VOCABS))
def vocab_tokenizer(request) -> tuple[str, bpetok.Tokenizer]:
    return request.param, bpetok.from_gguf(VOCABS[request.param])
