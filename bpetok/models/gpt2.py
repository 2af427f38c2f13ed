"""Byte-level BPE, llama.cpp's ``gpt2`` model (src/llama-vocab.cpp, ``llm_tokenizer_bpe_session``).

A piece's UTF-8 bytes become GPT-2's printable characters, one symbol each; then the adjacent
pair with the lowest merge rank is merged, leftmost on ties, until no pair has a rank. Symbols
that are tokens become their ids; any other symbol falls back to its bytes' one-byte tokens, and a
byte with no token is dropped, as llama.cpp does.

Symbols are ids, not strings: merges are keyed by ``left_id * stride + right_id``. A merge whose
result is not a token gets a *virtual* id (>= n_tokens) that remembers its text for the fallback.
"""

from __future__ import annotations

import heapq

from bpetok.errors import VocabularyError

__all__ = ["BYTE_TO_CHAR", "CHAR_TO_BYTE", "byte_encode", "BytePairModel"]


def _gpt2_byte_chars() -> list[str]:
    """GPT-2's byte -> printable character map (llama.cpp unicode.cpp, unicode_byte_to_utf8).

    Printable bytes keep their codepoint; the other 68, in increasing order, take U+0100 onwards.
    >>> _gpt2_byte_chars()[0x20], _gpt2_byte_chars()[0x0A], _gpt2_byte_chars()[ord("a")]
    ('Ġ', 'Ċ', 'a')
    """
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    chars, extra = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(0x100 + extra))
            extra += 1
    return chars


BYTE_TO_CHAR: list[str] = _gpt2_byte_chars()
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_CHAR)}
_ENCODE_TABLE = {b: c for b, c in enumerate(BYTE_TO_CHAR)}  # for bytes -> str via str.translate


def byte_encode(data: bytes) -> str:
    """Bytes to GPT-2 characters: ``byte_encode(b" hi") == "Ġhi"``."""
    return data.decode("latin-1").translate(_ENCODE_TABLE)


class BytePairModel:
    """Merge tables for one vocabulary, built once; :meth:`encode_piece` runs BPE on one piece."""

    def __init__(self, tokens: list[bytes], merges: list[bytes], *, ignore_merges: bool = False, path: str = ""):
        self.n_tokens = n = len(tokens)
        self.ignore_merges = ignore_merges
        self.token_to_id = token_to_id = {t: i for i, t in enumerate(tokens)}
        self.virtual_texts: list[bytes] = []  # text of virtual id n + k
        virtual_ids: dict[bytes, int] = {}

        def symbol_id(text: bytes) -> int:
            token_id = token_to_id.get(text)
            if token_id is not None:
                return token_id
            token_id = virtual_ids.get(text)
            if token_id is None:
                token_id = virtual_ids[text] = n + len(self.virtual_texts)
                self.virtual_texts.append(text)
            return token_id

        # Each byte's initial symbol: its GPT-2 character's token, or a virtual one (SmolLM2 has
        # no token for 21 byte values; llama.cpp then drops the byte).
        self.byte_ids = [symbol_id(c.encode()) for c in BYTE_TO_CHAR]
        # Merge ranks keyed by symbol-id pairs; the stride leaves room for virtual ids.
        self.stride = stride = n + len(merges) + 256
        ranks: dict[int, tuple[int, int]] = {}
        for rank, merge in enumerate(merges):
            # Split at the first space at byte index >= 1 (llama.cpp); no such space: never matches.
            cut = merge.find(b" ", 1)
            if cut < 0:
                continue
            left, right = merge[:cut], merge[cut + 1 :]
            left_id, right_id = token_to_id.get(left), token_to_id.get(right)
            if left_id is None or right_id is None:
                missing = left if left_id is None else right
                raise VocabularyError(
                    f"{path}: merge {rank} {merge.decode('utf-8', 'replace')!r} names "
                    f"{missing.decode('utf-8', 'replace')!r}, which is not in 'tokenizer.ggml.tokens'; "
                    "llama.cpp's result for such a vocabulary is not reproducible, so it is refused"
                )
            key = left_id * stride + right_id
            if key not in ranks:  # a duplicate merge keeps its first (lowest) rank
                ranks[key] = (rank, symbol_id(left + right))
        self.ranks = ranks
        self.token_texts = tokens

    # -- encoding --------------------------------------------------------------------------------

    def encode_piece(self, piece: bytes) -> list[int]:
        """BPE one pre-tokenized piece (its UTF-8 bytes) to ids.

        >>> # with merges "a a" and "aa a" absent: "aaa" -> ["aa", "a"] (leftmost on ties)
        """
        if self.ignore_merges:
            whole = self.token_to_id.get(byte_encode(piece).encode())
            if whole is not None:
                return [whole]
        return self._emit(self.merge_symbols([self.byte_ids[b] for b in piece]))

    def merge_symbols(self, symbols: list[int]) -> list[int]:
        """Merge a list of symbol ids until no adjacent pair has a rank; returns the survivors.

        A heap of (rank, left position) over a linked list; stale entries are skipped when popped
        (lazy deletion), so each merge costs O(log n) instead of a rescan of all pairs.
        """
        count = len(symbols)
        if count < 2:
            return symbols
        ranks, stride = self.ranks, self.stride
        ids = list(symbols)
        nxt = list(range(1, count + 1))
        prv = list(range(-1, count - 1))
        heap = []
        for i in range(count - 1):
            found = ranks.get(ids[i] * stride + ids[i + 1])
            if found is not None:
                heap.append((found[0], i, ids[i], ids[i + 1], found[1]))
        heapq.heapify(heap)
        while heap:
            _, left, left_id, right_id, merged = heapq.heappop(heap)
            right = nxt[left]
            # Stale: either side was merged since this entry was pushed.
            if ids[left] != left_id or right >= count or ids[right] != right_id:
                continue
            ids[left] = merged
            ids[right] = -1
            nxt[left] = after = nxt[right]
            if after < count:
                prv[after] = left
            before = prv[left]
            if before >= 0:
                found = ranks.get(ids[before] * stride + merged)
                if found is not None:
                    heapq.heappush(heap, (found[0], before, ids[before], merged, found[1]))
            if after < count:
                found = ranks.get(merged * stride + ids[after])
                if found is not None:
                    heapq.heappush(heap, (found[0], left, merged, ids[after], found[1]))
        out, i = [], 0
        while i < count:
            out.append(ids[i])
            i = nxt[i]
        return out

    def _emit(self, symbols: list[int]) -> list[int]:
        n = self.n_tokens
        if all(s < n for s in symbols):
            return symbols
        out = []
        for s in symbols:
            if s < n:
                out.append(s)
                continue
            # Not a token: each byte of the symbol's (GPT-2 character) text that is a one-byte
            # token is emitted, the others dropped silently (llama.cpp's fallback).
            for b in self.virtual_texts[s - n]:
                token_id = self.token_to_id.get(bytes((b,)))
                if token_id is not None:
                    out.append(token_id)
        return out
