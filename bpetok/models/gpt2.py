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
from typing import Any, NamedTuple, Sequence, cast

from bpetok.compiled import compiled_module, pure_python_forced
from bpetok.errors import VocabularyError
from bpetok.hookspecs import hookimpl
from bpetok.models import ModelSpec

__all__ = ["BYTE_TO_CHAR", "CHAR_TO_BYTE", "byte_encode", "decode_token_text", "BytePairModel", "kernel_module", "engine"]


def kernel_module():
    """The compiled kernel (``bpetok/models/_bpe.c``), or None: not built, or ``BPETOK_PURE_PYTHON=1``."""
    return compiled_module("bpetok.models._bpe")


def engine() -> str:
    """Which BPE engine runs: ``"C kernel"``, or ``"pure Python: "`` and why."""
    if kernel_module() is not None:
        return "C kernel"
    if pure_python_forced():
        return "pure Python: BPETOK_PURE_PYTHON is set"
    return "pure Python: the C kernel is not built"


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


class _BatchTables(NamedTuple):
    """What :meth:`BytePairModel._merge_batch` looks up, built once per model."""

    # An open-addressing hash table of the merges, one int64 a slot: rank << rank_shift, then the
    # pair key's hash (below, ``hash_mask``), which identifies the key (see _hash_keys). An empty
    # slot holds ``never | hash_mask``.
    table: Any
    bits: int  # the table has 1 << bits slots
    hash_bits: int  # pair keys are below 1 << hash_bits
    rank_shift: int  # a rank's place in a batch's packed state (see _merge_batch)
    never: int  # the rank (<< rank_shift) of a pair with no merge, above every other
    merged: Any  # rank -> the merged symbol
    byte_ids: Any  # each byte's initial symbol
    # The state of a batch's symbol that starts a byte pair, for the 65,536 pairs (at first << 8 |
    # second): the pair's rank << rank_shift | the first byte's symbol << 22.
    byte_cells: Any


class BytePairModel:
    """Merge tables for one vocabulary, built once; :meth:`encode_piece` runs BPE on one piece.

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
        split_name = split if split in getattr(module, "SPLITTERS", ()) else None
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

    def encode_pieces(self, pieces: list[bytes]) -> list[list[int]]:
        """:meth:`encode_piece` of many pieces at once: short ones share one vectorised BPE.

        With numpy, every piece of 1..:attr:`BATCH_LONGEST` bytes merges its own lowest-ranked
        pair (the leftmost on ties) in the same round, so a round costs a few array operations
        for all pieces together; that is the same merge order as one piece at a time, since
        pieces never interact. Other pieces go through :meth:`encode_piece`.
        """
        if len(pieces) < 64:  # below 64 pieces the arrays cost more than they save
            return list(map(self.encode_piece, pieces))
        import numpy as np

        lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
        longest = self.BATCH_LONGEST
        batch: Sequence[int]
        if lengths.min() > 0 and lengths.max() <= longest and not self.ignore_merges:
            batch = range(len(pieces))  # the usual case: all of them
        else:
            batch = np.flatnonzero((lengths > 0) & (lengths <= longest)).tolist()
            if self.ignore_merges:
                batch = [k for k in batch if self._whole_token(pieces[k]) is None]
        # The batch packs a rank, a symbol and a position into one int64 (see _merge_batch): a
        # vocabulary too large for that stays on the per-piece path.
        if len(batch) < 64 or self._batch_tables() is None:
            return list(map(self.encode_piece, pieces))
        if len(batch) == len(pieces):
            return self._merge_batch(pieces, lengths)
        out: list[list[int] | None] = [None] * len(pieces)
        for k, symbols in zip(batch, self._merge_batch([pieces[k] for k in batch])):
            out[k] = symbols
        for k in set(range(len(pieces))).difference(batch):
            out[k] = self.encode_piece(pieces[k])
        return cast("list[list[int]]", out)  # every slot filled

    BATCH_LONGEST = 256
    _BATCH_TAIL = 100  # below this many unfinished pieces, a batch finishes them one by one
    # Compact every other round when the pieces average more than _BATCH_SPLIT symbols and the
    # batch has more than _BATCH_SPLIT_MIN (below, a round's operations cost more than a pass).
    _BATCH_SPLIT = 12
    _BATCH_SPLIT_MIN = 20_000

    # Positions in a batch take the low 22 bits of a symbol's packed state (see _merge_batch); a
    # batch of more bytes is cut in parts.
    _BATCH_BYTES = 1 << 22

    def _batch_tables(self):
        """The arrays :meth:`_merge_batch` needs, built on first use (a cold pass pays for it).

        ``ranks`` as an open-addressing hash table (a new pair's rank is then mostly one array
        gather; a binary search over the 151k sorted keys took 3-6x longer, its accesses all
        cache misses), each rank's merged symbol, and the ranks of all 65,536 byte pairs, which
        every piece starts as. None when the vocabulary is too large to pack (see below).
        """
        import numpy as np

        tables = self.__dict__.get("_arrays", False)
        if tables is not False:
            return tables
        count = len(self.ranks)
        keys = np.fromiter(self.ranks.keys(), np.int64, count)
        packed = np.fromiter(self.ranks.values(), np.int64, count)
        ranks = packed >> self.shift
        # A batch keeps each symbol and the rank of the pair it starts in one int64: position in
        # the low 22 bits, then the symbol, then the rank, with one rank above all for "none".
        # A table slot keeps the rank and the key's hash, below the rank.
        last = int(ranks.max(initial=0))
        rank_shift = 22 + self.shift
        rank_bits = (last + 2).bit_length()
        hash_bits = (self.stride * self.stride - 1).bit_length()
        if rank_shift + rank_bits > 63 or hash_bits > rank_shift:
            self._arrays = None  # a vocabulary too large for that: no batch
            return None
        never = ((1 << rank_bits) - 1) << rank_shift
        merged = np.zeros(last + 1, np.int64)
        merged[ranks] = packed & self.mask
        # A load of at most 1/6: few probes, even for the many pairs that have no merge (a load
        # of 1/3 took 40% longer to look up, on the multi corpus).
        bits = max(count * 6, 1024).bit_length()
        size = 1 << bits
        hashes = self._hash_keys(keys, hash_bits)
        slots = hashes >> (hash_bits - bits)
        # Insert with linear probing, all keys at once: each round, of the keys aiming at a free
        # slot, one takes it (whichever numpy writes last) and the others move on to the next
        # slot. Any order of insertion makes a table that lookups probe correctly.
        slot_of = np.full(size, -1, np.int32)  # the index of the key in each slot, -1 if empty
        pending = np.arange(count, dtype=np.int32)
        slot_of[slots] = pending  # the first round: every slot is free
        pending = pending[slot_of[slots] != pending]
        slots[pending] = (slots[pending] + 1) & (size - 1)
        while len(pending):
            aim = slots[pending]
            free = slot_of[aim] == -1
            slot_of[aim[free]] = pending[free]
            pending = pending[slot_of[aim] != pending]
            slots[pending] = (slots[pending] + 1) & (size - 1)
        # Every key now sits at slots[its index].
        table = np.full(size, never | ((1 << hash_bits) - 1), np.int64)
        table[slots] = ranks << rank_shift | hashes
        byte_ids = np.array(self.byte_ids, np.int64)
        tables = _BatchTables(table, bits, hash_bits, rank_shift, never, merged, byte_ids, None)
        pair_keys = (byte_ids[:, None] * self.stride + byte_ids[None, :]).ravel()
        byte_cells = self._pair_ranks(tables, pair_keys) | np.repeat(byte_ids << 22, 256)
        tables = self._arrays = tables._replace(byte_cells=byte_cells)
        return tables

    @staticmethod
    def _hash_keys(keys, hash_bits: int):
        """Fibonacci hashing modulo ``2**hash_bits``: ``key * odd`` is a bijection of the keys
        below ``2**hash_bits``, so a hash stands for its key; its top bits pick the slot."""
        import numpy as np

        multiplier = np.uint64(0x9E3779B97F4A7C15 & ((1 << hash_bits) - 1) | 1)
        product = keys.view(np.uint64) * multiplier  # wraps mod 2**64, so right mod 2**hash_bits
        return product.view(np.int64) & ((1 << hash_bits) - 1)

    def _pair_ranks(self, tables, keys):
        """The ranks (<< rank_shift) of pair ``keys``, ``never`` for a pair with no merge."""
        import numpy as np

        table, bits, hash_bits, _, never = tables[:5]
        hash_mask = (1 << hash_bits) - 1
        hashes = self._hash_keys(keys, hash_bits)
        slots = hashes >> (hash_bits - bits)
        found = np.take(table, slots)  # (take: faster than fancy indexing)
        out = found & ~hash_mask  # right where the slot holds the key, or is empty (never)
        probe = np.flatnonzero((found & hash_mask) != hashes)
        if len(probe):
            empty = never | hash_mask
            out[probe] = never
            probe = probe[found[probe] != empty]  # another key: probe on
            hashes, slots, mask = hashes[probe], slots[probe], (1 << bits) - 1
            while len(probe):
                slots = (slots + 1) & mask
                found = np.take(table, slots)
                hit = (found & hash_mask) == hashes
                out[probe[hit]] = found[hit] & ~hash_mask
                more = ~hit & (found != empty)
                probe, hashes, slots = probe[more], hashes[more], slots[more]
        return out

    def _merge_batch(self, pieces: list[bytes], lengths=None) -> list[list[int]]:
        """Vectorised :meth:`merge_symbols` over many pieces of at least one byte each
        (``lengths``: their lengths, as an array, if the caller has them).

        All pieces' symbols lie back to back in ``state``, one int64 each: the rank of the pair
        the symbol starts (``never`` for a piece's last symbol or a pair with no merge), then the
        symbol, then 22 bits for its position. With the positions there (OR-ed in each round,
        or kept in while the pieces are long), one ``minimum.reduceat`` gives each piece's
        lowest pair and, on ties (the same merge, so the same left symbol), its leftmost; each
        round merges it. After a merge only the two pairs beside it change: they are looked up
        before the right symbol is dropped, while the neighbours are the cells beside it.

        Dropping symbols is a pass over the whole state: for long pieces every other round
        leaves them as holes instead (the next round's neighbours may be one cell further).
        The last :attr:`_BATCH_TAIL` pieces finish one by one (:meth:`merge_symbols_fast` from
        where the rounds left them), cheaper than rounds of tens of operations for a few pieces.
        """
        import numpy as np

        if lengths is None:
            lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))  # symbols left per piece
        if lengths.sum() >= self._BATCH_BYTES:  # pair positions must fit in 22 bits
            if len(pieces) == 1:
                return [self.encode_piece(pieces[0])]
            half = len(pieces) // 2
            return self._merge_batch(pieces[:half], lengths[:half]) + self._merge_batch(pieces[half:], lengths[half:])
        tables = self._batch_tables()
        never, merged, rank_shift = tables.never, tables.merged, tables.rank_shift
        stride, mask, low = self.stride, self.mask, (1 << 22) - 1

        raw = np.frombuffer(b"".join(pieces), np.uint8)
        lengths = lengths.copy()  # (decremented in place below)
        owner = np.arange(len(pieces))  # the piece each active sequence is
        # A piece's cells, from its start: its symbols (and one hole, after a split round).
        starts = np.cumsum(lengths) - lengths
        state = np.empty(len(raw), np.int64)
        pair = raw[:-1].astype(np.uint16)  # (16 bits: a fraction of int64's memory traffic)
        pair <<= 8
        pair |= raw[1:]
        np.take(tables.byte_cells, pair, out=state[:-1])
        last = starts + lengths - 1  # a piece's last symbol starts no pair
        state[last] = never | tables.byte_ids[raw[last]] << 22
        positions = np.arange(len(raw), dtype=np.uint32)  # (half the memory traffic of int64)
        key = None  # state | positions, when they are not in the state; reused each round
        # The positions are in the state's low bits (baked) while the pieces are long, else
        # OR-ed into ``key`` each round; a split round (long pieces only) leaves its dropped
        # symbols as holes until the next round has merged too.
        split = False
        baked = len(raw) > max(self._BATCH_SPLIT * len(pieces), self._BATCH_SPLIT_MIN)
        if baked:
            state |= positions
        hole = (1 << 63) - 1  # a dropped symbol's cell: above every pair
        dropped = 0  # merged-away symbols to drop at the next compaction
        # Finished pieces, in the order they finish: their owners, lengths and symbols.
        done_owner, done_length, done_sym = [], [], []

        while True:
            count = len(state)
            if baked:
                lowest = np.minimum.reduceat(state, starts)
            else:
                if key is None:
                    key = np.empty(count, np.int64)
                np.bitwise_or(state, positions[:count], out=key[:count])
                lowest = np.minimum.reduceat(key[:count], starts)
            merging = lowest < never
            if not split:
                keep = np.ones(count, bool)
            if not merging.all():
                # A piece with no merge left (or one symbol) is finished.
                gone = ~merging
                span = _ranges(starts[gone], lengths[gone] + split)
                cells = state[span]
                done_owner.append(owner[gone])
                done_length.append(lengths[gone])
                done_sym.append((cells[cells != hole] if split else cells) >> 22 & mask)
                if not merging.any():
                    break
                keep[span] = False
                lowest, starts, lengths, owner = lowest[merging], starts[merging], lengths[merging], owner[merging]
            if len(owner) < self._BATCH_TAIL:
                # A few pieces left (long ones, usually): a round's fixed cost, tens of array
                # operations, is more than their remaining merges cost one piece at a time.
                cells = state[_ranges(starts, lengths + split)]
                rest = np.split((cells[cells != hole] if split else cells) >> 22 & mask, np.cumsum(lengths)[:-1])
                symbols = [np.array(self.merge_symbols_fast(ids.tolist()), np.int64) for ids in rest]
                done_owner.append(owner)
                done_length.append(np.fromiter(map(len, symbols), np.int64, len(symbols)))
                done_sym.append(np.concatenate(symbols))
                break
            where = lowest & low  # the left symbol of the merge
            symbol = merged[lowest >> rank_shift]
            before, right = where - 1, where + 1
            if split:
                # The last round left a hole in each piece: a cell beside a symbol may be it,
                # and the neighbour then the cell past it.
                before -= np.take(state, before) == hole
                right += np.take(state, right) == hole
            after = right + 1
            if split:
                after += np.take(state, after, mode="clip") == hole
            # The pairs the merged symbol ends and starts, where it has neighbours, looked up
            # together.
            has_before = np.flatnonzero(before >= starts)
            has_after = np.flatnonzero(after < starts + lengths + split)
            before = before[has_before]
            left = (state[before] >> 22) & mask
            right_symbol = (state[after[has_after]] >> 22) & mask
            keys = np.concatenate((left * stride + symbol[has_before], symbol[has_after] * stride + right_symbol))
            found = self._pair_ranks(tables, keys)
            own = np.full(len(where), never)  # the rank of the pair the merged symbol starts
            own[has_after] = found[len(has_before) :]
            if baked:
                state[before] = found[: len(has_before)] | left << 22 | before
                state[where] = own | symbol << 22 | where
            else:
                state[before] = found[: len(has_before)] | left << 22
                state[where] = own | symbol << 22
            keep[right] = False
            dropped += len(where)
            lengths -= 1
            if baked and not split:
                # Long pieces: leave the dropped symbols as holes for one round, which costs
                # it a few operations per piece, and save a pass over all their symbols.
                state[right] = hole
                split = True
                continue
            # Drop the merged pairs' right symbols and the finished pieces.
            # (Boolean indexing branches on each element: slower than compress once many go.)
            state = np.compress(keep, state) if dropped * 10 > count else state[keep]
            split, dropped = False, 0
            starts = np.cumsum(lengths) - lengths
            if baked:
                state &= ~low
            baked = len(state) > max(self._BATCH_SPLIT * len(lengths), self._BATCH_SPLIT_MIN)
            if baked:
                state |= positions[: len(state)]
        # subtle: make the ints in piece order, one tolist(), not in the order pieces finished:
        # the caches keep them, and a warm pass reads them in text order (measurably faster).
        finish_owner = np.concatenate(done_owner)
        finish_length = np.concatenate(done_length)
        finish_sym = np.concatenate(done_sym)
        place = np.empty_like(finish_owner)  # piece -> its place in the finishing order
        place[finish_owner] = np.arange(len(finish_owner))
        sizes = finish_length[place]
        flat = finish_sym[_ranges((np.cumsum(finish_length) - finish_length)[place], sizes)]
        bounds = np.cumsum(sizes).tolist()
        values = flat.tolist()
        out = [values[a:b] for a, b in zip([0, *bounds], bounds)]
        if len(flat) and flat.max() >= self.n_tokens:  # a virtual symbol: emit its bytes
            virtual = np.maximum.reduceat(flat, np.cumsum(sizes) - sizes) >= self.n_tokens
            for k in np.flatnonzero(virtual).tolist():
                out[k] = self._emit(out[k])
        return out

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


def _ranges(starts, lengths):
    """The indices of ``starts[k] : starts[k] + lengths[k]`` for each k, in one array.

    >>> import numpy as np
    >>> _ranges(np.array([5, 0]), np.array([2, 3])).tolist()
    [5, 6, 0, 1, 2]
    """
    import numpy as np

    total = int(lengths.sum())
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)


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


# -- the model's registration (bpetok_register_models) ------------------------------------------


def _build_model(vocabulary, pretokenizer):
    """The byte-level model, or its raw-UTF-8 variant where the pre-tokenizer spec says
    ``byte_encode=False`` (llama.cpp's gemma4, mmbert, sarvam-moe, whitespace types)."""
    if not pretokenizer.byte_encode:
        from bpetok.models.raw_utf8 import RawUtf8Model  # imports this module

        return RawUtf8Model(vocabulary, pretokenizer)
    return BytePairModel(
        vocabulary.tokens,
        vocabulary.merges,
        ignore_merges=pretokenizer.ignore_merges,
        path=vocabulary.path,
        token_to_id=vocabulary.token_index(),
    )


@hookimpl
def bpetok_register_models(register) -> None:
    register(
        ModelSpec(
            name="gpt2",
            factory=_build_model,
            # llama.cpp's BPE default: BOS and EOS are id 11 unless the file says otherwise.
            special_ids={"bos": 11, "eos": 11},
            description="byte-level BPE over GPT-2's byte alphabet, split by the pre-tokenizer of tokenizer.ggml.pre",
        )
    )
