"""The vectorised BPE of many pieces at once (numpy), a part of :class:`~bpetok.models.gpt2.bpe.BytePairModel`.

Every piece of 1..``BATCH_LONGEST`` bytes merges its own lowest-ranked pair (the leftmost on ties)
in the same round, so a round costs a few array operations for all pieces together; that is the
same merge order as one piece at a time, since pieces never interact. tests/test_bpe_batch.py
holds it to the reference merge loop.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence, cast

__all__ = ["BatchMerge"]


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



class BatchMerge:
    """:meth:`encode_pieces` and its numpy machinery, mixed into BytePairModel (whose tables,
    ``encode_piece`` and ``merge_symbols_fast`` it uses)."""

    # Provided by BytePairModel.
    byte_ids: list[int]
    stride: int
    shift: int
    mask: int
    n_tokens: int
    ignore_merges: bool
    _arrays: Any

    @property
    def ranks(self) -> dict[int, int]:
        raise NotImplementedError

    def encode_piece(self, piece: bytes) -> list[int]:
        raise NotImplementedError

    def merge_symbols_fast(self, ids: list[int]) -> list[int]:
        raise NotImplementedError

    def _whole_token(self, piece: bytes) -> int | None:
        raise NotImplementedError

    def _emit(self, symbols: list[int]) -> list[int]:
        raise NotImplementedError

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


def _ranges(starts, lengths):
    """The indices of ``starts[k] : starts[k] + lengths[k]`` for each k, in one array.

    >>> import numpy as np
    >>> _ranges(np.array([5, 0]), np.array([2, 3])).tolist()
    [5, 6, 0, 1, 2]
    """
    import numpy as np

    total = int(lengths.sum())
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)
