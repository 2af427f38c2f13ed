"""A header-only GGUF reader: the metadata key/value section, never the tensor data.

GGUF (llama.cpp's model format) starts with ``GGUF``, a version, a tensor count, a key/value
count, then the key/values. We memory-map the file and walk that section. Every length and count
is checked against the bytes that remain *before* anything is allocated, so a truncated, corrupt
or hostile file raises :class:`GGUFError` naming the byte offset and key, never a crash, a hang,
a huge allocation or an over-read. Keys the caller does not want are skipped without building
their values.

Strings are returned as ``bytes`` (token texts need not be valid UTF-8); numeric arrays as
numpy arrays (copies: nothing refers to the map once the file is closed), or with
``numpy=False`` as ``array.array`` (bool arrays as lists) without importing numpy, which saves
its ~0.07 s import when loading a vocabulary; nested arrays as lists.
String arrays, 300k strings in a vocabulary, take a fast path (:meth:`_Cursor.string_array`:
the compiled ``bpetok.vocab._gguf.read_strings`` when it is built, else a ``struct`` layout) checked
against a plain one-string-at-a-time reference.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from array import array
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import repeat
from typing import Any, Callable

from bpetok.compiled import compiled_module
from bpetok.errors import GGUFError

__all__ = ["GGUFValueType", "GGUFFile", "read_gguf"]

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
MAX_ARRAY_NESTING = 8  # deeper nesting has no use and would only exhaust the stack


class GGUFValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct format and numpy dtype of each fixed-size type (little-endian).
_SCALAR = {
    GGUFValueType.UINT8: ("<B", "<u1"),
    GGUFValueType.INT8: ("<b", "<i1"),
    GGUFValueType.UINT16: ("<H", "<u2"),
    GGUFValueType.INT16: ("<h", "<i2"),
    GGUFValueType.UINT32: ("<I", "<u4"),
    GGUFValueType.INT32: ("<i", "<i4"),
    GGUFValueType.FLOAT32: ("<f", "<f4"),
    GGUFValueType.BOOL: ("<?", "<u1"),
    GGUFValueType.UINT64: ("<Q", "<u8"),
    GGUFValueType.INT64: ("<q", "<i8"),
    GGUFValueType.FLOAT64: ("<d", "<f8"),
}
_SIZE = {t: struct.calcsize(fmt) for t, (fmt, _) in _SCALAR.items()}
# array.array typecode of each numeric type, for reads without numpy (bool: "B", then a list).
_ARRAY_CODE = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "B",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}
# The fewest bytes one element can take: a string is at least its u64 length, an array at
# least its u32 type and u64 count. Used to refuse counts the remaining bytes cannot hold.
_MIN_SIZE = {**_SIZE, GGUFValueType.STRING: 8, GGUFValueType.ARRAY: 12}
_MIN_TENSOR_INFO = 8 + 4 + 4 + 8  # name length, n_dims, type, offset


@dataclass
class GGUFFile:
    """The metadata of a GGUF file: ``metadata[key]`` is the value, ``types[key]`` its type.

    For an array, ``types[key]`` is ``(ARRAY, element type)``; for a scalar ``(type, None)``.
    """

    path: str
    version: int
    tensor_count: int
    metadata: dict[str, Any] = field(default_factory=dict)
    types: dict[str, tuple[GGUFValueType, GGUFValueType | None]] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)  # every key in file order, read or skipped


class _Cursor:
    """Bounds-checked little-endian reads from a buffer; errors name the file, offset and key."""

    def __init__(self, path: str, buf: memoryview, use_numpy: bool = True):
        self.path = path
        self.buf = buf
        self.use_numpy = use_numpy
        self.end = len(buf)
        self.pos = 0
        self.key = "<header>"

    def fail(self, message: str, offset: int | None = None) -> GGUFError:
        offset = self.pos if offset is None else offset
        return GGUFError(
            f"{self.path}: {message} at byte offset {offset} (reading key {self.key!r}); "
            "the file is truncated or corrupt: re-download or re-convert it"
        )

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.end - self.pos:
            raise self.fail(f"{what} needs {n} bytes but only {self.end - self.pos} remain")

    def scalar(self, vtype: GGUFValueType):
        fmt, _ = _SCALAR[vtype]
        size = _SIZE[vtype]
        self.need(size, vtype.name.lower())
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def u32(self) -> int:
        return self.scalar(GGUFValueType.UINT32)

    def u64(self) -> int:
        return self.scalar(GGUFValueType.UINT64)

    def string(self) -> bytes:
        begin = self.skip_string()
        return bytes(self.buf[begin : self.pos])

    def skip_string(self) -> int:
        """Step over one length-prefixed string, checking that it fits; returns where its bytes begin."""
        start = self.pos
        n = self.u64()
        if n > self.end - self.pos:
            raise self.fail(f"string length {n} exceeds the {self.end - self.pos} bytes that remain", start)
        self.pos += n
        return self.pos - n

    def value_type(self) -> GGUFValueType:
        start = self.pos
        raw = self.u32()
        try:
            return GGUFValueType(raw)
        except ValueError:
            raise self.fail(f"unknown value type {raw}", start) from None

    def array_header(self, depth: int) -> tuple[GGUFValueType, int]:
        if depth >= MAX_ARRAY_NESTING:
            raise self.fail(f"arrays nested deeper than {MAX_ARRAY_NESTING} levels")
        elem = self.value_type()
        start = self.pos
        count = self.u64()
        # Refuse a count the rest of the file cannot hold before allocating anything for it.
        if count > (self.end - self.pos) // _MIN_SIZE[elem]:
            raise self.fail(
                f"array of {count} {elem.name.lower()} values cannot fit in the {self.end - self.pos} bytes "
                "that remain",
                start,
            )
        return elem, count

    def value(self, vtype: GGUFValueType, depth: int = 0):
        if vtype == GGUFValueType.STRING:
            return self.string()
        if vtype != GGUFValueType.ARRAY:
            return self.scalar(vtype)
        elem, count = self.array_header(depth)
        if elem in _SCALAR:
            size = _SIZE[elem] * count
            if not self.use_numpy:
                return self.plain_array(elem, count)
            import numpy as np

            # A copy, so that no view into the memory map outlives it.
            arr = np.frombuffer(self.buf, dtype=_SCALAR[elem][1], count=count, offset=self.pos).copy()
            self.pos += size
            return arr.astype(bool) if elem == GGUFValueType.BOOL else arr
        if elem == GGUFValueType.STRING:
            return self.string_array(count)
        return [self.value(elem, depth + 1) for _ in range(count)]

    def plain_array(self, elem: GGUFValueType, count: int) -> array | list[bool]:
        """A numeric array as ``array.array`` (a copy), bools as a list; array_header checked the size."""
        size = _SIZE[elem] * count
        arr = array(_ARRAY_CODE[elem])
        if arr.itemsize != _SIZE[elem]:  # a platform whose C types differ: fall back to struct
            arr = array(arr.typecode, struct.unpack_from("<%d%s" % (count, _SCALAR[elem][0][1]), self.buf, self.pos))
        else:
            arr.frombytes(self.buf[self.pos : self.pos + size])
            if sys.byteorder == "big":
                arr.byteswap()
        self.pos += size
        return [bool(b) for b in arr] if elem == GGUFValueType.BOOL else arr

    def string_array(self, count: int) -> list[bytes]:
        """``count`` length-prefixed strings: the hot path of loading a vocabulary (2 x 150k strings).

        With the compiled reader (:func:`_compiled_reader`) one C call does it all (~10x faster).
        Without, two passes instead of one Python loop doing everything: :meth:`string_lengths` finds the
        lengths (mostly with numpy), then one ``struct`` layout (``8x<n>s`` per string: skip the
        prefix, take ``n`` bytes) cuts every string out in a single call. Same result and errors
        as :meth:`string_array_plain`, the readable reference, in well under half the time
        (``python3 benchmarks/bench_gguf.py``).
        """
        compiled = _compiled_reader()
        if compiled is not None:
            found = compiled.read_strings(self.buf, self.pos, count)
            if found is None:  # an overrun: the reference finds the bad string and raises its error
                self.string_array_plain(count)
                raise self.fail(f"array of {count} strings overruns the file")  # not reached
            strings, self.pos = found
            return strings
        start = self.pos
        lengths = self.string_lengths(count)
        longest = max(lengths, default=0)
        if longest < 4096:  # the usual case: format each distinct length once
            table = ["8x%ds" % n for n in range(longest + 1)]
            layout = "".join(map(table.__getitem__, lengths))
        else:
            layout = ("8x%ds" * count) % tuple(lengths)
        # subtle: a Struct of our own, not struct.unpack_from(fmt), which would keep this
        # megabyte-long format in struct's cache.
        return list(struct.Struct("<" + layout).unpack_from(self.buf, start))

    def string_lengths(self, count: int) -> list[int]:
        """Walk ``count`` length-prefixed strings, checking they fit; return their lengths.

        Chunks are scanned with numpy (:func:`_scan_prefixes`) while that works, the rest is
        walked one prefix at a time.
        """
        start, buf = self.pos, self.buf
        lengths: list[int] = []
        pos, remaining = start, count
        while remaining >= _SCAN_MIN_STRINGS and self.use_numpy:
            chunk_end = min(self.end, pos + _SCAN_CHUNK)
            found = _scan_prefixes(buf, pos, chunk_end, remaining)
            if found is None:
                break
            lengths += found[0]
            remaining -= len(found[0])
            pos, before = found[1], pos
            if 2 * (pos - before) < chunk_end - before:
                break  # most of the chunk was not strings we could prove: walk the rest instead
        unpack = struct.Struct("<Q").unpack_from
        append = lengths.append
        try:
            # No bounds check per string: positions only grow (lengths are unsigned), so the walk
            # stays in bounds if its end does; a prefix past the end makes unpack raise.
            for _ in repeat(None, remaining):
                (n,) = unpack(buf, pos)
                append(n)
                pos += 8 + n
        except (struct.error, OverflowError):  # a prefix past the end, or a position past 2**63
            pos = self.end + 1
        if pos > self.end:
            self.string_array_plain(count)  # finds the bad string and raises its precise error
            raise self.fail(f"array of {count} strings overruns the file", start)  # not reached
        self.pos = pos
        return lengths

    def string_array_plain(self, count: int) -> list[bytes]:
        """The reference for :meth:`string_array`: one checked read per string."""
        out = []
        for index in range(count):
            start = self.pos
            if self.end - self.pos < 8:
                remain = self.end - self.pos
                raise self.fail(f"string {index} of {count}: length needs 8 bytes but only {remain} remain")
            (n,) = struct.unpack_from("<Q", self.buf, self.pos)
            self.pos += 8
            if n > self.end - self.pos:
                raise self.fail(
                    f"string {index} of {count}: length {n} exceeds the {self.end - self.pos} bytes that remain", start
                )
            out.append(bytes(self.buf[self.pos : self.pos + n]))
            self.pos += n
        return out

    def skip_value(self, vtype: GGUFValueType, depth: int = 0) -> None:
        if vtype == GGUFValueType.STRING:
            self.skip_string()
        elif vtype != GGUFValueType.ARRAY:
            self.need(_SIZE[vtype], vtype.name.lower())
            self.pos += _SIZE[vtype]
        else:
            elem, count = self.array_header(depth)
            if elem in _SIZE:
                self.pos += _SIZE[elem] * count  # array_header checked that it fits
            elif elem == GGUFValueType.STRING:
                self.string_lengths(count)
            else:
                for _ in range(count):
                    self.skip_value(elem, depth + 1)


def _compiled_reader():
    """``bpetok.vocab._gguf`` (bpetok/vocab/_gguf.c), or None: not built, or ``BPETOK_PURE_PYTHON=1``
    (which runs all of bpetok as pure Python, as it does the BPE engine)."""
    return compiled_module("bpetok.vocab._gguf")


_SCAN_CHUNK = 1 << 17  # bytes per numpy scan: small enough to read little past an array's end
_SCAN_MIN_STRINGS = 64  # fewer strings are walked in Python


def _scan_prefixes(buf: memoryview, pos: int, end: int, limit: int) -> tuple[list[int], int] | None:
    """The lengths of up to ``limit`` consecutive strings from ``pos``, proven with numpy in ``buf[pos:end]``.

    Returns the lengths and the offset after the last string, or None when not even one string
    can be proven. A guess, then a proof. The guess: the u64 length prefix of a string shorter
    than 2**40 ends in three zero bytes, and a string starts with a non-zero byte (true of every
    token of a byte-level vocabulary), so prefixes are among the offsets ``i`` where
    ``buf[i+5:i+8]`` is zero and ``buf[i+8]`` is not. The proof: the first candidate is ``pos``,
    and each string, inside the chunk, ends exactly where the next candidate starts; so every
    accepted candidate is a real prefix, whatever the guess. Data that defeats the guess (zero
    bytes in strings, empty strings in a row, lengths of 2**40 or more) only ends the run early.

    >>> data = memoryview(b"".join(len(s).to_bytes(8, "little") + s for s in [b"ab", b"", b"cde", b"f"]))
    >>> _scan_prefixes(data, 0, len(data), 4)  # b"f" is not followed by a prefix: not proven
    ([2, 0, 3], 29)
    """
    n = end - pos
    if n < 16:
        return None
    import numpy as np

    zero = np.frombuffer(buf, np.uint8, count=n, offset=pos) == 0
    starts = np.flatnonzero(zero[5:-3] & zero[6:-2] & zero[7:-1] & ~zero[8:])
    if len(starts) < 2 or starts[0] != 0:
        return None
    words = np.ndarray((n - 7,), "<u8", buffer=buf, offset=pos, strides=(1,))  # the u64 at every offset
    lengths = words[starts]
    room = (n - 8 - starts).astype(np.uint64)  # the bytes after each prefix, inside the chunk
    ends = starts + 8 + np.minimum(lengths, room).astype(np.int64)
    chained = (lengths[:-1] <= room[:-1]) & (ends[:-1] == starts[1:])
    broken = np.flatnonzero(~chained)
    proven = min(int(broken[0]) if len(broken) else len(starts) - 1, limit)
    if proven == 0:
        return None
    return lengths[:proven].tolist(), pos + int(ends[proven - 1])


def read_gguf(
    path: str | os.PathLike, *, want: Callable[[str], bool] | None = None, numpy: bool = True
) -> GGUFFile:
    """Read the metadata of the GGUF file at ``path``.

    :param want: which keys to materialise (default: all); the others are skipped.
    :param numpy: numeric arrays as numpy arrays (default), or as ``array.array`` without
        importing numpy (string arrays are then walked without numpy's scan too).
    :raises GGUFError: the file is not GGUF, is truncated or corrupt, or uses an unsupported version.
    :raises OSError: the file cannot be opened.
    """
    path = os.fspath(path)
    if path.endswith(".gz"):
        return _read(path, memoryview(_gunzip(path)), want, numpy)
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size < 24:  # too short for a header (and an empty file cannot be mapped)
            return _read(path, memoryview(f.read()), want, numpy)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                return _read(path, view, want, numpy)
            finally:
                view.release()


MAX_GUNZIPPED = 1 << 30  # a compressed vocabulary is a few MB; refuse to inflate a gzip bomb


def _gunzip(path: str) -> bytes:
    """Decompress a ``.gguf.gz`` (the vocabularies shipped with bpetok) into memory, bounded."""
    import gzip
    import zlib

    chunks, total = [], 0
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
                if total > MAX_GUNZIPPED:
                    raise GGUFError(f"{path}: decompresses to more than {MAX_GUNZIPPED} bytes; refusing to inflate it")
                chunks.append(chunk)
    except (OSError, EOFError, zlib.error) as e:
        raise GGUFError(f"{path}: not a readable gzip file ({e}); decompress it yourself or re-download it") from e
    return b"".join(chunks)


def _read(path: str, view: memoryview, want: Callable[[str], bool] | None, use_numpy: bool = True) -> GGUFFile:
    cur = _Cursor(path, view, use_numpy)
    magic = bytes(view[:4])
    if magic != MAGIC and len(magic) < 4 and MAGIC.startswith(magic):
        raise cur.fail(f"the file ends after {len(magic)} bytes, inside the {MAGIC!r} magic", len(magic))
    if magic != MAGIC:
        raise cur.fail(f"not a GGUF file: it starts with {magic!r}, not {MAGIC!r}", 0)
    cur.pos = 4
    version = cur.u32()
    if version not in SUPPORTED_VERSIONS:
        if version == 1:
            hint = "GGUF v1 is obsolete: re-convert the model with a current llama.cpp"
        elif version and version & 0xFFFF == 0:
            hint = "it looks big-endian; only little-endian GGUF is supported"
        else:
            hint = f"supported versions are {SUPPORTED_VERSIONS}"
        raise cur.fail(f"unsupported GGUF version {version} ({hint})", 4)
    tensor_count = cur.u64()
    kv_start = cur.pos
    kv_count = cur.u64()
    if kv_count > (cur.end - cur.pos) // (8 + 4 + 1):  # a key/value takes at least 13 bytes
        raise cur.fail(f"{kv_count} key/value pairs cannot fit in the {cur.end - cur.pos} bytes that remain", kv_start)
    result = GGUFFile(path=path, version=version, tensor_count=tensor_count)
    for index in range(kv_count):
        cur.key = f"<key #{index}>"
        key_offset = cur.pos
        key = cur.string().decode("utf-8", "surrogateescape")
        cur.key = key
        if key in result.types:
            raise cur.fail(f"duplicate key {key!r}", key_offset)
        vtype = cur.value_type()
        elem = None
        if vtype == GGUFValueType.ARRAY and cur.end - cur.pos >= 4:
            elem = _peek_type(view, cur.pos)  # validated by the read or skip just below
        if want is None or want(key):
            result.metadata[key] = cur.value(vtype)
        else:
            cur.skip_value(vtype)
        result.types[key] = (vtype, elem)
        result.keys.append(key)
    cur.key = "<header>"
    if tensor_count > (cur.end - cur.pos) // _MIN_TENSOR_INFO:
        raise cur.fail(
            f"tensor count {tensor_count} cannot fit: only {cur.end - cur.pos} bytes follow the "
            f"key/values (which end at byte {cur.pos}) for the tensor infos",
            8,
        )
    return result


def _peek_type(view: memoryview, pos: int) -> GGUFValueType | None:
    (raw,) = struct.unpack_from("<I", view, pos)
    return GGUFValueType(raw) if raw in GGUFValueType._value2member_map_ else None
