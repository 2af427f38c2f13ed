"""Text -> ids caches bounded by bytes, with the ids stored compactly.

A tokenizer remembers the ids of pieces and chunks of text it has seen, so that text seen again
is mostly dictionary lookups. New text (random CJK, say) brings new keys without end, so every
cache has a byte budget: past it the cache stops growing (what it holds stays valid; new text is
then encoded without being remembered). Ids are kept as ``array('I')`` (4 bytes an id), not a
list of Python ints (8 bytes a pointer plus 28 bytes an int object above 256).

The cost of an entry is counted with ``sys.getsizeof`` of its key and its value plus a fixed
charge for the dict slot, so the accounting is deterministic and close to what the entry really
holds (tests/test_cache.py checks it against tracemalloc).
"""

from __future__ import annotations

import os
import sys
from array import array

__all__ = ["IdCache", "DEFAULT_CACHE_BYTES", "cache_budget", "as_ids"]

# The default byte budget of all of a tokenizer's caches together (BPETOK_CACHE_BYTES or
# Tokenizer(cache_bytes=...) change it). 64 MiB holds the words of a few hundred MB of prose.
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
# A dict entry: hash, key and value pointers (24 bytes) plus its index slot and the slack a dict
# keeps (it is at most 2/3 full).
ENTRY_OVERHEAD = 48
SMALLEST_ENTRY = sys.getsizeof("a") + sys.getsizeof(array("I", [0])) + ENTRY_OVERHEAD


def cache_budget(cache_bytes: int | None) -> int:
    """The total budget: ``cache_bytes`` if given, else ``$BPETOK_CACHE_BYTES``, else the default."""
    if cache_bytes is None:
        env = os.environ.get("BPETOK_CACHE_BYTES")
        if env is None or not env.strip():
            return DEFAULT_CACHE_BYTES
        try:
            cache_bytes = int(env)
        except ValueError:
            raise ValueError(f"BPETOK_CACHE_BYTES={env!r}: give a whole number of bytes (0 disables the caches)") from None
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int):
        raise TypeError(f"cache_bytes must be an int (bytes), not {type(cache_bytes).__name__}")
    if cache_bytes < 0:
        raise ValueError(f"cache_bytes={cache_bytes}: give a number of bytes >= 0 (0 disables the caches)")
    return cache_bytes


# A key longer than this (characters, or bytes for a bytes key) is never cached: long keys are
# rarely seen twice, and one could take a large share of the budget.
LONGEST_KEY = 1024


def as_ids(ids) -> array:
    """Ids in their cached form: ``array('I')``."""
    return array("I", ids)


class IdCache(dict):
    """A ``str -> array('I')`` dict (or ``bytes ->``, for a model that keys by bytes) that stops
    growing at ``budget`` bytes.

    Reads are plain dict reads (``cache.get``, ``cache.__getitem__`` run in C); writes go
    through :meth:`put` / :meth:`put_many`, which count each entry's bytes.
    """

    __slots__ = ("budget", "used")

    def __init__(self, budget: int):
        super().__init__()
        self.budget = budget
        self.used = 0

    @staticmethod
    def entry_bytes(key: str | bytes, ids: array) -> int:
        return sys.getsizeof(key) + sys.getsizeof(ids) + ENTRY_OVERHEAD

    @property
    def full(self) -> bool:
        """No room left for even the smallest entry (a one-character key and one id)."""
        return self.used + SMALLEST_ENTRY > self.budget

    def put(self, key: str | bytes, ids: array) -> bool:
        """Remember ``key``'s ids if they fit the budget; True if remembered."""
        cost = self.entry_bytes(key, ids)
        if self.used + cost > self.budget or key in self:
            return False
        self[key] = ids
        self.used += cost
        return True

    def keep(self, key: str | bytes, ids) -> None:
        """:meth:`put` ``key``'s ids (a list or an ``array('I')``) if the key is at most
        :data:`LONGEST_KEY` long and the cache has room: every model's caching rule."""
        if len(key) <= LONGEST_KEY and not self.full:
            self.put(key, ids if ids.__class__ is array else as_ids(ids))

    def ids_of(self, keys, encode) -> list[int]:
        """The ids of ``keys`` one after the other: each key's from the cache, else
        ``encode(key)``'s, then :meth:`keep`-ed."""
        out: list[int] = []
        for key in keys:
            found = self.get(key)
            if found is None:
                found = encode(key)
                self.keep(key, found)
            out += found
        return out

    def put_many(self, keys, values) -> None:
        """:meth:`put` each pair that fits, in order."""
        keys, values = list(keys), list(values)
        total = sum(map(sys.getsizeof, keys)) + sum(map(sys.getsizeof, values)) + ENTRY_OVERHEAD * len(keys)
        if self.used + total <= self.budget and self.keys().isdisjoint(keys):
            self.update(zip(keys, values))  # the usual case, in C
            self.used += total
            return
        for key, ids in zip(keys, values):
            cost = self.entry_bytes(key, ids)
            if self.used + cost <= self.budget and key not in self:
                self[key] = ids
                self.used += cost

    def clear(self) -> None:
        super().clear()
        self.used = 0
