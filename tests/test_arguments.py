"""Argument types across the public API: integers are what operator.index accepts (not bool), flags
are bool, a str is never a batch or a list of ids; everything else is a TypeError saying so."""

from __future__ import annotations

import numpy as np
import pytest

import bpetok
from bpetok.train import extend, train
from helpers import QWEN3

HELLO = 9707  # "Hello" in Qwen3 (tests/data/qwen3.jsonl.gz: llama.cpp's ids)


# -- token ids ------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [int, np.int64, np.int32, np.uint16, lambda i: np.array([i])[0]])
def test_numpy_integers_are_token_ids(qwen3, make):
    token_id = make(HELLO)
    assert qwen3.decode([token_id]) == "Hello"
    assert qwen3.decode_bytes([token_id]) == b"Hello"
    assert qwen3.piece(token_id) == b"Hello" and qwen3.token_bytes(token_id) == b"Hello"
    assert qwen3.token_type(token_id) == qwen3.token_type(HELLO)
    assert qwen3.token_attributes(token_id) == qwen3.token_attributes(HELLO)


def test_a_numpy_array_of_ids_decodes(qwen3):
    ids = qwen3.encode("Hello world, again")
    assert qwen3.decode(np.array(ids, dtype=np.int64)) == "Hello world, again"
    assert qwen3.decode(np.array(ids, dtype=np.uint32)) == "Hello world, again"


@pytest.mark.parametrize("ids", [b"ab", "ab", bytearray(b"ab"), memoryview(b"ab")])
def test_text_is_not_a_sequence_of_ids(qwen3, ids):
    """decode(b"ab") used to decode ids 97 and 98."""
    with pytest.raises(TypeError, match="decode\\(\\) takes a sequence of token ids"):
        qwen3.decode(ids)
    with pytest.raises(TypeError, match="decode\\(\\) takes a sequence of token ids"):
        qwen3.decode_bytes(ids)


@pytest.mark.parametrize("bad", [9707.0, "9707", True, None, [1]])
def test_non_integer_ids_are_type_errors(qwen3, bad):
    for call in (qwen3.piece, qwen3.token_bytes, qwen3.token_type, qwen3.token_attributes, lambda i: qwen3.decode([i])):
        with pytest.raises(TypeError, match="a token id must be an integer"):
            call(bad)


def test_a_float_id_that_equals_a_cached_id_is_still_refused(qwen3):
    qwen3.piece(HELLO)  # cached: a dict lookup must not let 9707.0 through
    with pytest.raises(TypeError):
        qwen3.decode([float(HELLO)])


def test_out_of_range_ids_stay_value_errors(qwen3):
    for bad in (-1, qwen3.n_tokens, np.int64(qwen3.n_tokens)):
        with pytest.raises(bpetok.BpetokError, match="out of range"):
            qwen3.decode([bad])


def test_id_takes_text_only(qwen3):
    assert qwen3.id("<|im_end|>") == qwen3.id(b"<|im_end|>") == 151645
    with pytest.raises(TypeError, match="id\\(\\) takes a token's text"):
        qwen3.id(151645)


def test_streams_take_numpy_ids_and_bool_flags(qwen3):
    stream = qwen3.decode_stream()
    assert "".join(stream.step(np.int64(i)) for i in qwen3.encode("Hello world")) + stream.flush() == "Hello world"
    with pytest.raises(TypeError, match=r"decode_stream\(skip_special=...\) must be True or False"):
        qwen3.decode_stream(skip_special="yes")
    with pytest.raises(TypeError, match=r"decode\(skip_special=...\) must be True or False"):
        qwen3.decode([HELLO], skip_special=1)


def test_decode_of_a_non_iterable_is_a_type_error(qwen3):
    with pytest.raises(TypeError, match="decode\\(\\) takes a sequence of token ids, not int"):
        qwen3.decode(HELLO)


# -- flags ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["no", "", 0, 1, None])
def test_flags_must_be_bool(qwen3, bad):
    """encode(parse_special="no") used to raise a bare KeyError."""
    with pytest.raises(TypeError, match=r"encode\(parse_special=...\) must be True or False"):
        qwen3.encode("hi", parse_special=bad)
    with pytest.raises(TypeError, match=r"encode\(add_special=...\) must be True or False"):
        qwen3.encode("hi", add_special=bad)
    with pytest.raises(TypeError, match=r"count\(parse_special=...\) must be True or False"):
        qwen3.count("hi", parse_special=bad)
    with pytest.raises(TypeError, match=r"encode_batch\(parse_special=...\) must be True or False"):
        qwen3.encode_batch(["hi"], parse_special=bad)
    with pytest.raises(TypeError, match=r"encode_bytes\(parse_special=...\) must be True or False"):
        qwen3.encode_bytes(b"hi", parse_special=bad)


def test_numpy_bools_are_flags(qwen3):
    assert qwen3.encode("<|im_end|>", parse_special=np.bool_(False)) == qwen3.encode("<|im_end|>", parse_special=False)


# -- batches ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("texts", ["hello", b"hello"])
def test_a_str_is_not_a_batch(qwen3, texts):
    """encode_batch("hello") used to encode five one-character texts."""
    with pytest.raises(TypeError, match="encode_batch\\(\\) takes a sequence of str texts"):
        qwen3.encode_batch(texts)


@pytest.mark.parametrize("bad", ["2", 2.5, True])
def test_workers_must_be_an_integer(qwen3, bad):
    with pytest.raises(TypeError, match=r"encode_batch\(workers=...\) must be an integer"):
        qwen3.encode_batch(["a", "b"], workers=bad)


def test_numpy_workers_count(qwen3):
    assert qwen3.encode_batch(["Hello", "world"], workers=np.int64(1)) == [[HELLO], qwen3.encode("world")]


# -- training and extending ----------------------------------------------------------------------


def test_train_argument_types():
    with pytest.raises(TypeError, match=r"train\(vocab_size=...\) must be an integer"):
        train(texts=["low lower"], vocab_size="300")
    with pytest.raises(TypeError, match=r"train\(min_frequency=...\) must be an integer"):
        train(texts=["low lower"], vocab_size=300, min_frequency=1.5)
    with pytest.raises(TypeError, match=r"train\(pins=...\) takes a list of terms, not a single str"):
        train(texts=["low lower"], vocab_size=300, pins="low")
    with pytest.raises(TypeError, match=r"train\(special_tokens=...\) takes a list of token texts"):
        train(texts=["low lower"], vocab_size=300, special_tokens="<|endoftext|>")
    with pytest.raises(TypeError, match=r"train\(texts=...\) takes str texts, not bytes"):
        train(texts=[b"low lower"], vocab_size=300)
    with pytest.raises(TypeError, match=r"train\(progress=...\) must be True or False"):
        train(texts=["low lower"], vocab_size=300, progress="no")
    result = train(texts=["low lower lowest"] * 5, vocab_size=np.int64(262), min_frequency=np.int32(1), progress=False)
    assert len(result.tokens) == 262


def test_extend_argument_types():
    with pytest.raises(TypeError, match=r"extend\(pins=...\) takes a list of terms, not a single str"):
        extend(QWEN3, pins="QLoRA")
    with pytest.raises(TypeError, match="a pinned term must be a str, not int"):
        extend(QWEN3, pins=[5])
