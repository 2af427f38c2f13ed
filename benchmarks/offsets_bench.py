"""Time encode_with_offsets against encode on the same text (the cost of deriving the spans).

    python benchmarks/offsets_bench.py tests/data/ggml-vocab-qwen3.gguf.gz /work/shared/corpus/en.txt.xz --chars 1000000

Prints tokens, encode's time, encode_with_offsets's time and their ratio (process time, best of
--repeat, caches warm: the second encode of a text is what a server sees for repeated text, so
both are timed warm). The per-token tables are filled by a first, untimed call.
"""

from __future__ import annotations

import argparse
import lzma
import time

import bpetok


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("corpus", help="a text file (.xz read as xz)")
    parser.add_argument("--chars", type=int, default=1_000_000, help="characters of the corpus to use")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    opener = lzma.open if args.corpus.endswith(".xz") else open
    with opener(args.corpus, "rt", encoding="utf-8") as f:
        text = f.read(args.chars)
    tok = bpetok.from_file(args.model)
    found = tok.encode_with_offsets(text)  # fills the caches and the offsets tables
    encode = best(lambda: tok.encode(text), args.repeat)
    offsets = best(lambda: tok.encode_with_offsets(text), args.repeat)
    print(f"model:               {args.model} ({tok.engine})")
    print(f"text:                {len(text):,} characters, {len(text.encode()):,} bytes, {len(found):,} tokens")
    print(f"encode:              {encode * 1000:8.1f} ms")
    print(f"encode_with_offsets: {offsets * 1000:8.1f} ms  ({offsets / encode:.2f}x encode)")


if __name__ == "__main__":
    main()
