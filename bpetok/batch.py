"""encode_batch's worker processes.

Forked children inherit the tokenizer and the texts; every process (this one too) takes the
next group of texts from a shared counter, so no thread has to feed a queue (it would wait for
the GIL while this process encodes). Each child sends its groups' ids back in one message.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
from array import array
from itertools import chain
from typing import TYPE_CHECKING

from bpetok.errors import BpetokError

if TYPE_CHECKING:
    from bpetok.tokenizer import Tokenizer


def encode_batch_forked(tok: Tokenizer, texts: list[str], parse_special: bool, workers: int) -> list[list[int]]:
    # Contiguous groups of about equal size, many per worker: the work per character varies
    # fourfold between English and CJK text, and a process that finishes early takes more.
    target = sum(map(len, texts)) / (workers * 16) + 1
    groups, start, size = [], 0, 0
    for i, t in enumerate(texts):
        size += len(t)
        if size >= target:
            groups.append((start, i + 1))
            start, size = i + 1, 0
    if start < len(texts):
        groups.append((start, len(texts)))
    counter = multiprocessing.get_context("fork").Value("i", 0)

    def next_group() -> int:
        with counter.get_lock():
            k = counter.value
            counter.value = k + 1
        return k

    # Frozen objects are never scanned by the collector, so a child does not touch (and so
    # copy) every page of this process's heap when it collects.
    gc.freeze()
    children = []
    try:
        for _ in range(workers - 1):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: encode groups until none is left, send them, exit
                os.close(read_end)
                status = 0
                try:
                    done = []
                    while (k := next_group()) < len(groups):
                        encoded = tok._encode_many(texts[slice(*groups[k])], parse_special)
                        done.append((k, array("l", chain.from_iterable(encoded)).tobytes(), [len(x) for x in encoded]))
                    message = pickle.dumps(("ok", done), protocol=pickle.HIGHEST_PROTOCOL)
                except BaseException as e:  # reported by the parent
                    message = pickle.dumps(("error", f"{type(e).__name__}: {e}"))
                    status = 1
                try:
                    with os.fdopen(write_end, "wb") as pipe:
                        pipe.write(message)
                finally:
                    os._exit(status)
            os.close(write_end)
            children.append((pid, read_end))
        results: dict[int, list[list[int]]] = {}
        while (k := next_group()) < len(groups):
            results[k] = tok._encode_many(texts[slice(*groups[k])], parse_special)
        errors = []
        for pid, read_end in children:
            with os.fdopen(read_end, "rb") as pipe:
                kind, payload = pickle.loads(pipe.read())
            os.waitpid(pid, 0)
            if kind != "ok":
                errors.append(payload)
                continue
            for k, data, lengths in payload:
                flat = array("l")
                flat.frombytes(data)
                ids, at, group = flat.tolist(), 0, []
                for length in lengths:
                    group.append(ids[at : at + length])
                    at += length
                results[k] = group
        children = []
    finally:
        gc.unfreeze()
        for pid, read_end in children:  # only after an error in this process
            os.close(read_end)
            os.waitpid(pid, 0)
    if errors:
        raise BpetokError(f"encode_batch: a worker process failed: {errors[0]}")
    return [ids for k in range(len(groups)) for ids in results[k]]
