"""bpetok's speed as a multiple of llama.cpp's, per vocabulary, with the ids compared.

    python3 benchmarks/llama_cpp_ratio.py CORPUS.txt.xz VOCAB.gguf [VOCAB.gguf ...] [--limit-mb 0.25] [--repeat 3]

For each vocabulary (any ``tokenizer.ggml.model`` both know): the corpus cut to ``--limit-mb`` MB
of whole paragraphs (``models_bench.read_paragraphs``), each encoded with ``parse_special=False`` by a fresh bpetok tokenizer (cold:
load not counted) and by llama-cpp-python's ``Llama(path, vocab_only=True).tokenize(...,
add_bos=False, special=False)``, the two in turn ``--repeat`` times (a fresh bpetok tokenizer each
time; the last pass's garbage collected before each timing); CPU seconds, the median MB/s of UTF-8
and the median of the repeats' ratios, and how many paragraphs give different ids (llama.cpp is
the reference: this should print 0). Needs the ``llama`` extra.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import shutil
import statistics
import tempfile
import time

import bpetok
from models_bench import read_paragraphs  # benchmarks/ is on the path: scripts run from it


def plain_gguf(path: str, scratch: str) -> str:
    """llama.cpp reads plain GGUF files only: a ``.gguf.gz`` is inflated into ``scratch``."""
    if not path.endswith(".gz"):
        return path
    out = os.path.join(scratch, os.path.basename(path)[:-3])
    with gzip.open(path, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus")
    parser.add_argument("vocab", nargs="+")
    parser.add_argument("--limit-mb", type=float, default=0.25)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each, in turn (medians)")
    args = parser.parse_args()
    from llama_cpp import Llama

    texts = read_paragraphs(args.corpus, int(args.limit_mb * 1e6))
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"{len(texts)} paragraphs, {mb:.2f} MB of {os.path.basename(args.corpus)}")
    print(f"{'vocabulary':<36} {'model':<10} {'bpetok MB/s':>11} {'llama.cpp MB/s':>14} {'ratio':>7} {'differ':>6}")
    with tempfile.TemporaryDirectory() as scratch:
        for path in args.vocab:
            plain = plain_gguf(path, scratch)
            llama = Llama(plain, vocab_only=True, verbose=False)
            ours_s, theirs_s = [], []
            for _ in range(max(1, args.repeat)):
                ours = theirs = []  # the last pass's ids freed here, not in a timing
                tok = bpetok.from_file(plain)
                gc.collect()  # the last tokenizer's garbage is not this pass's time
                start = time.process_time()
                ours = [tok.encode(t, parse_special=False) for t in texts]
                ours_s.append(time.process_time() - start)
                gc.collect()
                start = time.process_time()
                theirs = [llama.tokenize(t.encode(), add_bos=False, special=False) for t in texts]
                theirs_s.append(time.process_time() - start)
            differ = sum(a != b for a, b in zip(ours, theirs))
            ratio = statistics.median(t / o for o, t in zip(ours_s, theirs_s))
            print(f"{os.path.basename(path):<36} {tok.vocabulary.model:<10} {mb / statistics.median(ours_s):>11.2f} "
                  f"{mb / statistics.median(theirs_s):>14.2f} {ratio:>6.1f}x {differ:>6}")


if __name__ == "__main__":
    main()
