"""Training with the counting phase on worker processes gives the single-process vocabulary, byte for byte."""

from __future__ import annotations

import importlib
import io
import re
from collections import Counter

import pytest

from bpetok.apps.cli import main
from bpetok.train import count_pieces, train
from helpers import load_cases

train_mod = importlib.import_module("bpetok.train")  # the module: bpetok.train is also the function

PINS = ["QLoRA", "tokenizer"]
SPECIALS = ["<|endoftext|>", "<|pad|>"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Real text in several scripts (the reference cases), special tokens written in it too."""
    texts = [c["text"] for c in load_cases("qwen3") if not c["special"]][:2500]
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n<|endoftext|>".join(texts) + "\n", encoding="utf-8", errors="surrogatepass")
    return path


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of ~2,000 characters and one chunk per task: the corpus is spread over many tasks."""
    monkeypatch.setattr(train_mod, "CHUNK_CHARS", 2000)
    monkeypatch.setattr(train_mod, "TASK_CHUNKS", 1)


def train_to(path, corpus, **kwargs):
    return train([corpus], vocab_size=700, special_tokens=SPECIALS, pins=PINS, min_frequency=2, output=path,
                 progress=False, **kwargs)


def test_two_workers_train_the_same_vocabulary(tmp_path, corpus, small_chunks):
    text = corpus.read_text(encoding="utf-8", errors="surrogatepass")
    assert len(list(train_mod._chunks(io.StringIO(text)))) > 20  # many tasks, so the merge of counts is exercised
    one = train_to(tmp_path / "one.gguf", corpus)
    two = train_to(tmp_path / "two.gguf", corpus, workers=2)
    assert (one.tokens, one.merges, one.n_pieces, one.n_unique) == (two.tokens, two.merges, two.n_pieces, two.n_unique)
    assert (tmp_path / "one.gguf").read_bytes() == (tmp_path / "two.gguf").read_bytes()
    assert len(one.merges) > 300


def test_counting_in_parts_adds_up_to_counting_at_once(corpus, small_chunks):
    text = corpus.read_text(encoding="utf-8", errors="surrogatepass")
    chunks = list(train_mod._chunks(io.StringIO(text)))
    whole = count_pieces("qwen2", SPECIALS, chunks)
    parts = count_pieces("qwen2", SPECIALS, chunks[:7])
    parts.update(count_pieces("qwen2", SPECIALS, chunks[7:]))
    # The reference: a plain Counter over the pre-tokenizer's pieces of the text between the specials.
    split = train_mod._pretokenizer("qwen2").split
    expected = Counter(p for part in re.split("<\\|endoftext\\|>|<\\|pad\\|>", text) for p in split(part))
    assert dict(whole.items()) == dict(parts.items()) == expected
    assert whole.total() == expected.total() and len(whole) == len(expected)
    assert "<|endoftext|>" not in dict(whole.items()) and whole["\n"] > 0


def test_cli_train_workers(tmp_path, corpus, capsys):
    args = ["train", str(corpus), "--vocab-size", "400", "--special", "<|endoftext|>", "-q"]
    assert main(args + ["-o", str(tmp_path / "a.gguf")]) == 0
    assert main(args + ["--workers", "2", "-o", str(tmp_path / "b.gguf")]) == 0
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()
