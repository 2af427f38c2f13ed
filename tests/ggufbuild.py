"""Build small GGUF files byte by byte for the reader tests, recording where every field lies.

A value is given as ``(type, value)``; an array's value is ``(element type, [values])``, and the
values of an array of arrays are themselves ``(element type, [values])``:

>>> T = GGUFValueType
>>> built = build([("a", T.UINT32, 7), ("b", T.ARRAY, (T.ARRAY, [(T.STRING, [b"x"])]))])
>>> len(built.data), [f.what for f in built.fields][2:]
(87, ['key length', 'value type', 'key length', 'value type', 'array type', 'array count', \
'array type', 'array count', 'string length'])
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bpetok.vocab.gguf import GGUFValueType

T = GGUFValueType
SCALAR_FORMATS = {
    T.UINT8: "<B", T.INT8: "<b", T.UINT16: "<H", T.INT16: "<h", T.UINT32: "<I", T.INT32: "<i",
    T.FLOAT32: "<f", T.BOOL: "<?", T.UINT64: "<Q", T.INT64: "<q", T.FLOAT64: "<d",
}
HEADER_SIZE = 24  # magic, version, tensor count, key/value count


@dataclass(frozen=True)
class Field:
    """A length, count or type field: what it is, its byte offset, the key it belongs to."""

    what: str  # "key length", "value type", "string length", "array type", "array count", ...
    offset: int
    key: str
    size: int  # 4 (a type) or 8 (a length or count)


@dataclass
class Built:
    data: bytes
    fields: list[Field] = field(default_factory=list)
    spans: list[tuple[str, int, int, int]] = field(default_factory=list)  # key, start, value start, end


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()
        self.fields: list[Field] = []

    def field(self, what: str, key: str, fmt: str, value: int) -> None:
        self.fields.append(Field(what, len(self.out), key, struct.calcsize(fmt)))
        self.out += struct.pack(fmt, value)

    def string(self, what: str, key: str, data: bytes) -> None:
        self.field(what, key, "<Q", len(data))
        self.out += data

    def value(self, key: str, vtype: T, value: Any) -> None:
        if vtype == T.STRING:
            self.string("string length", key, value)
        elif vtype == T.ARRAY:
            elem, items = value
            self.field("array type", key, "<I", elem)
            self.field("array count", key, "<Q", len(items))
            for item in items:
                self.value(key, elem, item)
        else:
            self.out += struct.pack(SCALAR_FORMATS[vtype], value)


def build(
    kvs: list[tuple[str | bytes, int, Any]],
    *,
    magic: bytes = b"GGUF",
    version: int = 3,
    tensor_count: int = 0,
    kv_count: int | None = None,
    tail: bytes = b"",
) -> Built:
    """A GGUF file with these key/values (``(key, type, value)``), then ``tail`` (tensor infos, data)."""
    w = _Writer()
    w.out += magic
    w.out += struct.pack("<I", version)
    w.field("tensor count", "<header>", "<Q", tensor_count)
    w.field("key/value count", "<header>", "<Q", len(kvs) if kv_count is None else kv_count)
    spans = []
    for index, (key, vtype, value) in enumerate(kvs):
        raw_key = key.encode() if isinstance(key, str) else key
        name = raw_key.decode("utf-8", "surrogateescape")
        start = len(w.out)
        w.string("key length", f"<key #{index}>", raw_key)
        w.field("value type", name, "<I", vtype)
        value_start = len(w.out)
        w.value(name, vtype, value)
        spans.append((name, start, value_start, len(w.out)))
    w.out += tail
    return Built(bytes(w.out), w.fields, spans)


def expected(vtype: int, value: Any) -> Any:
    """The plain-Python form of a value as given to :func:`build` (compare with :func:`plain`)."""
    if vtype == T.ARRAY:
        elem, items = value
        return [expected(elem, item) for item in items]
    if vtype == T.BOOL:
        return bool(value)
    if vtype == T.FLOAT32:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    return value


def plain(value: Any) -> Any:
    """A value read by bpetok or gguf, as plain Python: arrays become lists, numpy scalars ints/floats."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def element_type(vtype: int, value: Any) -> int | None:
    return value[0] if vtype == T.ARRAY else None


# One key of every type, every array element type, empty and nested arrays: the round-trip sample.
EVERY_TYPE: list[tuple[str, int, Any]] = [
    ("t.u8", T.UINT8, 200),
    ("t.i8", T.INT8, -128),
    ("t.u16", T.UINT16, 65535),
    ("t.i16", T.INT16, -32768),
    ("t.u32", T.UINT32, 2**32 - 1),
    ("t.i32", T.INT32, -(2**31)),
    ("t.f32", T.FLOAT32, 0.1),
    ("t.bool", T.BOOL, True),
    ("t.bool.false", T.BOOL, False),
    ("t.string", T.STRING, "héllo".encode()),
    ("t.string.raw", T.STRING, b"\xff\x00not utf-8\x80"),
    ("t.string.empty", T.STRING, b""),
    ("t.u64", T.UINT64, 2**64 - 1),
    ("t.i64", T.INT64, -(2**63)),
    ("t.f64", T.FLOAT64, -1e300),
    ("a.u8", T.ARRAY, (T.UINT8, [0, 1, 255])),
    ("a.i8", T.ARRAY, (T.INT8, [-128, 0, 127])),
    ("a.u16", T.ARRAY, (T.UINT16, [0, 65535])),
    ("a.i16", T.ARRAY, (T.INT16, [-32768, 32767])),
    ("a.u32", T.ARRAY, (T.UINT32, [0, 2**32 - 1, 7])),
    ("a.i32", T.ARRAY, (T.INT32, [-(2**31), 2**31 - 1])),
    ("a.f32", T.ARRAY, (T.FLOAT32, [0.5, -2.25, 3e38])),
    ("a.bool", T.ARRAY, (T.BOOL, [True, False, True])),
    ("a.string", T.ARRAY, (T.STRING, [b"a", b"", b"\xc4\xa0the", b"\x00\xff"])),
    ("a.u64", T.ARRAY, (T.UINT64, [0, 2**64 - 1])),
    ("a.i64", T.ARRAY, (T.INT64, [-(2**63), 2**63 - 1])),
    ("a.f64", T.ARRAY, (T.FLOAT64, [1e-300, -0.0])),
    ("a.empty", T.ARRAY, (T.UINT32, [])),
    ("a.empty.string", T.ARRAY, (T.STRING, [])),
    ("n.u32", T.ARRAY, (T.ARRAY, [(T.UINT32, [1, 2]), (T.UINT32, []), (T.UINT32, [3])])),
    ("n.string", T.ARRAY, (T.ARRAY, [(T.STRING, [b"x", b"yz"]), (T.STRING, [b""])])),
    ("n.mixed", T.ARRAY, (T.ARRAY, [(T.INT8, [-1]), (T.STRING, [b"s"]), (T.ARRAY, [(T.BOOL, [True])])])),
    ("n.deep", T.ARRAY, (T.ARRAY, [(T.ARRAY, [(T.ARRAY, [(T.FLOAT64, [2.5])])])])),
    ("n.empty", T.ARRAY, (T.ARRAY, [])),
    ("tokenizer.ggml.model", T.STRING, b"gpt2"),
]


def nested(depth: int) -> tuple[int, Any]:
    """An array value ``depth`` levels deep (1: a plain array of one u8)."""
    value: tuple[int, Any] = (T.UINT8, [1])
    for _ in range(depth - 1):
        value = (T.ARRAY, [value])
    return value


@dataclass
class Layout:
    """Where the fields of a (well-formed) GGUF file lie, as :func:`build` records them."""

    fields: list[Field]
    spans: list[tuple[str, int, int, int]]
    strings: dict[str, list[tuple[int, int]]]  # key -> (offset, length) of each string element's bytes


def layout(data: bytes) -> Layout:
    """Walk a well-formed GGUF file independently of bpetok, recording every field's offset."""
    fields: list[Field] = []
    strings: dict[str, list[tuple[int, int]]] = {}
    spans = []

    def u(fmt: str, pos: int) -> int:
        return struct.unpack_from(fmt, data, pos)[0]

    def value(key: str, vtype: int, pos: int) -> int:
        if vtype == T.STRING:
            fields.append(Field("string length", pos, key, 8))
            n = u("<Q", pos)
            strings.setdefault(key, []).append((pos + 8, n))
            return pos + 8 + n
        if vtype == T.ARRAY:
            fields.append(Field("array type", pos, key, 4))
            fields.append(Field("array count", pos + 4, key, 8))
            elem, count = u("<I", pos), u("<Q", pos + 4)
            pos += 12
            if elem in SCALAR_FORMATS:
                return pos + count * struct.calcsize(SCALAR_FORMATS[elem])
            for _ in range(count):
                pos = value(key, elem, pos)
            return pos
        return pos + struct.calcsize(SCALAR_FORMATS[T(vtype)])

    fields.append(Field("tensor count", 8, "<header>", 8))
    fields.append(Field("key/value count", 16, "<header>", 8))
    pos = HEADER_SIZE
    for index in range(u("<Q", 16)):
        start = pos
        fields.append(Field("key length", pos, f"<key #{index}>", 8))
        n = u("<Q", pos)
        key = data[pos + 8 : pos + 8 + n].decode("utf-8", "surrogateescape")
        pos += 8 + n
        fields.append(Field("value type", pos, key, 4))
        vtype = u("<I", pos)
        pos = value(key, vtype, pos + 4)
        spans.append((key, start, start + 8 + n + 4, pos))
    return Layout(fields, spans, strings)
