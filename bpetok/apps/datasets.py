"""Encoding a corpus into token-id shards for training (``bpetok encode-dataset``).

The flow, one way: the driver (this process) cuts the inputs into *tasks* of about
:data:`BLOCK_BYTES` bytes each: a byte range of a JSONL or text file, cut at a line break, or a
few Parquet row groups (:func:`plan_tasks`), so only where to read travels, not the text. The
task runs in this process, on its threads or local worker processes (``concurrent.futures``) or on a Dask
cluster: it reads its records into *documents* (a text file, a line, a JSONL record's field, a
Parquet cell), encodes them and returns their ids, lengths and bad records (:func:`run_task`).
The results come back in task order and are cut into *shards* of whole documents holding at
most ``shard_tokens`` ids each.

Why the output does not depend on the workers or the engine: a document's ids are
``tok.encode(text)`` whichever process computes them, results are consumed in input order, and
a shard ends where its next document would not fit: the cut depends only on the documents'
lengths in ids, never on which task or worker they came from, nor on timing.

Why a rerun resumes: each shard is written to a temporary file in the output directory and
renamed when complete, and the manifest (written the same way) lists the finished shards with
their sha256. A rerun with the same model, inputs and options keeps the shards whose files still
match, skips the documents they hold (reading, not encoding, them) and carries on from there;
the cut of the rest is the same because a shard always starts a fresh cut.

Output (``OUTDIR``): ``shard-00000.npy`` (the ids, one flat array, ``uint16`` when the
vocabulary has at most 65,536 tokens, else ``uint32``) with ``shard-00000.idx.npy`` (``uint64``
offsets: document ``i`` is ``ids[idx[i]:idx[i + 1]]``), or ``shard-00000.parquet`` (one row per
document, an ``ids`` column of ``list<uint16>`` or ``list<uint32>``, as the manifest's ``dtype``
says); and ``manifest.json``; while a run writes there, its lock file (:mod:`bpetok.apps._outdir`).
"""

from __future__ import annotations

import bz2
import functools
import gzip
import hashlib
import io
import json
import lzma
import os
import sys
import tempfile
import threading
import zlib
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from bpetok.apps import _outdir
from bpetok.errors import BpetokError
from bpetok.hookspecs import hookimpl

if TYPE_CHECKING:  # numpy is imported where it is used: `import bpetok` loads no numpy (test_gguf_plain)
    import numpy as np

__all__ = [
    "encode_dataset", "DatasetResult", "ModelSource", "bpetok_register_commands", "connect_dask", "in_order",
    "process_pool",
]

MANIFEST = "manifest.json"
FORMAT_VERSION = "bpetok-shards/1"
# The input a task reads: large enough that the per-task overhead (one round trip, a worker's
# reading and its returned ids) is small, small enough that a worker's memory stays far below 1 GiB.
BLOCK_BYTES = 1 << 22
# 2**26 ids: 128 MiB as uint16, 256 MiB as uint32; the writer holds one shard's ids (npy shards are
# written part by part, with no concatenated copy), so its memory is bounded by this, not by the corpus.
DEFAULT_SHARD_TOKENS = 1 << 26
# Tasks submitted ahead of the one being written, per worker: keeps every worker busy while
# bounding the texts and ids held in memory.
AHEAD_PER_WORKER = 2
EXAMPLES_KEPT = 20  # error examples kept in the manifest (all errors are counted)
_COMPRESSED = (".gz", ".xz", ".bz2", ".zst")


class DatasetError(BpetokError):
    """An input record cannot be read (with ``on_error="fail"``), or the output directory is unusable."""


# -- the model, as it travels to workers --------------------------------------------------------


@dataclass(frozen=True)
class ModelSource:
    """How a worker gets the tokenizer: the GGUF's path (a shared filesystem) or its bytes.

    Only this travels: a worker builds the tokenizer once and keeps it (keyed by ``sha256``),
    never a pickled tokenizer with its caches.
    """

    path: str
    sha256: str
    data: bytes | None = field(default=None, repr=False)

    def tokenizer(self):
        with _TOKENIZERS_LOCK:  # a worker's threads (local, or a Dask worker's) build it once
            return self._tokenizer()

    def _tokenizer(self):
        tok = _TOKENIZERS.get(self.sha256)
        if tok is None:
            import bpetok

            path = self.path
            data = self.data if self.data is not None else _WORKER_MODELS.get(self.sha256)
            if data is not None:
                path = os.path.join(tempfile.gettempdir(), f"bpetok-{self.sha256[:16]}-{os.path.basename(self.path)}")
                if not os.path.exists(path):
                    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".bpetok-model-")
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                    os.replace(tmp, path)
            _TOKENIZERS.clear()  # one vocabulary at a time: a tokenizer is large
            tok = _TOKENIZERS[self.sha256] = bpetok.from_gguf(path)
        return tok


_TOKENIZERS: dict = {}  # per process: sha256 -> Tokenizer, the last one built
_TOKENIZERS_LOCK = threading.Lock()
_WORKER_MODELS: dict = {}  # on a Dask worker: sha256 -> the GGUF's bytes, put there by ModelOnWorkers


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def encode_block(model: ModelSource, texts: list[str], parse_special: bool, eos: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Documents' ids, flat (``uint32``), and each document's length in ids."""
    import numpy as np

    tok = model.tokenizer()
    ids, offsets = tok.encode_batch_to_numpy(texts, parse_special=parse_special, workers=1)
    lengths = np.diff(offsets)
    if eos is not None:
        ids = np.insert(ids, offsets[1:], np.uint32(eos))  # after each document's last id
        lengths += 1
    return ids, lengths


# -- tasks: what a worker reads -------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """A unit of work, small enough to ship: where a worker finds its records, not the records.

    ``kind`` is ``jsonl`` or ``lines`` (the records are the lines of the bytes ``start:stop`` of
    ``paths[0]``, or of ``data`` when this process had to decompress them), ``parquet`` (row groups
    ``start:stop``), or ``files`` (each of ``paths`` is one document). ``inputs`` are the paths'
    positions among the run's inputs; ``paths`` are absolute, as the workers open them.
    """

    kind: str
    inputs: tuple[int, ...]
    paths: tuple[str, ...]
    start: int = 0
    stop: int = 0
    data: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Reading:
    """How a worker turns records into ids: the same for every task of a run."""

    field: str
    parse_special: bool
    eos: int | None


@dataclass
class TaskResult:
    """A task's ids (``uint32``, flat), each encoded document's length, and what its records held.

    ``examples`` are ``(input, record, reason)``: the record's number is counted from the task's
    first record (the driver, which sees the tasks in order, makes it the line or row in the file).
    """

    ids: np.ndarray
    lengths: np.ndarray
    documents: int  # documents read, encoded or (the first ``skip``) not
    records: int  # lines or rows read: where the next task's numbering starts
    input: int
    errors: Counter = field(default_factory=Counter)
    examples: list[tuple[int, int | None, str]] = field(default_factory=list)
    empty: Counter = field(default_factory=Counter)
    spilled: str | None = None  # from a local worker: the file holding ids and lengths (see run_task_to_file)

    def add_error(self, kind: str, input: int, record: int | None, reason: str) -> None:
        self.errors[kind] += 1
        if len(self.examples) < EXAMPLES_KEPT:
            self.examples.append((input, record, reason))


def run_task(model: ModelSource, task: Task, reading: Reading, skip: int = 0) -> TaskResult:
    """Read a task's records, encode its documents but the first ``skip``. Runs on a worker."""
    import numpy as np

    _unfix_mmap_threshold()
    result = TaskResult(np.zeros(0, np.uint32), np.zeros(0, np.int64), 0, 0, task.inputs[0])
    texts = list(_task_documents(task, reading.field, result))
    result.documents = len(texts)
    if skip < len(texts):
        result.ids, result.lengths = encode_block(model, texts[skip:], reading.parse_special, reading.eos)
    return result


def run_task_to_file(model: ModelSource, task: Task, reading: Reading, skip: int, directory: str) -> TaskResult:
    """:func:`run_task` on a local worker process: the ids and lengths go to a temporary file in
    ``directory`` (``result.spilled``) and only the small rest of the result goes back through the
    pool's pipe. A worker killed while it writes a large result to that pipe leaves half a message
    in it, and the pool then waits for the rest forever (seen in 2 runs of 5 with ~100 KB results);
    a message of a few hundred bytes is written at once."""
    import numpy as np

    result = run_task(model, task, reading, skip)
    fd, path = tempfile.mkstemp(dir=directory, prefix=".shard-part-", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        np.save(f, result.lengths)
        np.save(f, result.ids)
    result.ids = result.lengths = None  # type: ignore[assignment]
    result.spilled = path
    return result


def _read_spilled(result: TaskResult) -> None:
    import numpy as np

    if result.spilled is not None:
        with open(result.spilled, "rb") as f:
            result.lengths, result.ids = np.load(f), np.load(f)
        os.unlink(result.spilled)
        result.spilled = None


def _remove_spilled(directory: str) -> None:
    """The spilled results of tasks a stopped run did not write."""
    for name in os.listdir(directory):
        if name.startswith(".shard-part-") and name.endswith(".tmp"):
            os.unlink(os.path.join(directory, name))


_MMAP_THRESHOLD_SET = False


def _unfix_mmap_threshold() -> None:
    """Let glibc serve the encoder's per-call work buffers (a few hundred KB) from its heap again.

    Dask's nannies start workers with ``MALLOC_TRIM_THRESHOLD_`` set, and setting any of glibc's
    ``MALLOC_*_`` tunables also freezes its mmap threshold at 128 KiB: every larger buffer is then
    a fresh ``mmap`` whose pages fault in on each call (measured: 1.5x the CPU per task). Once per
    process, unless the threshold was chosen explicitly, it is set to 4 MiB (what glibc's own
    dynamic threshold would reach); freed memory still goes back to the system by the trim threshold.
    """
    global _MMAP_THRESHOLD_SET
    if _MMAP_THRESHOLD_SET:
        return
    _MMAP_THRESHOLD_SET = True
    tunables = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    if not any(name in os.environ for name in tunables):
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    M_TOP_PAD, M_MMAP_THRESHOLD = -2, -3
    mallopt(M_MMAP_THRESHOLD, 1 << 22)
    if "MALLOC_TOP_PAD_" not in os.environ:
        mallopt(M_TOP_PAD, 1 << 22)


def _task_documents(task: Task, key: str, result: TaskResult) -> Iterator[str]:
    path = task.paths[0]
    try:
        if task.kind == "files":
            for input, path in zip(task.inputs, task.paths):
                with _open_input(path) as f:
                    text = _decode(f.read(), input, None, result)
                if text == "":
                    result.empty["documents"] += 1
                elif text is not None:
                    yield text
        elif task.kind == "parquet":
            yield from _parquet_documents(path, task.start, task.stop, key, task.inputs[0], result)
        else:
            data = task.data
            if data is None:
                with _open_input(path) as f:
                    f.seek(task.start)
                    data = f.read(task.stop - task.start)
                if len(data) != task.stop - task.start:
                    raise DatasetError(f"{path}: shorter than when the run started; was it changed? Run again")
            lines = data.split(b"\n")
            if lines[-1] == b"":
                lines.pop()  # the line break ending the last line
            result.records = len(lines)
            if task.kind == "jsonl":
                yield from _jsonl_documents(lines, key, task.inputs[0], result)
            else:
                yield from _text_lines(lines, task.inputs[0], result)
    except _decompress_errors() as e:
        raise DatasetError(f"{path}: cannot decompress the input ({e}); is it truncated?") from e
    except OSError as e:
        raise DatasetError(f"{path}: cannot read the input ({e.strerror or e})") from e


@contextmanager
def _open_input(path: str) -> Iterator:
    """The input's bytes (decompressed), or an error that says a worker must see the same path."""
    try:
        f = _open_binary(path)
    except OSError as e:
        import socket

        raise DatasetError(
            f"{path}: cannot open the input on {socket.gethostname()} ({e.strerror or e}); workers read their "
            "inputs themselves, so every Dask worker must see them at the same path (a shared filesystem)"
        ) from e
    with f:
        yield f


def _open_binary(path: str):
    """The file's bytes, decompressed on the fly by its suffix (``.zst`` needs ``zstandard``)."""
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.endswith(".xz"):
        return lzma.open(path, "rb")
    if path.endswith(".bz2"):
        return bz2.open(path, "rb")
    if path.endswith(".zst"):
        return io.BufferedReader(_zstandard(path).open(path, "rb"))  # its reader cannot iterate lines itself
    return open(path, "rb")


def _zstandard(path: str):
    """The ``zstandard`` module, which ``path`` needs, or the error saying how to install it."""
    try:
        import zstandard
    except ImportError:
        raise BpetokError(f"{path}: reading .zst files needs the zstandard package: pip install 'bpetok[zstd]'") from None
    return zstandard


def input_kind(path: str) -> str:
    """``jsonl``, ``parquet`` or ``text``, from the name without its compression suffix.

    >>> input_kind("a.jsonl.zst"), input_kind("b.parquet"), input_kind("c.txt.gz")
    ('jsonl', 'parquet', 'text')
    """
    name = path
    for suffix in _COMPRESSED:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    return "text"


def _decode(data: bytes, input: int, record: int | None, result: TaskResult) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        result.add_error("invalid_utf8", input, record, f"invalid UTF-8 at byte {e.start} ({data[e.start:e.start + 4]!r})")
        return None


def _text_lines(lines: list[bytes], input: int, result: TaskResult) -> Iterator[str]:
    for n, raw in enumerate(lines, 1):
        raw = raw.rstrip(b"\r\n")
        if not raw:
            result.empty["documents"] += 1
            continue
        text = _decode(raw, input, n, result)
        if text is not None:
            yield text


def _jsonl_documents(lines: list[bytes], key: str, input: int, result: TaskResult) -> Iterator[str]:
    """Each line's ``key`` field. With orjson installed (the ``jsonl`` extra) a line goes to it
    first: when it gives an object whose field is a non-empty string, the line is one that
    :func:`_jsonl_field` (the reference) reads to the same text, because orjson accepts only
    strict UTF-8 JSON without lone surrogates, a subset of what ``json`` reads; any other line
    goes to the reference, which counts what is wrong with it."""
    fast = _orjson_loads()
    for n, raw in enumerate(lines, 1):
        if fast is not None:
            try:
                record = fast(raw)
            except ValueError:  # orjson.JSONDecodeError
                record = None
            if record.__class__ is dict:
                text = record.get(key)
                if text.__class__ is str and text:
                    yield text
                    continue
        text = _jsonl_field(raw, key, input, n, result)
        if text is not None:
            yield text


def _jsonl_field(raw: bytes, key: str, input: int, n: int, result: TaskResult) -> str | None:
    """A JSONL line's ``key`` field, read with the standard library, or None with the reason counted."""
    if not raw.strip():
        result.empty["lines"] += 1
        return None
    line = _decode(raw.rstrip(b"\r\n"), input, n, result)
    if line is None:
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        result.add_error("invalid_json", input, n, f"not valid JSON ({e.msg}: column {e.colno})")
        return None
    except RecursionError:
        result.add_error("invalid_json", input, n, "JSON nested too deeply to read")
        return None
    except ValueError as e:  # Python's limit on an int's digits, e.g. {"n": 1000...000} with 5,000 digits
        result.add_error("invalid_json", input, n, f"not readable JSON ({e})")
        return None
    if not isinstance(record, dict):
        result.add_error("not_an_object", input, n, f"a JSON {type(record).__name__}, not an object with a {key!r} field")
        return None
    if key not in record:
        result.add_error("missing_field", input, n, f"no {key!r} field (fields: {', '.join(list(record)[:8])}); choose one with --field")
        return None
    text = record[key]
    if not isinstance(text, str):
        result.add_error("not_a_string", input, n, f"field {key!r} is a {type(text).__name__}, not a string")
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate written as \\udXXX in the JSON
        result.add_error("invalid_utf8", input, n, f"field {key!r} holds a lone surrogate (not UTF-8 text)")
        return None
    if not text:
        result.empty["documents"] += 1
        return None
    return text


@functools.cache  # looked up once per process, not once per task
def _orjson_loads() -> Callable | None:
    """``orjson.loads`` when installed: it parses JSONL lines several times faster than ``json``
    (whose string scanning was half of a task's time, as much as encoding)."""
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


def _parquet_file(path: str, source=None):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise BpetokError(f"{path}: reading Parquet needs pyarrow: pip install 'bpetok[parquet]'") from None
    try:
        return pq.ParquetFile(path if source is None else source)
    except (pa.ArrowInvalid, OSError) as e:
        raise BpetokError(f"{path}: not a readable Parquet file ({e})") from e


def _parquet_documents(path: str, start: int, stop: int, key: str, input: int, result: TaskResult) -> Iterator[str]:
    with _open_input(path) as f:
        pf = _parquet_file(path, f)
        column = pf.read_row_groups(list(range(start, stop)), columns=[key]).column(0).to_pylist()
    result.records = len(column)
    for row, text in enumerate(column, 1):
        if text is None:
            result.add_error("null", input, row, f"column {key!r} is null")
        elif not text:
            result.empty["documents"] += 1
        else:
            yield text


def _decompress_errors() -> tuple:
    errors = [EOFError, lzma.LZMAError, zlib.error, gzip.BadGzipFile]
    try:
        import zstandard

        errors.append(zstandard.ZstdError)
    except ImportError:
        pass
    return tuple(errors)


# -- planning tasks (the driver) --------------------------------------------------------------------


def plan_tasks(paths: list[str], *, key: str, lines: bool, block_bytes: int) -> Iterator[Task]:
    """The run's tasks, in input order, each about ``block_bytes`` of input.

    Uncompressed JSONL and text lines are cut into byte ranges at line breaks (the driver seeks
    and reads to the next one: it never reads the records); Parquet into groups of row groups;
    whole-file text documents are grouped a few files a task. A compressed line-based input cannot
    be cut without decompressing it, so the driver decompresses it and ships the bytes, cut at line
    breaks (the workers still parse and encode them).
    """
    files: list[tuple[int, str]] = []
    size = 0
    for i, path in enumerate(paths):
        kind = input_kind(path)
        full = os.path.abspath(path)
        if kind == "text" and not lines:
            files.append((i, full))
            size += os.path.getsize(path)
            if size >= block_bytes:
                yield _files_task(files)
                files, size = [], 0
            continue
        if files:
            yield _files_task(files)
            files, size = [], 0
        kind = "lines" if kind == "text" else kind
        try:
            if kind == "parquet":
                yield from _parquet_tasks(i, path, full, key, block_bytes)
            elif path.endswith(_COMPRESSED):
                yield from _decompressed_tasks(i, path, full, kind, block_bytes)
            else:
                yield from _range_tasks(i, path, full, kind, block_bytes)
        except _decompress_errors() as e:
            raise BpetokError(f"{path}: cannot decompress the input ({e}); is it truncated?") from e
        except OSError as e:
            raise BpetokError(f"{path}: cannot read the input ({e.strerror or e})") from e
    if files:
        yield _files_task(files)


def _files_task(files: list[tuple[int, str]]) -> Task:
    """One task reading whole text files (input number, absolute path), one document each."""
    return Task("files", tuple(i for i, _ in files), tuple(path for _, path in files))


def _range_tasks(i: int, path: str, full: str, kind: str, block_bytes: int) -> Iterator[Task]:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = 0
        while start < size:
            stop = start + block_bytes
            if stop < size:
                f.seek(stop - 1)
                stop += len(f.readline()) - 1  # to just after the next line break (or the end)
            stop = min(stop, size)
            yield Task(kind, (i,), (full,), start, stop)
            start = stop


def _decompressed_tasks(i: int, path: str, full: str, kind: str, block_bytes: int) -> Iterator[Task]:
    with _open_binary(path) as f:
        while True:
            data = f.read(block_bytes)
            if not data:
                return
            if not data.endswith(b"\n"):
                data += f.readline()
            yield Task(kind, (i,), (full,), data=data)


def _parquet_tasks(i: int, path: str, full: str, key: str, block_bytes: int) -> Iterator[Task]:
    import pyarrow as pa

    pf = _parquet_file(path)
    names = pf.schema_arrow.names
    if key not in names:
        raise BpetokError(f"{path}: no column {key!r} (columns: {', '.join(names)}); choose one with --field")
    column_type = pf.schema_arrow.field(key).type
    if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise BpetokError(f"{path}: column {key!r} is {column_type}, not a string column; choose another with --field")
    start, size = 0, 0
    for group in range(pf.metadata.num_row_groups):
        size += pf.metadata.row_group(group).total_byte_size
        if size >= block_bytes:
            yield Task("parquet", (i,), (full,), start, group + 1)
            start, size = group + 1, 0
    if start < pf.metadata.num_row_groups:
        yield Task("parquet", (i,), (full,), start, pf.metadata.num_row_groups)

# -- the driver's side: errors in input order --------------------------------------------------------


class ErrorLog:
    """Records that could not be read, over the whole run: counted by kind, the first few kept as examples.

    Tasks' results arrive in input order; each example is given its file and line (or row) here.
    With ``on_error="fail"`` the first one raises a :class:`DatasetError` naming the file and line.
    """

    def __init__(self, on_error: str, paths: list[str]):
        if on_error not in ("skip", "fail"):
            raise BpetokError(f"on_error must be 'skip' or 'fail', not {on_error!r}")
        self.on_error = on_error
        self.paths = paths
        self.counts: Counter = Counter()
        self.examples: list[str] = []
        self.empty: Counter = Counter()
        self._input = -1
        self._records_before = 0  # in the input being read: the lines or rows of its earlier tasks

    def absorb(self, result: TaskResult) -> None:
        if result.input != self._input:
            self._input, self._records_before = result.input, 0
        for input, record, reason in result.examples:
            message = f"{self._where(input, record)}: {reason}"
            if self.on_error == "fail":
                raise DatasetError(f"{message} (pass --on-error skip to count and skip such records)")
            if len(self.examples) < EXAMPLES_KEPT:
                self.examples.append(message)
        self.counts.update(result.errors)
        self.empty.update(result.empty)
        self._records_before += result.records

    def _where(self, input: int, record: int | None) -> str:
        path = self.paths[input]
        if record is None:
            return path
        if input_kind(path) == "parquet":
            return f"{path}: row {self._records_before + record}"
        return f"{path}:{self._records_before + record}"


def _after_kept(tasks: Iterable[Task], kept: int, model: ModelSource, reading: Reading, log: ErrorLog) -> Iterator[tuple[Task, int]]:
    """Each task with the number of its leading documents not to encode: on a resume, the ``kept``
    documents the finished shards hold are read here (their errors counted again), not encoded."""
    for task in tasks:
        if kept:
            counted = run_task(model, task, reading, skip=sys.maxsize)
            if counted.documents <= kept:
                log.absorb(counted)
                kept -= counted.documents
                continue
        yield task, kept
        kept = 0
    if kept:
        raise BpetokError("the manifest's shards hold more documents than the inputs; delete the output directory to start over")


# -- running tasks -------------------------------------------------------------------------------


def in_order(submit: Callable, tasks: Iterable, ahead: int, result: Callable = lambda future: future.result()) -> Iterator:
    """Submit tasks, at most ``ahead`` unfinished, and yield their results (``result(future)``) in task order."""
    pending: deque = deque()
    for task in tasks:
        pending.append(submit(task))
        if len(pending) >= ahead:
            yield result(pending.popleft())
    while pending:
        yield result(pending.popleft())


def in_order_here_too(submit: Callable, run_here: Callable, tasks: Iterable, ahead: int) -> Iterator:
    """:func:`in_order` with this process as one more worker: a task goes to the pool while fewer
    than ``ahead`` of its tasks are unfinished, else this process runs it itself (``run_here``)
    rather than wait; finished results are yielded, in task order, between tasks."""
    pending: deque = deque()  # the pool's futures and this process's results (as done futures), in task order
    for task in tasks:
        while pending and pending[0].done():
            yield pending.popleft().result()
        if sum(not f.done() for f in pending) < ahead:
            pending.append(submit(task))
        else:
            done: Future = Future()
            done.set_result(run_here(task))
            pending.append(done)
    while pending:
        yield pending.popleft().result()


@contextmanager
def process_pool(workers: int, model: ModelSource | None = None) -> Iterator:
    """A ``ProcessPoolExecutor`` of ``workers`` clean processes (``forkserver`` where there is one):
    no copy of this process's threads or caches; each worker builds what it needs itself.

    The workers start at once; with a ``model``, each builds its tokenizer as it starts.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method), initializer=_start_worker,
                               initargs=(model,))
    try:
        for _ in range(workers):  # one each: a pool starts a process per task while none is idle
            pool.submit(int)
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)


def _start_worker(model: ModelSource | None) -> None:
    _exit_with_parent()
    _unfix_mmap_threshold()
    if model is not None:
        try:
            model.tokenizer()
        except Exception:  # noqa: S110 - the worker's first task meets the error again and reports it
            pass


def _exit_with_parent() -> None:
    """End this worker process when the process that started it ends, however it ends.

    A pool's worker waits for its next task on a queue whose write end it holds itself, so a
    parent killed with ``SIGKILL`` would leave it (and through it the forkserver) sleeping for
    good. ``PR_SET_PDEATHSIG`` would not do: a forkserver's worker is the forkserver's child.
    multiprocessing gives each worker a pipe from the process that asked for it, the parent's
    *sentinel*, which comes to its end of file when that process is gone.
    """
    import multiprocessing
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        wait([sentinel])
        os._exit(1)  # not sys.exit: this is a thread, and the main one may be busy in a task

    threading.Thread(target=watch, name="bpetok-parent-watch", daemon=True).start()


def _load_vocabulary(path: str):
    import bpetok

    return bpetok.load_vocabulary(path)


def connect_dask(address: str):
    """A ``dask.distributed.Client`` for the scheduler at ``address``, or a clear error."""
    try:
        from dask.distributed import Client
    except ImportError:
        raise BpetokError("--dask needs dask.distributed: pip install 'bpetok[dask]'") from None
    from bpetok.apps._dask import check_scheduler_address

    try:
        return Client(check_scheduler_address(address), timeout="20s")
    except (OSError, TimeoutError) as e:
        raise BpetokError(f"cannot reach the Dask scheduler at {address} ({e}); is it running?") from e


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


# -- the run -------------------------------------------------------------------------------------


@dataclass
class DatasetResult:
    """What :func:`encode_dataset` wrote (the manifest's content) and what it skipped on a resume."""

    manifest: dict
    output_dir: str
    resumed_shards: int = 0

    @property
    def documents(self) -> int:
        return self.manifest["documents"]

    @property
    def tokens(self) -> int:
        return self.manifest["tokens"]

    @property
    def errors(self) -> dict[str, int]:
        return self.manifest["errors"]["counts"]


def _inputs(paths: list[str]) -> list[dict]:
    """The inputs as the plan records them, each checked to be a file this run can read."""
    out = []
    for path in paths:
        if not os.path.isfile(path):
            raise BpetokError(f"{path}: no such input file" + (" (it is a directory)" if os.path.isdir(path) else ""))
        if path.endswith(".zst"):
            _zstandard(path)
        st = os.stat(path)
        out.append({"path": path, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


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


def _progress_bar(enabled: bool | None):
    """A tqdm bar on stderr when it is a terminal (and tqdm is installed), else None."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(unit=" docs", unit_scale=True, desc="encoding", file=sys.stderr)


def encode_dataset(
    model: str | os.PathLike,
    inputs: Iterable[str | os.PathLike],
    output_dir: str | os.PathLike,
    *,
    field: str = "text",
    lines: bool = False,
    format: str = "npy",
    append_eos: bool = False,
    parse_special: bool = False,
    workers: int = 1,
    client=None,
    on_error: str = "fail",
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    block_bytes: int = BLOCK_BYTES,
    progress: bool | None = None,
) -> DatasetResult:
    """Encode every document of ``inputs`` with the GGUF vocabulary ``model`` into shards in ``output_dir``.

    >>> import json, tempfile
    >>> d = tempfile.mkdtemp()
    >>> with open(f"{d}/train.jsonl", "w") as f:
    ...     _ = f.write(json.dumps({"text": "Hello world"}) + "\\n")
    >>> r = encode_dataset("tests/data/ggml-vocab-qwen3.gguf.gz", [f"{d}/train.jsonl"], f"{d}/out", append_eos=True)
    >>> r.documents, r.tokens, r.manifest["dtype"], r.manifest["shards"][0]["file"]
    (1, 3, 'uint32', 'shard-00000.npy')

    :param inputs: text files (one document each, or one per line with ``lines``), JSONL
        (``.jsonl``/``.ndjson``: the ``field`` of each record) or Parquet (the ``field`` column);
        ``.gz``/``.xz``/``.bz2``/``.zst`` are decompressed on the fly.
    :param format: ``npy`` (flat ids + document offsets) or ``parquet`` (a list of ids per document).
    :param append_eos: end every document with the vocabulary's EOS id.
    :param parse_special: read special-token texts (``<|im_end|>``) in documents as their ids;
        off by default, so a document cannot inject control tokens.
    :param workers: how many tasks encode at once: on threads of this process where the tokenizer
        encodes without the GIL (:attr:`bpetok.Tokenizer.encodes_without_gil`), else on this
        process and ``workers - 1`` worker processes.
    :param client: a ``dask.distributed.Client``: run the tasks on its cluster instead; its workers
        read the inputs themselves, so they must see them at the same (absolute) paths.
    :param on_error: ``fail`` at the first unreadable record, or ``skip`` it and count it.
    :param shard_tokens: the most ids in a shard (a longer document gets a shard of its own).
    :param block_bytes: about how much input one task reads (the output does not depend on it).
    :raises BpetokError: unreadable model or input, a bad record with ``on_error="fail"``, an
        output directory holding another run's shards, or being written by another run at the
        moment (:class:`bpetok.apps._outdir.DirectoryBusy`, naming its pid).
    """
    import numpy as np

    from bpetok._args import as_int, check_flag, check_not_text

    check_not_text(inputs, "encode_dataset(inputs=...)", "a list of paths")
    model = os.fspath(model)
    paths = [os.fspath(p) for p in inputs]
    output_dir = os.fspath(output_dir)
    workers = as_int(workers, "encode_dataset(workers=...)")
    shard_tokens = as_int(shard_tokens, "encode_dataset(shard_tokens=...)")
    block_bytes = as_int(block_bytes, "encode_dataset(block_bytes=...)")
    for name, flag in (("lines", lines), ("append_eos", append_eos), ("parse_special", parse_special)):
        check_flag(flag, f"encode_dataset({name}=...)")
    if not paths:
        raise BpetokError("no inputs: give at least one text, JSONL or Parquet file")
    if format not in ("npy", "parquet"):
        raise BpetokError(f"format must be 'npy' or 'parquet', not {format!r}")
    if format == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise BpetokError("--format parquet needs pyarrow: pip install 'bpetok[parquet]'") from None
    if shard_tokens < 1 or workers < 1 or block_bytes < 1:
        raise BpetokError("shard_tokens, workers and block_bytes must be at least 1")
    errors = ErrorLog(on_error, paths)
    source = ModelSource(path=os.path.abspath(model), sha256=file_sha256(model))
    checked_inputs = _inputs(paths)  # before the output directory is created: a run refused creates nothing
    with _outdir.claimed(output_dir), ExitStack() as pool:
        # This process needs a tokenizer only when it encodes (not on Dask); else the vocabulary's facts will do.
        tok = source.tokenizer() if client is None else None
        vocabulary = tok.vocabulary if tok is not None else _load_vocabulary(model)
        # Local workers: threads sharing this tokenizer where its encoding runs without the GIL
        # (no second process to start, no second set of caches to warm, no ids to send back), else
        # processes; they start now, and build their tokenizers while this one plans the run.
        threads = processes = None
        if tok is not None and workers > 1:
            if tok.encodes_without_gil:
                threads = ThreadPoolExecutor(workers, thread_name_prefix="bpetok-encode")
                pool.callback(threads.shutdown, cancel_futures=True)
            else:
                pool.callback(_remove_spilled, output_dir)  # once the workers are gone (callbacks run last first)
                processes = pool.enter_context(process_pool(workers - 1, source))
        eos = None
        if append_eos:
            eos = vocabulary.special_ids.get("eos")
            if eos is None:
                raise BpetokError(f"{model}: the vocabulary has no EOS token (tokenizer.ggml.eos_token_id); drop --append-eos")
        dtype = np.uint16 if vocabulary.n_tokens <= 1 << 16 else np.uint32
        plan = {
            "model_sha256": source.sha256,
            "inputs": checked_inputs,
            "field": field, "lines": lines, "format": format, "append_eos": append_eos,
            "parse_special": parse_special, "on_error": on_error, "shard_tokens": shard_tokens,
        }
        manifest = {
            "format": FORMAT_VERSION,
            "model": {"path": model, "model": vocabulary.model, "pre": vocabulary.pre,
                      "sha256": source.sha256, "n_tokens": vocabulary.n_tokens, "eos_id": eos},
            "dtype": np.dtype(dtype).name,
            "plan": plan,
            "complete": False,
            "shards": [],
        }

        for name in os.listdir(output_dir):  # temporary files a killed run left behind (none is running: claimed)
            if name.startswith((".shard-", f".{MANIFEST}.")) and name.endswith(".tmp"):
                os.unlink(os.path.join(output_dir, name))
        previous = _read_manifest(output_dir)
        if previous is not None:
            if previous["plan"] != plan:
                changed = sorted(k for k in plan if previous["plan"].get(k) != plan[k])
                raise BpetokError(
                    f"{output_dir}: holds shards of another run ({', '.join(changed)} differ); "
                    "choose an empty output directory, or delete this one to start over"
                )
            manifest["shards"] = _verified_prefix(output_dir, previous["shards"])
        elif any(n.startswith("shard-") for n in os.listdir(output_dir)):
            raise BpetokError(f"{output_dir}: holds shards but no {MANIFEST}; choose an empty output directory")
        resumed = len(manifest["shards"])
        skip = sum(s["documents"] for s in manifest["shards"])

        def save_manifest() -> None:
            _atomic_write(output_dir, MANIFEST, lambda f: f.write(json.dumps(manifest, indent=1).encode() + b"\n"))

        writer = _ShardWriter(output_dir, format, dtype, shard_tokens, manifest["shards"], skip)
        writer.on_shard = save_manifest
        reading = Reading(field, parse_special, eos)
        tasks = plan_tasks(paths, key=field, lines=lines, block_bytes=block_bytes)
        work = _after_kept(tasks, skip, source, reading, errors)
        bar = _progress_bar(progress)

        try:
            if client is not None:
                from bpetok.apps._dask import ModelOnWorkers, result_from_worker

                plugin = ModelOnWorkers(source.sha256, _read_bytes(model))
                client.register_plugin(plugin)
                pool.callback(client.unregister_worker_plugin, plugin.name)
                n = max(sum(client.nthreads().values()), 1)
                results = in_order(lambda w: client.submit(run_task, source, w[0], reading, w[1], pure=False),
                                   work, AHEAD_PER_WORKER * n, result_from_worker(client))
            elif threads is not None:
                results = in_order(lambda w: threads.submit(run_task, source, w[0], reading, w[1]), work, AHEAD_PER_WORKER * workers)
            elif processes is not None:
                results = in_order_here_too(lambda w: processes.submit(run_task_to_file, source, w[0], reading, w[1], output_dir),
                                            lambda w: run_task(source, w[0], reading, w[1]),
                                            work, AHEAD_PER_WORKER * (workers - 1))
            else:
                results = (run_task(source, task, reading, kept) for task, kept in work)
            for result in results:
                _read_spilled(result)
                errors.absorb(result)
                writer.add(result.ids, result.lengths)
                if bar is not None:
                    bar.update(len(result.lengths))
            writer.flush()
        except Exception as e:
            if type(e).__name__ in ("BrokenProcessPool", "KilledWorker"):  # concurrent.futures', dask's
                raise BpetokError(
                    f"a worker died while encoding ({e}); the {len(manifest['shards'])} finished shards are kept: "
                    "run the same command again to resume"
                ) from e
            raise
        finally:
            writer.discard()  # a shard left incomplete (after flush, there is none)
            if bar is not None:
                bar.close()

        manifest["documents"] = sum(s["documents"] for s in manifest["shards"])
        manifest["tokens"] = sum(s["tokens"] for s in manifest["shards"])
        manifest["empty"] = dict(sorted(errors.empty.items()))
        manifest["errors"] = {"counts": dict(sorted(errors.counts.items())), "examples": errors.examples}
        manifest["complete"] = True
        save_manifest()
    return DatasetResult(manifest=manifest, output_dir=output_dir, resumed_shards=resumed)


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# -- command line ---------------------------------------------------------------------------------


def _cmd_encode_dataset(args) -> int:
    client = connect_dask(args.dask) if args.dask else None
    try:
        result = encode_dataset(
            args.model, args.inputs, args.output, field=args.field, lines=args.lines, format=args.format,
            append_eos=args.append_eos, parse_special=args.parse_special, workers=args.workers, client=client,
            on_error=args.on_error, shard_tokens=args.shard_tokens, progress=False if args.quiet else None,
        )
    finally:
        if client is not None:
            client.close()
    m = result.manifest
    resumed = f" ({result.resumed_shards} kept from an earlier run)" if result.resumed_shards else ""
    print(f"wrote {args.output}: {len(m['shards'])} shard{'s' if len(m['shards']) != 1 else ''}{resumed}, {m['documents']:,} documents, "
          f"{m['tokens']:,} tokens ({m['dtype']})")
    if result.errors:
        counts = ", ".join(f"{k}: {v:,}" for k, v in result.errors.items())
        print(f"skipped {sum(result.errors.values()):,} unreadable records ({counts}); "
              f"the first ones are listed in {os.path.join(args.output, MANIFEST)}:", file=sys.stderr)
        for line in m["errors"]["examples"][:5]:
            print(f"  {line}", file=sys.stderr)
    return 0


@hookimpl
def bpetok_register_commands(subparsers) -> None:
    """Add ``bpetok encode-dataset`` (a built-in plugin of the CLI hook)."""
    from bpetok.apps.cli import positive_int

    p = subparsers.add_parser("encode-dataset", help="encode text/JSONL/Parquet files into token-id shards")
    p.add_argument("model", metavar="MODEL.gguf")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="text, .jsonl or .parquet files (.gz/.xz/.bz2/.zst decompressed on the fly)")
    p.add_argument("-o", "--output", required=True, metavar="OUTDIR", help="directory for the shards and manifest.json")
    p.add_argument("--field", default="text", help="JSONL field / Parquet column holding the text (default: text)")
    p.add_argument("--lines", action="store_true", help="text files: one document per line (default: per file)")
    p.add_argument("--format", choices=("npy", "parquet"), default="npy", help="shard format (default: npy)")
    p.add_argument("--append-eos", action="store_true", help="end every document with the EOS token")
    p.add_argument("--parse-special", action="store_true",
                   help="read special-token texts in documents as their ids (default: as plain text)")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N", help="tasks encoding at once: threads with the C kernel's splitter, else processes (default 1)")
    p.add_argument("--dask", metavar="SCHEDULER_ADDRESS", help="run on this Dask cluster (tcp://host:8786)")
    p.add_argument("--on-error", choices=("skip", "fail"), default="fail",
                   help="an unreadable record: stop (default) or count it and go on")
    p.add_argument("--shard-tokens", type=positive_int, default=DEFAULT_SHARD_TOKENS, metavar="N",
                   help=f"the most tokens in a shard, of whole documents (default {DEFAULT_SHARD_TOKENS:,})")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_encode_dataset)
