"""A run's output directory: created only for a run that gets going, written by one run at a time.

Two runs writing one directory at once interleave their shards and manifests (each renames its
files over the other's, and removes the other's temporary files as a dead run's), so a run holds
an exclusive ``flock`` on :data:`LOCK_FILE` inside the directory for its whole life. The kernel
releases it when the process ends, however it ends: the lock of a killed run is free, and the
next run resumes. The holder's pid is written in the file, for the error the next run gives.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator

from bpetok.errors import BpetokError

LOCK_FILE = ".encode-dataset.lock"


class DirectoryBusy(BpetokError):
    """Another run holds the output directory."""


@contextmanager
def holding(directory: str) -> Iterator[None]:
    """Hold ``directory`` for this run, or raise :class:`DirectoryBusy` at once, naming the pid
    of the run that holds it. The lock file is removed when the run ends (still locked, so that a
    run that opened it meanwhile sees it is gone, and tries again on a new one)."""
    import fcntl

    path = os.path.join(directory, LOCK_FILE)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise DirectoryBusy(
                f"{directory}: another encode-dataset run ({holder}) is writing to it; wait for it to end, "
                "or choose another output directory"
            ) from None
        except OSError as e:
            os.close(fd)
            raise BpetokError(f"{path}: cannot lock the output directory ({e.strerror or e}); choose one on a local disk") from e
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # locked a file the run that held it had removed: try again on the one there now
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        try:
            os.unlink(path)
        finally:
            os.close(fd)


def _holder(fd: int) -> str:
    """``pid N`` from the lock file; the holder writes it just after locking, so wait a little for it."""
    deadline = time.monotonic() + 2
    while True:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return f"pid {text}"
        if time.monotonic() > deadline:
            return "pid unknown"
        time.sleep(0.01)


@contextmanager
def claimed(directory: str) -> Iterator[None]:
    """The output directory, created if need be and held for the run (:func:`holding`); if the run
    fails before writing anything there, the directories it created are removed again."""
    created = make(directory)
    try:
        with holding(directory):
            yield
    except BaseException:
        remove_empty(created)
        raise


def make(directory: str) -> list[str]:
    """Create ``directory`` and its missing parents; those this created, deepest first."""
    created = []
    path = os.path.abspath(directory)
    while not os.path.lexists(path):
        created.append(path)
        path = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise BpetokError(f"{directory}: cannot create the output directory ({e.strerror or e})") from e
    return created


def remove_empty(created: list[str]) -> None:
    """Remove the directories :func:`make` created, as long as they are empty (nothing was written)."""
    for path in created:
        try:
            os.rmdir(path)
        except OSError:
            return
