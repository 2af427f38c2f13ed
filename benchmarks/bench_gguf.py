"""Time bpetok's GGUF reader on a vocabulary: the fast string path against its plain reference.

    python3 benchmarks/bench_gguf.py [--against GIT_REV] [PATH.gguf ...]
        (default paths: the vocabularies in tests/data)

Prints the best CPU time of several runs of ``read_gguf`` (every key materialised, as ``gguf`` would),
of the vocabulary loader's read (``tokenizer.*`` keys only), and of the same with the plain
one-string-at-a-time loop; with ``--against``, also of the reader as it was at that commit
(``--against a8d58f3``: before the fast string path). A ``.gguf.gz`` is decompressed to a temporary file first, so the
figure is for the memory-mapped plain file.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from bpetok.vocab import gguf
from bpetok.vocab.vocabulary import _wanted

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


def reader_at(rev: str):
    """bpetok/vocab/gguf.py as it was at git revision ``rev``, imported as a separate module."""
    root = pathlib.Path(__file__).resolve().parent.parent
    source = subprocess.run(
        ["git", "show", f"{rev}:bpetok/vocab/gguf.py"], cwd=root, check=True, capture_output=True, text=True
    ).stdout
    spec = importlib.util.spec_from_loader(f"gguf_at_{rev}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:bpetok/vocab/gguf.py", "exec"), module.__dict__)
    return module


def bench(path: pathlib.Path, against=None, rev: str = "") -> None:
    n_tokens = len(gguf.read_gguf(path, want=_wanted).metadata["tokenizer.ggml.tokens"])
    fast_all = best_of(lambda: gguf.read_gguf(path))
    fast = best_of(lambda: gguf.read_gguf(path, want=_wanted))
    fast_method = gguf._Cursor.string_array
    gguf._Cursor.string_array = gguf._Cursor.string_array_plain
    try:
        plain = best_of(lambda: gguf.read_gguf(path, want=_wanted))
    finally:
        gguf._Cursor.string_array = fast_method
    line = (
        f"{path.name}: {n_tokens} tokens; read_gguf all keys {fast_all * 1000:.1f} ms, "
        f"tokenizer keys {fast * 1000:.1f} ms, plain string loop {plain * 1000:.1f} ms ({plain / fast:.1f}x)"
    )
    if against is not None:
        old = best_of(lambda: against.read_gguf(path, want=_wanted))
        line += f", reader at {rev} {old * 1000:.1f} ms ({old / fast:.1f}x)"
    print(line + f" [CPU time, best of {RUNS}]")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="GIT_REV", help="also time bpetok/vocab/gguf.py as of this commit")
    parser.add_argument("paths", nargs="*", type=pathlib.Path)
    args = parser.parse_args(argv)
    against = reader_at(args.against) if args.against else None
    paths = args.paths or sorted(DATA.glob("ggml-vocab-*.gguf.gz"))
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            if path.suffix == ".gz":
                plain_path = pathlib.Path(tmp) / path.stem
                with gzip.open(path, "rb") as src, open(plain_path, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                path = plain_path
            bench(path, against, args.against or "")


if __name__ == "__main__":
    main(sys.argv[1:])
