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

import numpy as np

from bpetok.specials import ASCII_SPACE

if TYPE_CHECKING:
    from bpetok.offsets import TokenOffsets
    from bpetok.tokenizer import Tokenizer

__all__ = ["spans_of_fragments", "spans_of_fragment_arrays", "encode_with_fragment_arrays", "of_span_buffer", "Spans"]

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


def _special_at(text: str, special: str, pos: int) -> int:
    """Where the special token ``special`` stands in ``text``, at ``pos`` or past the whitespace
    its LSTRIP swallowed (after another special's RSTRIP: both ways, this one's)."""
    at, n = pos, len(text)
    while not text.startswith(special, at) and at < n and text[at] in ASCII_SPACE:
        at += 1
    return at


def _fragment_at(text: str, fragment: str, pos: int) -> int:
    """Where ``fragment`` stands in ``text``, at ``pos`` or past the whitespace the special token
    before it swallowed (RSTRIP)."""
    at, n = pos, len(text)
    while not text.startswith(fragment, at) and at < n:
        at += 1
    return at


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
            at = _special_at(text, special, pos)
            out.append((fragment, pos, at + len(special), char_bytes[pos], char_bytes[at + len(special)]))
            pos, last_special = at + len(special), len(out) - 1
            continue
        at = _fragment_at(text, fragment, pos)
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


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def spans_of_fragment_arrays(
    tok: Tokenizer, text: str, ids: list[int], add_special: bool, fragment_rows: Callable[[str], np.ndarray | None]
) -> TokenOffsets | None:
    """:func:`spans_of_fragments` with each fragment's spans from a kernel as an ``(n, 5)`` int64
    array (``fragment_rows``: rows of id, char start, char end, byte start, byte end within the
    fragment; None where it cannot say), so that no Python object is made per token; None where
    the ids are not the text's (the twin then says why)."""
    from bpetok.offsets import _added

    head, tail = _added(tok, add_special)
    if len(ids) < len(head) + len(tail) or ids[: len(head)] != head or ids[len(ids) - len(tail) :] != tail:
        return None
    body = ids[len(head) : len(ids) - len(tail)]
    for parse_special in (True, False):
        fragments = tok._partition(text, parse_special) if text else []
        rows = _walk_rows(tok, text, fragments, fragment_rows)
        if rows is not None and rows[:, 0].tolist() == body:
            return _of_rows(text, rows, (head, tail))
    return None


def encode_with_fragment_arrays(
    tok: Tokenizer, text: str, parse_special: bool, add_special: bool, fragment_rows: Callable[[str], np.ndarray | None]
) -> TokenOffsets | None:
    """``encode_with_offsets`` in one pass: the ids are the kernel's rows' (``fragment_rows``
    gives each fragment's ids as encode does, and their spans); None where it cannot say."""
    from bpetok.offsets import _added

    fragments = tok._partition(text, parse_special) if text else []
    rows = _walk_rows(tok, text, fragments, fragment_rows)
    return None if rows is None else _of_rows(text, rows, _added(tok, add_special))


def _of_rows(text: str, rows: np.ndarray, added: tuple[list[int], list[int]]) -> TokenOffsets:
    """The TokenOffsets of ``rows`` (the text's tokens) with what add_special adds around them."""
    from bpetok.offsets import TokenOffsets

    head, tail = added
    if head or tail:
        n_chars, n_bytes = len(text), _utf8_size(text)
        rows = np.concatenate((
            np.array([[token_id, 0, 0, 0, 0] for token_id in head], dtype=np.int64).reshape(-1, 5),
            rows,
            np.array([[token_id, n_chars, n_chars, n_bytes, n_bytes] for token_id in tail], dtype=np.int64).reshape(-1, 5),
        ))
    elif not rows.flags.writeable:  # the kernel's buffer: the spans handed out are the caller's to change
        rows = rows.copy()
    return TokenOffsets._of_arrays(rows[:, 0], rows[:, 3:5], rows[:, 1:3], np.zeros(len(rows), dtype=bool))


def of_span_buffer(text: str, found: bytearray, added: tuple[list[int], list[int]]) -> TokenOffsets:
    """The TokenOffsets of a kernel's tokens given as one buffer (``Wpm.encode_cut_spans``): a row
    of four int64 a token (char start, char end, byte start, byte end), then the ids as int32; the
    arrays are views of it, no copy. What add_special adds goes around them, empty."""
    from bpetok.offsets import TokenOffsets

    n = len(found) // (4 * 8 + 4)
    spans = np.frombuffer(found, dtype=np.int64, count=4 * n).reshape(n, 4)
    ids = np.frombuffer(found, dtype=np.int32, offset=4 * 8 * n)
    head, tail = added
    if head or tail:
        n_chars, n_bytes = len(text), _utf8_size(text)
        ends = np.array([[n_chars, n_chars, n_bytes, n_bytes]] * len(tail), dtype=np.int64).reshape(-1, 4)
        spans = np.concatenate((np.zeros((len(head), 4), dtype=np.int64), spans, ends))
        ids = np.concatenate((np.array(head, dtype=np.int32), ids, np.array(tail, dtype=np.int32)))
    return TokenOffsets._of_arrays(ids, spans[:, 2:], spans[:, :2], np.zeros(len(ids), dtype=bool))


def _walk_rows(tok, text: str, fragments, fragment_rows) -> np.ndarray | None:
    """:func:`_walk` (spans in characters) as one ``(n, 5)`` array of rows."""
    pieces = tok.vocabulary.tokens
    chunks: list[np.ndarray] = []
    pos, pos_byte, n = 0, 0, len(text)
    last_special: np.ndarray | None = None  # the row of the special token that may have swallowed spaces

    def advance(to: int) -> None:
        nonlocal pos, pos_byte
        pos_byte += _utf8_size(text[pos:to])
        pos = to

    def extend_special(to: int) -> None:
        if last_special is not None and to > pos:
            last_special[0, 2], last_special[0, 4] = to, pos_byte + _utf8_size(text[pos:to])

    for fragment in fragments:
        if fragment.__class__ is int:
            special = pieces[fragment].decode("utf-8", "surrogatepass")
            at = _special_at(text, special, pos)
            start, start_byte = pos, pos_byte
            advance(at + len(special))
            last_special = np.array([[fragment, start, pos, start_byte, pos_byte]], dtype=np.int64)
            chunks.append(last_special)
            continue
        at = _fragment_at(text, fragment, pos)
        extend_special(at)
        advance(at)
        last_special = None
        rows = fragment_rows(fragment)
        if rows is None:
            return None
        chunks.append(rows + np.array([0, pos, pos, pos_byte, pos_byte], dtype=np.int64) if pos else rows)
        advance(pos + len(fragment))
    extend_special(n)
    if not chunks:
        return np.zeros((0, 5), dtype=np.int64)
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
