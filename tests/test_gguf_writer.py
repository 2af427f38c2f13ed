"""The vocab-only GGUF writer: every value type round-trips through our reader and the gguf package's."""

from __future__ import annotations

import numpy as np
import pytest

import bpetok
from bpetok.vocab.gguf import GGUFValueType as T
from bpetok.vocab.gguf import read_gguf
from bpetok.vocab.gguf_writer import ALIGNMENT, items_of, write_gguf
from helpers import QWEN3

ITEMS = [
    ("general.architecture", T.STRING, "llama", None),
    ("test.u8", T.UINT8, 255, None),
    ("test.i8", T.INT8, -128, None),
    ("test.u16", T.UINT16, 65535, None),
    ("test.i16", T.INT16, -32768, None),
    ("test.u32", T.UINT32, 2**32 - 1, None),
    ("test.i32", T.INT32, -(2**31), None),
    ("test.f32", T.FLOAT32, 1.5, None),
    ("test.bool", T.BOOL, True, None),
    ("test.u64", T.UINT64, 2**64 - 1, None),
    ("test.i64", T.INT64, -(2**63), None),
    ("test.f64", T.FLOAT64, -0.25, None),
    ("test.bytes", T.STRING, b"\xff\x00raw", None),
    ("test.strings", T.ARRAY, ["a", b"\xc4\xa0b", ""], T.STRING),
    ("test.ints", T.ARRAY, [1, -2, 3], T.INT32),
    ("test.floats", T.ARRAY, [0.5, 2.0], T.FLOAT32),
    ("test.bools", T.ARRAY, [True, False], T.BOOL),
    ("test.nested", T.ARRAY, [np.array([1, 2], dtype="<u2"), [b"x", b"y"]], T.ARRAY),
]


def test_every_type_round_trips(tmp_path):
    path = tmp_path / "all.gguf"
    write_gguf(path, ITEMS)
    data = path.read_bytes()
    assert data[:4] == b"GGUF" and int.from_bytes(data[4:8], "little") == 3 and len(data) % ALIGNMENT == 0
    g = read_gguf(path)
    assert g.version == 3 and g.tensor_count == 0 and g.keys == [k for k, *_ in ITEMS]
    for key, vtype, value, elem in ITEMS:
        assert g.types[key][0] == vtype and (elem is None or g.types[key][1] == elem), key
    assert g.metadata["test.u64"] == 2**64 - 1 and g.metadata["test.i64"] == -(2**63)
    assert g.metadata["test.bytes"] == b"\xff\x00raw"
    assert g.metadata["test.strings"] == [b"a", b"\xc4\xa0b", b""]
    assert g.metadata["test.ints"].tolist() == [1, -2, 3] and g.metadata["test.bools"].tolist() == [True, False]
    assert g.metadata["test.nested"][0].tolist() == [1, 2] and g.metadata["test.nested"][1] == [b"x", b"y"]
    # Rewriting what was read gives the same bytes.
    again = tmp_path / "again.gguf"
    write_gguf(again, items_of(g))
    assert again.read_bytes() == data


def test_gguf_package_reads_it(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "all.gguf"
    write_gguf(path, ITEMS)
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["test.u32"].parts[-1][0] == 2**32 - 1
    assert bytes(reader.fields["general.architecture"].parts[-1]) == b"llama"
    strings = reader.fields["test.strings"]
    assert [bytes(strings.parts[i]) for i in strings.data] == [b"a", b"\xc4\xa0b", b""]
    assert len(reader.tensors) == 0


def test_copy_of_qwen3_tokenizes_the_same(tmp_path, qwen3):
    path = tmp_path / "copy.gguf"
    write_gguf(path, items_of(read_gguf(QWEN3)))
    copy = bpetok.from_gguf(path)
    text = "Hello <|im_end|> <think> wörld 123"
    assert copy.encode(text) == qwen3.encode(text) and copy.n_tokens == qwen3.n_tokens


def test_errors(tmp_path):
    with pytest.raises(bpetok.BpetokError, match="'a' given twice"):
        write_gguf(tmp_path / "x.gguf", [("a", T.UINT8, 1, None), ("a", T.UINT8, 2, None)])
    with pytest.raises(bpetok.BpetokError, match="'b': value does not fit type UINT8"):
        write_gguf(tmp_path / "x.gguf", [("b", T.UINT8, 300, None)])
    with pytest.raises(bpetok.BpetokError, match="skipped when reading"):
        items_of(read_gguf(QWEN3, want=lambda k: k.startswith("general.")))
    assert not (tmp_path / "x.gguf").exists()


def test_gguf_package_reads_a_trained_vocabulary(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "trained.gguf"
    result = bpetok.train(texts=["low lower lowest newest widest\n"] * 20, vocab_size=270, special_tokens=["<s>"],
                          min_frequency=1, output=path)
    reader = gguf.GGUFReader(str(path))
    field = reader.fields["tokenizer.ggml.tokens"]
    assert [bytes(field.parts[i]) for i in field.data] == result.tokens
    field = reader.fields["tokenizer.ggml.merges"]
    assert [bytes(field.parts[i]) for i in field.data] == result.merges
    field = reader.fields["tokenizer.ggml.token_type"]
    assert [int(field.parts[i][0]) for i in field.data] == [1] * 269 + [3]
    assert bytes(reader.fields["tokenizer.ggml.pre"].parts[-1]) == b"qwen2"
    ours = read_gguf(path)
    assert ours.metadata["tokenizer.ggml.eos_token_id"] == 269


def test_a_users_file_named_like_a_temporary_is_never_touched(tmp_path):
    path = tmp_path / "v.gguf"
    mine = tmp_path / "v.gguf.tmp"  # the writer's old fixed temporary name
    mine.write_bytes(b"my notes")
    write_gguf(path, ITEMS)
    assert mine.read_bytes() == b"my notes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.gguf", "v.gguf.tmp"]
    assert read_gguf(path).metadata["test.u8"] == 255


def test_a_failed_write_leaves_no_temporary_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "v.gguf"
    path.write_bytes(b"old")
    import bpetok.vocab.gguf_writer as writer

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer.os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        write_gguf(path, ITEMS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.gguf"] and path.read_bytes() == b"old"


def test_output_that_is_not_a_file_is_refused(tmp_path):
    import os

    with pytest.raises(bpetok.BpetokError, match="is a directory; give the name of the GGUF file"):
        write_gguf(tmp_path, ITEMS)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(bpetok.BpetokError, match="exists and is not a regular file"):
        write_gguf(fifo, ITEMS)
    with pytest.raises(bpetok.BpetokError, match="does not exist"):
        write_gguf(tmp_path / "no" / "v.gguf", ITEMS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_written_file_has_the_usual_permissions(tmp_path):
    import os
    import stat

    path = tmp_path / "v.gguf"
    write_gguf(path, ITEMS)
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
