"""Token spans for the models that normalize the text before they cut it (bert, t5).

The model re-runs its readable twin (normalizer, then cut) on each fragment between special
tokens, keeping for every normalized unit where in the fragment it came from, as Hugging Face
tokenizers' ``NormalizedString`` alignments do; a token's span runs from the source of its first
unit to the end of the source of its last. The ids found so are compared with the ids asked
about: a mismatch (ids of another text) is an :class:`~bpetok.offsets.OffsetsError`.

:func:`spans_of_fragments` does the shared part: finds each fragment and special token in the
text (the partition, with either ``parse_special``), calls the model's per-fragment function and
turns its spans into the text's character and byte spans. A special token's span covers the
whitespace its LSTRIP/RSTRIP made it swallow; what add_special adds is empty, at either end.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING, Callable

from bpetok.specials import ASCII_SPACE

if TYPE_CHECKING:
    from bpetok.offsets import TokenOffsets
    from bpetok.tokenizer import Tokenizer

__all__ = ["spans_of_fragments", "Spans"]

#: (token id, start, end) within one fragment: characters or UTF-8 bytes, as the model says.
Spans = list[tuple[int, int, int]]


def _utf8_length(ch: str) -> int:
    return len(ch.encode("utf-8", "surrogatepass"))


def spans_of_fragments(
    tok: Tokenizer, text: str, ids: list[int], add_special: bool, fragment_spans: Callable[[str], Spans], in_bytes: bool
) -> TokenOffsets:
    """The spans of ``ids`` (``tok.encode(text, add_special=...)``), each fragment's tokens from
    ``fragment_spans`` (spans within the fragment: in its UTF-8 bytes if ``in_bytes``, else in
    its characters)."""
    from bpetok.offsets import OffsetsError, TokenOffsets, _added

    head, tail = _added(tok, add_special)
    body = ids[len(head) : len(ids) - len(tail)]
    # the byte offset of each character (and of the end)
    char_bytes = list(range(len(text) + 1)) if text.isascii() else list(accumulate(map(_utf8_length, text), initial=0))
    found = None
    if len(ids) >= len(head) + len(tail) and ids[: len(head)] == head and ids[len(ids) - len(tail) :] == tail:
        for parse_special in (True, False):
            fragments = tok._partition(text, parse_special) if text else []
            found = _walk(tok, text, fragments, fragment_spans, in_bytes, char_bytes)
            if [span[0] for span in found] == body:
                break
            found = None
    if found is None:
        vocab = tok.vocabulary
        if any(ids == tok.encode(text, parse_special=p, add_special=add_special) for p in (True, False)):
            # encode's own ids, which the twin does not make: a subclass that normalizes otherwise
            from bpetok.offsets import refuse_offsets

            refuse_offsets(tok, f"{type(tok.model).__name__} normalizes the text its own way, and bpetok keeps the "
                           "alignment of llama.cpp's bert and t5 normalizers only")
        raise OffsetsError(
            f"{vocab.path}: cannot derive token offsets for this {vocab.model} model: the ids are not what "
            f"encode(text, add_special={add_special}) gives for this text (with either parse_special); pass the text's own ids"
        )
    n_chars, n_bytes = len(text), char_bytes[-1]
    offsets = [(0, 0)] * len(head) + [(cs, ce) for _, cs, ce, _, _ in found] + [(n_chars, n_chars)] * len(tail)
    byte_offsets = [(0, 0)] * len(head) + [(bs, be) for _, _, _, bs, be in found] + [(n_bytes, n_bytes)] * len(tail)
    partial = [False] * len(head)
    for _, cs, ce, bs, be in found:
        partial.append(bs != char_bytes[cs] or be != char_bytes[ce])
    partial += [False] * len(tail)
    return TokenOffsets(ids, offsets, byte_offsets, partial)


def _walk(tok, text: str, fragments, fragment_spans, in_bytes: bool, char_bytes: list[int]) -> list[tuple[int, int, int, int, int]]:
    """(id, char start, char end, byte start, byte end) of every token, fragment by fragment."""
    pieces = tok.vocabulary.tokens
    out: list[tuple[int, int, int, int, int]] = []
    pos, n = 0, len(text)
    last_special = -1  # where in out the special token that may have swallowed spaces is

    def extend_special(to: int) -> None:
        if last_special >= 0 and to > pos:
            token_id, cs, _, bs, _ = out[last_special]
            out[last_special] = (token_id, cs, to, bs, char_bytes[to])

    for fragment in fragments:
        if fragment.__class__ is int:
            special = pieces[fragment].decode("utf-8", "surrogatepass")
            at = pos
            while not text.startswith(special, at) and at < n and text[at] in ASCII_SPACE:
                at += 1  # LSTRIP swallowed it (after another special's RSTRIP: both ways, this one's)
            out.append((fragment, pos, at + len(special), char_bytes[pos], char_bytes[at + len(special)]))
            pos, last_special = at + len(special), len(out) - 1
            continue
        at = pos
        while not text.startswith(fragment, at) and at < n:
            at += 1  # whitespace the special token before swallowed (RSTRIP)
        extend_special(at)
        pos, last_special = at, -1
        if in_bytes:
            base = char_bytes[pos]
            for token_id, s, e in fragment_spans(fragment):
                bs, be = base + s, base + e
                cs = bisect_right(char_bytes, bs) - 1
                ce = bisect_right(char_bytes, be) - 1
                ce += char_bytes[ce] != be  # the end of the character byte be is inside
                out.append((token_id, cs, ce, bs, be))
        else:
            for token_id, s, e in fragment_spans(fragment):
                out.append((token_id, pos + s, pos + e, char_bytes[pos + s], char_bytes[pos + e]))
        pos += len(fragment)
    extend_special(n)
    return out
