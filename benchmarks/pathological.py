"""CPU seconds of one encode of each 1 MB pathological input (bench.py's), in this process.

    python3 benchmarks/pathological.py VOCAB.gguf [--engines bpetok,tiktoken,quicktok]

bench.py times these in subprocesses against a wall-clock timeout, vocabulary load included;
on a busy machine that measures the machine. This measures each engine's own work.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("vocab")
    ap.add_argument("--engines", default="bpetok,tiktoken,quicktok")
    args = ap.parse_args()
    inputs = bench.pathological_inputs()
    for engine in args.engines.split(","):
        maker = bench.ENGINES[engine](args.vocab)
        for name, text in inputs.items():
            if engine == "tiktoken" and name == "spaces":
                print(f"{engine:10} {name:15} skipped (tiktoken panics: stack overflow)")
                continue
            encode = maker()
            start = time.process_time()
            encode(text)
            print(f"{engine:10} {name:15} {time.process_time() - start:.3f} s", flush=True)


if __name__ == "__main__":
    main()
