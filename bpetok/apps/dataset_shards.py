"""encode-dataset's output: shards written atomically as results arrive (:class:`_ShardWriter`,
npy or Parquet) and the manifest that lets a rerun resume (:func:`_read_manifest`,
:func:`_verified_prefix`). See bpetok/apps/datasets.py.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Callable

from bpetok.errors import BpetokError
from bpetok.apps.dataset_tasks import file_sha256

if TYPE_CHECKING:  # numpy is imported where it is used: `import bpetok` loads no numpy (test_gguf_plain)
    import numpy as np


MANIFEST = "manifest.json"


# -- writing shards ------------------------------------------------------------------------------


def _atomic_write(directory: str, name: str, write: Callable) -> str:
    """Write ``name`` through a temporary file in ``directory``, renamed when complete; its sha256."""
    f = _new_temporary(directory, name)
    try:
        write(f)
    except BaseException:
        f.close()
        os.unlink(f.name)
        raise
    return _finish_atomic_write(f, directory, name)


def _new_temporary(directory: str, name: str):
    """A new file ``.NAME.XXXXXXXX.tmp`` in ``directory``, open for writing, made as ``open`` makes
    any file (mode 0666 less the umask: ``tempfile``'s are 0600, and shards are renamed, not copied)."""
    while True:
        path = os.path.join(directory, f".{name}.{os.urandom(4).hex()}.tmp")
        try:
            return open(path, "xb")
        except FileExistsError:
            continue


def _finish_atomic_write(f, directory: str, name: str) -> str:
    """Make the temporary file ``f`` durable and rename it to ``name``; its sha256."""
    try:
        with f:
            f.flush()
            os.fsync(f.fileno())
        digest = file_sha256(f.name)
        os.replace(f.name, os.path.join(directory, name))
    except BaseException:
        if os.path.exists(f.name):
            os.unlink(f.name)
        raise
    return digest


class _ShardWriter:
    """Writes shards of whole documents, each before it would pass ``limit`` ids.

    An npy shard's ids go to its temporary file as they arrive (with the header numpy writes for
    any length, rewritten with the real one when the shard is complete), so writing is spread over
    the run instead of waiting for the last task; a Parquet shard is collected and written whole.
    """

    def __init__(self, directory: str, fmt: str, dtype, limit: int, shards: list[dict], first_document: int):
        self.directory, self.fmt, self.dtype, self.limit = directory, fmt, dtype, limit
        self.shards = shards  # the manifest's list, appended to as shards are written
        self.first_document = first_document
        self.parts: list[np.ndarray] = []  # Parquet: the shard's ids so far
        self.lengths: list[np.ndarray] = []
        self.file: Any = None  # npy: the shard's temporary file, open
        self.unsynced = 0  # bytes written to it since it was last synced
        self.n_ids = 0
        self.n_docs = 0
        self.on_shard: Callable = lambda: None

    def add(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        import numpy as np

        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        start = 0
        while start < len(lengths):
            room = self.limit - self.n_ids
            # the documents start.. that fit in the room left: the last offset <= offsets[start] + room
            stop = int(np.searchsorted(offsets, offsets[start] + room, side="right")) - 1
            if stop == start:
                if self.n_docs:
                    self.flush()
                    continue
                stop = start + 1  # a document longer than a shard: a shard of its own
            self._take(ids[offsets[start]:offsets[stop]], lengths[start:stop])
            start = stop
            if start < len(lengths):
                self.flush()

    def _take(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        import numpy as np

        ids = ids.astype(self.dtype, copy=False)
        if self.fmt == "npy":
            if self.file is None:
                self.file = _new_temporary(self.directory, self._name("npy"))
                _write_npy_header(self.file, self.dtype, 0)
                self.unsynced = 0
            self.file.write(np.ascontiguousarray(ids).data)
            self.unsynced += ids.nbytes
            if self.unsynced >= _SYNC_BYTES:  # to disk as it goes, not all at the shard's end
                self.file.flush()
                os.fsync(self.file.fileno())
                self.unsynced = 0
        else:
            self.parts.append(ids)
        self.lengths.append(lengths)
        self.n_ids += len(ids)
        self.n_docs += len(lengths)

    def _name(self, suffix: str) -> str:
        return f"shard-{len(self.shards):05d}.{suffix}"

    def flush(self) -> None:
        import numpy as np

        if not self.n_docs:
            return
        lengths = np.concatenate(self.lengths)
        entry: dict[str, int | str] = {
            "documents": int(self.n_docs), "tokens": self.n_ids, "first_document": self.first_document,
        }
        if self.fmt == "npy":
            name, index = self._name("npy"), self._name("idx.npy")
            offsets = np.zeros(len(lengths) + 1, dtype=np.uint64)
            np.cumsum(lengths, dtype=np.uint64, out=offsets[1:])  # in uint64 (summing in the lengths' int64 and casting took 10x)
            entry["index_sha256"] = _atomic_write(self.directory, index, lambda f: np.save(f, offsets))
            f, self.file = self.file, None
            f.seek(0)
            _write_npy_header(f, self.dtype, self.n_ids)
            entry["sha256"] = _finish_atomic_write(f, self.directory, name)
            entry = {"file": name, "index": index, **entry}
        else:
            ids = np.concatenate(self.parts)
            name = self._name("parquet")
            entry["sha256"] = _atomic_write(self.directory, name, lambda f: _write_parquet(f, ids, lengths))
            entry = {"file": name, **entry}
        self.shards.append(entry)
        self.first_document += self.n_docs
        self.parts, self.lengths = [], []
        self.n_ids = self.n_docs = 0
        self.on_shard()

    def discard(self) -> None:
        """Drop the shard being written (a run that stops before it is complete)."""
        if self.file is not None:
            self.file.close()
            os.unlink(self.file.name)
            self.file = None


def _write_npy_header(f, dtype, n: int) -> None:
    """The header ``np.save`` writes for ``n`` ids of ``dtype``: 128 bytes for any ``n`` below
    10**50, so the header of a shard's final length can replace the one written first."""
    import numpy as np

    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (n,)}
    at = f.tell()
    np.lib.format.write_array_header_1_0(f, header)
    if f.tell() - at != _NPY_HEADER_BYTES:
        raise AssertionError(f"npy header of {f.tell() - at} bytes, not {_NPY_HEADER_BYTES}")


_NPY_HEADER_BYTES = 128
# An npy shard being written is synced every this many bytes: while this process waits for the
# workers, rather than all of it when the shard is complete.
_SYNC_BYTES = 32 << 20


def _write_parquet(f, ids: np.ndarray, lengths: np.ndarray) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    # The ids in the manifest's dtype (the writer's): list<uint16> or list<uint32>, as in .npy shards.
    big = len(ids) > np.iinfo(np.int32).max  # past a list's int32 offsets
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64 if big else np.int32)
    np.cumsum(lengths, out=offsets[1:])
    lists = pa.LargeListArray if big else pa.ListArray
    column = lists.from_arrays(pa.array(offsets), pa.array(ids))
    pq.write_table(pa.table({"ids": column}), f)


def _read_manifest(directory: str) -> dict | None:
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
        manifest["plan"], manifest["shards"]  # noqa: B018 - the keys a resume needs
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BpetokError(f"{path}: not a bpetok manifest ({e}); choose an empty output directory or delete it") from e
    return manifest


def _verified_prefix(directory: str, shards: list[dict]) -> list[dict]:
    """The leading shards whose files are all present with the sha256 the manifest recorded."""
    kept: list[dict] = []
    for entry in shards:
        files = [(entry["file"], entry["sha256"])]
        if "index" in entry:
            files.append((entry["index"], entry["index_sha256"]))
        for name, digest in files:
            path = os.path.join(directory, name)
            if not os.path.isfile(path) or file_sha256(path) != digest:
                return kept
        kept.append(entry)
    return kept
