"""encode_batch's worker processes.

``workers - 1`` children are forked, so they start with the tokenizer, its caches and the texts.
The texts are cut into contiguous groups; every process (this one too) takes the next group
number from a pipe filled before the fork (a 4-byte read from a pipe is atomic, so there is no
lock and no thread feeding a queue while this process holds the GIL). A child marshals each
group's ids into that group's slot of a shared anonymous map made before the fork, then says so
on a second pipe; this process loads the finished groups between its own, so when the groups
run out almost nothing is left to unpack.

Why so (measured on the benchmark corpora's 65,727 paragraphs, 1.6M ids per process):
``marshal`` writes a child's ids in ~35 ms and this process reads them back in ~30 ms, where an
``array`` of ids plus ``tolist`` and a slice per text took ~66 + ~76 ms (marshal shares the int
objects a child's cached chunks repeat, so most ids load as references; copying the lists alone
takes ~22 ms, so little more is to be had). Nothing is pickled or sent whole at the end, so this
process never sits idle unpacking while the children wait. Groups shrink as the work runs out
(large first: a cold tokenizer BPEs a big group's new words in one batch; small last: the
processes finish together). The rest is the fork itself (~8 ms with a warm tokenizer's heap):
below ~400k characters one process is faster.
"""

from __future__ import annotations

import atexit
import gc
import marshal
import mmap
import os
import signal
import struct
import threading
from bisect import bisect_left, bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING

from bpetok.errors import BpetokError

if TYPE_CHECKING:
    from bpetok.tokenizer import Tokenizer

# A child's records on the done pipe: (group, bytes in its slot). Fewer than PIPE_BUF bytes per
# write, so records from several children never interleave.
_RECORD = struct.Struct("<ii")
_STORED_ELSEWHERE = -1  # (group, -1): the ids did not fit the slot; this process encodes the group
_LAST = -1  # (-1, 0): the child has no more groups; (-1, n) + n bytes: it failed, with this message
_MESSAGE_MAX = 400
# marshal writes a list as 5 bytes plus 5 per id (an int or a back-reference), and a text has at
# most one id per UTF-8 byte, at most 4 per character: a slot never overflows.
_SLOT_PER_TEXT = 5
_SLOT_PER_CHAR = 20
# Texts per fork: bounds the shared map (address space, touched only as ids are written) to ~1 GB.
_ROUND_CHARS = 50_000_000
# Group numbers in the work pipe: 4 bytes each, well under any pipe's capacity.
_MAX_GROUPS = 1000


def encode_batch_forked(tok: Tokenizer, texts: list[str], parse_special: bool, workers: int) -> list[list[int]]:
    """``[tok.encode(t, parse_special=parse_special) for t in texts]`` over ``workers`` processes."""
    ends = list(accumulate(map(len, texts)))  # ends[i]: characters in texts[: i + 1]
    out: list[list[int]] = []
    lo = 0
    while lo < len(texts):
        base = ends[lo - 1] if lo else 0
        hi = max(bisect_right(ends, base + _ROUND_CHARS, lo), lo + 1)
        out += _encode_round(tok, texts, ends, lo, hi, parse_special, workers)
        lo = hi
    return out


def group_bounds(ends: list[int], lo: int, hi: int, workers: int) -> list[tuple[int, int]]:
    """Cut ``texts[lo:hi]`` into contiguous ``(start, stop)`` groups: each about a ``4 * workers``-th
    of the characters still left, but no smaller than a ``64 * workers``-th of them all.

    >>> group_bounds(list(accumulate([10] * 16)), 0, 16, 1)
    [(0, 4), (4, 7), (7, 10), (10, 12), (12, 13), (13, 14), (14, 15), (15, 16)]
    """
    base = ends[lo - 1] if lo else 0
    total = ends[hi - 1] - base
    floor = max(total / min(64 * workers, _MAX_GROUPS), 1)
    groups, start, done = [], lo, 0
    while start < hi:
        want = max((total - done) / (4 * workers), floor)
        stop = min(bisect_left(ends, base + done + want, start, hi) + 1, hi)
        groups.append((start, stop))
        start, done = stop, ends[stop - 1] - base
    return groups


def _encode_round(tok, texts, ends, lo, hi, parse_special, workers) -> list[list[int]]:
    groups = group_bounds(ends, lo, hi, workers)
    if len(groups) < 2:
        return tok._encode_many(texts[lo:hi], parse_special)
    # A cold tokenizer builds the batched BPE's tables (importing numpy) on first use: do it
    # once here rather than once in every process.
    batch_tables = getattr(tok.bpe, "_batch_tables", None)  # byte-level BPE only
    if batch_tables is not None:
        batch_tables()
    slots, size = [], 0
    for start, stop in groups:
        chars = ends[stop - 1] - (ends[start - 1] if start else 0)
        capacity = _SLOT_PER_TEXT * (stop - start + 1) + _SLOT_PER_CHAR * chars
        slots.append((size, capacity))
        size += capacity
    try:
        shared = mmap.mmap(-1, size)  # anonymous, MAP_SHARED: children's writes are seen here
    except (OSError, OverflowError, ValueError):  # no room for the map: stay in this process
        return tok._encode_many(texts[lo:hi], parse_special)
    return _Round(tok, texts, groups, slots, shared, parse_special).run(workers - 1)


class _Round:
    """One fork of the workers over one round of texts: fork, share the groups, gather, reap."""

    def __init__(self, tok, texts, groups, slots, shared, parse_special):
        self.tok, self.texts, self.groups, self.slots = tok, texts, groups, slots
        self.shared, self.parse_special = shared, parse_special
        self.results: list[list[list[int]] | None] = [None] * len(groups)
        self.children: list[int] = []  # forked and not yet reaped
        self.reporting = 0  # children that have not sent their last record
        self.inbox = bytearray()
        self.errors: list[str] = []
        self.redo: set[int] = set()  # groups a child could not store: encoded here

    def encode(self, k: int) -> list[list[int]]:
        start, stop = self.groups[k]
        return self.tok._encode_many(self.texts[start:stop], self.parse_special)

    def run(self, n_children: int) -> list[list[int]]:
        self.work_r = self.done_r = self.done_w = -1
        try:
            wait_for_workers()  # no reaper thread left running when this process forks
            self.work_r, work_w = os.pipe()
            try:
                numbers = b"".join(k.to_bytes(4, "little") for k in range(len(self.groups)))
                if os.write(work_w, numbers) != len(numbers):
                    raise OSError("encode_batch: the work pipe took only part of the group numbers")
            finally:
                os.close(work_w)  # subtle: children then see end of file once the groups run out
            self.done_r, self.done_w = os.pipe()
            # Frozen objects are never scanned by the collector, so a collection here does not
            # walk the whole heap (nor one in a child, which would copy every page it touched).
            # subtle: disabling the collector instead costs more: the collection it puts off
            # comes due when it is enabled again, over the whole heap (40-70 ms).
            gc.freeze()
            try:
                self.fork(n_children)
                self.gather()
            finally:
                gc.unfreeze()
            self.reap()
        finally:
            self.abort()
        if self.errors:
            raise BpetokError(f"encode_batch: a worker process failed: {self.errors[0]}")
        missing = [k for k, found in enumerate(self.results) if found is None]
        if missing:  # a child died after taking a group (its reap told why)
            raise BpetokError(f"encode_batch: {len(missing)} group(s) of texts were lost with a worker process")
        return [ids for group in self.results if group is not None for ids in group]  # none is None (above)

    def fork(self, n_children: int) -> None:
        for _ in range(n_children):
            try:
                pid = os.fork()
            except OSError:  # no more processes for now: this one still encodes
                break
            if pid == 0:
                status = 1
                try:
                    status = self.child()
                finally:
                    os._exit(status)
            self.children.append(pid)
            self.reporting += 1
        os.close(self.done_w)
        self.done_w = -1

    def child(self) -> int:
        """Encode groups until none is left, each into its slot; never returns to the caller's code."""
        try:
            gc.disable()  # it exits soon: nothing to gain from collecting
            os.close(self.done_r)
            while got := os.read(self.work_r, 4):
                k = int.from_bytes(got, "little")
                data = marshal.dumps(self.encode(k))
                at, capacity = self.slots[k]
                if len(data) <= capacity:
                    self.shared[at : at + len(data)] = data
                    os.write(self.done_w, _RECORD.pack(k, len(data)))
                else:
                    os.write(self.done_w, _RECORD.pack(k, _STORED_ELSEWHERE))
            os.write(self.done_w, _RECORD.pack(_LAST, 0))
            return 0
        except BaseException as e:  # reported by the parent
            message = f"{type(e).__name__}: {e}".encode("utf-8", "replace")[:_MESSAGE_MAX]
            os.write(self.done_w, _RECORD.pack(_LAST, len(message)) + message)
            return 1

    def gather(self) -> None:
        """Encode groups here too, loading the children's finished ones in between."""
        os.set_blocking(self.done_r, False)
        while not self.errors and (got := os.read(self.work_r, 4)):
            k = int.from_bytes(got, "little")
            self.results[k] = self.encode(k)
            self.receive()
            # subtle: freeze what the group and the loads added (ids lists, cache entries), or
            # the collections they trigger rescan it all, a full one near the end (~30 ms).
            gc.freeze()
        if self.errors:
            self.stop_children()
        os.set_blocking(self.done_r, True)
        while self.reporting and self.receive():
            pass
        for k in sorted(self.redo) if not self.errors else ():
            self.results[k] = self.encode(k)

    def receive(self) -> bool:
        """Read the records the children have written; False at end of file (all children gone)."""
        try:
            data = os.read(self.done_r, 1 << 16)
        except BlockingIOError:
            return True
        if not data:
            return False
        inbox = self.inbox
        inbox += data
        at = 0
        while len(inbox) - at >= _RECORD.size:
            k, n = _RECORD.unpack_from(inbox, at)
            if k == _LAST:
                if len(inbox) - at < _RECORD.size + n:
                    break  # the rest of its message has not arrived yet
                if n:
                    self.errors.append(inbox[at + _RECORD.size : at + _RECORD.size + n].decode("utf-8", "replace"))
                self.reporting -= 1
                at += _RECORD.size + n
                continue
            if n == _STORED_ELSEWHERE:
                self.redo.add(k)
            else:
                start = self.slots[k][0]
                with memoryview(self.shared)[start : start + n] as view:  # read in place, no copy
                    self.results[k] = marshal.loads(view)
            at += _RECORD.size
        del inbox[:at]
        return True

    def stop_children(self) -> None:
        """Take the groups no process has started, so the children stop after their current one."""
        while os.read(self.work_r, 1 << 16):
            pass

    def reap(self) -> None:
        """Wait for the children to exit. When all went well, a thread does: a child's exit
        unmaps its copy of this process's heap (~10 ms), which the caller need not wait for."""
        if not self.errors and not self.reporting and all(found is not None for found in self.results):
            pids, self.children = self.children, []
            _reap_later(pids)
            return
        for pid in list(self.children):
            status = _waitpid(pid)
            self.children.remove(pid)
            if status is not None and os.WIFSIGNALED(status) and not self.errors:
                number = os.WTERMSIG(status)
                try:
                    name = signal.Signals(number).name
                except ValueError:
                    name = f"signal {number}"
                self.errors.append(f"process {pid} was killed by {name}")

    def abort(self) -> None:
        """Leave no process or descriptor behind, whatever happened (children only remain here
        when this process failed: they are killed rather than waited for, then reaped)."""
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _waitpid(pid)
        self.children = []
        for fd in (self.work_r, self.done_r, self.done_w):
            if fd >= 0:
                os.close(fd)
        self.work_r = self.done_r = self.done_w = -1
        self.shared.close()


# -- reaping ------------------------------------------------------------------------------------
# A child's exit unmaps its copy of this process's heap (~10 ms on the benchmark corpora); when
# all went well nothing depends on its exit status, so a thread waits for it.

_reapers: list[threading.Thread] = []


def _reap_later(pids: list[int]) -> None:
    def wait() -> None:
        for pid in pids:
            _waitpid(pid)

    thread = threading.Thread(target=wait, name="bpetok-batch-reaper", daemon=True)
    thread.start()
    _reapers.append(thread)


def _waitpid(pid: int) -> int | None:
    """Reap a child: its wait status, or None when something else reaped it (a program that
    ignores SIGCHLD, or a SIGCHLD handler that waits for any child)."""
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return None


def wait_for_workers() -> None:
    """Return once the worker processes of earlier batches have exited and been reaped."""
    while _reapers:
        _reapers.pop().join()


atexit.register(wait_for_workers)
