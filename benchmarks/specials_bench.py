"""Encode speed with special tokens: repeated specials (issue 11) and many specials (issue 30).

    python3 benchmarks/specials_bench.py repeated VOCAB.gguf PROSE.txt[.xz] [--mb 1 4] [--repeat 3]
    python3 benchmarks/specials_bench.py many PROSE.txt[.xz] [--mb 4] [--reference]

``repeated``: MB/s (UTF-8 bytes, CPU time of this process: time.process_time) of ``encode`` and
``count`` on ``"<|im_end|>" * n`` (parse_special=True), ``"<think>" * n`` (a USER_DEFINED token,
parse_special=False) and ``"Hi<|im_end|> "`` repeated, against the prose file cut to the same size,
each on a fresh tokenizer (cold) and then again (warm). Linear work shows as MB/s that do not fall
with size.

``many``: vocabularies with many special tokens, built in a temporary directory from the test
vocabularies (Qwen3 with 50,000 USER_DEFINED ``<extra_N>`` added; Qwen3 with user-defined runs
of 2..31 spaces, as Gemma 3 has; Qwen3 with ``<q..q>`` of 200 lengths and 26 one-character CJK
specials) or taken as they are (command-r: 1,008 specials; deepseek-llm: 2,400, single letters
among them). For each: the partition's CPU time on the prose cut to ``--mb`` MB, with and without
one special token in the middle, and warm ``encode`` times; the time per special token of a text
of 400,000 of them; adversarial texts (1 MB of spaces against the space runs, 1 MB of
single-letter specials, millions of one-character matches among matches of 200 lengths), with the
partition's peak memory (the pieces list included). ``--reference`` times the per-special
reference partition too (what the pure-Python engine runs: minutes for 50,000 specials).
"""

from __future__ import annotations

import argparse
import lzma
import pathlib
import random
import statistics
import sys
import tempfile
import time
import tracemalloc

import numpy as np

import bpetok
from bpetok.vocab.gguf import read_gguf
from bpetok.vocab.gguf_writer import items_of, write_gguf

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
QWEN3 = DATA / "ggml-vocab-qwen3.gguf.gz"
USER_DEFINED = 4
CJK = [chr(0x4E00 + i) for i in range(26)]  # real CJK characters: no byte-level token is spelled so


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


# -- repeated ---------------------------------------------------------------------------------------


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


def repeated(args: argparse.Namespace) -> None:
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


# -- many -------------------------------------------------------------------------------------------


def with_added_specials(base: pathlib.Path, texts: list[str], out: pathlib.Path) -> pathlib.Path:
    """``base`` with ``texts`` appended as USER_DEFINED tokens."""
    gguf = read_gguf(base)
    items = []
    for key, vtype, value, elem in items_of(gguf):
        if key == "tokenizer.ggml.tokens":
            value = list(value) + texts
        elif key == "tokenizer.ggml.token_type":
            value = np.concatenate([np.asarray(value), np.full(len(texts), USER_DEFINED, dtype=np.asarray(value).dtype)])
        items.append((key, vtype, value, elem))
    write_gguf(out, items)
    return out


def cpu(call, *args) -> float:
    start = time.process_time()
    call(*args)
    return time.process_time() - start


def best(call, *args, repeat: int = 3) -> float:
    return min(cpu(call, *args) for _ in range(repeat))


def many(args: argparse.Namespace) -> None:
    prose = fit(read(args.prose), int(args.mb * 1e6))
    with tempfile.TemporaryDirectory() as tmp:
        vocabularies = {
            "Qwen3 + 50,000 USER_DEFINED": with_added_specials(
                QWEN3, [f"<extra_{i}>" for i in range(50_000)], pathlib.Path(tmp) / "many.gguf"
            ),
            "command-r (1,008)": DATA / "llama.cpp-tests" / "ggml-vocab-command-r.gguf.gz",
            "deepseek-llm (2,400)": DATA / "llama.cpp-tests" / "ggml-vocab-deepseek-llm.gguf.gz",
            "Qwen3 (26)": QWEN3,
            "Qwen3 + runs of 2..31 spaces": with_added_specials(
                QWEN3, [" " * n for n in range(2, 32)], pathlib.Path(tmp) / "spaces.gguf"
            ),
            "Qwen3 + 200 lengths + 26 CJK characters": with_added_specials(
                QWEN3, [f"<{'q' * k}>" for k in range(1, 201)] + CJK, pathlib.Path(tmp) / "lengths.gguf"
            ),
        }
        print(f"CPU seconds (best of 3; a shared 2-core machine). Engine: {'C' if not args.reference else 'C, then reference'}")
        print("| vocabulary | specials | partition, prose | + 1 special | encode, prose (warm) | + 1 special (warm) |"
              + (" reference partition + 1 special |" if args.reference else ""))
        print("|---|---|---|---|---|---|" + ("---|" if args.reference else ""))
        tokenizers = {}
        for label, path in list(vocabularies.items())[:-1]:
            tok = tokenizers[label] = bpetok.from_gguf(path)
            table = tok._special_table
            special = tok._special_table.specials[len(tok._special_table.specials) // 2][1]
            middle = len(prose) // 2
            marked = prose[:middle] + special + prose[middle:]
            table.partition(marked, True)  # builds the automaton
            cells = [best(table.partition, prose, True), best(table.partition, marked, True)]
            tok.encode(prose)
            cells += [best(tok.encode, prose), best(tok.encode, marked)]
            if args.reference:
                cells.append(cpu(table.partition_reference, marked, True))
            row = " | ".join(f"{c:.3f}" for c in cells)
            print(f"| {label} | {len(tok._special_table.specials):,} | {row} |", flush=True)

        print()
        print("| vocabulary | text | partition s | us per special | encode s | us per special |")
        print("|---|---|---|---|---|---|")
        rng = random.Random(0)
        for label in ("deepseek-llm (2,400)", "command-r (1,008)", "Qwen3 (26)"):
            tok = tokenizers[label]
            texts = [t for _, t in tok._special_table.specials]
            text = "".join(rng.choices(texts, k=400_000))
            n = len(tok._special_table.partition(text, True))
            part, enc = best(tok._special_table.partition, text, True), best(tok.encode, text)
            print(f"| {label} | 400,000 random specials ({n:,} pieces) | {part:.3f} | {part / 4e5 * 1e6:.2f} "
                  f"| {enc:.3f} | {enc / 4e5 * 1e6:.2f} |", flush=True)

        print()
        print("| vocabulary | adversarial text | partition s | pieces | peak MB (tracemalloc) |")
        print("|---|---|---|---|---|")
        spaces = tokenizers["Qwen3 + runs of 2..31 spaces"]
        letters = [t for _, t in tokenizers["deepseek-llm (2,400)"]._special_table.specials if len(t) == 1]
        cases = [
            (spaces, "Qwen3 + runs of 2..31 spaces", "1 MB of spaces", " " * 1_000_000),
            (spaces, "Qwen3 + runs of 2..31 spaces", "1 MB of 'a' + 2..40 spaces", "".join("a" + " " * rng.randrange(2, 41) for _ in range(45_000))),
            (tokenizers["deepseek-llm (2,400)"], "deepseek-llm (2,400)", f"1 MB of its {len(letters)} single-letter specials", "".join(rng.choices(letters, k=500_000))),
        ]
        lengths = "Qwen3 + 200 lengths + 26 CJK characters"
        tokenizers[lengths] = bpetok.from_gguf(vocabularies[lengths])
        mixed = "".join("".join(rng.choices(CJK, k=200)) + f"<{'q' * rng.randrange(1, 201)}>" for _ in range(20_000))
        cases.append((tokenizers[lengths], lengths, "4M CJK specials among 20,000 of 200 lengths", mixed))
        for tok, label, what, text in cases:
            seconds = best(tok._special_table.partition, text, True)
            tracemalloc.start()
            pieces = len(tok._special_table.partition(text, True))
            peak = tracemalloc.get_traced_memory()[1] / 1e6
            tracemalloc.stop()
            print(f"| {label} | {what} | {seconds:.3f} | {pieces:,} | {peak:.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("repeated", help="repeated specials against prose (issue 11)")
    rep.add_argument("vocab")
    rep.add_argument("prose")
    rep.add_argument("--mb", type=float, nargs="+", default=[1, 4])
    rep.add_argument("--repeat", type=int, default=3)
    man = sub.add_parser("many", help="vocabularies with many specials (issue 30)")
    man.add_argument("prose")
    man.add_argument("--mb", type=float, default=4)
    man.add_argument("--reference", action="store_true", help="also time the per-special reference partition")
    args = parser.parse_args()
    if args.command == "repeated":
        repeated(args)
    else:
        many(args)


if __name__ == "__main__":
    sys.exit(main())
