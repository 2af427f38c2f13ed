"""The byte-level model the Tokenizer calls: pre-tokenizer, caches, space chunks and the C kernel
around the merge tables of :class:`~bpetok.models.gpt2.bpe.BytePairModel`.

A fragment is split by the pre-tokenizer registered for the vocabulary's (model, pre), and each
piece merged by BPE. The pure-Python engine does just that, with a cache of pieces (text -> ids);
it is the readable reference. The speed is the C kernel's (``bpetok/models/gpt2/kernel/``, module ``_kernel``), when built:

- three caches, each a share of the byte budget (:mod:`bpetok.cache`): pieces, space chunks
  (``" word,"`` -> ids) and text heads; past its share a cache stops growing;
- space chunks: a pre-tokenizer with ``space_chunks`` lets a fragment be cut at the spaces that
  follow a non-space (:meth:`ByteLevelModel._encode_chunked`), and most of a text is then lookups;
- with its own splitter (the spec's ``kernel_split``) the kernel takes whole texts, special
  tokens included, on several threads without the GIL; without one the pre-tokenizer splits here,
  in Python, and the kernel merges.

:meth:`ByteLevelModel.encode_fragment_reference` is the plain way (no cache, no chunks) that
tests hold all of it to.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from bpetok.cache import IdCache, as_ids, cache_budget
from bpetok.compiled import warn_not_built
from bpetok.models.base import TokenizerModel
from bpetok.models.gpt2.bpe import BytePairModel, decode_token_text, kernel_module

__all__ = ["ByteLevelModel"]

# The byte budget's shares: pieces, space chunks and text heads.
_CACHE_SHARES = {"pieces": 0.25, "chunks": 0.5, "heads": 0.25}
# The pure-Python engine caches pieces only.
_PURE_CACHE_SHARES = {"pieces": 1.0, "chunks": 0.0, "heads": 0.0}
# The spaces a ``space_chunks`` pre-tokenizer lets us cut at: those after a non-whitespace
# character. The literal space comes first so the engine can scan for it (2x faster than "(?<=\S) ").
_SAFE_SPACE = re.compile(r" (?<=\S )")


class ByteLevelModel(TokenizerModel):
    """BPE over GPT-2's byte alphabet, each fragment split by the pre-tokenizer first."""

    def __init__(self, bpe: BytePairModel, spec, vocabulary, cache_bytes: int | None = None):
        """``bpe``: the merge tables; ``spec``: the :class:`~bpetok.pretok.PreTokenizerSpec`;
        ``cache_bytes``: as :meth:`use_cache_budget` (default: :func:`bpetok.cache.cache_budget`'s)."""
        self.bpe = bpe
        self.spec = spec
        self.pretokenizer: Any = spec.for_vocabulary(vocabulary) if spec.for_vocabulary else spec.factory()
        # The spec's fast-path promise (see bpetok.pretok.PreTokenizerSpec.space_chunks).
        self.space_chunks = bool(spec.space_chunks)
        module = kernel_module()
        if module is None:
            warn_not_built("bpetok.models.gpt2._kernel")
        self.compiled = module is not None
        # With the kernel's own splitter, whole texts go to C (and run without the GIL).
        self._kernel_split = spec.kernel_split if module is not None and spec.kernel_split in module.SPLITTERS else ""
        self.releases_gil = bool(self._kernel_split)
        self.cache_bytes = -1
        self.use_cache_budget(cache_budget(cache_bytes))

    def use_cache_budget(self, cache_bytes: int) -> None:
        """Make the caches (and the kernel, which holds the piece and chunk caches) for a byte
        budget of ``cache_bytes``, empty."""
        if cache_bytes == self.cache_bytes:
            return
        self.cache_bytes = cache_bytes
        shares = _CACHE_SHARES if self.compiled else _PURE_CACHE_SHARES
        self._cache = IdCache(int(cache_bytes * shares["pieces"]))
        self._chunks = IdCache(int(cache_bytes * shares["chunks"]))
        self._heads = IdCache(int(cache_bytes * shares["heads"]))
        # The compiled kernel (None: the pure-Python engine).
        self._kernel: Any = (
            self.bpe.make_kernel(self._cache.budget, self._chunks.budget, split=self._kernel_split) if self.compiled else None
        )
        # The kernel, when it splits text itself.
        self._text_kernel: Any = self._kernel if self.releases_gil else None
        if self._text_kernel is not None:  # it caches a text's head as pieces: no heads cache
            self._heads = IdCache(0)

    def cache_info(self) -> dict[str, dict[str, int]]:
        info = {
            name: {"entries": len(cache), "bytes": cache.used, "budget": cache.budget}
            for name, cache in (("pieces", self._cache), ("chunks", self._chunks), ("heads", self._heads))
        }
        if self._kernel is not None:  # the kernel keeps the piece and chunk caches
            info.update(self._kernel.cache_info())
        return info

    def normal_piece(self, text: bytes) -> bytes:
        """The bytes of a NORMAL token: its GPT-2 characters decoded (:func:`decode_token_text`)."""
        return decode_token_text(text)

    # -- one fragment ------------------------------------------------------------------------------

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of text without special tokens: with the kernel, space chunks when the pre-tokenizer
        allows them."""
        if self._text_kernel is not None:  # all of it in C: chunks, cache lookups, splitting, BPE
            return self._text_kernel.encode_text(text)
        if self.space_chunks and self._kernel is not None:
            return self._encode_chunked(text)
        return self._encode_pieces(text)

    def text_encoder(self, automata):
        """With the kernel's splitter: a text the automaton (``Automaton.cuts``) cuts no special
        token from is one ``encode_text`` call, whose list the Tokenizer returns as it is (not
        copied into another); a text with one gives None, and the Tokenizer partitions it."""
        built = self._own_automata(automata, ByteLevelModel) if self.releases_gil else None
        if built is None:
            return None

        def encode(text: str, parse_special: bool) -> list[int] | None:
            automaton = built[parse_special]
            if automaton is not None and automaton.cuts(text) != b"":
                return None  # a special to cut, or a text too long for the automaton
            kernel = self._text_kernel  # looked up per call: use_cache_budget makes a new one
            return kernel.encode_text(text) if kernel is not None else None

        return encode

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` the plain way: no caches, no chunks, the reference BPE."""
        encode = self.bpe.encode_piece_reference
        return [i for piece in self.pretokenizer.split(text) for i in encode(piece.encode("utf-8", "surrogatepass"))]

    def _encode_chunked(self, text: str) -> list[int]:
        r"""Encode ``text`` one space chunk at a time, each chunk's ids cached by its text.

        A pre-tokenizer with ``space_chunks`` promises that a space preceded by a character that
        is not whitespace always starts a new piece, and that pieces after it do not depend on
        text before it. Cut at those spaces, the text is a head and chunks such as ``" word,"``
        or ``" x\n    return"`` whose ids never depend on their neighbours: most of a text is
        then dictionary lookups, in the kernel.

        >>> _SAFE_SPACE.split("Hi there,  you\n  all")
        ['Hi', 'there,', ' you\n  all']
        """
        parts = _SAFE_SPACE.split(text)
        out = self._encode_head(parts[0]) if parts[0] else []
        out += self._kernel_chunks(parts)  # lookups, then the new chunks together
        return out

    def _kernel_chunks(self, parts: list[str]) -> list[int]:
        """The ids of ``" " + part`` for each of ``parts[1:]`` (a text cut at :data:`_SAFE_SPACE`)
        from the kernel's chunk cache; the chunks it lacks are split here and merged in C.

        They are split together, joined back to back (``" a b c"``): each but a text's last part
        ends in a character that is not whitespace, and a text's last part comes last, so by the
        ``space_chunks`` promise no piece crosses from one chunk to the next and each chunk splits
        as it does in its text; the kernel finds each chunk's pieces by their lengths. If a piece
        crosses a chunk's end all the same, each chunk is split on its own.
        """
        kernel, split = self._kernel, self.pretokenizer.split
        ids, lacking = kernel.encode_chunks(parts, 1)
        if lacking:
            ids, lacking = kernel.encode_chunks(parts, 1, lacking, split(" " + " ".join(lacking)))
        if lacking:  # a piece crossed a chunk's end
            pieces: list[str] = []
            stops = []
            for chunk in lacking:
                pieces += split(" " + chunk)
                stops.append(len(pieces))
            ids, lacking = kernel.encode_chunks(parts, 1, lacking, pieces, stops)
        return ids

    def _encode_head(self, head: str) -> list[int]:
        """The ids of a text's first chunk (no leading space), cached like the others."""
        found = self._heads.get(head)
        if found is None:
            found = self._encode_pieces(head)
            if not self._heads.full:
                self._heads.put(head, as_ids(found))
            return found
        return found.tolist()

    def _encode_pieces(self, text: str) -> list[int]:
        """Pre-tokenize ``text`` and BPE each piece, with a cache keyed by piece text."""
        if self._kernel is not None:
            return self._kernel.encode(self.pretokenizer.split(text))
        ids: list[int] = []
        cache, encode_piece = self._cache, self.bpe.encode_piece
        for piece in self.pretokenizer.split(text):
            found = cache.get(piece)
            if found is None:
                found = encode_piece(piece.encode("utf-8", "surrogatepass"))
                cache.keep(piece, found)
            ids += found
        return ids

    # -- many fragments ----------------------------------------------------------------------------

    def encode_fragments(self, fragments: Sequence[str], *, workers: int = 1) -> list[list[int]]:
        """Each fragment's ids. With the kernel's splitter all of them go to C in one call, on
        ``workers`` threads without the GIL."""
        if self._text_kernel is not None:
            return self._text_kernel.encode_texts(fragments, None, workers)[0]
        return super().encode_fragments(fragments, workers=workers)

    def encode_texts(
        self, texts: Sequence[str], specials: tuple[str, ...], workers: int = 1
    ) -> tuple[list[list[int]], list[int]]:
        """With the kernel's splitter, C looks for ``specials`` and encodes the other texts;
        else :meth:`TokenizerModel.encode_texts`."""
        if self._text_kernel is not None:
            return self._text_kernel.encode_texts(texts, specials, workers)
        return super().encode_texts(texts, specials, workers)

    def encode_texts_to_numpy(
        self, texts: Sequence[str], specials: tuple[str, ...], workers: int = 1
    ) -> tuple[Any, Any, list[int]]:
        """With the kernel's splitter, the ids as machine words (no int object per id); else
        :meth:`TokenizerModel.encode_texts_to_numpy`, its readable twin."""
        if self._text_kernel is None:
            return super().encode_texts_to_numpy(texts, specials, workers)
        import numpy as np

        flat, flat_counts, held = self._text_kernel.encode_texts_flat(texts, specials, workers)
        return np.frombuffer(flat, np.uint32), np.frombuffer(flat_counts, np.uint64).astype(np.int64), held
