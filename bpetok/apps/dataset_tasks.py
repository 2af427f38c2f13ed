"""encode-dataset's tasks, as a worker runs them: the model as it travels to workers
(:class:`ModelSource`), a task (:class:`Task`: a byte range of a text or JSONL file, or Parquet row
groups) read into documents, encoded into ids and lengths (:func:`run_task`). See
bpetok/apps/datasets.py for the whole flow.
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
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

from bpetok.errors import BpetokError

if TYPE_CHECKING:  # numpy is imported where it is used: `import bpetok` loads no numpy (test_gguf_plain)
    import numpy as np


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
