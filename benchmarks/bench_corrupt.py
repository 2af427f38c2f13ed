"""Time bpetok.from_gguf on each corrupted SmolLM2 variant of tests/test_corrupt.py.

    python3 benchmarks/bench_corrupt.py

Prints, per outcome (loaded, or the error class), how many variants and their median, 95th
percentile and slowest wall time: issue 2 asks for "well under a second each".
"""

from __future__ import annotations

import gzip
import pathlib
import statistics
import sys
import tempfile
import time
from collections import defaultdict

TESTS = pathlib.Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

import bpetok  # noqa: E402
from helpers import SMOLLM2  # noqa: E402
from test_corrupt import variants  # noqa: E402


def main() -> None:
    with gzip.open(SMOLLM2, "rb") as f:
        clean = f.read()
    times: dict[str, list[tuple[float, str]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "corrupt.gguf"
        for name, data in variants(clean):
            if data == clean:
                continue
            path.write_bytes(data)
            start = time.perf_counter()
            try:
                bpetok.from_gguf(path)
                outcome = "loaded"
            except ValueError as e:
                outcome = type(e).__name__
            times[outcome].append((time.perf_counter() - start, name))
    total = sum(len(v) for v in times.values())
    print(f"{total} variants of {SMOLLM2.name}, wall time of from_gguf each:")
    for outcome, rows in sorted(times.items(), key=lambda kv: -len(kv[1])):
        secs = sorted(t for t, _ in rows)
        p95 = secs[min(len(secs) - 1, int(0.95 * len(secs)))]
        slowest = max(rows)
        print(
            f"  {outcome:28} {len(rows):4}  median {statistics.median(secs) * 1000:6.1f} ms  "
            f"p95 {p95 * 1000:6.1f} ms  max {slowest[0] * 1000:6.1f} ms ({slowest[1]})"
        )


if __name__ == "__main__":
    main()
