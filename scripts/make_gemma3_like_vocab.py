"""Write a ``llama``-model GGUF laid out like Gemma 3's 262,144-token SentencePiece vocabulary.

    python3 scripts/make_gemma3_like_vocab.py OUT.gguf [--base ggml-vocab-llama-spm.gguf[.gz]] [--size 262144]

Gemma 3's file is not in the repository; this one has its shape, for tests and benchmarks:

- ids 0-4 ``<pad> <eos> <bos> <unk> <mask>``, then ``<start_of_turn>``, ``<end_of_turn>``, the
  image markers and ``<unused0>`` ... : 6,249 CONTROL tokens in all (``<unk>`` UNKNOWN);
- 165 USER_DEFINED tokens: runs of 2-31 newlines, 2-31 spaces and 1-31 tabs (with real spaces, as
  the partition matches them against the raw text), and HTML tags;
- the 256 ``<0xXX>`` BYTE tokens (byte fallback);
- Llama 2's NORMAL pieces with their scores (but its runs of ``▁``, user-defined here) (the ``--base`` vocabulary, llama.cpp's
  test file by default), then merged pieces up to ``--size``: each the concatenation of two
  existing pieces, the left one picked with Zipf-like weights by score rank and the right one
  never starting with ``▁`` (a piece never spans two words, as in SentencePiece's training),
  each scored below every piece before it, as SPM BPE scores its merges. Every added piece can
  therefore be formed by a merge, so the file behaves as an SPM BPE of that size.

``add_space_prefix`` is false, as in Gemma 3. The output is deterministic (a fixed seed).
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
from itertools import accumulate

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpetok.vocab.gguf import GGUFValueType, read_gguf  # noqa: E402
from bpetok.vocab.gguf_writer import write_gguf  # noqa: E402

DEFAULT_BASE = ROOT / "tests" / "data" / "llama.cpp-tests" / "ggml-vocab-llama-spm.gguf.gz"
SPACE = "\u2581".encode()
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6
N_CONTROL = 6249
HTML_TAGS = ["table", "tr", "td", "th", "thead", "tbody", "h1", "h2", "h3", "h4", "h5", "h6", "p", "br", "div",
             "span", "ul", "ol", "li", "a", "b", "i", "pre", "code", "blockquote", "img", "sup", "sub", "em", "strong",
             "hr", "dl", "dt", "dd", "caption", "tfoot", "small", "s", "u", "center", "font", "big", "nav"]


def specials() -> tuple[list[bytes], list[int]]:
    """The CONTROL/UNKNOWN tokens, then the USER_DEFINED ones, with their types."""
    control = [b"<pad>", b"<eos>", b"<bos>", b"<unk>", b"<mask>", b"[@BOS@]", b"<start_of_turn>", b"<end_of_turn>",
               b"<start_of_image>", b"<end_of_image>", b"<image_soft_token>"]
    control += [b"<unused%d>" % k for k in range(N_CONTROL - len(control))]
    types = [UNKNOWN if t == b"<unk>" else CONTROL for t in control]
    user = [b"\n" * k for k in range(2, 32)] + [b" " * k for k in range(2, 32)] + [b"\t" * k for k in range(1, 32)]
    user += [b"<%s>" % t.encode() for t in HTML_TAGS] + [b"</%s>" % t.encode() for t in HTML_TAGS]
    user = user[:165]
    return control + user, types + [USER_DEFINED] * len(user)


def grow(pieces: list[bytes], scores: list[float], count: int, seed: int) -> tuple[list[bytes], list[float]]:
    """``count`` new pieces, each two existing ones joined, scored below all before it."""
    rng = random.Random(seed)
    known = set(pieces)
    lefts = list(pieces)  # by score, highest first (the base's order)
    rights = [p for p in pieces if not p.startswith(SPACE)]
    left_weights = list(accumulate(1.0 / (rank + 20) for rank in range(len(lefts))))
    right_weights = list(accumulate(1.0 / (rank + 20) for rank in range(len(rights))))
    score = min(scores) - 1.0
    new, new_scores = [], []
    while len(new) < count:
        left = rng.choices(lefts, cum_weights=left_weights)[0]
        right = rng.choices(rights, cum_weights=right_weights)[0]
        piece = left + right
        if piece in known or piece.strip(SPACE) == b"" or len(piece) > 48:
            continue
        known.add(piece)
        new.append(piece)
        new_scores.append(score)
        score -= 1.0
        # A new piece can take part in later merges, as merged symbols do in training.
        if len(new) % 4 == 0:
            lefts.append(piece)
            left_weights.append(left_weights[-1] + 1.0 / (len(lefts) + 20))
            if not piece.startswith(SPACE):
                rights.append(piece)
                right_weights.append(right_weights[-1] + 1.0 / (len(rights) + 20))
    return new, new_scores


def build(base: pathlib.Path, size: int, seed: int = 3):
    """(tokens, scores, types) of the vocabulary."""
    gguf = read_gguf(base)
    meta = gguf.metadata
    base_types = list(meta["tokenizer.ggml.token_type"])
    base_scores = [float(s) for s in meta["tokenizer.ggml.scores"]]
    tokens, types = specials()
    # Runs of spaces are USER_DEFINED only (sentencepiece, which spells them with ▁, has one of each).
    taken = {t.replace(b" ", SPACE) for t, k in zip(tokens, types) if k == USER_DEFINED}
    normal = [(t, s) for t, s, k in zip(meta["tokenizer.ggml.tokens"], base_scores, base_types) if k == NORMAL and t not in taken]
    normal.sort(key=lambda ts: -ts[1])
    scores = [0.0] * len(tokens)
    tokens += [b"<0x%02X>" % b for b in range(256)]
    types += [BYTE] * 256
    scores += [0.0] * 256
    pieces, piece_scores = [t for t, _ in normal], [s for _, s in normal]
    added, added_scores = grow(pieces, piece_scores, size - len(tokens) - len(pieces), seed)
    tokens += pieces + added
    scores += piece_scores + added_scores
    types += [NORMAL] * (len(pieces) + len(added))
    return tokens, scores, types


def write(path: str | pathlib.Path, base: pathlib.Path = DEFAULT_BASE, size: int = 262_144) -> None:
    tokens, scores, types = build(base, size)
    S, A = GGUFValueType.STRING, GGUFValueType.ARRAY
    u32, b = GGUFValueType.UINT32, GGUFValueType.BOOL
    write_gguf(path, [
        ("general.architecture", S, "gemma3", None),
        ("general.name", S, "gemma-3-like (scripts/make_gemma3_like_vocab.py)", None),
        ("tokenizer.ggml.model", S, "llama", None),
        ("tokenizer.ggml.pre", S, "default", None),
        ("tokenizer.ggml.tokens", A, tokens, S),
        ("tokenizer.ggml.scores", A, scores, GGUFValueType.FLOAT32),
        ("tokenizer.ggml.token_type", A, types, GGUFValueType.INT32),
        ("tokenizer.ggml.bos_token_id", u32, 2, None),
        ("tokenizer.ggml.eos_token_id", u32, 1, None),
        ("tokenizer.ggml.unknown_token_id", u32, 3, None),
        ("tokenizer.ggml.padding_token_id", u32, 0, None),
        ("tokenizer.ggml.add_bos_token", b, True, None),
        ("tokenizer.ggml.add_eos_token", b, False, None),
        ("tokenizer.ggml.add_space_prefix", b, False, None),
    ])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the GGUF file to write")
    parser.add_argument("--base", type=pathlib.Path, default=DEFAULT_BASE, help="the SPM vocabulary to grow (default: %(default)s)")
    parser.add_argument("--size", type=int, default=262_144, help="tokens in all (default: %(default)s)")
    args = parser.parse_args(argv)
    write(args.out, args.base, args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
