"""Fixtures for bpetok-hf's tests. Hugging Face tokenizers (and transformers) are the oracle.

The GGUF vocabularies and llama.cpp's reference texts are bpetok's own test data (the
repository's tests/data); this plugin adds only a corpus sample. No helper module on purpose:
these tests also run from bpetok's root, where tests/helpers.py is importable as ``helpers``.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

import bpetok

try:
    import bpetok_hf
except ImportError as e:  # run from bpetok's root without installing the plugin
    raise ImportError("bpetok-hf is not installed: python -m pip install -e 'plugins/bpetok-hf[test]'") from e

from bpetok_hf.writer import export_hf

DATA = pathlib.Path(__file__).parent / "data"
ROOT = pathlib.Path(__file__).resolve().parents[3]  # bpetok's repository
# bpetok's CLI module (bpetok.apps.cli since the layout moved it; bpetok.cli before).
CLI = "bpetok.apps.cli" if importlib.util.find_spec("bpetok.apps") else "bpetok.cli"


def _find(name: str) -> pathlib.Path:
    """A file of bpetok's test data (llama-bpe's GGUF is in tests/data/llama.cpp-tests since llama3 joined the core)."""
    for folder in ("tests/data", "tests/data/llama.cpp-tests", "plugins/bpetok-llama3/tests/data"):
        path = ROOT / folder / name
        if path.is_file():
            return path
    raise FileNotFoundError(f"{name}: not in bpetok's tests/data; run these tests from a bpetok checkout")


# name -> GGUF, the three vocabularies the plugin is checked on (llama.cpp's reference cases: name.jsonl.gz).
VOCABS = {
    "qwen3": "ggml-vocab-qwen3.gguf.gz",
    "smollm2": "ggml-vocab-smollm2.gguf.gz",
    "llama-bpe": "ggml-vocab-llama-bpe.gguf.gz",
}


def _jsonl(path: pathlib.Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def read_jsonl():
    """The records of a gzipped JSON-lines file (llama.cpp's reference cases, HF's recorded ids)."""
    return _jsonl


@pytest.fixture(scope="session")
def gguf_path():
    return lambda name: _find(VOCABS[name])


@pytest.fixture(scope="session")
def oracle_texts():
    """llama.cpp's reference texts for the vocabulary ``name`` (of VOCABS, or any other with its
    ``name``.jsonl.gz in bpetok's tests/data) with its ids, those of parse_special=True: HF always
    cuts special tokens out. 2,900 per vocabulary."""
    return functools.cache(lambda name: [c for c in _jsonl(_find(f"{name}.jsonl.gz")) if c["special"]])


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    """600 paragraphs, 200 from each of the shared corpora (English prose, Python code, man pages
    in five languages), in tests/data/corpus-sample.jsonl.gz."""
    return [c["text"] for c in _jsonl(DATA / "corpus-sample.jsonl.gz")]


@pytest.fixture(scope="session")
def reference_texts(oracle_texts, corpus):
    """The texts of ``oracle_texts(name)``, then the corpus sample: what a file made from the
    vocabulary ``name`` is checked on."""
    return lambda name: [c["text"] for c in oracle_texts(name)] + corpus


@pytest.fixture(scope="session")
def gguf_tokenizer(gguf_path):
    return functools.cache(lambda name: bpetok.from_file(gguf_path(name)))


@pytest.fixture(scope="session")
def exported(gguf_tokenizer, tmp_path_factory):
    """The directory bpetok-hf exports a vocabulary to (tokenizer.json, tokenizer_config.json)."""

    @functools.cache
    def get(name):
        out = tmp_path_factory.mktemp(f"hf-{name}")
        export_hf(gguf_tokenizer(name), out)
        return out

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


@pytest.fixture(scope="session")
def cli():
    """bpetok's CLI run as a user runs it, in a subprocess: ``cli("export", path, ...)`` -> CompletedProcess."""
    return lambda *args: subprocess.run([sys.executable, "-m", CLI, *map(str, args)], capture_output=True, text=True,
                                        timeout=300)


@pytest.fixture(scope="session")
def cli_export(cli, tmp_path_factory):
    """``export GGUF --format hf`` by the CLI into a new folder named after ``name``: the folder."""

    def export(gguf, name: str) -> pathlib.Path:
        out = tmp_path_factory.mktemp(name)
        result = cli("export", gguf, "--format", "hf", "-o", out)
        assert result.returncode == 0, result.stderr
        return out

    return export
