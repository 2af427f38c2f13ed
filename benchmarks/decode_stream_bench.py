"""Time DecodeStream.step per id against one decode() of the same ids (a serving loop's overhead).

    python benchmarks/decode_stream_bench.py tests/data/ggml-vocab-qwen3.gguf.gz /work/shared/corpus/multi.txt.xz --chars 200000

Prints ids, the one-shot decode time, the streamed time and the cost per id (process time, best of --repeat).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
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
    parser.add_argument("corpus", help="a UTF-8 text file, .xz allowed")
    parser.add_argument("--chars", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    opener = lzma.open if args.corpus.endswith(".xz") else open
    with opener(args.corpus, "rt", encoding="utf-8") as f:
        text = f.read(args.chars)
    tok = bpetok.from_gguf(args.model)
    ids = tok.encode(text)
    cleaning = copy.copy(tok)
    cleaning.spec = dataclasses.replace(tok.spec, clean_spaces=True)
    for label, t in (("clean_spaces off", tok), ("clean_spaces on", cleaning)):
        def streamed():
            stream = t.decode_stream()
            step = stream.step
            return "".join([step(i) for i in ids]) + stream.flush()

        assert streamed() == t.decode(ids)
        one = best(lambda: t.decode(ids), args.repeat)
        many = best(streamed, args.repeat)
        print(f"{label:17} {len(ids):,} ids: decode {one * 1e3:.1f} ms, stream {many * 1e3:.1f} ms "
              f"({many / len(ids) * 1e6:.2f} us per id)")


if __name__ == "__main__":
    main()
