"""Record llama.cpp's token ids for malformed UTF-8 byte strings (llama-cpp-python, live).

Writes one JSON object per line to a gzipped file, ``{"hex": str, "special": bool, "ids": [int] | null}``:
``ids`` are ``llama_tokenize(vocab, bytes.fromhex(hex), add_special=false, parse_special=special)``,
or null where llama.cpp aborts the process on the input (a sequence that decodes past U+10FFFF:
``unicode_cpt_to_utf8`` throws and nothing catches it; SentencePiece vocabularies read raw bytes
and never abort). Those are checked in a subprocess.

    pip install -e '.[llama]'
    python scripts/record_malformed_utf8.py MODEL.gguf OUT.jsonl.gz [--random 300] [--seed 0]

The cases: lone continuation bytes, truncated 2/3/4-byte sequences, overlongs, encoded surrogates,
sequences past U+10FFFF, bytes 0xF8..0xFF, each alone, between letters and next to special tokens;
then random mixes of those with text, multi-byte characters and special tokens.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys

SPECIALS = [b"<|im_end|>", b"<|endoftext|>", b"<|im_start|>", b"<think>", b"</s>", b"<|fim_pad|>", b"<|im_end"]
MALFORMED = [
    b"\x80", b"\xbf", b"\x80\x80", b"\xa0\x80",                      # lone continuation bytes
    b"\xc3", b"\xc3a", b"\xe4", b"\xe4\xb8", b"\xe4\xb8a", b"\xf0\x9f", b"\xf0\x9f\x98",  # truncated
    b"\xf0\x9f\x98a", b"\xe4a\xb8",
    b"\xc0\x80", b"\xc0\xbc", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x80\xbc", b"\xf0\x80\x80\xbc",  # overlongs
    b"\xf0\x8f\xbf\xbf", b"\xc0\xa0", b"\xe0\x81\x8a",
    b"\xed\xa0\x80", b"\xed\xb3\xbf", b"\xed\xbf\xbf", b"\xed\xa0\xbd\xed\xb8\x80",  # encoded surrogates
    b"\xf8", b"\xfc\x80\x80\x80\x80\x80", b"\xfe", b"\xff", b"\xff\xfe", b"\xf8\x88\x80\x80\x80",  # never valid
    b"\xf5", b"\xf5\x80", b"\xf4\x90\x80",                         # lead bytes past U+10FFFF, truncated
]
BEYOND = [b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf7\xbf\xbf\xbf"]  # decode past U+10FFFF: llama.cpp aborts
TEXT = [b"a", b"Hello", b" world", b" ", b"  ", b"\n", b"\t", b"123", b"'s", b"\xc3\xa9", b"\xe4\xb8\xad\xe6\x96\x87",
        b"\xf0\x9f\x98\x80", b"\xd0\xbf\xd1\x80\xd0\xb8", b"<", b"|", b">", b"!"]


def fixed_cases() -> list[bytes]:
    cases = []
    for bad in MALFORMED:
        cases += [bad, b"a" + bad + b"b", b" " + bad + b" ", bad + b"<|im_end|>", b"<|im_end|>" + bad,
                  bad + b"<|im_end|>" + bad, b"Hi " + bad + b" <think>" + bad + b"</think>"]
    # an overlong "<" must not join a special token; a special split by a bad byte is plain text
    cases += [b"\xc0\xbc|im_end|>", b"<|im_\xffend|>", b"<|im_end|\xc0\xbe", b"\xff<|im_end|>\xff<|endoftext|>\xff"]
    return cases


def random_cases(rng: random.Random, count: int) -> list[bytes]:
    cases = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.35:
                parts.append(rng.choice(MALFORMED))
            elif r < 0.45:
                parts.append(bytes([rng.randint(0x80, 0xFF)]))
            elif r < 0.6:
                parts.append(rng.choice(SPECIALS))
            else:
                parts.append(rng.choice(TEXT))
        data = b"".join(parts)
        if not any(b in data for b in BEYOND) and not past_unicode(data):
            cases.append(data)
    return cases


def past_unicode(data: bytes) -> bool:
    """Whether llama.cpp's decoder meets a sequence past U+10FFFF (it would abort): a lead byte
    F4..F7 at a point where it decodes, with three continuation bytes and a value over 0x10FFFF."""
    i = 0
    while i < len(data):
        b = data[i]
        n = 1 if b < 0x80 else 2 if 0xC0 <= b < 0xE0 else 3 if 0xE0 <= b < 0xF0 else 4 if 0xF0 <= b < 0xF8 else 0
        tail = data[i + 1 : i + n]
        if n > 1 and len(tail) == n - 1 and all(0x80 <= c < 0xC0 for c in tail):
            if n == 4 and ((b & 7) << 18 | (tail[0] & 0x3F) << 12) > 0x10FFFF:
                return True
            i += n
        else:
            i += 1
    return False


# A child that tokenizes "HEX SPECIAL" lines from stdin and answers one JSON line each, so that
# a case on which llama.cpp aborts (it kills the process) is found without losing the others.
_CHILD = (
    "import sys, json; from llama_cpp import Llama\n"
    "l = Llama(sys.argv[1], vocab_only=True, verbose=False)\n"
    "for line in sys.stdin:\n"
    "    hex_, special = line.split()\n"
    "    ids = l.tokenize(bytes.fromhex(hex_), add_bos=False, special=special == '1')\n"
    "    print('IDS', json.dumps(ids), flush=True)\n"
)


def tokenize_all(model: str, cases: list[tuple[bytes, bool]]) -> list[list[int] | None]:
    """llama.cpp's ids for every case, None where it aborts (the child is restarted after it)."""
    results: list[list[int] | None] = []
    while len(results) < len(cases):
        todo = cases[len(results):]
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, model],
            input="".join(f"{data.hex()} {int(special)}\n" for data, special in todo),
            capture_output=True, text=True,
        )
        answers = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("IDS ")]
        results += answers
        if proc.returncode != 0:
            if proc.returncode > 0 or not (b"invalid codepoint" in proc.stderr.encode() or "GGML_ASSERT" in proc.stderr):
                sys.exit(f"the llama.cpp child failed unexpectedly ({proc.returncode}):\n{proc.stderr[-2000:]}")
            results.append(None)  # the case after the last answer killed it
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--random", type=int, default=300, help="add N random mixes (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    inputs = fixed_cases() + random_cases(random.Random(args.seed), args.random)
    inputs += BEYOND + [b"ab" + BEYOND[0] + b"<|im_end|>"]
    cases = [(data, special) for data in inputs for special in (False, True)]
    ids = tokenize_all(args.model, cases)
    # Every sequence past U+10FFFF aborts a byte-level BPE vocabulary (its pre-tokenizer decodes
    # code points); a SentencePiece one reads raw bytes and tokenizes it; gemma4 also aborts on an
    # overlong space. Whatever llama.cpp did is recorded.
    rows = [{"hex": data.hex(), "special": special, "ids": found} for (data, special), found in zip(cases, ids)]
    with gzip.open(args.out, "wt", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    aborted = sum(row["ids"] is None for row in rows)
    print(f"wrote {len(rows)} cases ({aborted} on which llama.cpp aborts) to {args.out}")


if __name__ == "__main__":
    main()
