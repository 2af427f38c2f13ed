"""Time bpetok's GGUF reader on a vocabulary: the fast string path against its plain reference.

    python3 benchmarks/bench_gguf.py [PATH.gguf ...]   (default: the vocabularies in tests/data)

Prints the best CPU time of several runs of ``read_gguf`` (every key materialised, as ``gguf`` would),
of the vocabulary loader's read (``tokenizer.*`` keys only), and of the same with the plain
one-string-at-a-time loop. A ``.gguf.gz`` is decompressed to a temporary file first, so the
figure is for the memory-mapped plain file.
"""

from __future__ import annotations

import gzip
import pathlib
import shutil
import sys
import tempfile
import time

from bpetok import gguf
from bpetok.vocab import _wanted

DATA = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data"
RUNS = 7


def best_of(fn, runs: int = RUNS) -> float:
    """Best CPU time of ``runs`` calls: steadier than wall time on a shared machine."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def bench(path: pathlib.Path) -> None:
    n_tokens = len(gguf.read_gguf(path, want=_wanted).metadata["tokenizer.ggml.tokens"])
    fast_all = best_of(lambda: gguf.read_gguf(path))
    fast = best_of(lambda: gguf.read_gguf(path, want=_wanted))
    fast_method = gguf._Cursor.string_array
    gguf._Cursor.string_array = gguf._Cursor.string_array_plain
    try:
        plain = best_of(lambda: gguf.read_gguf(path, want=_wanted))
    finally:
        gguf._Cursor.string_array = fast_method
    print(
        f"{path.name}: {n_tokens} tokens; read_gguf all keys {fast_all * 1000:.1f} ms, "
        f"tokenizer keys {fast * 1000:.1f} ms, plain string loop {plain * 1000:.1f} ms "
        f"({plain / fast:.1f}x) [CPU time, best of {RUNS}]"
    )


def main(argv: list[str]) -> None:
    paths = [pathlib.Path(p) for p in argv] or sorted(DATA.glob("ggml-vocab-*.gguf.gz"))
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            if path.suffix == ".gz":
                plain_path = pathlib.Path(tmp) / path.stem
                with gzip.open(path, "rb") as src, open(plain_path, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                path = plain_path
            bench(path)


if __name__ == "__main__":
    main(sys.argv[1:])
