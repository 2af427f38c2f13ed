"""Encode speed on text made of special tokens against ordinary prose (issue 11, fault 1).

    python3 benchmarks/specials_bench.py VOCAB.gguf PROSE.txt[.xz] [--mb 1 4] [--repeat 3]

For each size: MB/s (UTF-8 bytes, CPU time of this process: time.process_time) of ``encode`` and
``count`` on ``"<|im_end|>" * n`` (parse_special=True), ``"<think>" * n`` (a USER_DEFINED token,
parse_special=False) and ``"Hi<|im_end|> "`` repeated, against the prose file cut to the same size,
each on a fresh tokenizer (cold) and then again (warm). Linear work shows as MB/s that do not fall
with size; before the fix, repeated specials lost half their speed per doubling.
"""

from __future__ import annotations

import argparse
import lzma
import statistics
import time

import bpetok


def read(path: str) -> str:
    if path.endswith(".xz"):
        with lzma.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def fit(text: str, size: int) -> str:
    """``text`` repeated and cut to ``size`` UTF-8 bytes (about)."""
    unit = len(text.encode("utf-8"))
    return (text * (size // unit + 1))[: size * len(text) // unit]


def mbps(vocab: str, method: str, text: str, parse_special: bool, repeat: int) -> tuple[float, float]:
    size = len(text.encode("utf-8")) / 1e6
    cold, warm = [], []
    for _ in range(repeat):
        tok = bpetok.from_gguf(vocab)
        call = getattr(tok, method)
        for times in (cold, warm):
            start = time.process_time()
            call(text, parse_special=parse_special)
            times.append(time.process_time() - start)
    return size / statistics.median(cold), size / statistics.median(warm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vocab")
    parser.add_argument("prose")
    parser.add_argument("--mb", type=float, nargs="+", default=[1, 4])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    prose = read(args.prose)
    cases = [
        ("prose", None, True),
        ("<|im_end|> * n", "<|im_end|>", True),
        ("<think> * n, parse_special=False", "<think>", False),
        ("'Hi<|im_end|> ' * n", "Hi<|im_end|> ", True),
    ]
    print("MB/s, cold / warm (median of", args.repeat, "runs, CPU time; a shared machine: noisy)")
    print(f"| input | method | {' | '.join(f'{mb:g} MB' for mb in args.mb)} |")
    print("|---|---|" + "---|" * len(args.mb))
    for label, unit, parse_special in cases:
        for method in ("encode", "count"):
            cells = []
            for mb in args.mb:
                size = int(mb * 1e6)
                text = fit(prose, size) if unit is None else unit * (size // len(unit.encode()))
                cold, warm = mbps(args.vocab, method, text, parse_special, args.repeat)
                cells.append(f"{cold:.1f} / {warm:.1f}")
            print(f"| {label} | {method} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
