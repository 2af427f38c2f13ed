"""Fuzzing the GGUF reader: every damaged file reads or raises GGUFError naming the offset and key.

Never another exception, a hang, a MemoryError or a read past the end: a lying count or length is
refused before anything is allocated for it. The memory map is exactly the file, so an attempt to
read past its end would surface as a foreign exception (struct.error, IndexError) and fail.
"""

from __future__ import annotations

import gzip
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.vocab.gguf import GGUFValueType, read_gguf
from ggufbuild import EVERY_TYPE, HEADER_SIZE, build, element_type, expected, plain
from helpers import SMOLLM2

T = GGUFValueType
SAMPLE = build(EVERY_TYPE)
LIES = [2**62, 2**63, 2**64 - 1, 2**32, 1 << 40]


@pytest.fixture(scope="module")
def smollm2_bytes() -> bytes:
    with gzip.open(SMOLLM2, "rb") as f:
        return f.read()


def read_or_refuse(path):
    """Read a file; a GGUFError (with its offset) is fine, anything else fails the test."""
    try:
        return read_gguf(path)
    except bpetok.GGUFError as e:
        assert "byte offset" in str(e) and "reading key" in str(e), str(e)
        return e


def key_at(built, offset: int) -> str:
    """The key the reader is reading when the file stops at ``offset``."""
    for index, (key, start, value_start, end) in enumerate(built.spans):
        if offset < end:
            # Inside the key string itself the key's name is not known yet.
            return key if offset >= value_start - 4 else f"<key #{index}>"
    return "<header>"


def test_truncation_at_every_offset(tmp_path):
    path = tmp_path / "cut.gguf"
    n_kv = len(SAMPLE.spans)
    for cut in range(len(SAMPLE.data)):
        path.write_bytes(SAMPLE.data[:cut])
        with pytest.raises(bpetok.GGUFError) as info:
            read_gguf(path)
        message = str(info.value)
        # The key/value count is checked against the remaining bytes first (13 bytes per pair).
        header = cut < HEADER_SIZE or n_kv > (cut - HEADER_SIZE) // 13
        key = "<header>" if header else key_at(SAMPLE, cut)
        assert f"(reading key {key!r})" in message, (cut, message)
        assert "byte offset" in message


def test_truncation_of_a_real_vocabulary_header(tmp_path, smollm2_bytes):
    # Every offset of the first 4 kB (header and small keys), then a spread over the token arrays.
    path = tmp_path / "cut.gguf"
    rng = random.Random(2)
    cuts = list(range(0, 4096, 5)) + rng.sample(range(4096, len(smollm2_bytes)), 50)
    for cut in cuts:
        path.write_bytes(smollm2_bytes[:cut])
        with pytest.raises(bpetok.GGUFError, match="byte offset"):
            read_gguf(path)


@pytest.mark.parametrize("field_index", range(len(SAMPLE.fields)))
def test_lying_lengths_and_counts(tmp_path, field_index):
    """Every length, count and type field of the sample, overwritten with huge values."""
    field = SAMPLE.fields[field_index]
    path = tmp_path / "lie.gguf"
    for lie in LIES if field.size == 8 else [2**32 - 1, 2**31, 13, 99]:
        data = bytearray(SAMPLE.data)
        data[field.offset : field.offset + field.size] = lie.to_bytes(field.size, "little")
        path.write_bytes(bytes(data))
        with pytest.raises(bpetok.GGUFError) as info:
            read_gguf(path)
        message = str(info.value)
        assert f"byte offset {field.offset}" in message, (field, lie, message)
        assert f"(reading key {field.key!r})" in message, (field, lie, message)


@pytest.mark.parametrize("lie", LIES)
def test_lying_length_inside_a_long_string_array(tmp_path, lie):
    # The fast string-array path: a lie in the middle, and in the last element.
    strings = [b"s%d" % i for i in range(1000)]
    built = build([("tokenizer.ggml.tokens", T.ARRAY, (T.STRING, strings)), ("after", T.UINT8, 1)])
    lengths = [f for f in built.fields if f.what == "string length"]
    for field in (lengths[500], lengths[-1], lengths[0]):
        data = bytearray(built.data)
        data[field.offset : field.offset + 8] = lie.to_bytes(8, "little")
        path = tmp_path / "lie.gguf"
        path.write_bytes(bytes(data))
        with pytest.raises(bpetok.GGUFError) as info:
            read_gguf(path)
        message = str(info.value)
        assert f"byte offset {field.offset}" in message and "'tokenizer.ggml.tokens'" in message, message


def test_lengths_just_past_the_end(tmp_path):
    # Off-by-one lies: one byte more than the file holds.
    built = build([("s", T.STRING, b"abc")])
    field = [f for f in built.fields if f.what == "string length"][0]
    data = bytearray(built.data)
    data[field.offset : field.offset + 8] = (4).to_bytes(8, "little")
    path = tmp_path / "off.gguf"
    path.write_bytes(bytes(data))
    expected_message = f"string length 4 exceeds the 3 bytes that remain at byte offset {field.offset}"
    with pytest.raises(bpetok.GGUFError, match=expected_message):
        read_gguf(path)


def test_lying_tensor_count(tmp_path):
    path = tmp_path / "tensors.gguf"
    for lie in LIES:
        path.write_bytes(build(EVERY_TYPE, tensor_count=lie).data)
        expected_message = rf"tensor count {lie} cannot fit.* at byte offset 8 \(reading key '<header>'\)"
        with pytest.raises(bpetok.GGUFError, match=expected_message):
            read_gguf(path)


def test_bit_flips_in_every_byte(tmp_path):
    path = tmp_path / "flip.gguf"
    outcomes = {"read": 0, "refused": 0}
    for offset in range(len(SAMPLE.data)):
        for bit in (0, 7):
            data = bytearray(SAMPLE.data)
            data[offset] ^= 1 << bit
            path.write_bytes(bytes(data))
            result = read_or_refuse(path)
            outcomes["refused" if isinstance(result, bpetok.GGUFError) else "read"] += 1
    # Flips in values read fine; flips in lengths, counts and types are refused.
    assert outcomes["read"] > 100 and outcomes["refused"] > 100, outcomes


def test_nesting_far_too_deep(tmp_path):
    # 100,000 nested array headers: refused at the ninth level, no recursion error.
    header = struct.pack("<IQ", T.ARRAY, 1)
    data = build([]).data[:-8] + struct.pack("<Q", 1) + struct.pack("<Q", 4) + b"deep" + struct.pack("<I", T.ARRAY)
    data += header * 100_000 + struct.pack("<IQ", T.UINT8, 1) + b"\x01"
    path = tmp_path / "deep.gguf"
    path.write_bytes(data)
    with pytest.raises(bpetok.GGUFError, match="nested deeper than 8 levels.*'deep'"):
        read_gguf(path)


def test_many_empty_arrays_finish(tmp_path):
    # The most elements a file can describe per byte (12 bytes each): read, not hung.
    count = 50_000
    data = build([("many", T.ARRAY, (T.ARRAY, [(T.UINT8, [])] * count))]).data
    path = tmp_path / "many.gguf"
    path.write_bytes(data)
    assert len(read_gguf(path).metadata["many"]) == count


# -- hypothesis -------------------------------------------------------------------------------------

SCALAR_VALUES = {
    T.UINT8: st.integers(0, 2**8 - 1),
    T.INT8: st.integers(-(2**7), 2**7 - 1),
    T.UINT16: st.integers(0, 2**16 - 1),
    T.INT16: st.integers(-(2**15), 2**15 - 1),
    T.UINT32: st.integers(0, 2**32 - 1),
    T.INT32: st.integers(-(2**31), 2**31 - 1),
    T.FLOAT32: st.floats(width=32, allow_nan=False),
    T.BOOL: st.booleans(),
    T.STRING: st.binary(max_size=20),
    T.UINT64: st.integers(0, 2**64 - 1),
    T.INT64: st.integers(-(2**63), 2**63 - 1),
    T.FLOAT64: st.floats(allow_nan=False),
}


def typed_values(depth: int = 0):
    scalars = st.sampled_from(sorted(SCALAR_VALUES)).flatmap(lambda t: SCALAR_VALUES[t].map(lambda v: (t, v)))
    if depth >= 3:
        return scalars
    arrays = st.sampled_from(sorted(SCALAR_VALUES)).flatmap(
        lambda t: st.lists(SCALAR_VALUES[t], max_size=5).map(lambda vs: (T.ARRAY, (t, vs)))
    )
    nested = typed_values(depth + 1).filter(lambda tv: tv[0] == T.ARRAY).flatmap(
        lambda tv: st.lists(st.just(tv[1]), max_size=3).map(lambda vs: (T.ARRAY, (T.ARRAY, vs)))
    )
    return st.one_of(scalars, arrays, nested)


key_values = st.dictionaries(st.text(max_size=12), typed_values(), max_size=8).map(
    lambda d: [(key, vtype, value) for key, (vtype, value) in d.items()]
)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(kvs=key_values, version=st.sampled_from([2, 3]))
def test_hypothesis_round_trip(tmp_path, kvs, version):
    path = tmp_path / "rt.gguf"
    path.write_bytes(build(kvs, version=version).data)
    gguf = read_gguf(path)
    assert gguf.keys == [key for key, _, _ in kvs]
    for key, vtype, value in kvs:
        assert gguf.types[key] == (vtype, element_type(vtype, value))
        assert plain(gguf.metadata[key]) == expected(vtype, value)


@FUZZ
@given(kvs=key_values, data=st.data())
def test_hypothesis_damaged_files(tmp_path, kvs, data):
    clean = build(kvs).data
    damaged = bytearray(clean)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        width = data.draw(st.sampled_from([1, 4, 8]))
        damaged[at : at + width] = data.draw(st.binary(min_size=width, max_size=width))
    cut = data.draw(st.integers(0, len(damaged)))
    path = tmp_path / "damaged.gguf"
    path.write_bytes(bytes(damaged[:cut]))
    read_or_refuse(path)


@FUZZ
@given(header=st.binary(min_size=0, max_size=64), body=st.binary(max_size=200))
def test_hypothesis_headers(tmp_path, header, body):
    # A valid magic and version, then arbitrary counts and bytes.
    path = tmp_path / "header.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<I", 3) + header + body)
    read_or_refuse(path)


@FUZZ
@given(tensor_count=st.integers(0, 2**64 - 1), kv_count=st.integers(0, 2**64 - 1), body=st.binary(max_size=300))
def test_hypothesis_counts(tmp_path, tensor_count, kv_count, body):
    path = tmp_path / "counts.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, tensor_count, kv_count) + body)
    read_or_refuse(path)


@settings(FUZZ, max_examples=60)
@given(
    strings=st.lists(
        st.one_of(st.binary(max_size=12), st.text(max_size=8).map(str.encode), st.binary(min_size=250, max_size=260)),
        min_size=60,
        max_size=400,
    ),
    cut=st.integers(0, 64),
)
def test_hypothesis_string_arrays(tmp_path, strings, cut):
    # The numpy scan against the plain walk: same strings, and the same error for a cut file.
    built = build([("s", T.ARRAY, (T.STRING, strings))])
    path = tmp_path / "strings.gguf"
    path.write_bytes(built.data)
    assert read_gguf(path).metadata["s"] == strings
    if cut:
        path.write_bytes(built.data[:-cut])
        with pytest.raises(bpetok.GGUFError, match="reading key 's'"):
            read_gguf(path)
