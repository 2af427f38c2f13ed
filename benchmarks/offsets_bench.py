"""Time encode_with_offsets against encode on the same text (the cost of deriving the spans).

    python benchmarks/offsets_bench.py tests/data/ggml-vocab-qwen3.gguf.gz \\
        tests/data/llama.cpp-tests/ggml-vocab-llama-spm.gguf.gz /work/shared/corpus/en.txt.xz --chars 300000

(docs/benchmarks.md runs every model on the en, code and multi corpora, one process each.)

For each model (one process, the same text): tokens, encode's time, and against it what a user
of ``Tokenizer.encode_with_offsets`` pays: the call and its spans read as the numpy arrays
``char_spans`` and ``byte_spans`` ("offsets"); that and the ids read as a list, ``.ids``, which
makes an int per token ("+ids"); everything as Python lists, ``.ids``, ``.offsets``,
``.byte_offsets`` and ``.partial``, a tuple per span ("+lists"). Process time, best of --repeat,
the four timed in turn in each round, caches warm (the second encode of a text is what a server
sees for repeated text). The per-token tables are filled by a first, untimed call. A model that
has no offsets says so.
"""

from __future__ import annotations

import argparse
import lzma
import time

import bpetok
from bpetok.offsets import OffsetsError


def timed(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def as_arrays(found) -> None:
    found.char_spans, found.byte_spans


def with_ids(found) -> None:
    found.char_spans, found.byte_spans, found.ids


def as_lists(found) -> None:
    found.ids, found.offsets, found.byte_offsets, found.partial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="vocabulary files")
    parser.add_argument("corpus", help="a text file (.xz read as xz)")
    parser.add_argument("--chars", type=int, default=300_000, help="characters of the corpus to use")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    opener = lzma.open if args.corpus.endswith(".xz") else open
    with opener(args.corpus, "rt", encoding="utf-8") as f:
        text = f.read(args.chars)
    print(f"text: {len(text):,} characters, {len(text.encode()):,} bytes")
    print(f"{'model':44s} {'engine':11s} {'tokens':>8s} {'encode ms':>10s} {'offsets ms':>11s} {'ratio':>6s} {'+ids':>7s} {'+lists':>7s}")
    for path in args.models:
        tok = bpetok.from_file(path)
        name = path.rsplit("/", 1)[-1]
        try:
            found = tok.encode_with_offsets(text)  # fills the caches and the offsets tables
        except OffsetsError as e:
            print(f"{name:44s} {tok.engine:11s} no offsets: {str(e).split(': ', 2)[-1][:60]}...")
            continue
        encode, offsets, ids, lists = [], [], [], []
        for _ in range(args.repeat):
            encode.append(timed(lambda: tok.encode(text)))
            offsets.append(timed(lambda: as_arrays(tok.encode_with_offsets(text))))
            ids.append(timed(lambda: with_ids(tok.encode_with_offsets(text))))
            lists.append(timed(lambda: as_lists(tok.encode_with_offsets(text))))
        e, o, i, k = min(encode), min(offsets), min(ids), min(lists)
        print(f"{name:44s} {tok.engine:11s} {len(found):8,} {e * 1000:10.1f} {o * 1000:11.1f} {o / e:5.2f}x {i / e:6.2f}x {k / e:6.2f}x")


if __name__ == "__main__":
    main()
