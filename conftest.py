"""Doctests of bpetok's modules (``pytest --doctest-modules bpetok``): they run from the repository
root, with ``tok``, Qwen3's tokenizer from tests/data, in their namespace."""

from __future__ import annotations

import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).parent


@functools.lru_cache(maxsize=None)
def _qwen3():
    import bpetok

    return bpetok.from_gguf(ROOT / "tests" / "data" / "ggml-vocab-qwen3.gguf.gz")


@pytest.fixture(autouse=True)
def _doctest_setup(request, monkeypatch):
    if isinstance(request.node, pytest.DoctestItem):
        request.getfixturevalue("doctest_namespace")["tok"] = _qwen3()
        monkeypatch.chdir(ROOT)
