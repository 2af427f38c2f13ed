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
import os
from itertools import repeat
from typing import cast

from bpetok.compiled import compiled_module, pure_python_reason
from bpetok.errors import VocabularyError
from bpetok.models.gpt2.batch import BatchMerge

__all__ = ["BYTE_TO_CHAR", "CHAR_TO_BYTE", "byte_encode", "decode_token_text", "BytePairModel", "kernel_module", "engine"]


def kernel_module():
    """The compiled kernel (``bpetok/models/gpt2/kernel/``), or None: not built, or ``BPETOK_PURE_PYTHON=1``."""
    return compiled_module("bpetok.models.gpt2._kernel")


def engine() -> str:
    """Which BPE engine runs: ``"C kernel"``, or ``"pure Python: "`` and why."""
    reason = pure_python_reason("bpetok.models.gpt2._kernel")
    return "C kernel" if reason is None else f"pure Python: {reason}"


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


class BytePairModel(BatchMerge):
    """Merge tables for one vocabulary, built once; :meth:`encode_piece` runs BPE on one piece.

    :meth:`encode_pieces` (:mod:`bpetok.models.gpt2.batch`) runs many pieces at once.
    Two implementations share the tables: :meth:`merge_symbols` is the plain reference (a heap
    over a linked list, as llama.cpp does it) and :meth:`merge_symbols_fast` the one the
    tokenizer uses, which on short pieces keeps one rank per adjacent pair in a list and lets
    ``min``/``list.index`` find the next merge in C, and on very long ones (1 MB of one letter)
    applies merges rank by rank (:meth:`_merge_long`). tests/test_fast.py checks them against it.

    ``ranks`` maps ``left_id * stride + right_id`` to ``rank << shift | merged_id``: one int that
    orders by rank (so heaps and ``min`` need no tuple) and carries the merged symbol in its low bits.
    """

    # Up to SCAN_LIMIT symbols the list scan is fastest, then the heap (measured on the multi
    # corpus's pieces); above LONG_LIMIT the rank buckets, whose set-up pays off on long pieces.
    SCAN_LIMIT = 16
    LONG_LIMIT = 1024

    def __init__(
        self,
        tokens: list[bytes],
        merges: list[bytes],
        *,
        ignore_merges: bool = False,
        path: str = "",
        token_to_id: dict[bytes, int] | None = None,
    ):
        """``token_to_id``, if given, must be ``tokens``' index (Vocabulary.token_index()): it
        is shared, not copied, saving a 150k-entry dict at load; it is only ever read."""
        self.n_tokens = n = len(tokens)
        self.ignore_merges = ignore_merges
        self.path = path
        # dict(zip()) keeps the last id of a duplicate text, as {t: i for ...} would.
        self.token_to_id = token_to_id if token_to_id is not None else dict(zip(tokens, range(n)))
        self.token_texts = tokens
        self.virtual_texts: list[bytes] = []  # text of virtual id n + k
        self._virtual_ids: dict[bytes, int] = {}
        # Each byte's initial symbol: its GPT-2 character's token, or a virtual one (SmolLM2 has
        # no token for 21 byte values; llama.cpp then drops the byte).
        self.byte_ids = [self._symbol_id(c.encode()) for c in BYTE_TO_CHAR]
        # The stride leaves room for virtual ids (at most one per merge) in a pair key.
        self.stride = n + len(merges) + 256
        self.shift = self.stride.bit_length()
        self.mask = (1 << self.shift) - 1
        self._merges = merges
        self._ranks: dict[int, int] | None = None
        # With the kernel, its merge table is built in C from the raw merges (build_merges, the
        # twin of _build_ranks; ~10x faster and without a 150k-entry dict), and ``ranks`` only
        # when something asks for it. Either way a bad merge is refused here, at load.
        module = kernel_module()
        self._merge_table = self._build_merge_table(module) if module is not None else None
        if self._merge_table is None:
            self._ranks = self._build_ranks(merges)

    @property
    def ranks(self) -> dict[int, int]:
        """``left_id * stride + right_id`` -> ``rank << shift | merged_id`` (built on first use
        when the kernel holds its own table)."""
        if self._ranks is None:
            self._ranks = self._build_ranks(self._merges)
        return self._ranks

    def _build_merge_table(self, module) -> bytes | None:
        """The kernel's merge table from ``module.build_merges``; its new virtual symbols are
        recorded here in the same order :meth:`_build_ranks` gives them. None: a merge names a
        missing token (the caller's :meth:`_build_ranks` raises the reference's error)."""
        as_list = lambda seq: seq if type(seq) is list else list(seq)  # noqa: E731
        built = module.build_merges(as_list(self.token_texts), as_list(self._merges), self.virtual_texts)
        if built is None:
            return None
        table, new_virtual = built
        for text in new_virtual:
            self._symbol_id(text)
        return table

    def _symbol_id(self, text: bytes) -> int:
        token_id = self.token_to_id.get(text)
        if token_id is not None:
            return token_id
        token_id = self._virtual_ids.get(text)
        if token_id is None:
            token_id = self._virtual_ids[text] = self.n_tokens + len(self.virtual_texts)
            self.virtual_texts.append(text)
        return token_id

    def _build_ranks(self, merges: list[bytes]) -> dict[int, int]:
        """The merge table, built with whole-list operations (151k merges in ~0.1 s, not ~0.6 s).

        Falls back to :meth:`_build_ranks_reference` when a merge does not have the plain
        ``"left right"`` form or names a missing token, so odd files get the reference's behaviour
        and its error messages.
        """
        # Split at the first space at byte index >= 1 (llama.cpp). With exactly one space in each
        # merge and none leading, that is a split of the joined list at every space.
        count = len(merges)
        halves = b" ".join(merges).split(b" ")
        if len(halves) != 2 * count or list(map(bytes.count, merges, repeat(b" "))).count(1) != count:
            return self._build_ranks_reference(merges)  # a merge with 0 or 2+ spaces: rare, exact there
        lefts, rights = halves[0::2], halves[1::2]
        if b"" in lefts:
            return self._build_ranks_reference(merges)  # a leading space splits elsewhere
        get = self.token_to_id.get
        left_ids = list(map(get, lefts))
        right_ids = list(map(get, rights))
        if None in left_ids or None in right_ids:
            return self._build_ranks_reference(merges)  # for its error message
        merged_ids = list(map(get, map(bytes.__add__, lefts, rights)))
        if None in merged_ids:  # results that are not tokens get virtual ids, in rank order
            merged_ids = [m if m is not None else self._symbol_id(lefts[r] + rights[r]) for r, m in enumerate(merged_ids)]
        stride, shift = self.stride, self.shift
        # (None was ruled out above; the casts tell the type checker so)
        keys = [a * stride + b for a, b in zip(cast("list[int]", left_ids), cast("list[int]", right_ids))]
        values = [r << shift | m for r, m in enumerate(cast("list[int]", merged_ids))]
        # subtle: a duplicate merge keeps its first (lowest) rank; dict() keeps the last value
        # of a key, so feed it in reverse.
        keys.reverse()
        values.reverse()
        return dict(zip(keys, values))

    def _build_ranks_reference(self, merges: list[bytes]) -> dict[int, int]:
        """The merge table, one merge at a time: the readable version of :meth:`_build_ranks`."""
        token_to_id, stride, shift = self.token_to_id, self.stride, self.shift
        ranks: dict[int, int] = {}
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
                    f"{self.path}: merge {rank} {merge.decode('utf-8', 'replace')!r} names "
                    f"{missing.decode('utf-8', 'replace')!r}, which is not in 'tokenizer.ggml.tokens'; "
                    "llama.cpp's result for such a vocabulary is not reproducible, so it is refused"
                )
            key = left_id * stride + right_id
            if key not in ranks:  # a duplicate merge keeps its first (lowest) rank
                ranks[key] = rank << shift | self._symbol_id(left + right)
        return ranks

    def make_kernel(self, cache_bytes: int, chunk_bytes: int = 0, split: str = ""):
        """These tables in the compiled kernel, with a piece cache of ``cache_bytes`` and a space
        chunk cache of ``chunk_bytes``; None when the kernel is not available (see :func:`kernel_module`).
        ``split``: the kernel's own splitter (a :attr:`PreTokenizerSpec.kernel_split`), used only
        if this build has it (``kernel.split`` says which one runs, or None)."""
        module = kernel_module()
        if module is None:
            return None
        split_name = split if split in module.SPLITTERS else None
        n = self.n_tokens
        return module.Kernel(
            self.byte_ids,
            self._merge_table if self._merge_table is not None else self.ranks,
            self.stride,
            self.shift,
            n,
            [self._emit([n + k]) for k in range(len(self.virtual_texts))],
            self.token_to_id if self.ignore_merges else None,
            [c.encode() for c in BYTE_TO_CHAR],
            cache_bytes,
            int.from_bytes(os.urandom(8), "little"),
            chunk_bytes,
            split_name,
        )

    # -- encoding --------------------------------------------------------------------------------

    def _whole_token(self, piece: bytes) -> int | None:
        """With ``ignore_merges`` (llama3), the id of a piece that is already a token: no BPE then."""
        if not self.ignore_merges:
            return None
        return self.token_to_id.get(byte_encode(piece).encode())

    def encode_piece(self, piece: bytes) -> list[int]:
        """BPE one pre-tokenized piece (its UTF-8 bytes) to ids, with the fast merge loop.

        >>> # with merges "a a" and "aa a" absent: "aaa" -> ["aa", "a"] (leftmost on ties)
        """
        whole = self._whole_token(piece)
        if whole is not None:
            return [whole]
        return self._emit(self.merge_symbols_fast(list(map(self.byte_ids.__getitem__, piece))))

    def encode_piece_reference(self, piece: bytes) -> list[int]:
        """:meth:`encode_piece` with the reference merge loop (for tests and benchmarks)."""
        whole = self._whole_token(piece)
        if whole is not None:
            return [whole]
        return self._emit(self.merge_symbols([self.byte_ids[b] for b in piece]))

    def merge_symbols_fast(self, ids: list[int]) -> list[int]:
        """:meth:`merge_symbols`, faster on short pieces; ``ids`` is consumed.

        ``pair[i]`` is the packed rank of (``ids[i]``, ``ids[i + 1]``) or a sentinel above every
        rank; each step merges the leftmost lowest pair and recomputes only its two neighbours.
        """
        count = len(ids)
        if count < 2:
            return ids
        if count > self.SCAN_LIMIT:  # no quadratic scan on long pieces
            return self._merge_long(ids) if count > self.LONG_LIMIT else self.merge_symbols(ids)
        get, stride, mask = self.ranks.get, self.stride, self.mask
        never = 1 << 62  # above every packed rank
        pair = [get(a * stride + b, never) for a, b in zip(ids, ids[1:])]
        while True:
            best = min(pair)
            if best == never:
                return ids
            # subtle: equal packed values are the same merge, so index() gives the leftmost.
            i = pair.index(best)
            merged = best & mask
            ids[i] = merged
            del ids[i + 1]
            del pair[i]
            if i:
                pair[i - 1] = get(ids[i - 1] * stride + merged, never)
            if i < len(pair):
                pair[i] = get(merged * stride + ids[i + 1], never)
            elif not pair:
                return ids

    def _merge_long(self, ids: list[int]) -> list[int]:
        """:meth:`merge_symbols` for long pieces, one merge rule at a time.

        Left positions are kept in one bucket per rank; ranks are taken in increasing order and
        each bucket's positions left to right, which is the order the heap pops them in as long
        as no merge creates a pair ranked below the one being applied (then the heap decides).
        On 1 MB of one letter this is a few passes, where a heap would do a million pops.
        """
        count = len(ids)
        get, stride, mask = self.ranks.get, self.stride, self.mask
        original = list(ids)
        nxt = list(range(1, count + 1))
        prv = list(range(-1, count - 1))
        buckets: dict[int, list[int]] = {}  # packed rank -> left positions
        pairs: dict[int, int] = {}  # packed rank -> its pair key
        for i, key in enumerate(map(int.__add__, map(stride.__mul__, ids), ids[1:])):
            packed = get(key)
            if packed is not None:
                bucket = buckets.get(packed)
                if bucket is None:
                    buckets[packed] = [i]
                    pairs[packed] = key
                else:
                    bucket.append(i)
        order = list(buckets)
        heapq.heapify(order)
        while order:
            packed = heapq.heappop(order)
            positions = buckets.pop(packed)
            positions.sort()
            merged = packed & mask
            first, second = divmod(pairs[packed], stride)
            for left in positions:
                if ids[left] != first:
                    continue  # stale: the left symbol was merged since this position was queued
                right = nxt[left]
                if right >= count or ids[right] != second:
                    continue
                ids[left] = merged
                ids[right] = -1
                nxt[left] = after = nxt[right]
                if after < count:
                    prv[after] = left
                    key = merged * stride + ids[after]
                    found = get(key)
                    if found is not None:
                        if found <= packed:
                            return self.merge_symbols(original)  # out of rank order: let the heap decide
                        bucket = buckets.get(found)
                        if bucket is None:
                            buckets[found] = [left]
                            pairs[found] = key
                            heapq.heappush(order, found)
                        else:
                            bucket.append(left)
                before = prv[left]
                if before >= 0:
                    key = ids[before] * stride + merged
                    found = get(key)
                    if found is not None:
                        if found <= packed:
                            return self.merge_symbols(original)
                        bucket = buckets.get(found)
                        if bucket is None:
                            buckets[found] = [before]
                            pairs[found] = key
                            heapq.heappush(order, found)
                        else:
                            bucket.append(before)
        return [s for s in ids if s >= 0]

    def merge_symbols(self, symbols: list[int]) -> list[int]:
        """Merge a list of symbol ids until no adjacent pair has a rank; returns the survivors.

        A heap of (rank, left position) over a linked list; stale entries are skipped when popped
        (lazy deletion), so each merge costs O(log n) instead of a rescan of all pairs.
        """
        count = len(symbols)
        if count < 2:
            return symbols
        ranks, stride, mask = self.ranks, self.stride, self.mask
        ids = list(symbols)
        nxt = list(range(1, count + 1))
        prv = list(range(-1, count - 1))
        heap = []
        for i in range(count - 1):
            found = ranks.get(ids[i] * stride + ids[i + 1])
            if found is not None:
                heap.append((found, i, ids[i], ids[i + 1]))
        heapq.heapify(heap)
        while heap:
            packed, left, left_id, right_id = heapq.heappop(heap)
            right = nxt[left]
            # Stale: either side was merged since this entry was pushed.
            if ids[left] != left_id or right >= count or ids[right] != right_id:
                continue
            ids[left] = merged = packed & mask
            ids[right] = -1
            nxt[left] = after = nxt[right]
            if after < count:
                prv[after] = left
            before = prv[left]
            if before >= 0:
                found = ranks.get(ids[before] * stride + merged)
                if found is not None:
                    heapq.heappush(heap, (found, before, ids[before], merged))
            if after < count:
                found = ranks.get(merged * stride + ids[after])
                if found is not None:
                    heapq.heappush(heap, (found, left, merged, ids[after]))
        out, i = [], 0
        while i < count:
            out.append(ids[i])
            i = nxt[i]
        return out

    def normal_piece(self, text: bytes) -> bytes:
        """The bytes of a NORMAL token: its GPT-2 characters decoded (:func:`decode_token_text`)."""
        return decode_token_text(text)

    def _emit(self, symbols: list[int]) -> list[int]:
        n = self.n_tokens
        if max(symbols, default=0) < n:
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


def decode_token_text(text: bytes) -> bytes:
    """A byte-level token's text (GPT-2's printable characters) back to the bytes it stands for.

    A character outside GPT-2's alphabet gives llama.cpp's marker, with the whole token text
    (llama-vocab.cpp, ``llama_decode_text``).

    >>> decode_token_text("Ġhi".encode())
    b' hi'
    """
    out = bytearray()
    for char in _llama_utf8_chars(text):
        b = CHAR_TO_BYTE.get(char)
        if b is not None:
            out.append(b)
        else:
            out += b"[UNK_BYTE_0x" + char.encode("utf-8", "surrogatepass").hex().encode() + text + b"]"
    return bytes(out)


def _llama_utf8_chars(data: bytes):
    """Split bytes into characters the way llama.cpp decodes UTF-8: an invalid byte is U+FFFD, one byte at a time."""
    try:
        yield from data.decode("utf-8", "surrogatepass")
        return
    except UnicodeDecodeError:
        pass
    i, n = 0, len(data)
    while i < n:
        b = data[i]
        length = 1 if b < 0x80 else 2 if 0xC0 <= b < 0xE0 else 3 if 0xE0 <= b < 0xF0 else 4 if 0xF0 <= b < 0xF8 else 0
        if length == 1:
            yield chr(b)
            i += 1
            continue
        tail = data[i + 1 : i + length]
        if length and len(tail) == length - 1 and all(0x80 <= c < 0xC0 for c in tail):
            cp = b & (0x7F >> length)
            for c in tail:
                cp = (cp << 6) | (c & 0x3F)
            yield chr(cp) if cp < 0x110000 else "\ufffd"
            i += length
        else:
            yield "\ufffd"
            i += 1
