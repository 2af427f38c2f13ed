"""What new text costs a tokenizer's memory: RSS after encoding MB of random CJK (never repeated).

    python3 benchmarks/cache_memory.py VOCAB.gguf [--mb 8] [--cache-bytes N]

Prints the process's resident size after loading, then after each MB of random CJK ideographs
(with a space or a full stop now and then, in 2,000-character texts, as a server would get
them), and what the caches count (``Tokenizer.cache_info``). With a byte budget the caches
plateau at the budget; the rest is the vocabulary and the interpreter.
"""

from __future__ import annotations

import argparse
import random
import resource

import bpetok


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e6


def random_cjk_texts(rng: random.Random, chars: int) -> list[str]:
    texts = []
    for _ in range(max(chars // 2000, 1)):
        out = []
        for _ in range(2000):
            r = rng.random()
            out.append(" " if r < 0.08 else "\u3002" if r < 0.1 else chr(rng.randrange(0x4E00, 0x9FFF)))
        texts.append("".join(out))
    return texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("vocab")
    ap.add_argument("--mb", type=int, default=8, help="MB (UTF-8) of random CJK to encode")
    ap.add_argument("--cache-bytes", type=int, default=None, help="the tokenizer's cache budget")
    args = ap.parse_args()
    tok = bpetok.from_gguf(args.vocab)
    if args.cache_bytes is not None:
        tok = bpetok.Tokenizer(tok.vocabulary, tok.spec, cache_bytes=args.cache_bytes)
    tok.encode("warm up 中文")
    print(f"budget {tok.cache_bytes / 1e6:.1f} MB; loaded: RSS {rss_mb():.0f} MB")
    rng = random.Random(0)
    for mb in range(1, args.mb + 1):
        for text in random_cjk_texts(rng, 1_000_000 // 3):  # 3 UTF-8 bytes a character
            tok.encode(text)
        counted = sum(row["bytes"] for row in tok.cache_info().values())
        print(f"after {mb} MB of new CJK: RSS {rss_mb():.0f} MB, caches count {counted / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
