"""Cold encodes of bpetok and quicktok-v1 alternated many times in one process (issue 33's ratio).

    python3 benchmarks/cold_vs_quicktok.py VOCAB.gguf CORPUS.txt.xz [CORPUS ...] [--rounds 8]

bench.py takes the median of three cold passes per engine; on a shared machine one slow pass
moves a ratio by 10-20%. Here each round makes a fresh bpetok tokenizer (``Tokenizer(vocab, spec)``,
not timed) and a fresh ``quicktok.Tokenizer("qwen3", "")``, collects the last round's garbage,
and times one ``encode`` of the whole corpus by each (CPU seconds, ``parse_special=False`` /
``encode_ordinary``), the two in turn. Prints the medians, the minima and the median of the
rounds' ratios, quicktok-v1 / bpetok (above 1: bpetok faster). ``VOCAB.gguf``: a qwen2-family
vocabulary (quicktok-v1 ships Qwen3's encoding only), e.g. tests/data/ggml-vocab-qwen3.gguf.gz.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time

import bpetok
from bench import read_corpus  # benchmarks/ is on the path: scripts run from it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("vocab")
    parser.add_argument("corpus", nargs="+")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    import quicktok

    vocab = bpetok.load_vocabulary(args.vocab)
    spec = bpetok.from_gguf(args.vocab).spec
    for path in args.corpus:
        text = read_corpus(path)
        ours, theirs = [], []
        for _ in range(args.rounds):
            tok = bpetok.Tokenizer(vocab, spec)
            ids = None  # the last round's list freed here, not in a timing
            gc.collect()
            start = time.process_time()
            ids = tok.encode(text, parse_special=False)
            ours.append(time.process_time() - start)
            encode = quicktok.Tokenizer("qwen3", "").encode_ordinary
            ids = None
            gc.collect()
            start = time.process_time()
            ids = encode(text)
            theirs.append(time.process_time() - start)
        del ids
        ratio = statistics.median(q / b for b, q in zip(ours, theirs))
        print(f"{os.path.basename(path):<16} bpetok {statistics.median(ours) * 1e3:6.1f} ms (min {min(ours) * 1e3:6.1f})"
              f"  quicktok-v1 {statistics.median(theirs) * 1e3:6.1f} ms (min {min(theirs) * 1e3:6.1f})"
              f"  ratio {ratio:.2f}x", flush=True)


if __name__ == "__main__":
    main()
