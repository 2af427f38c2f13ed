"""Training time on inputs where one piece or one pin is very long (the trainer must stay near linear).

Each case is a fresh subprocess, stopped after ``--timeout`` seconds; the figure is the wall time
and CPU time of ``bpetok.train`` alone (imports excluded; CPU time is the steadier figure on a
busy machine), and "token MB" the total length of the token texts. The bpetok imported is the first on PYTHONPATH, so
pointing it at another tree measures that tree's trainer:

    python3 benchmarks/train_pathological.py
    python3 benchmarks/train_pathological.py --case letter-1MiB pin-8k --timeout 60

A pin's merge chain makes one token per step, and once no pair of the form is in the corpus the
rule (most frequent pair, leftmost on ties) grows one token from the left: the chain's token texts
have lengths up to the pin's, so their total (and the file) grows with the square of the pin's
length whatever the trainer does: "token MB" shows it. A pin of one repeated letter needs only
about log2(n) merges.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time

PROSE = "the quick brown fox jumps over the lazy dog; a tokenizer learns merges from text\n" * 200


def letters(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))


def case_args(name: str) -> dict:
    """The keyword arguments of ``bpetok.train`` for one case."""
    if name == "letter-1MiB":  # one piece of 1,048,576 times "a": a few merges, each with ~n occurrences
        return {"texts": ["a" * (1 << 20)], "vocab_size": 1000}
    if name == "piece-512k":  # one piece of 524,288 random letters: hundreds of merges inside one piece
        return {"texts": [letters(1 << 19)], "vocab_size": 1000}
    if name.startswith("pin-"):  # one pin over a small prose corpus: N thousand random letters, or "a"s
        size, _, kind = name[4:].partition("-")
        n = int(size[:-1]) * 1000
        return {"texts": [PROSE], "pins": ["a" * n if kind == "a" else letters(n)], "vocab_size": 256 + 2 * n + 256}
    raise SystemExit(f"unknown case {name!r}; cases: {', '.join(CASES)}")


CASES = ["letter-1MiB", "piece-512k", "pin-8k", "pin-20k", "pin-50k-a"]
# Not run by default: a pin of 50,000 random letters builds ~2.4 GB of token texts (see below).
MORE = ["pin-50k"]


def run_one(name: str) -> dict:
    import bpetok

    kwargs = case_args(name)
    start, cpu = time.perf_counter(), time.process_time()
    result = bpetok.train(progress=False, min_frequency=2, **kwargs)
    return {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu, "tokens": len(result.tokens),
            "merges": len(result.merges), "text_mb": sum(map(len, result.tokens)) / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", nargs="+", choices=CASES + MORE, default=CASES)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case is stopped (default 60)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one)))
        return
    print(f"{'case':<12} {'seconds':>8} {'cpu s':>8} {'tokens':>7} {'merges':>7} {'token MB':>8}")
    for name in args.case:
        try:
            out = subprocess.run([sys.executable, __file__, "--one", name], check=True, capture_output=True,
                                 text=True, timeout=args.timeout).stdout
        except subprocess.TimeoutExpired:
            print(f"{name:<12} {'>' + format(args.timeout, '.0f'):>8}")
            continue
        except subprocess.CalledProcessError as failed:  # refused (a pin past MAX_TEXT_BYTES): say why
            lines = failed.stderr.strip().splitlines()
            print(f"{name:<12} refused: {lines[-1] if lines else 'exit ' + str(failed.returncode)}")
            continue
        row = json.loads(out.strip().splitlines()[-1])
        print(f"{name:<12} {row['seconds']:>8.2f} {row['cpu']:>8.2f} {row['tokens']:>7} {row['merges']:>7} "
              f"{row['text_mb']:>8.1f}")


if __name__ == "__main__":
    main()
