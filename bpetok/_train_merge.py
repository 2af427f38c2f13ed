"""The trainer's merge machinery: corpus pair counts, the vocabulary being built, pin chains.

Each fast structure here has one plain twin that the tests hold it equal to:
:class:`_PairCounts` / :class:`_RecountedPairs` (the merge loop) and :func:`_add_chain` /
:func:`_reference_chain` (a pin's merge chain). The fast ones cost time linear (times a log) in the
corpus and the pins, however long one piece or pin is: a merge touches only the occurrences of its
pair, never a whole piece. :class:`_PairCounts` is in turn the readable twin of ``PairCounts`` in
bpetok/_train.c, the same loop in C, which the trainer runs when it is built.
"""

from __future__ import annotations

import heapq
from array import array
from collections import Counter, defaultdict
from typing import Iterable, Sequence

from bpetok.errors import BpetokError
from bpetok.models.gpt2 import BYTE_TO_CHAR, merge_symbols
from bpetok.vocab import TokenType

STRIDE = 1 << 24  # a pair (left, right) is the int left * STRIDE + right; ids stay below 16M
MERGED = STRIDE - 1  # a merge's packed rank is rank << 24 | merged id: these are the id's bits
END = -1  # no next (or previous) symbol: the end of a word


# -- the merge loop ------------------------------------------------------------------------------


class _PairCounts:
    """Every unique word's symbols in one linked list, with incrementally maintained pair counts.

    Position ``p`` holds symbol ``sym[p]`` (-1 once merged into its left neighbour), of a word
    counted ``weight[p]`` times; ``nxt[p]``/``prv[p]`` are the live neighbours in the same word
    (:data:`END` at its ends). A merge keeps its left position, so positions stay in text order.
    ``counts[pair]`` is the weighted number of times ``pair`` is adjacent; ``where[pair]`` the
    positions where it was adjacent when recorded (a superset: a stale one is skipped when met);
    ``heap`` holds ``(-count, pair)`` with, for every pair, at least one entry whose count is >=
    the pair's current count (lazy deletion: stale entries are fixed when popped).
    """

    def __init__(self, words: Iterable[bytes | list[int]], freqs: Sequence[int]):
        sym, nxt, prv, weight = array("i"), array("q"), array("q"), array("q")
        counts: dict[int, int] = defaultdict(int)
        where: dict[int, array] = defaultdict(lambda: array("q"))
        starts = []
        for word, f in zip(words, freqs):
            base, n = len(sym), len(word)
            starts.append(base if n else END)
            sym.extend(word)
            weight.extend([f] * n)
            nxt.extend(range(base + 1, base + n + 1))
            prv.extend(range(base - 1, base + n - 1))
            if n:
                nxt[-1] = prv[base] = END
            for i in range(n - 1):
                pair = word[i] * STRIDE + word[i + 1]
                counts[pair] += f
                where[pair].append(base + i)
        self.sym, self.nxt, self.prv, self.weight, self.starts = sym, nxt, prv, weight, starts
        self.freqs = freqs
        self.counts, self.where = counts, where
        self.heap = [(-c, pair) for pair, c in counts.items()]
        heapq.heapify(self.heap)

    @property
    def words(self) -> list[list[int]]:
        """The words' current symbols (for tests: a word's first position is never merged away)."""
        out = []
        for p in self.starts:
            word = []
            while p != END:
                word.append(self.sym[p])
                p = self.nxt[p]
            out.append(word)
        return out

    def best(self, min_frequency: int) -> int | None:
        """The most frequent pair (ties: smallest left id, then right id), or None below min_frequency."""
        heap, counts = self.heap, self.counts
        while heap:
            neg, pair = heap[0]
            current = counts.get(pair, 0)
            if current == -neg:
                return pair if current >= min_frequency else None
            heapq.heappop(heap)
            # subtle: current > -neg means a newer, larger entry exists; only a shrunk count is re-pushed.
            if current < -neg and current >= min_frequency:
                heapq.heappush(heap, (-current, pair))
        return None

    def merge(self, pair: int, new: int) -> None:
        """Replace every occurrence of ``pair`` by ``new``, left to right, updating only neighbour pairs.

        Example: merging (a, b) in ``x a b y`` takes one ``(x,a)``, ``(a,b)``, ``(b,y)`` away and
        adds ``(x,new)``, ``(new,y)``; nothing else in the corpus is looked at.
        """
        a, b = divmod(pair, STRIDE)
        sym, nxt, prv, weight, counts, where = self.sym, self.nxt, self.prv, self.weight, self.counts, self.where
        grown: set[int] = set()
        # subtle: in text order, so that overlapping occurrences (a == b, "a a a") merge left to
        # right without overlap ("aa a"): the second one is then stale (its left symbol is gone).

        def move(f: int, old: int, key: int, at: int) -> None:
            """An occurrence of weight ``f`` turns pair ``old`` into pair ``key``, recorded at ``at``."""
            counts[old] -= f
            counts[key] += f
            where[key].append(at)
            grown.add(key)

        for p in sorted(where.pop(pair, ())):
            q = nxt[p]
            if sym[p] != a or q == END or sym[q] != b:
                continue  # stale: this occurrence was merged away since it was recorded
            f = weight[p]
            left, right = prv[p], nxt[q]
            if left != END:
                x = sym[left]
                move(f, x * STRIDE + a, x * STRIDE + new, left)
            if right != END:
                y = sym[right]
                move(f, b * STRIDE + y, new * STRIDE + y, p)
                prv[right] = p
            sym[p], sym[q], nxt[p] = new, -1, right
        counts.pop(pair, None)
        grown.discard(pair)
        heap = self.heap
        for key in sorted(grown):
            heapq.heappush(heap, (-counts[key], key))


class _RecountedPairs:
    """The plain twin of :class:`_PairCounts`: words as lists, every pair recounted after each merge.

    Same interface (``counts``, ``words``, ``best``, ``merge``); for tests only.
    """

    def __init__(self, words: Iterable[bytes | list[int]], freqs: Sequence[int]):
        self.words, self.freqs = [list(w) for w in words], list(freqs)
        self._recount()

    def _recount(self) -> None:
        counts: Counter = Counter()
        for word, f in zip(self.words, self.freqs):
            for left, right in zip(word, word[1:]):
                counts[left * STRIDE + right] += f
        self.counts = counts

    def best(self, min_frequency: int) -> int | None:
        if not self.counts:
            return None
        pair = min(self.counts, key=lambda p: (-self.counts[p], p))  # packed pairs order by left, then right
        return pair if self.counts[pair] >= min_frequency else None

    def merge(self, pair: int, new: int) -> None:
        a, b = divmod(pair, STRIDE)
        for word in self.words:
            i = 0
            while i < len(word) - 1:
                if word[i] == a and word[i + 1] == b:
                    word[i : i + 2] = [new]
                i += 1
        self._recount()


# -- the vocabulary being built ------------------------------------------------------------------


# What all token texts together may weigh. A long pin with no repeats grows one token from the left,
# so its chain's texts total about n**2/2 bytes (20k random letters: 391 MB): past this, refuse it.
MAX_TEXT_BYTES = 256 * 2**20


class ChainTooLarge(BpetokError):
    """The token texts a vocabulary's chains need would pass :data:`MAX_TEXT_BYTES`."""


class _Vocab:
    """Token texts (GPT-2 byte characters, UTF-8) and merges in rank order."""

    def __init__(self):
        self.text_bytes = 0
        self.tokens: list[bytes] = [c.encode() for c in BYTE_TO_CHAR]
        self.types: list[int] = [TokenType.NORMAL] * 256
        self.ids: dict[bytes, int] = {t: i for i, t in enumerate(self.tokens)}
        self.merges: list[bytes] = []
        # pair -> rank << 24 | merged id (the byte-level model's form), first rank wins
        self.ranks: dict[int, int] = {}

    def add_merge(self, left: int, right: int) -> int:
        """Append the merge ``left right``; returns the merged token's id (new unless its text exists)."""
        text = self.tokens[left] + self.tokens[right]
        new = self.ids.get(text)
        if new is None:
            self.text_bytes += len(text)
            if self.text_bytes > MAX_TEXT_BYTES:
                raise ChainTooLarge(f"the token texts would pass {MAX_TEXT_BYTES // 2**20} MiB")
            new = self.ids[text] = len(self.tokens)
            self.tokens.append(text)
            self.types.append(TokenType.NORMAL)
        self.ranks.setdefault(left * STRIDE + right, len(self.merges) << 24 | new)
        self.merges.append(self.tokens[left] + b" " + self.tokens[right])
        return new

    def bpe(self, symbols: list[int]) -> list[int]:
        """BPE with the merges so far: the byte-level model's merge loop (lowest rank first,
        leftmost on ties, llama.cpp's order)."""
        return merge_symbols(symbols, self.ranks, STRIDE, MERGED)


# -- pins -----------------------------------------------------------------------------------------


def _reference_chain(vocab: _Vocab, form: str, counts: dict[int, int] | None = None) -> list[tuple[int, int]]:
    """Append merges until BPE gives ``form`` as one token; returns them. The plain twin of :func:`_add_chain`.

    Each step runs BPE with every merge so far to its fixed point and appends a merge for one
    adjacent pair of it: the one most frequent in the corpus (``counts``), leftmost on ties, so
    that the chain's intermediate tokens are as useful as they can be. The new merge has the
    highest rank, so it fires only at that fixed point, and each step makes the fixed point shorter.

    >>> v = _Vocab(); [(v.tokens[a], v.tokens[b]) for a, b in _reference_chain(v, "abc")]
    [(b'a', b'b'), (b'ab', b'c')]
    """
    chain = []
    symbols = vocab.bpe(list(form.encode("utf-8")))
    while len(symbols) > 1:
        pairs = [(symbols[i], symbols[i + 1]) for i in range(len(symbols) - 1)]
        if counts is not None:
            left, right = max(pairs, key=lambda p: counts.get(p[0] * STRIDE + p[1], 0))  # first max: leftmost
        else:
            left, right = pairs[0]
        vocab.add_merge(left, right)
        chain.append((left, right))
        symbols = vocab.bpe(symbols)
    return chain


def _add_chain(vocab: _Vocab, form: str, counts: dict[int, int] | None = None) -> list[tuple[int, int]]:
    """:func:`_reference_chain` (same merges, same order) in time ``n log n`` for an ``n``-byte form.

    The form's symbols are a linked list kept across steps. ``todo`` is BPE's queue: ``(rank,
    position, pair)`` for adjacent pairs that have a merge; ``best`` ranks every adjacent pair by
    ``(-corpus count, position)``, so its first live entry is the most frequent, leftmost pair;
    ``at[pair]`` lists the positions where ``pair`` was adjacent, to queue them once it gets a
    merge. All three are lazy: an entry whose pair is no longer at its position is skipped.
    (``counts`` does not change during a chain: the corpus is merged after it.)

    >>> v = _Vocab(); [(v.tokens[a], v.tokens[b]) for a, b in _add_chain(v, "abc")]
    [(b'a', b'b'), (b'ab', b'c')]
    """
    get_count = (counts or {}).get
    ranks = vocab.ranks
    sym = list(form.encode("utf-8"))
    n = len(sym)
    nxt, prv = list(range(1, n + 1)), list(range(-1, n - 1))
    nxt[-1] = END
    todo: list[tuple[int, int, int]] = []
    best: list[tuple[int, int, int]] = []
    at: dict[int, list[int]] = defaultdict(list)

    def adjacent(p: int) -> None:
        """Record the pair that now starts at position ``p``."""
        pair = sym[p] * STRIDE + sym[nxt[p]]
        at[pair].append(p)
        heapq.heappush(best, (-get_count(pair, 0), p, pair))
        found = ranks.get(pair)
        if found is not None:
            heapq.heappush(todo, (found >> 24, p, pair))

    def live(p: int, pair: int) -> bool:
        q = nxt[p]
        return sym[p] >= 0 and q != END and sym[p] * STRIDE + sym[q] == pair

    def run_bpe() -> None:
        """Apply queued merges, lowest rank then leftmost first, until none applies (the fixed point)."""
        while todo:
            _, p, pair = heapq.heappop(todo)
            if not live(p, pair):
                continue
            q = nxt[p]
            right = nxt[q]
            sym[p], sym[q], nxt[p] = ranks[pair] & MERGED, -1, right
            if right != END:
                prv[right] = p
                adjacent(p)
            if prv[p] != END:
                adjacent(prv[p])

    for p in range(n - 1):
        adjacent(p)
    run_bpe()
    chain = []
    while nxt[0] != END:  # position 0 is never merged away: one symbol left when it has no next
        _, p, pair = best[0]
        if not live(p, pair):
            heapq.heappop(best)
            continue
        left, right = divmod(pair, STRIDE)
        vocab.add_merge(left, right)
        chain.append((left, right))
        rank = ranks[pair] >> 24  # a new rank: no pair at a fixed point has one
        for q in at.pop(pair):
            if live(q, pair):
                heapq.heappush(todo, (rank, q, pair))
        run_bpe()
    return chain
