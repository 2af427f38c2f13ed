"""Live check against llama.cpp itself (llama-cpp-python), when it is installed.

A fresh random sample each run (the seed is printed on failure), on both shipped vocabularies:
ids for both parse_special modes and token pieces for random ids. Install the oracle with
``pip install -e '.[llama]'`` (builds llama.cpp, about 10 minutes on 2 cores).
"""

from __future__ import annotations

import ctypes
import gzip
import importlib.util
import pathlib
import random
import shutil

import pytest

import bpetok
import bpetok.tokenizer
from bpetok.plugins import get_registry
from helpers import LLAMA_TESTS, VOCABS, gguf_with_pre, sharing_bpe_models, with_pre

llama_cpp = pytest.importorskip("llama_cpp")

SCRIPT = pathlib.Path(__file__).parent.parent / "scripts" / "record_reference_cases.py"
spec = importlib.util.spec_from_file_location("record_reference_cases", SCRIPT)
record = importlib.util.module_from_spec(spec)
spec.loader.exec_module(record)


@pytest.fixture(scope="module", params=sorted(VOCABS))
def pair(request, tmp_path_factory):
    plain = tmp_path_factory.mktemp("vocab") / f"{request.param}.gguf"
    with gzip.open(VOCABS[request.param]) as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return bpetok.from_gguf(plain), llama_cpp.Llama(str(plain), vocab_only=True, verbose=False)


def test_fresh_random_sample_matches_llama_cpp(pair):
    tok, llama = pair
    seed = random.randrange(2**32)
    texts = record.random_texts(random.Random(seed), 400)
    for text in texts:
        for special in (False, True):
            expected = record.llama_ids(llama, text, special)
            assert tok.encode(text, parse_special=special) == expected, f"seed {seed}: {text!r}"


def token_to_piece(llama, token_id: int, special: bool) -> bytes:
    """llama.cpp's llama_token_to_piece through the C API (lstrip 0)."""
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(llama._model.vocab, token_id, buf, len(buf), 0, special)
    assert n >= 0
    return buf.raw[:n]


def test_random_pieces_match_token_to_piece(pair):
    tok, llama = pair
    rng = random.Random()
    for token_id in rng.sample(range(tok.n_tokens), 500) + sorted(tok.eog_ids):
        assert tok.piece(token_id) == token_to_piece(llama, token_id, special=True)
        assert tok.token_bytes(token_id) == token_to_piece(llama, token_id, special=False)


def test_lone_surrogates_tokenize_as_their_bytes(pair):
    tok, llama = pair
    for text in ["\ud800", "a\udfffb", "x\ud83d\ude00"]:
        data = text.encode("utf-8", "surrogatepass")
        assert tok.encode(text) == llama.tokenize(data, add_bos=False, special=True)


# -- every pre-tokenizer family, a few per run ------------------------------------------------------

QWEN2_TEST_VOCAB = LLAMA_TESTS / "ggml-vocab-qwen2.gguf.gz"
# bpetok's own families (llama.cpp types): a plugin's pre name (bpetok-hf's hf-regex) means nothing to llama.cpp.
# The raw-UTF-8 ones need a vocabulary with <0xXX> tokens (below).
FAMILY_PRES = [row.pre for row in get_registry().rows()
               if row.pre == row.spec.pre_names[0] and row.spec.llama_type and row.spec.byte_encode]


def test_fresh_random_sample_matches_llama_cpp_for_some_families(tmp_path):
    """Six families drawn at random each run, 100 fresh random texts each (both parse_special), on a
    copy of the qwen2 test vocabulary with that family's pre; tests/test_pretok_families.py checks
    every family on recorded cases every run."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    with sharing_bpe_models():
        vocab = bpetok.load_vocabulary(QWEN2_TEST_VOCAB)
        for pre in rng.sample(FAMILY_PRES, 6):
            path = gguf_with_pre(QWEN2_TEST_VOCAB, tmp_path / f"{pre or 'default'}.gguf", pre)
            llama = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
            tok = bpetok.tokenizer.from_vocabulary(with_pre(vocab, pre))
            for text in record.random_texts(rng, 50) + record.pretok_fuzz(rng, 50):
                for special in (False, True):
                    expected = record.llama_ids(llama, text, special)
                    assert tok.encode(text, parse_special=special) == expected, f"seed {seed}, {pre}: {text!r}"


# The raw-UTF-8 names llama-cpp-python 0.3.36's llama.cpp knows (it predates mmbert) and that never
# abort on valid UTF-8 (whitespace aborts the process on a space next to other whitespace).
LIVE_RAW_UTF8 = ["gemma4", "granite-embed-multi-311m", "sarvam-moe"]


def test_fresh_random_sample_matches_llama_cpp_for_a_raw_utf8_type(tmp_path):
    """One raw-UTF-8 type drawn at random each run, 100 fresh random texts (both parse_special), on
    llama.cpp's Gemma 4 test vocabulary as a gpt2 model; tests/test_raw_utf8.py checks all five on
    recorded cases every run."""
    from test_raw_utf8 import gemma4_as_gpt2

    seed = random.randrange(2**32)
    rng = random.Random(seed)
    pre = rng.choice(LIVE_RAW_UTF8)
    path = gemma4_as_gpt2(tmp_path / f"{pre}.gguf", pre)
    llama = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    tok = bpetok.from_gguf(path)
    for text in record.random_texts(rng, 50) + record.pretok_fuzz(rng, 50):
        for special in (False, True):
            expected = record.llama_ids(llama, text, special)
            assert tok.encode(text, parse_special=special) == expected, f"seed {seed}, {pre}: {text!r}"


def detokenize(llama, ids: list[int]) -> bytes:
    """llama.cpp's llama_detokenize(remove_special=false, unparse_special=true), what decode_bytes mirrors."""
    array = (llama_cpp.llama_token * len(ids))(*ids)
    buf = ctypes.create_string_buffer(64 * len(ids) + 64)
    n = llama_cpp.llama_detokenize(llama._model.vocab, array, len(ids), buf, len(buf), False, True)
    assert n >= 0
    return buf.raw[:n]


def test_random_id_sequences_decode_as_llama_detokenize(pair):
    tok, llama = pair
    rng = random.Random()
    bos = tok.special_ids["bos"]
    for _ in range(300):
        ids = [rng.randrange(tok.n_tokens) for _ in range(rng.randrange(1, 8))]
        if bos is not None and rng.random() < 0.3:
            ids[0] = bos
        assert tok.decode_bytes(ids) == detokenize(llama, ids), ids


def test_add_special_and_eog_set_match_llama_cpp(pair):
    tok, llama = pair
    for text in ["Hello world", "", " x"]:
        assert tok.encode(text, add_special=True) == llama.tokenize(text.encode(), add_bos=True, special=True)
    vocab = llama._model.vocab
    assert tok.eog_ids == {i for i in range(tok.n_tokens) if llama_cpp.llama_vocab_is_eog(vocab, i)}
