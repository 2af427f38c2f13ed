"""Fixtures for bpetok-hf's tests. Hugging Face tokenizers (and transformers) are the oracle.

The GGUF vocabularies and llama.cpp's reference texts are bpetok's own test data (the
repository's tests/data); this plugin adds only a corpus sample. No helper module on purpose:
these tests also run from bpetok's root, where tests/helpers.py is importable as ``helpers``.
"""

from __future__ import annotations

import gzip
import json
import pathlib

import pytest

import bpetok

try:
    import bpetok_hf
except ImportError as e:  # run from bpetok's root without installing the plugin
    raise ImportError("bpetok-hf is not installed: python -m pip install -e 'plugins/bpetok-hf[test]'") from e

from bpetok_hf.writer import export_hf

DATA = pathlib.Path(__file__).parent / "data"
ROOT = pathlib.Path(__file__).resolve().parents[3]  # bpetok's repository


def _find(name: str) -> pathlib.Path:
    """A file of bpetok's test data (llama-bpe's GGUF is in tests/data/llama.cpp-tests since llama3 joined the core)."""
    for folder in ("tests/data", "tests/data/llama.cpp-tests", "plugins/bpetok-llama3/tests/data"):
        path = ROOT / folder / name
        if path.is_file():
            return path
    raise FileNotFoundError(f"{name}: not in bpetok's tests/data; run these tests from a bpetok checkout")


# name -> (GGUF, llama.cpp's reference cases), the three vocabularies the plugin is checked on.
VOCABS = {
    "qwen3": ("ggml-vocab-qwen3.gguf.gz", "qwen3.jsonl.gz"),
    "smollm2": ("ggml-vocab-smollm2.gguf.gz", "smollm2.jsonl.gz"),
    "llama-bpe": ("ggml-vocab-llama-bpe.gguf.gz", "llama-bpe.jsonl.gz"),
}


def _jsonl(path: pathlib.Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def gguf_path():
    return lambda name: _find(VOCABS[name][0])


@pytest.fixture(scope="session")
def oracle_texts():
    """llama.cpp's reference texts for a vocabulary with its ids (parse_special=True: HF always
    cuts special tokens out), 2,900 per vocabulary."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = [c for c in _jsonl(_find(VOCABS[name][1])) if c["special"]]
        return cache[name]

    return get


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    """600 paragraphs, 200 from each of the shared corpora (English prose, Python code, man pages
    in five languages), in tests/data/corpus-sample.jsonl.gz."""
    return [c["text"] for c in _jsonl(DATA / "corpus-sample.jsonl.gz")]


@pytest.fixture(scope="session")
def gguf_tokenizer(gguf_path):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = bpetok.from_file(gguf_path(name))
        return cache[name]

    return get


@pytest.fixture(scope="session")
def exported(gguf_tokenizer, tmp_path_factory):
    """The directory bpetok-hf exports a vocabulary to (tokenizer.json, tokenizer_config.json)."""
    cache = {}

    def get(name):
        if name not in cache:
            out = tmp_path_factory.mktemp(f"hf-{name}")
            export_hf(gguf_tokenizer(name), out)
            cache[name] = out
        return cache[name]

    return get


@pytest.fixture(scope="session")
def hf_tokenizer(exported):
    """HF tokenizers' Tokenizer over an exported tokenizer.json."""
    from tokenizers import Tokenizer

    return lambda name: Tokenizer.from_file(str(exported(name) / "tokenizer.json"))


@pytest.fixture(scope="session")
def hf_ids():
    """HF's ids for a text without the post-processor's BOS/EOS (bpetok's add_special=False)."""
    return lambda hf, text: hf.encode(text, add_special_tokens=False).ids


@pytest.fixture(scope="session")
def plugin():
    return bpetok_hf
