"""Record llama.cpp reference cases for a GGUF vocabulary with llama-cpp-python.

Writes one JSON object per line, ``{"text": str, "special": bool, "ids": [int]}``, the format of
tests/data/*.jsonl.gz, where ids are llama.cpp's
``llama_tokenize(vocab, text, add_special=false, parse_special=special)``.

    pip install llama-cpp-python==0.3.36       # builds llama.cpp (about 10 minutes on 2 cores)
    python scripts/record_reference_cases.py MODEL.gguf OUT.jsonl.gz [--texts FILE] [--random N] [--seed S]

--texts takes a file of cases separated by lines ``__ggml_vocab_test__`` (llama.cpp's .inp format);
--random adds N random strings drawn from many Unicode ranges (the generator tests/test_live_llama.py uses).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random

# Ranges that exercise the pre-tokenizers: ASCII, Latin-1, combining marks, Greek/Cyrillic,
# Arabic/Hebrew, Devanagari, Thai, CJK, Hangul, fullwidth, emoji, digits of many scripts,
# whitespace of many kinds, and Unicode 15/16 additions llama.cpp's table may lack.
RANGES = [
    (0x20, 0x7E), (0x09, 0x0D), (0xA0, 0xFF), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
    (0x590, 0x5FF), (0x600, 0x6FF), (0x660, 0x669), (0x900, 0x97F), (0xE00, 0xE7F), (0x2000, 0x206F),
    (0x2150, 0x218F), (0x2460, 0x24FF), (0x3000, 0x303F), (0x3040, 0x30FF), (0x4E00, 0x4FFF),
    (0xAC00, 0xACFF), (0xFF00, 0xFFEF), (0x1F300, 0x1F6FF), (0x1F900, 0x1F9FF), (0x1D7CE, 0x1D7FF),
    (0x10D40, 0x10D8F), (0x2EBF0, 0x2EE5D), (0x1C, 0x1F), (0x85, 0x85), (0xFE00, 0xFE0F), (0x200B, 0x200D),
]
SPECIAL_SNIPPETS = ["<|im_end|>", "<|endoftext|>", "<think>", "</think>", "</s>", "<|im_start|>", "<|im_end",
                    "<reponame>", "<|fim_pad|>", "'s", "'LL", " 's", "\r\n", "  ", "123456"]


def random_texts(rng: random.Random, count: int) -> list[str]:
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.15:
                parts.append(rng.choice(SPECIAL_SNIPPETS))
            else:
                lo, hi = rng.choice(RANGES)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
        texts.append("".join(parts))
    return texts


def llama_ids(llama, text: str, special: bool) -> list[int]:
    return llama.tokenize(text.encode("utf-8"), add_bos=False, special=special)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--texts", help="a file of cases separated by __ggml_vocab_test__ lines")
    parser.add_argument("--random", type=int, default=0, help="add N random strings")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from llama_cpp import Llama

    llama = Llama(args.model, vocab_only=True, verbose=False)
    texts = []
    if args.texts:
        with open(args.texts, encoding="utf-8", newline="") as f:
            texts += f.read().split("\n__ggml_vocab_test__\n")[:-1]
    texts += random_texts(random.Random(args.seed), args.random)
    with gzip.open(args.out, "wt", encoding="utf-8") as out:
        for text in texts:
            for special in (False, True):
                out.write(json.dumps({"text": text, "special": special, "ids": llama_ids(llama, text, special)}) + "\n")
    print(f"wrote {2 * len(texts)} cases to {args.out}")


if __name__ == "__main__":
    main()
