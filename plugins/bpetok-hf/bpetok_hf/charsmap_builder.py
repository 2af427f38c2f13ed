"""Write a SentencePiece precompiled character map (the blob ``Precompiled`` and llama.cpp's
``tokenizer.ggml.precompiled_charsmap`` read) for a map of single characters.

The layout is the one :mod:`bpetok.models.charsmap` documents: a uint32 size, the XOR-compressed
double array of uint32 units, NUL-terminated replacement strings. Each trie node is given an
origin ``o`` (its children at ``o ^ byte``, its value, when a key ends there, at ``o`` itself);
a node at index ``i`` stores ``BASE = i ^ o``. Origins are found first-fit, so the array stays
about as long as the number of nodes; it is padded so that every ``origin ^ byte`` a walk can
reach is inside it (HF's crate indexes without checking).
"""

from __future__ import annotations

import struct

__all__ = ["build_charsmap"]

_LEAF = 1 << 8
_VALUE = 1 << 31
_MAX_BASE = 1 << 21  # BASE in bits 10-30 without the shift flag


def build_charsmap(mapping: dict[str, str]) -> bytes:
    """The blob mapping each key (one character) to its replacement (UTF-8, no NUL)."""
    strings = bytearray()
    offset_of: dict[str, int] = {}
    trie: dict = {}  # byte -> child dict; the key's value offset under None
    for key in sorted(mapping):
        value = mapping[key]
        if "\0" in value or "\0" in key or len(key) != 1:
            raise ValueError(f"charsmap key {key!r} -> {value!r}: keys are single characters, neither has NUL")
        if value not in offset_of:
            offset_of[value] = len(strings)
            strings += value.encode("utf-8") + b"\0"
        node = trie
        for byte in key.encode("utf-8"):
            node = node.setdefault(byte, {})
        node[None] = offset_of[value]
    # Every node breadth first as (parent's position in this list, label, node); the root first.
    nodes: list[tuple[int, int, dict]] = [(-1, 0, trie)]
    k = 0
    while k < len(nodes):
        nodes += [(k, c, child) for c, child in nodes[k][2].items() if c is not None]
        k += 1
    # A unit with label c at slot p can only be the child of the node whose origin is p ^ c (the
    # walk checks labels, not parents), so no two nodes share an origin. The nodes with children
    # (a few hundred) get a 256-slot block each; a node that only ends a key takes the first free
    # slot as its origin (its value sits there), the blocks' unused slots included.
    origin = [0] * len(nodes)
    used = {0}
    inner = [k for k, (_, _, node) in enumerate(nodes) if any(c is not None for c in node)]
    for n, k in enumerate(inner):
        origin[k] = 256 * (n + 1)
        used.update(origin[k] ^ c for c in nodes[k][2] if c is not None)
        if None in nodes[k][2]:
            used.add(origin[k])
    blocks = set(origin[k] for k in inner)
    free = 1
    for k, (_, _, node) in enumerate(nodes):
        if any(c is not None for c in node):
            continue
        while free in used or free in blocks:
            free += 1
        origin[k] = free
        used.add(free)
    units: dict[int, int] = {}
    for k, (parent, label, node) in enumerate(nodes):
        index = 0 if parent < 0 else origin[parent] ^ label
        base = index ^ origin[k]
        if base >= _MAX_BASE:
            raise ValueError("charsmap trie too large for an unshifted BASE")
        units[index] = (base << 10) | (_LEAF if None in node else 0) | label
        if None in node:
            units[origin[k]] = _VALUE | node[None]
    size = (max(max(units), *origin) | 0xFF) + 1  # every origin ^ byte inside the array
    array = [0] * size
    for i, u in units.items():
        array[i] = u
    blob = struct.pack(f"<{size}I", *array)
    return struct.pack("<I", len(blob)) + blob + bytes(strings)
