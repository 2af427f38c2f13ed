"""What copy-on-write costs a forked encode_batch worker.

    python3 benchmarks/batch_cow.py ../shared/vocab/ggml-vocab-qwen3.gguf ../shared/corpus/{en,code,multi}.txt.xz

A tokenizer is warmed on the corpora's paragraphs (as bench.py's *warm* encode_batch), then
every other paragraph is encoded twice in this process and twice in a forked child, as a
worker does (``Tokenizer._encode_many``). For each pass it prints the CPU seconds and the
minor page faults: the child's first pass pays for the pages it shares with this process and
writes to (reference counts of the cached chunks and ids, and new objects in the shared heap's
free blocks); its second pass shows the same work without them.
"""

from __future__ import annotations

import argparse
import gc
import lzma
import os
import resource
import time

import bpetok


def read_paragraphs(path: str) -> list[str]:
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rb") as f:
        return f.read().decode("utf-8").split("\n\n")


def timed_pass(label: str, tok, texts: list[str]) -> None:
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.process_time()
    tok._encode_many(texts, True)
    seconds = time.process_time() - start
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(f"{label:<22} {seconds:6.3f} s CPU {faults:8d} minor faults", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gguf")
    parser.add_argument("corpora", nargs="+")
    args = parser.parse_args(argv)
    tok = bpetok.from_gguf(args.gguf)
    texts = [p for path in args.corpora for p in read_paragraphs(path)]
    tok.encode_batch(texts, workers=1)  # warm: every chunk cached
    half = texts[::2]
    timed_pass("this process, pass 1", tok, half)
    timed_pass("this process, pass 2", tok, half)
    gc.freeze()  # as bpetok/batch.py does before it forks
    pid = os.fork()
    if pid == 0:
        try:
            timed_pass("forked child, pass 1", tok, half)
            timed_pass("forked child, pass 2", tok, half)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
