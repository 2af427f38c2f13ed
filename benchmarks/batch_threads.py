"""encode_batch and encode_batch_to_numpy on 2 threads against 1, fresh and warm, in pairs.

    python benchmarks/batch_threads.py VOCAB.gguf CORPUS.txt.xz ... [--pairs 5] [--repeat 3]

The texts are the corpora's paragraphs (as bench.py's encode_batch figure). Each pair times one
thread, then two, back to back (each the best of ``--repeat`` calls, the result dropped outside
the timing); the table gives each pair's ratio and their median, and the best times' ratio.
*fresh*: a new tokenizer for every call; *warm*: one tokenizer that has encoded the texts. The
time the cycle collector spent inside the warm calls (``gc.callbacks``) is printed too: a batch's
result lists are millions of objects.
"""

from __future__ import annotations

import argparse
import gc
import lzma
import statistics
import time

import bpetok


def read(path: str) -> str:
    with (lzma.open if path.endswith(".xz") else open)(path, "rt", encoding="utf-8") as f:
        return f.read()


def best(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
        del result
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vocab")
    parser.add_argument("corpora", nargs="+")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    texts = [p for path in args.corpora for p in read(path).split("\n\n") if p]
    size = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    vocab = bpetok.load_vocabulary(args.vocab)
    spec = bpetok.from_gguf(args.vocab).spec
    warm = bpetok.Tokenizer(vocab, spec)
    warm.encode_batch(texts, parse_special=False, workers=1)
    print(f"{len(texts)} texts, {size:.1f} MB, engine: {warm.engine}")

    collecting: list[float] = []
    gc.callbacks.append(lambda phase, info: collecting.append(time.perf_counter() * (1 if phase == "stop" else -1)))
    collecting.clear()
    warm.encode_batch(texts, parse_special=False, workers=1)
    print(f"cycle collector inside one warm encode_batch call: {sum(collecting) * 1000:.1f} ms")
    gc.callbacks.pop()

    print("| method | kind | 1 thread ms (best) | 2 threads ms (best) | pair ratios | median | best / best |")
    print("|---|---|---:|---:|---|---:|---:|")
    for method in ("encode_batch", "encode_batch_to_numpy"):
        for kind in ("fresh", "warm"):
            def call(workers: int):
                tok = bpetok.Tokenizer(vocab, spec) if kind == "fresh" else warm
                return lambda: getattr(tok, method)(texts, parse_special=False, workers=workers)

            ones, twos = [], []
            for _ in range(args.pairs):
                if kind == "fresh":  # a new tokenizer per call: build it outside the timing
                    ones.append(min(best(call(1), 1) for _ in range(args.repeat)))
                    twos.append(min(best(call(2), 1) for _ in range(args.repeat)))
                else:
                    ones.append(best(call(1), args.repeat))
                    twos.append(best(call(2), args.repeat))
            ratios = [a / b for a, b in zip(ones, twos)]
            print(f"| {method} | {kind} | {min(ones) * 1000:.1f} | {min(twos) * 1000:.1f} | "
                  f"{', '.join(f'{r:.2f}' for r in ratios)} | {statistics.median(ratios):.2f} | {min(ones) / min(twos):.2f} |")


if __name__ == "__main__":
    main()
