"""A GGUF writer for vocabulary-only files: the key/value section, no tensors.

The sibling of :mod:`bpetok.vocab.gguf` (the reader). We write GGUF ourselves rather than with the
``gguf`` package's ``GGUFWriter``: a vocab-only file is a header and a list of typed key/values
(about 80 lines), and keeping it here leaves bpetok with no dependency beyond numpy, writes
byte-identical files for identical input, and round-trips every value type the reader returns
(so :func:`bpetok.train.extend` can copy a base file's metadata verbatim).

Layout (GGUF v3, little-endian, as in llama.cpp's ``gguf-py/gguf/gguf_writer.py``)::

    b"GGUF"  u32 version=3  u64 tensor_count=0  u64 kv_count
    kv_count times:  string key  u32 value_type  value
    zero padding to ``general.alignment`` (32), where tensor data would start

A string is a u64 byte length and the bytes; an array is a u32 element type, a u64 count and
the elements.

>>> write_gguf("vocab.gguf", [("general.architecture", GGUFValueType.STRING, "llama")])  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import struct
import tempfile
from typing import Any, Iterable

import numpy as np

from bpetok.errors import BpetokError
from bpetok.vocab.gguf import _SCALAR, GGUFFile, GGUFValueType

__all__ = ["write_gguf", "items_of", "GGUF_VERSION", "ALIGNMENT"]

GGUF_VERSION = 3
ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT in llama.cpp's gguf.h

# A key/value to write: (key, type, value, element type for arrays else None).
Item = tuple[str, GGUFValueType, Any, "GGUFValueType | None"]


def _string(value: str | bytes) -> bytes:
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
    return struct.pack("<Q", len(data)) + data


def _elem_type_of(value: Any) -> GGUFValueType:
    """The element type of a nested array value as the reader returns it (numpy array or list)."""
    if isinstance(value, np.ndarray):
        if value.dtype == np.bool_:
            return GGUFValueType.BOOL
        for vtype, (_, dtype) in _SCALAR.items():
            if vtype != GGUFValueType.BOOL and np.dtype(dtype) == value.dtype.newbyteorder("<"):
                return vtype
        raise BpetokError(f"cannot write a GGUF array of numpy dtype {value.dtype}")
    if isinstance(value, list) and all(isinstance(v, (bytes, str)) for v in value):
        return GGUFValueType.STRING
    if isinstance(value, list):
        return GGUFValueType.ARRAY
    raise BpetokError(f"cannot tell the GGUF element type of {type(value).__name__}")


def _value(vtype: GGUFValueType, value: Any, elem: GGUFValueType | None, key: str) -> bytes:
    if vtype == GGUFValueType.STRING:
        return _string(value)
    if vtype != GGUFValueType.ARRAY:
        return struct.pack(_SCALAR[vtype][0], value)
    if elem is None:
        raise BpetokError(f"GGUF key {key!r}: an array needs an element type")
    head = struct.pack("<IQ", int(elem), len(value))
    if elem == GGUFValueType.STRING:
        return head + b"".join(_string(v) for v in value)
    if elem == GGUFValueType.ARRAY:
        return head + b"".join(_value(GGUFValueType.ARRAY, v, _elem_type_of(v), key) for v in value)
    dtype = _SCALAR[elem][1]
    return head + np.asarray(value).astype(dtype if elem != GGUFValueType.BOOL else "<u1").tobytes()


def write_gguf(path: str | os.PathLike, items: Iterable[Item]) -> None:
    """Write a tensor-less GGUF v3 file with these key/values, in this order.

    :param items: ``(key, type, value, element_type)``; strings may be ``str`` or ``bytes``,
        numeric arrays any sequence numpy accepts, string arrays lists of ``str``/``bytes``.
    :raises BpetokError: a key is repeated or a value does not fit its type.
    :raises OSError: the file cannot be written.
    """
    chunks, seen = [], set()
    for key, vtype, value, elem in items:
        if key in seen:
            raise BpetokError(f"GGUF key {key!r} given twice")
        seen.add(key)
        try:
            chunks.append(_string(key) + struct.pack("<I", int(vtype)) + _value(vtype, value, elem, key))
        except (struct.error, TypeError, ValueError, OverflowError) as e:
            raise BpetokError(f"GGUF key {key!r}: value does not fit type {vtype.name} ({e})") from e
    body = struct.pack("<4sIQQ", b"GGUF", GGUF_VERSION, 0, len(chunks)) + b"".join(chunks)
    # Tensor data would start at the next multiple of the alignment; llama.cpp seeks there.
    body += b"\0" * (-len(body) % ALIGNMENT)
    _write_atomically(os.fspath(path), body)


def _write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory, then rename it.

    Never a half-written file under the final name, and never a fixed temporary name (which
    could be a user's file): ``tempfile`` picks an unused one, removed again if anything fails.
    """
    if os.path.isdir(path):
        raise BpetokError(f"{path}: is a directory; give the name of the GGUF file to write, e.g. {os.path.join(path, 'vocab.gguf')}")
    if os.path.exists(path) and not os.path.isfile(path):
        raise BpetokError(f"{path}: exists and is not a regular file (a pipe or device?); give the name of a file to write")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    except FileNotFoundError:
        raise BpetokError(f"{path}: cannot write it, the directory {directory} does not exist") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; a written file is not
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it back at once
    os.umask(mask)
    return mask


def items_of(gguf: GGUFFile) -> list[Item]:
    """Every key/value of a fully read :class:`GGUFFile` (``read_gguf(path)``), in file order."""
    missing = [k for k in gguf.keys if k not in gguf.metadata]
    if missing:
        raise BpetokError(f"{gguf.path}: key {missing[0]!r} was skipped when reading; read the file with want=None")
    return [(k, gguf.types[k][0], gguf.metadata[k], gguf.types[k][1]) for k in gguf.keys]
