"""encode-dataset's driver side: inputs cut into tasks (:func:`plan_tasks`), errors kept in input
order (:class:`ErrorLog`), tasks run in order on a thread or process pool (:func:`in_order`,
:func:`process_pool`) or a Dask cluster (:func:`connect_dask`). See bpetok/apps/datasets.py.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter, deque
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from bpetok.errors import BpetokError
from bpetok.apps.dataset_tasks import (
    _COMPRESSED,
    EXAMPLES_KEPT,
    DatasetError,
    ModelSource,
    Reading,
    Task,
    TaskResult,
    _decompress_errors,
    _open_binary,
    _parquet_file,
    _unfix_mmap_threshold,
    input_kind,
    run_task,
)


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
