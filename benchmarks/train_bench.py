"""Training speed and peak memory: bpetok's trainer against Hugging Face tokenizers' BpeTrainer.

Three runs: HF, bpetok with its Python merge loop (``bpetok-py``) and bpetok as installed (the C
merge loop of bpetok/_train.c when built). All learn a byte-level BPE vocabulary of the same size
from the same text with the same pre-tokenizer regex (Qwen2's) and min_frequency 2; HF runs
single-threaded (RAYON_NUM_THREADS=1). Compressed corpora are decompressed to a temporary
directory first (not timed), so all read plain text. Each run is a fresh subprocess; "cpu s" its
CPU time in training (steadier than wall time on a busy machine), "merge cpu" bpetok's CPU time in
the merge loop, its arrays built from the unique pieces included (the rest is reading and
counting pieces), peak memory its maximum RSS, and
"import RSS" the RSS after imports.

    python3 benchmarks/train_bench.py ../shared/corpus/en.txt.xz ../shared/corpus/code.txt.xz --sizes 4000 16000

With ``--domain FILE``, it measures pinning instead: the tokens FILE takes with a vocabulary
trained on the corpus with and without the pinned terms (``--pin-file``, default: PYTHON_TERMS,
a hand-written list of Python standard-library and identifier words), and, with ``--base``, with a
base GGUF vocabulary before and after ``extend`` with the same terms:

    python3 benchmarks/train_bench.py ../shared/corpus/en.txt.xz --sizes 4000 16000 \
        --domain ../shared/corpus/code.txt.xz --base ../shared/vocab/ggml-vocab-qwen3.gguf
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import resource
import subprocess
import sys
import tempfile
import time

QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


# Written by hand (not mined from the benchmark corpus): words a Python user would pin. Only
# letters, because the qwen2 pre-tokenizer splits at "_" and digits (see docs/training.md).
PYTHON_TERMS = """
isinstance issubclass asyncio dataclass dataclasses kwargs args namedtuple subprocess itertools
functools contextlib contextmanager staticmethod classmethod abstractmethod NotImplementedError
ValueError TypeError KeyError IndexError AttributeError RuntimeError OSError StopIteration
Exception setattr getattr hasattr delattr enumerate startswith endswith isdigit isspace isalpha
splitlines readline readlines writelines bytearray memoryview frozenset defaultdict OrderedDict
Counter deque heapq bisect threading multiprocessing tempfile pathlib typing Optional Callable
Iterable Iterator Generator Sequence Mapping collections argparse logging warnings traceback
unittest assertEqual assertRaises assertTrue assertFalse assertIn assertIsNone setUp tearDown
socket urllib pickle struct shutil encoding decode encode utf isoformat datetime timedelta
tzinfo fileno stdout stderr stdin sys os re json math random
""".split()


def read_text(path: str) -> str:
    with lzma.open(path, "rt", encoding="utf-8") if path.endswith(".xz") else open(path, encoding="utf-8") as f:
        return f.read()


def count_tokens(tok, text: str, pinned_pieces: dict[str, int]) -> tuple[int, int]:
    """Tokens of the whole text, and tokens of its pieces that are pinned forms (" isinstance")."""
    total = sum(len(tok.encode(block, parse_special=False)) for block in text.split("\n\n"))
    pinned = sum(c * len(tok.encode(piece, parse_special=False)) for piece, c in pinned_pieces.items())
    return total, pinned


def run_pins(args) -> None:
    from collections import Counter

    import bpetok
    from bpetok.plugins import get_registry
    from bpetok._extend import read_pin_file

    terms = read_pin_file(args.pin_file) if args.pin_file else PYTHON_TERMS
    text = read_text(args.domain)
    pieces = Counter(get_registry().get("gpt2", "qwen2").spec.factory().split(text))
    forms = {f for t in terms for f in (t, " " + t)}
    pinned_pieces = {p: c for p, c in pieces.items() if p in forms}
    print(f"{len(terms)} pinned terms, {sum(pinned_pieces.values()):,} occurrences (as whole pieces) in "
          f"{os.path.basename(args.domain)}; tokens of the whole file / of those occurrences (fewer is better)")

    def show(label, a, b, extra=""):
        print(f"{label:<22} {a[0]:>9,} -> {b[0]:>9,} ({100 * (b[0] - a[0]) / a[0]:+.1f}%)   "
              f"pinned terms {a[1]:>7,} -> {b[1]:>7,} ({100 * (b[1] - a[1]) / a[1]:+.1f}%){extra}")

    for size in args.sizes:
        plain = bpetok.train(args.corpus, vocab_size=size, progress=False)
        pinned = bpetok.train(args.corpus, vocab_size=size, pins=terms, progress=False)
        show(f"train {size}", count_tokens(plain.tokenizer(), text, pinned_pieces),
             count_tokens(pinned.tokenizer(), text, pinned_pieces), f"; pin chains took {pinned.n_pin_tokens} tokens")
    if args.base:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "extended.gguf")
            result = bpetok.extend(args.base, pins=terms, output=out)
            show(f"extend {os.path.basename(args.base).replace('ggml-vocab-', '')}",
                 count_tokens(bpetok.from_gguf(args.base), text, pinned_pieces),
                 count_tokens(bpetok.from_gguf(out), text, pinned_pieces),
                 f"; {len(result.added)} forms added, {len(result.already)} already single")


# bpetok-py: bpetok with its Python merge loop (bpetok/_train_merge.py), the C loop's twin.
TOOLS = ("hf", "bpetok-py", "bpetok")


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(tool: str, size: int, files: list[str]) -> dict:
    if tool.startswith("bpetok"):
        import importlib

        import bpetok

        module = importlib.import_module("bpetok.train")
        if tool == "bpetok-py":  # the Python merge loop (the C one's twin) instead of bpetok/_train.c
            from bpetok._train_merge import _PairCounts

            module._pair_counts = _PairCounts
        merge_seconds = [0.0]

        def timed(function):
            def run(*args):
                start = time.process_time()
                try:
                    return function(*args)
                finally:
                    merge_seconds[0] += time.process_time() - start
            return run

        # The merge loop's time: building its arrays from the unique pieces, then merging.
        module._pair_counts, module._learn = timed(module._pair_counts), timed(module._learn)
        base = rss_mb()
        start, cpu = time.perf_counter(), time.process_time()
        result = bpetok.train(files, vocab_size=size, pre="qwen2", min_frequency=2, progress=False)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        n = len(result.tokens)
        merge = merge_seconds[0]
    else:
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=size, min_frequency=2, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        base = rss_mb()
        start, cpu = time.perf_counter(), time.process_time()
        tok.train(files, trainer)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        n = tok.get_vocab_size()
        merge = float("nan")
    return {"tool": tool, "size": size, "seconds": seconds, "cpu": cpu, "merge": merge, "peak_mb": rss_mb(), "import_mb": base, "n_tokens": n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="+", help="text files (.xz decompressed first)")
    parser.add_argument("--sizes", nargs="+", type=int, default=[4000, 16000])
    parser.add_argument("--repeat", type=int, default=1, help="runs per tool and size; the fastest is reported")
    parser.add_argument("--domain", help="measure pinning: count tokens of this file instead of timing")
    parser.add_argument("--pin-file", help="terms to pin, one per line (default: the built-in Python list)")
    parser.add_argument("--base", help="with --domain: also extend this GGUF vocabulary")
    parser.add_argument("--one", choices=TOOLS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.domain:
        run_pins(args)
        return
    if args.one:
        print(json.dumps(run_one(args.one, args.sizes[0], args.corpus)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for path in args.corpus:
            if path.endswith(".xz"):
                plain = os.path.join(tmp, os.path.basename(path)[:-3])
                with lzma.open(path, "rb") as src, open(plain, "wb") as dst:
                    dst.write(src.read())
                path = plain
            files.append(path)
        mb = sum(os.path.getsize(f) for f in files) / 1e6
        print(f"corpus: {', '.join(os.path.basename(f) for f in files)} ({mb:.1f} MB of text)")
        print(f"{'size':>6}  {'tool':<9} {'seconds':>8} {'cpu s':>8} {'merge cpu':>9} {'peak MB':>8} {'import MB':>9} {'tokens':>7}")
        env = dict(os.environ, RAYON_NUM_THREADS="1")
        for size in args.sizes:
            rows = {}
            for tool in TOOLS:
                runs = []
                for _ in range(args.repeat):
                    out = subprocess.run([sys.executable, __file__, *files, "--one", tool, "--sizes", str(size)],
                                         env=env, check=True, capture_output=True, text=True).stdout
                    runs.append(json.loads(out.strip().splitlines()[-1]))
                row = rows[tool] = min(runs, key=lambda r: r["seconds"])
                print(f"{size:>6}  {tool:<9} {row['seconds']:>8.2f} {row['cpu']:>8.2f} {row['merge']:>9.2f} {row['peak_mb']:>8.0f} {row['import_mb']:>9.0f} {row['n_tokens']:>7}")
            ratio = rows["bpetok"]["seconds"] / rows["hf"]["seconds"]
            cpu_ratio = rows["bpetok"]["cpu"] / rows["hf"]["cpu"]
            print(f"{size:>6}  bpetok / hf: time {ratio:.2f}x, cpu {cpu_ratio:.2f}x")


if __name__ == "__main__":
    main()
