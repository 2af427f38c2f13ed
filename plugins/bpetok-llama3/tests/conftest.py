"""Fixtures for bpetok-llama3's tests: the llama-bpe vocabulary and llama.cpp's ids for it.

No helper module on purpose: these tests also run from bpetok's repository root, whose own
tests/ has a helpers.py on the path; fixtures avoid any module-name clash.
"""

from __future__ import annotations

import gzip
import json
import pathlib

import pytest

import bpetok
from bpetok.plugins import make_plugin_manager

try:
    import bpetok_llama3
except ImportError as e:  # run from bpetok's root without installing the plugin
    raise ImportError("bpetok-llama3 is not installed: python -m pip install -e plugins/bpetok-llama3") from e

DATA = pathlib.Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    """tests/data: llama.cpp's llama-bpe test vocabulary (gzipped GGUF, MIT, see LICENSE-llama.cpp),
    its test-tokenizer-0 vectors and the reference cases recorded with llama-cpp-python."""
    return DATA


@pytest.fixture(scope="session")
def llama_bpe_path() -> pathlib.Path:
    return DATA / "ggml-vocab-llama-bpe.gguf.gz"


@pytest.fixture
def plugin_manager():
    """A fresh plugin manager holding bpetok's built-ins and this plugin, registered directly,
    so the tests below do not depend on which other plugins happen to be installed."""
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(bpetok_llama3, name="llama3")
    return pm


@pytest.fixture(scope="session")
def llama_bpe(llama_bpe_path) -> bpetok.Tokenizer:
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(bpetok_llama3, name="llama3")
    return bpetok.from_gguf(llama_bpe_path, plugin_manager=pm)


def _jsonl(path: pathlib.Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def oracle_cases() -> list[dict]:
    """5,800 texts with llama.cpp's llama_tokenize(add_special=False, parse_special) ids."""
    return _jsonl(DATA / "llama-bpe.jsonl.gz")


@pytest.fixture(scope="session")
def add_special_cases() -> list[dict]:
    """Recorded by scripts/record_cases.py --add-special: ids with BOS, and llama_detokenize's bytes."""
    return _jsonl(DATA / "llama-bpe-add-special.jsonl.gz")


@pytest.fixture(scope="session")
def llama_cpp_vectors() -> list[tuple[str, list[int]]]:
    """llama.cpp's own tests/ggml-vocab-llama-bpe.gguf.inp/.out (test-tokenizer-0's format)."""
    inputs = (DATA / "ggml-vocab-llama-bpe.gguf.inp").read_bytes().decode("utf-8").split("\n__ggml_vocab_test__\n")
    outputs = (DATA / "ggml-vocab-llama-bpe.gguf.out").read_text(encoding="utf-8").split("\n")
    inputs = inputs[:-1]  # every input, the last included, is followed by the separator
    return [(text, [int(x) for x in line.split()]) for text, line in zip(inputs, outputs)]
