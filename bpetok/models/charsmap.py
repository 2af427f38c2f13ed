"""SentencePiece's precompiled character map (``tokenizer.ggml.precompiled_charsmap``), read with every bound checked.

The blob is a little-endian uint32 ``n``, then ``n`` bytes of an XOR-compressed compact double
array (XCDA: Kanda 2018) of uint32 nodes, then NUL-terminated replacement strings. A node packs
BASE in bits 10-30 (shifted left 8 more when bit 9 is set), LCHECK in bits 0-7 (with bit 31,
which value nodes set, so they never match a byte), the LEAF flag in bit 8 and, in a value
node, the offset of its replacement string in bits 0-30. From a node at BASE ``s``, byte ``c``
leads to node ``s ^ c`` if its LCHECK is ``c``; a node with LEAF set ends a key, its value node
at ``node ^ BASE(node)``. Matching stops at a NUL byte. (darts-clone shares common suffixes, so
the array is a DAG: the Hangul compositions alone give 200k keys over 60k nodes.)

:meth:`CharsMap.prefix` is llama.cpp's walk (``normalize_prefix``), one byte at a time, each node
index checked: a map that points outside itself is a :class:`~bpetok.errors.VocabularyError`
where llama.cpp throws. The header is checked at load as llama.cpp checks it, and the walk of
every single character is done once at load, for the fast path (:meth:`CharsMap.normalize`).
"""

from __future__ import annotations

import re
import struct

from bpetok.errors import VocabularyError

__all__ = ["CharsMap"]

_REPLACEMENT_CHARACTER = "\ufffd".encode()
# unicode_cpt_from_utf8's sequence length from the first byte (0: it throws); every
# continuation byte must then be 10xxxxxx.
_SEQUENCE_LENGTH = bytes([1] * 0x80 + [0] * 0x40 + [2] * 0x20 + [3] * 0x10 + [4] * 0x08 + [0] * 0x08)
# The fast path's look-ahead, in characters, grown when a match runs to its end.
_WINDOW = 8


def _base(packed: int) -> int:
    return (packed >> 10) << ((packed & (1 << 9)) >> 6)


class CharsMap:
    """The normalizer's map: :meth:`prefix` is llama.cpp's step; :meth:`normalize` the fast whole-text pass."""

    def __init__(self, blob: bytes, where: str):
        self.where = where
        self.nodes: tuple[int, ...] = ()
        self.strings = b""
        if blob:
            if len(blob) < 4:
                raise VocabularyError(
                    f"{where}: {len(blob)} bytes is too small for the charsmap's size header (4 bytes); "
                    "the file is corrupt (llama.cpp refuses it too): re-convert the model"
                )
            (xcda_size,) = struct.unpack_from("<I", blob, 0)
            if xcda_size + 4 >= len(blob):
                raise VocabularyError(
                    f"{where}: the charsmap says its trie takes {xcda_size} bytes but the whole map is {len(blob)} "
                    "bytes; the file is corrupt (llama.cpp refuses it too): re-convert the model"
                )
            self.nodes = struct.unpack_from(f"<{xcda_size // 4}I", blob, 4)
            self.strings = blob[4 + xcda_size :]
        self._strings_at: dict[int, bytes] = {}
        self._fast = self._build_fast()

    def _node(self, index: int) -> int:
        if index >= len(self.nodes):
            raise VocabularyError(
                f"{self.where}: the charsmap's trie points at node {index} but has {len(self.nodes)} nodes; "
                "the file is corrupt (llama.cpp throws on it too): re-convert the model"
            )
        return self.nodes[index]

    def _string(self, offset: int) -> bytes:
        found = self._strings_at.get(offset)
        if found is None:
            strings = self.strings
            end = strings.find(b"\0", offset) if offset < len(strings) else -1
            if end < 0:
                where = "past the end of" if offset >= len(strings) else "unterminated in"
                raise VocabularyError(
                    f"{self.where}: a charsmap replacement at offset {offset} is {where} its {len(strings)} bytes "
                    "of strings; the file is corrupt (llama.cpp throws on it too): re-convert the model"
                )
            found = self._strings_at[offset] = strings[offset:end]
        return found

    def match(self, data: bytes, i: int) -> tuple[bytes, int] | None:
        """The longest key of the map at ``data[i]`` as (replacement, length), or None: llama.cpp's walk."""
        longest, value_at, _ = self._walk(data, i)
        if not longest:
            return None
        return self._string(self._node(value_at) & 0x7FFFFFFF), longest

    def _walk(self, data: bytes, i: int) -> tuple[int, int, bool]:
        """(length of the longest key at ``data[i]``, its value node, whether the walk ran to the end of ``data``)."""
        if not self.nodes:
            return 0, 0, False
        node = self._node
        longest, value_at = 0, 0
        state = _base(node(0))
        for k in range(i, len(data)):
            c = data[k]
            if c == 0:
                return longest, value_at, False
            state ^= c
            packed = node(state)
            if packed & 0x800000FF != c:
                return longest, value_at, False
            state ^= _base(packed)
            if packed >> 8 & 1:
                longest, value_at = k - i + 1, state
        return longest, value_at, True

    def prefix(self, data: bytes, i: int) -> tuple[bytes, int]:
        """What llama.cpp's ``normalize_prefix`` gives at ``data[i]`` (no user-defined token there):
        (replacement, bytes consumed)."""
        found = self.match(data, i)
        if found is not None:
            return found
        length = _SEQUENCE_LENGTH[data[i]]
        if length and i + length <= len(data) and all(0x80 <= b < 0xC0 for b in data[i + 1 : i + length]):
            return data[i : i + length], length
        return _REPLACEMENT_CHARACTER, 1

    def normalize_reference(self, data: bytes) -> bytes:
        """Every prefix in turn through :meth:`prefix`."""
        out, i, n = [], 0, len(data)
        while i < n:
            replacement, used = self.prefix(data, i)
            out.append(replacement)
            i += used
        return b"".join(out)

    def _build_fast(self):
        """What every single character does, walked once: a ``str.translate`` table for the
        characters that are a key on their own; the characters that start a longer key; and a
        pattern of the characters that can come second in such a key (the walk runs where one
        follows a starter: anywhere else it ends after one character, at the table's key).
        None when only the byte walk is right: a key ends inside a character, or a
        replacement is not UTF-8."""
        table: dict[int, str] = {}
        if not self.nodes:
            return table, frozenset(), None
        # The children of each BASE: node j hangs from BASE j ^ LCHECK(j) (a node whose LCHECK
        # is 0 or has bit 31 set is no byte's child). Found in one pass, not 255 probes a node.
        children: dict[int, list[int]] = {}
        for j, packed in enumerate(self.nodes):
            c = packed & 0x800000FF
            if 0 < c < 256:
                children.setdefault(j ^ c, []).append(j)
        first = self._characters(children, _base(self._node(0)))
        if first is None:
            return None
        starters, follow = set(), set()
        for char, packed, child in first:
            if packed >> 8 & 1:
                try:
                    table[ord(char)] = self._string(self._node(child) & 0x7FFFFFFF).decode()
                except UnicodeDecodeError:
                    return None
            if child in children:
                starters.add(char)
                second = self._characters(children, child)
                if second is None:
                    return None
                follow.update(c for c, _, _ in second)
        pattern = re.compile("[" + "".join(map(re.escape, sorted(follow))) + "]") if follow else None
        return table, frozenset(starters), pattern

    def _characters(self, children: dict[int, list[int]], state: int):
        """(character, its last node, BASE after it) for each whole UTF-8 character the trie
        spells from BASE ``state``; None if a key ends inside one."""
        out = []
        stack = [(state, b"")]
        while stack:
            state, key = stack.pop()
            if state | 0xFF >= len(self.nodes):
                self._node(state | 0xFF)  # some byte leads out of the array: llama.cpp throws on it
            for index in children.get(state, ()):
                packed = self.nodes[index]
                path = key + bytes((packed & 0xFF,))
                length = _SEQUENCE_LENGTH[path[0]]
                if not length or (len(path) > 1 and not 0x80 <= path[-1] < 0xC0):
                    continue  # a byte text never has here: never reached from valid UTF-8
                child = index ^ _base(packed)
                if len(path) < length:
                    if packed >> 8 & 1:
                        return None
                    stack.append((child, path))
                    continue
                try:
                    out.append((path.decode(), packed, child))
                except UnicodeDecodeError:
                    continue  # an overlong or surrogate form: str.encode never writes it
        return out

    def normalize(self, data: bytes) -> bytes:
        """:meth:`normalize_reference`, at C speed where it can (held equal to it by tests)."""
        if self._fast is None:
            return self.normalize_reference(data)
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return self.normalize_reference(data)
        table, starters, follows = self._fast
        if follows is None:
            return text.translate(table).encode()
        out, pos, n = [], 0, len(text)
        for found in follows.finditer(text, 1):
            at = found.start() - 1
            if at < pos or text[at] not in starters:
                continue
            out.append(text[pos:at].translate(table).encode())
            window = _WINDOW
            while True:
                chunk = text[at : at + window].encode()
                _, _, to_the_end = self._walk(chunk, 0)
                if not to_the_end or at + window >= n:
                    break
                window *= 2  # the walk ran to the end of the look-ahead: a longer key may follow
            replacement, used = self.prefix(chunk, 0)
            try:
                consumed = len(chunk[:used].decode())
            except UnicodeDecodeError:
                return self.normalize_reference(data)  # a key ending inside a character
            out.append(replacement)
            pos = at + consumed
        out.append(text[pos:].translate(table).encode())
        return b"".join(out)
