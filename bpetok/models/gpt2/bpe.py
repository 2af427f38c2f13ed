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

from bpetok.compiled import compiled_module, pure_python_reason
from bpetok.errors import VocabularyError
from bpetok.utf8 import decode_llama_utf8

__all__ = [
    "BYTE_TO_CHAR", "CHAR_TO_BYTE", "byte_encode", "decode_token_text", "merge_symbols", "BytePairModel", "kernel_module",
    "engine",
]


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


def merge_symbols(symbols: list[int], ranks: dict[int, int], stride: int, mask: int) -> list[int]:
    """BPE of one piece: merge the adjacent pair of lowest rank, the leftmost on ties, until no
    pair has a merge; returns the symbols left. The pure engine's loop, and the readable twin of
    the C kernel's (``bpetok/models/gpt2/kernel/merge.c``) and the trainer's.

    ``ranks`` maps a pair ``left * stride + right`` to ``rank << shift | merged``: one int that
    orders by rank and carries the merged symbol in its low bits (``mask``). The symbols are a
    linked list and the pairs a heap, as in llama.cpp, so n symbols cost O(n log n), even 1 MB of
    one letter.

    >>> merge_symbols([1, 1, 1], {1 * 8 + 1: 0 << 3 | 2}, 8, 7)  # "1 1" -> 2: leftmost first
    [2, 1]
    """
    ids = list(symbols)
    count = len(ids)
    # Each position's neighbours in the list (count: none after, -1: none before).
    nxt = list(range(1, count + 1))
    prv = list(range(-1, count - 1))
    # Every adjacent pair that has a merge, as (packed rank, left position, pair): the heap pops
    # the lowest rank first and, on equal ranks (the same merge), the leftmost.
    heap = []
    for i in range(count - 1):
        pair = ids[i] * stride + ids[i + 1]
        if pair in ranks:
            heap.append((ranks[pair], i, pair))
    heapq.heapify(heap)
    while heap:
        packed, left, pair = heapq.heappop(heap)
        # Skip a stale entry: a merge since it was queued changed a symbol of it (a merged-away
        # position holds -1, so its pair cannot match).
        right = nxt[left]
        if right >= count or ids[left] * stride + ids[right] != pair:
            continue
        # Merge: the left position takes the merged symbol, the right one leaves the list.
        merged = packed & mask
        ids[left], ids[right] = merged, -1
        after = nxt[left] = nxt[right]
        if after < count:
            prv[after] = left
        # The merged symbol's pairs with its new neighbours join the queue, if they have a merge.
        before = prv[left]
        if before >= 0:
            pair = ids[before] * stride + merged
            if pair in ranks:
                heapq.heappush(heap, (ranks[pair], before, pair))
        if after < count:
            pair = merged * stride + ids[after]
            if pair in ranks:
                heapq.heappush(heap, (ranks[pair], left, pair))
    # The survivors, in order.
    return [s for s in ids if s >= 0]


class BytePairModel:
    """Merge tables for one vocabulary, built once; :meth:`encode_piece` runs BPE on one piece
    (:func:`merge_symbols`).

    ``ranks`` maps ``left_id * stride + right_id`` to ``rank << shift | merged_id``: one int that
    orders by rank (so the heap needs no tuple key) and carries the merged symbol in its low bits.
    With the kernel, its own table is built in C (``build_merges``) and ``ranks`` only on demand.
    """

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
        # One builder per engine: the kernel's in C (build_merges), else _build_ranks. Either
        # way a bad merge is refused here, at load.
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
        missing token (the caller's :meth:`_build_ranks` raises the error)."""
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
        """The merge table, one merge at a time (the twin of the kernel's ``build_merges``)."""
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

    def encode_piece(self, piece: bytes) -> list[int]:
        """BPE one pre-tokenized piece (its UTF-8 bytes) to ids: each byte's symbol, merged by
        :func:`merge_symbols`, then the symbols that are no token as their bytes (:meth:`_emit`).
        With ``ignore_merges`` (llama3) a piece that is already a token is that token."""
        if self.ignore_merges:
            whole = self.token_to_id.get(byte_encode(piece).encode())
            if whole is not None:
                return [whole]
        return self._emit(merge_symbols([self.byte_ids[b] for b in piece], self.ranks, self.stride, self.mask))

    # The name tests hold the kernel's encode_piece to: the pure engine is the reference.
    encode_piece_reference = encode_piece

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
    """A byte-level token's text (GPT-2's printable characters) back to the bytes it stands for
    (llama-vocab.cpp, ``llama_decode_text``).

    The text is read as llama.cpp reads UTF-8 (:func:`bpetok.utf8.decode_llama_utf8`); a
    character outside GPT-2's alphabet gives llama.cpp's marker, with the whole token text. A
    sequence past U+10FFFF raises :class:`bpetok.utf8.BeyondUnicode`: llama.cpp refuses to load
    the vocabulary (its ``unicode_cpt_to_utf8`` throws).

    >>> decode_token_text("Ġhi".encode()), decode_token_text(b"\\xff!")
    (b' hi', b'[UNK_BYTE_0xefbfbd\\xff!]!')
    """
    out = bytearray()
    for char in decode_llama_utf8(text):
        b = CHAR_TO_BYTE.get(char)
        if b is not None:
            out.append(b)
        else:
            out += b"[UNK_BYTE_0x" + char.encode("utf-8", "surrogatepass").hex().encode() + text + b"]"
    return bytes(out)
