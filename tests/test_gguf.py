"""bpetok's GGUF reader: round trips, the gguf package's reader as a cross-check, and clear refusals.

The fuzzing (truncation, bit flips, lying lengths, hypothesis) is in test_gguf_fuzz.py; whole
corrupted vocabularies going through ``bpetok.from_gguf`` are in test_corrupt.py.
"""

from __future__ import annotations

import gzip
import shutil
import struct

import numpy as np
import pytest

import bpetok
import bpetok.vocab.gguf
from bpetok.vocab.gguf import MAX_ARRAY_NESTING, GGUFValueType, _Cursor, read_gguf
from ggufbuild import EVERY_TYPE, HEADER_SIZE, build, element_type, expected, nested, plain
from helpers import DATA, QWEN3, SMOLLM2

T = GGUFValueType
SHIPPED = sorted([QWEN3, SMOLLM2, *(DATA / "llama.cpp-tests").glob("*.gguf.gz")])


def write(tmp_path, data: bytes, name: str = "model.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def gunzip(src, tmp_path):
    dst = tmp_path / src.name.removesuffix(".gz")
    with gzip.open(src, "rb") as f, open(dst, "wb") as out:
        shutil.copyfileobj(f, out)
    return dst


def refusal(tmp_path, data: bytes) -> str:
    """Read ``data`` as a GGUF file, expecting a GGUFError; return its message."""
    path = write(tmp_path, data)
    with pytest.raises(bpetok.GGUFError) as info:
        read_gguf(path)
    message = str(info.value)
    assert str(path) in message and "byte offset" in message, message
    return message


# -- round trips ---------------------------------------------------------------------------------


def test_every_type_round_trips(tmp_path):
    gguf = read_gguf(write(tmp_path, build(EVERY_TYPE, tensor_count=0).data))
    assert gguf.version == 3 and gguf.tensor_count == 0
    assert gguf.keys == [key for key, _, _ in EVERY_TYPE]
    for key, vtype, value in EVERY_TYPE:
        assert gguf.types[key] == (vtype, element_type(vtype, value)), key
        assert plain(gguf.metadata[key]) == expected(vtype, value), key


def test_value_representation(tmp_path):
    gguf = read_gguf(write(tmp_path, build(EVERY_TYPE).data))
    md = gguf.metadata
    assert isinstance(md["t.string"], bytes) and md["t.string.raw"] == b"\xff\x00not utf-8\x80"
    assert md["a.u32"].dtype == np.dtype("<u4") and md["a.bool"].dtype == np.bool_
    assert isinstance(md["a.string"], list) and all(isinstance(s, bytes) for s in md["a.string"])
    assert isinstance(md["t.bool"], bool) and isinstance(md["t.u64"], int)


def test_version_2_reads_like_version_3(tmp_path):
    gguf = read_gguf(write(tmp_path, build(EVERY_TYPE, version=2).data))
    assert gguf.version == 2 and plain(gguf.metadata["n.deep"]) == [[[[2.5]]]]


def test_unwanted_keys_are_skipped_but_listed(tmp_path):
    path = write(tmp_path, build(EVERY_TYPE).data)
    gguf = read_gguf(path, want=lambda key: key.startswith("n."))
    assert set(gguf.metadata) == {"n.u32", "n.string", "n.mixed", "n.deep", "n.empty"}
    assert gguf.keys == [key for key, _, _ in EVERY_TYPE]
    assert gguf.types["a.string"] == (T.ARRAY, T.STRING)


def test_nesting_limit_is_exact(tmp_path):
    deepest = read_gguf(write(tmp_path, build([("deep", T.ARRAY, nested(MAX_ARRAY_NESTING))]).data))
    value = deepest.metadata["deep"]
    for _ in range(MAX_ARRAY_NESTING - 1):
        value = value[0]
    assert value.tolist() == [1]
    message = refusal(tmp_path, build([("deep", T.ARRAY, nested(MAX_ARRAY_NESTING + 1))]).data)
    assert "nested deeper than" in message and "'deep'" in message


def test_tensor_data_is_never_read(tmp_path):
    # One tensor info, then "tensor data" that is garbage: the reader stops before both.
    info = struct.pack("<Q", 6) + b"weight" + struct.pack("<IQQIQ", 2, 4, 4, 0, 0)
    built = build([("general.name", T.STRING, b"x")], tensor_count=1, tail=info + b"\xff" * 4096)
    gguf = read_gguf(write(tmp_path, built.data))
    assert gguf.tensor_count == 1 and gguf.metadata == {"general.name": b"x"}


def test_gz_and_plain_files_read_the_same(tmp_path):
    plain_path = gunzip(SMOLLM2, tmp_path)
    a, b = read_gguf(plain_path), read_gguf(SMOLLM2)
    assert a.keys == b.keys and a.types == b.types
    for key in a.keys:
        assert plain(a.metadata[key]) == plain(b.metadata[key]), key


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_fast_string_arrays_match_the_plain_reference(path, monkeypatch):
    fast = read_gguf(path, want=lambda key: key.startswith("tokenizer."))
    monkeypatch.setattr(_Cursor, "string_array", _Cursor.string_array_plain)
    reference = read_gguf(path, want=lambda key: key.startswith("tokenizer."))
    assert fast.types == reference.types
    for key in fast.metadata:
        assert plain(fast.metadata[key]) == plain(reference.metadata[key]), key
    assert len(fast.metadata["tokenizer.ggml.tokens"]) > 30_000  # deepseek-coder has 32,256


# -- cross-check against the gguf package --------------------------------------------------------


def gguf_package_fields(path) -> dict:
    """Every key's (type, element type, value) as the gguf package's reader sees it.

    The package flattens nested arrays into their leaf values; so do we, for the comparison.
    """
    gguf_pkg = pytest.importorskip("gguf")
    reader = gguf_pkg.GGUFReader(str(path))
    fields = {}
    for name, f in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        leaves = [f.parts[i] for i in f.data]
        main, leaf = T(int(f.types[0])), T(int(f.types[-1]))
        if main == T.STRING:
            value = bytes(leaves[0])
        elif main != T.ARRAY:
            value = leaves[0].item()
        elif leaf == T.STRING:
            value = [bytes(p) for p in leaves]
        else:
            value = [p.item() for p in leaves]
        elem = T(int(f.types[1])) if main == T.ARRAY and len(f.types) > 1 else None
        fields[name] = (main, elem, value)
    version = reader.fields["GGUF.version"].parts[-1].item()
    tensor_count = reader.fields["GGUF.tensor_count"].parts[-1].item()
    return {"fields": fields, "version": version, "tensor_count": tensor_count}


def flatten(value):
    if not isinstance(value, list):
        return [value]
    return [leaf for item in value for leaf in flatten(item)]


def assert_same_as_gguf_package(path):
    theirs = gguf_package_fields(path)
    ours = read_gguf(path)
    assert ours.version == theirs["version"] and ours.tensor_count == theirs["tensor_count"]
    assert ours.keys == list(theirs["fields"])
    for key in ours.keys:
        vtype, elem, value = theirs["fields"][key]
        our_type, our_elem = ours.types[key]
        assert our_type == vtype, key
        if elem is not None:  # the package has no element type for an empty array
            assert our_elem == elem, key
        ours_value = plain(ours.metadata[key])
        if vtype == T.ARRAY:
            ours_value = flatten(ours_value)
        assert ours_value == value, key
        if vtype in (T.FLOAT32, T.FLOAT64):
            assert isinstance(ours_value, float)


@pytest.mark.parametrize("path", [SMOLLM2, QWEN3], ids=lambda p: p.name)
def test_shipped_vocabularies_match_the_gguf_package(path, tmp_path):
    pytest.importorskip("gguf")
    plain_path = gunzip(path, tmp_path)
    assert_same_as_gguf_package(plain_path)
    # The values the tokenizer depends on, spelled out.
    ours = read_gguf(plain_path)
    tokens = ours.metadata["tokenizer.ggml.tokens"]
    assert len(tokens) == len(ours.metadata["tokenizer.ggml.token_type"]) > 30_000
    assert ours.metadata["tokenizer.ggml.model"] == b"gpt2"
    assert ours.types["tokenizer.ggml.eos_token_id"] == (T.UINT32, None)


def test_every_type_matches_the_gguf_package(tmp_path):
    pytest.importorskip("gguf")
    # The package cannot represent an array of arrays of different element types (it flattens
    # the leaves and keeps the first element's types), so n.mixed is checked by the round trip only.
    kvs = [kv for kv in EVERY_TYPE if kv[0] != "n.mixed"]
    assert_same_as_gguf_package(write(tmp_path, build(kvs).data))


def test_file_written_by_the_gguf_package(tmp_path):
    gguf_pkg = pytest.importorskip("gguf")
    path = tmp_path / "written.gguf"
    writer = gguf_pkg.GGUFWriter(str(path), "llama")
    writer.add_string("general.name", "tiny")
    writer.add_uint32("t.u32", 7)
    writer.add_float32("t.f32", 0.25)
    writer.add_bool("t.bool", True)
    writer.add_array("a.string", ["a", "bc", ""])
    writer.add_array("a.int", [1, -2, 3])
    writer.add_token_list(["<s>", "Ġthe"])
    writer.add_token_types([3, 1])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    assert_same_as_gguf_package(path)
    gguf = read_gguf(path)
    assert gguf.metadata["tokenizer.ggml.tokens"] == [b"<s>", "Ġthe".encode()]
    assert gguf.metadata["a.string"] == [b"a", b"bc", b""]


# -- refusals ------------------------------------------------------------------------------------


def test_wrong_magic(tmp_path):
    message = refusal(tmp_path, build(EVERY_TYPE, magic=b"GGML").data)
    assert "not a GGUF file" in message and "b'GGML'" in message and "byte offset 0" in message


@pytest.mark.parametrize(
    ("version", "hint"),
    [(1, "obsolete"), (4, "supported versions are"), (0, "supported versions are"), (3 << 24, "big-endian")],
)
def test_unsupported_versions(tmp_path, version, hint):
    message = refusal(tmp_path, build(EVERY_TYPE, version=version).data)
    assert f"unsupported GGUF version {version}" in message and hint in message and "byte offset 4" in message


def test_big_endian_file(tmp_path):
    # A whole big-endian header: the version is the first field that gives it away.
    data = b"GGUF" + struct.pack(">IQQ", 3, 0, 1) + struct.pack(">Q", 1) + b"k" + struct.pack(">IB", 0, 1)
    assert "big-endian" in refusal(tmp_path, data)


def test_duplicate_key(tmp_path):
    built = build([("a", T.UINT8, 1), ("b", T.UINT8, 2), ("a", T.UINT8, 3)])
    message = refusal(tmp_path, built.data)
    assert "duplicate key 'a'" in message and f"byte offset {built.spans[2][1]}" in message


@pytest.mark.parametrize("raw", [13, 255, 2**31, 2**32 - 1])
def test_unknown_value_type(tmp_path, raw):
    built = build([("ok", T.UINT8, 1), ("bad", T.UINT8, 1)])
    field = [f for f in built.fields if f.what == "value type" and f.key == "bad"][0]
    data = bytearray(built.data)
    data[field.offset : field.offset + 4] = struct.pack("<I", raw)
    message = refusal(tmp_path, bytes(data))
    assert f"unknown value type {raw}" in message and f"byte offset {field.offset}" in message and "'bad'" in message


def test_unknown_array_element_type(tmp_path):
    built = build([("arr", T.ARRAY, (T.UINT8, [1, 2]))])
    field = [f for f in built.fields if f.what == "array type"][0]
    data = bytearray(built.data)
    data[field.offset : field.offset + 4] = struct.pack("<I", 99)
    message = refusal(tmp_path, bytes(data))
    assert "unknown value type 99" in message and "'arr'" in message


@pytest.mark.parametrize("size", [0, 1, 4, 8, 16, 23])
def test_too_short_for_a_header(tmp_path, size):
    data = build([]).data[:size]
    assert len(data) < HEADER_SIZE
    message = refusal(tmp_path, data)
    assert "<header>" in message


def test_errors_are_value_errors():
    assert issubclass(bpetok.GGUFError, ValueError) and issubclass(bpetok.GGUFError, bpetok.BpetokError)


def test_not_gzip(tmp_path):
    path = write(tmp_path, b"GGUF not really gzip", "model.gguf.gz")
    with pytest.raises(bpetok.GGUFError, match="not a readable gzip file"):
        read_gguf(path)


# -- the fast string path ----------------------------------------------------------------------------


def string_array_both_ways(tmp_path, strings: list[bytes]):
    built = build([("s", T.ARRAY, (T.STRING, strings)), ("after", T.UINT32, 7)])
    path = write(tmp_path, built.data)
    fast = read_gguf(path).metadata["s"]
    view = memoryview(built.data)
    cursor = _Cursor(str(path), view)
    cursor.pos = built.spans[0][2] + 12
    assert fast == cursor.string_array_plain(len(strings)) == strings
    return built


@pytest.mark.parametrize(
    "strings",
    [
        [b"tok%d" % i for i in range(5000)],
        [b"x" * (i % 700) for i in range(3000)],  # lengths with a zero low byte (256, 512)
        [b""] * 3000,  # every prefix all zeros: the numpy guess finds nothing, the walk does it
        [b"\x00a\x00" * (i % 5) for i in range(3000)],  # zero bytes inside strings defeat the guess
        [b"a", b"", b"", b"b"] * 1000 + [b"\x00" * 9] * 100 + [b"end%d" % i for i in range(2000)],
        [bytes([i % 256]) * (i % 300) for i in range(4000)],
    ],
    ids=["plain", "long", "empty", "zeros", "mixed", "bytes"],
)
@pytest.mark.parametrize("reader", ["compiled", "struct"])
def test_fast_string_array_on_awkward_data(tmp_path, strings, reader, monkeypatch):
    from bpetok.vocab import _gguf  # the suite requires the C modules to be built (CI builds them)

    # Each fast path, whichever engine runs (BPETOK_PURE_PYTHON=1 would pick the struct one).
    monkeypatch.setattr(bpetok.vocab.gguf, "_compiled_reader", lambda: _gguf if reader == "compiled" else None)
    string_array_both_ways(tmp_path, strings)


def test_compiled_string_reader_checks_every_bound():
    from bpetok.vocab import _gguf  # the suite requires the C modules to be built (CI builds them)

    data = b"".join(len(s).to_bytes(8, "little") + s for s in [b"ab", b"", b"cde"])
    assert _gguf.read_strings(data, 0, 3) == ([b"ab", b"", b"cde"], len(data))
    assert _gguf.read_strings(data, 10, 2) == ([b"", b"cde"], len(data))
    assert _gguf.read_strings(data, len(data), 0) == ([], len(data))
    assert _gguf.read_strings(data, 0, 4) is None  # a fourth prefix would start at the end
    assert _gguf.read_strings(data[:-1], 0, 3) is None  # the last string is cut short
    assert _gguf.read_strings(data, 0, 2**62) is None  # a hostile count allocates nothing
    assert _gguf.read_strings(b"\xff" * 8 + b"x", 0, 1) is None  # a length past the end (2**64 - 1)
    assert _gguf.read_strings(data[:20], 13, 1) is None  # a prefix that needs 8 bytes, 7 remain
    for offset, count in ((-1, 1), (len(data) + 1, 0), (0, -1)):
        with pytest.raises(ValueError):
            _gguf.read_strings(data, offset, count)


def test_the_numpy_scan_proves_most_of_a_real_vocabulary():
    # Not a timing: checks the fast path is really taken on a real token array.
    from bpetok.vocab.gguf import _scan_prefixes
    from ggufbuild import layout

    with gzip.open(SMOLLM2, "rb") as f:
        data = f.read()
    lay = layout(data)
    first = lay.strings["tokenizer.ggml.tokens"][0][0] - 8
    lengths, after = _scan_prefixes(memoryview(data), first, first + (1 << 17), 10**6)
    assert len(lengths) > 5000
    assert lengths == [n for _, n in lay.strings["tokenizer.ggml.tokens"][: len(lengths)]]
    assert after == lay.strings["tokenizer.ggml.tokens"][len(lengths)][0] - 8


# -- the built-in vocabulary loader --------------------------------------------------------------------


def test_loader_reads_strings_as_c_strings(tmp_path):
    # llama.cpp truncates token and merge texts at a NUL and renames an empty token [EMPTY_<id>].
    from bpetok.vocab.vocabulary import load_gguf_vocabulary

    kvs = [
        ("tokenizer.ggml.model", T.STRING, b"gpt2"),
        ("tokenizer.ggml.tokens", T.ARRAY, (T.STRING, [b"a\x00junk", b"", b"b", b"ab"])),
        ("tokenizer.ggml.merges", T.ARRAY, (T.STRING, [b"a b\x00junk"])),
    ]
    vocab = load_gguf_vocabulary(str(write(tmp_path, build(kvs).data)))
    assert vocab.tokens == [b"a", b"[EMPTY_1]", b"b", b"ab"] and vocab.merges == [b"a b"]
    clean = kvs[:1] + [  # nothing to truncate or rename: the fast path
        ("tokenizer.ggml.tokens", T.ARRAY, (T.STRING, [b"a", b"b"])),
        ("tokenizer.ggml.merges", T.ARRAY, (T.STRING, [b"a b"])),
    ]
    vocab = load_gguf_vocabulary(str(write(tmp_path, build(clean).data, "clean.gguf")))
    assert vocab.tokens == [b"a", b"b"] and vocab.merges == [b"a b"]
