"""How ``bpetok serve`` runs requests and writes answers without blocking or pinning memory.

Plain Python, no HTTP and no asyncio imports at module level (``bpetok.apps.server`` uses it):

- :class:`WorkPool`: a fixed number of daemon threads that run every request's work
  (parsing, tokenizing, rendering, detokenizing) off the event loop, with a time limit per
  request. Daemon threads, unlike the pools of asyncio and anyio, do not hold the process's exit
  when SIGTERM's grace period is over; and a thread cannot be killed, so a request past its time
  limit is answered at once while its thread finishes on its own.
- :class:`TokensBody`: a ``/tokenize`` answer kept as the ids (4 bytes each) and produced in
  chunks as the client reads, from one serialized fragment per distinct token: a 4 MB CJK
  request with pieces holds about 5 MB instead of a list of a million dicts.
- :class:`OutputBudget`: the bytes that request bodies and unsent answers hold across all
  connections; past it the server answers 503 instead of buffering more.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
from array import array
from typing import Any, Callable, Iterator

__all__ = ["CHUNK_BYTES", "BytesBody", "OutputBudget", "PieceFragments", "TokensBody", "WorkPool", "WorkTimeout", "dumps"]

CHUNK_BYTES = 64 * 1024  # what one write hands the transport; uvicorn pauses the writer past 64 KiB buffered


def dumps(payload) -> bytes:
    """Compact JSON, UTF-8 (llama-server's output style)."""
    try:
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (e.g. in a file name): escape everything
        return json.dumps(payload, separators=(",", ":")).encode("ascii")


def piece_json(data: bytes):
    """A piece as a string when it is valid UTF-8, else its byte values (llama-server's convention)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


# -- answers ----------------------------------------------------------------------------------------


class BytesBody:
    """An answer already serialized: written in :data:`CHUNK_BYTES` slices, never copied."""

    def __init__(self, data: bytes):
        self.data = data
        self.size = len(data)
        self.length: int | None = len(data)

    def chunks(self) -> Iterator[bytes]:
        view = memoryview(self.data)
        for start in range(0, len(view), CHUNK_BYTES):
            yield view[start : start + CHUNK_BYTES]  # type: ignore[misc]


class PieceFragments:
    """``{"id":N,"piece":...}`` serialized once per token id, on first use (one table per app).

    Filled from request threads and the event loop alike: a slot written twice gets the same bytes.
    """

    def __init__(self, tok):
        self._tok = tok
        self._table: list[bytes | None] = [None] * tok.n_tokens

    def __getitem__(self, token_id: int) -> bytes:
        fragment = self._table[token_id]
        if fragment is None:
            fragment = dumps({"id": token_id, "piece": piece_json(self._tok.piece(token_id))})
            self._table[token_id] = fragment
        return fragment


class TokensBody:
    """``{"tokens": [...]}`` for ``ids``, produced chunk by chunk: byte for byte what
    ``dumps(tokenize_request(...))`` gives (tests hold the two equal)."""

    IDS_PER_CHUNK = 4096  # ~16-64 KiB of JSON with pieces

    def __init__(self, ids: list[int], fragments: PieceFragments | None):
        self.ids = array("i")
        # In steps: one array("i", ids) of two million ids holds the GIL ~70 ms, stalling the event loop.
        for start in range(0, len(ids), 65536):
            self.ids.fromlist(ids[start : start + 65536])
        self.fragments = fragments
        self.size = self.ids.itemsize * len(self.ids) + CHUNK_BYTES
        self.length: int | None = None  # unknown until written: sent chunked

    def chunks(self) -> Iterator[bytes]:
        yield b'{"tokens":['
        step = self.IDS_PER_CHUNK
        for start in range(0, len(self.ids), step):
            part = self.ids[start : start + step]
            if self.fragments is not None:
                text = b",".join([self.fragments[i] for i in part])
            else:
                text = ",".join(map(str, part)).encode("ascii")
            yield b"," + text if start else text
        yield b"]}"

    def to_bytes(self) -> BytesBody:
        """The whole answer at once (for small answers: one write, with a Content-Length)."""
        return BytesBody(b"".join(self.chunks()))


# -- the memory bound ----------------------------------------------------------------------------------


class OutputBudget:
    """Bytes held by request bodies being read and answers not yet written, across connections.

    Used from the event loop only (no lock): :meth:`take` says whether ``n`` more bytes fit.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0

    def take(self, n: int) -> bool:
        if self.used + n > self.limit:
            return False
        self.used += n
        return True

    def give_back(self, n: int) -> None:
        self.used -= n


# -- running requests off the event loop --------------------------------------------------------------


class WorkTimeout(Exception):
    """A request's work ran past the pool's time limit (its thread may still be running)."""


class WorkPool:
    """``threads`` daemon threads running request work; :meth:`run` awaits one call with a time limit.

    Work waits in a queue for a free thread, and the time limit counts that wait: a request whose
    turn comes after its limit is dropped without running.
    """

    def __init__(self, threads: int, time_limit: float):
        self.threads = threads
        self.time_limit = time_limit
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()

    def _start_threads(self) -> None:
        with self._lock:
            while self._started < self.threads:
                self._started += 1
                threading.Thread(target=self._serve, name=f"bpetok-request-{self._started}", daemon=True).start()

    def _serve(self) -> None:
        while True:
            loop, done, function, args = self._queue.get()
            if done.done():  # timed out (or the request was cancelled) while waiting its turn
                continue
            result = error = None
            try:
                result = function(*args)
            except BaseException as e:  # handed to the awaiting request, which answers it
                error = e
            try:
                loop.call_soon_threadsafe(_settle, done, result, error)
            except RuntimeError:  # the loop is closed: the server stopped, nobody is waiting
                pass
            del result, error, function, args, done  # drop the answer's memory before waiting again

    async def run(self, function: Callable[..., Any], *args) -> Any:
        if self._started < self.threads:
            self._start_threads()
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._queue.put((loop, done, function, args))
        # subtle: a timer failing the future, not asyncio.wait_for, which takes extra loop turns to
        # unwind when the request is cancelled (SIGTERM's deadline), by which time the loop may be gone
        timer = loop.call_later(self.time_limit, _settle, done, None, WorkTimeout())
        try:
            return await done
        finally:
            timer.cancel()


def _settle(done: asyncio.Future, result, error) -> None:
    if done.done():  # timed out or cancelled: the late result goes nowhere
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)
