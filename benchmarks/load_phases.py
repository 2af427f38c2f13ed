"""Where a fresh process's load time goes: CPU seconds of each phase of ``bpetok.from_gguf``.

    python3 benchmarks/load_phases.py VOCAB.gguf [--runs 5]

Each run is a new interpreter (so imports and the plugin scan are really paid); the phases are
timed with ``time.process_time`` inside it: importing bpetok, building the plugin manager and
its registries (entry-point scan included), reading the GGUF vocabulary, building the
tokenizer (model tables, kernel, specials), and the first encode. Medians over the runs.

As in ``bench.py``'s load measurement, the runs use bytecode caching (``PYTHONDONTWRITEBYTECODE``
is dropped, and one untimed run writes the .pyc files), as an installed package does: pip compiles
them at install, and with the variable set every run would compile bpetok's sources (~0.08 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from bench import bytecode_cached_env

CHILD = r"""
import json, sys, time
clock = time.process_time
t0 = clock()
import bpetok
t1 = clock()
from bpetok.plugins import get_model_registry, get_plugin_manager, get_registry
pm = get_plugin_manager(); get_model_registry(pm); get_registry(pm)
t2 = clock()
from bpetok.tokenizer import load_vocabulary
vocab = load_vocabulary(sys.argv[1])
t3 = clock()
tok = bpetok.Tokenizer(vocab)
t4 = clock()
tok.encode("Hello world")
t5 = clock()
print(json.dumps({"import": t1 - t0, "plugins": t2 - t1, "vocabulary": t3 - t2, "tokenizer": t4 - t3, "encode": t5 - t4}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vocab")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = []
    env = bytecode_cached_env()
    subprocess.run([sys.executable, "-c", CHILD, args.vocab], capture_output=True, env=env, check=True)
    for _ in range(args.runs):
        done = subprocess.run([sys.executable, "-c", CHILD, args.vocab], capture_output=True, text=True, env=env, check=True)
        runs.append(json.loads(done.stdout))
    for phase in runs[0]:
        print(f"{phase:>10}: {statistics.median(r[phase] for r in runs):.3f} s CPU")
    print(f"{'total':>10}: {statistics.median(sum(r.values()) for r in runs):.3f} s CPU (after interpreter start-up)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
