"""The byte-level model the Tokenizer calls: pre-tokenizer, caches, space chunks and the C kernel
around the merge tables of :class:`~bpetok.models.gpt2.bpe.BytePairModel`.

A fragment is split by the pre-tokenizer registered for the vocabulary's (model, pre), and each
piece merged by BPE. What makes that fast lives here:

- three caches, each a share of the byte budget (:mod:`bpetok.cache`): pieces (text -> ids), space
  chunks (``" word,"`` -> ids) and text heads; past its share a cache stops growing;
- space chunks: a pre-tokenizer with ``space_chunks`` lets a fragment be cut at the spaces that
  follow a non-space (:meth:`ByteLevelModel._encode_chunked`), and most of a text is then lookups;
- many new chunks merged together by numpy (:meth:`ByteLevelModel._fill_chunks`) without the kernel;
- the C kernel (``bpetok/models/gpt2/kernel/``, module ``_kernel``), when built: it holds the piece
  and chunk caches and merges; the pre-tokenizer splits here, in Python, unless the kernel has it
  compiled (the spec's ``kernel_split``): then whole texts, special tokens included, go to C, on
  several threads without the GIL.

:meth:`ByteLevelModel.encode_fragment_reference` is the plain way (no cache, no chunks, the
reference merge loop) that tests hold all of it to.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from itertools import chain, compress, islice, repeat
from typing import Any

from bpetok.cache import LONGEST_KEY, IdCache, as_ids, cache_budget
from bpetok.compiled import warn_not_built
from bpetok.models.base import TokenizerModel, gc_paused
from bpetok.models.gpt2.bpe import BytePairModel, decode_token_text, kernel_module

__all__ = ["ByteLevelModel"]

# The byte budget's shares: pieces, space chunks and text heads.
_CACHE_SHARES = {"pieces": 0.25, "chunks": 0.5, "heads": 0.25}
# After a chunk cache miss, this many parts are looked up one at a time before trying C again.
_MISS_RUN = 63
# A text of more chunks than this, many of them new, has its new chunks encoded in one batch.
_BATCH_FILL_PARTS = 2048
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
        self._cache = IdCache(int(cache_bytes * _CACHE_SHARES["pieces"]))
        self._chunks = IdCache(int(cache_bytes * _CACHE_SHARES["chunks"]))
        self._heads = IdCache(int(cache_bytes * _CACHE_SHARES["heads"]))
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
        """Ids of text without special tokens: space chunks when the pre-tokenizer allows them."""
        if self._text_kernel is not None:  # all of it in C: chunks, cache lookups, splitting, BPE
            return self._text_kernel.encode_text(text)
        if self.space_chunks:
            return self._encode_chunked(text)
        return self._encode_pieces(text)

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` the plain way: no caches, no chunks, the reference BPE."""
        encode = self.bpe.encode_piece_reference
        return [i for piece in self.pretokenizer.split(text) for i in encode(piece.encode("utf-8", "surrogatepass"))]

    def count_fragment(self, text: str, at_start: bool) -> int:
        """The number of ids of ``text``, without building the list when all its space chunks
        but the head are cached (the second time a text or its words are seen)."""
        if self.space_chunks and self._kernel is None:
            parts = _SAFE_SPACE.split(text)
            try:
                tail = sum(map(len, map(self._chunks.__getitem__, parts[1:])))
            except KeyError:
                pass
            else:
                return tail + (len(self._encode_head(parts[0])) if parts[0] else 0)
        return len(self.encode_fragment(text, at_start))

    def _encode_chunked(self, text: str) -> list[int]:
        r"""Encode ``text`` one space chunk at a time, each chunk's ids cached by its text.

        A pre-tokenizer with ``space_chunks`` promises that a space preceded by a character that
        is not whitespace always starts a new piece, and that pieces after it do not depend on
        text before it. Cut at those spaces, the text is a head and chunks such as ``" word,"``
        or ``" x\n    return"`` whose ids never depend on their neighbours: most of a text is
        then dictionary lookups, done in C until one misses.

        >>> _SAFE_SPACE.split("Hi there,  you\n  all")
        ['Hi', 'there,', ' you\n  all']
        """
        parts = _SAFE_SPACE.split(text)
        out = self._encode_head(parts[0]) if parts[0] else []
        if self._kernel is not None:  # the same with the kernel's chunk cache
            out += self._kernel_chunks(parts)
            return out
        chunks = self._chunks
        lookup = chunks.__getitem__
        rest = iter(parts)
        next(rest)
        filled = False
        while True:
            try:  # every chunk cached (a warm pass): the lookups all run in C
                out.extend(chain.from_iterable(map(lookup, rest)))
                return out
            except KeyError as miss:
                # subtle: extend() keeps what it added before the miss, and `rest` has moved
                # past the missing part, which the error carries.
                part = miss.args[0]
            left = operator.length_hint(rest)
            if not filled and left >= _BATCH_FILL_PARTS:
                filled = True  # once: the fill takes every new chunk it has room for
                missing = self._missing_chunks(parts[len(parts) - left - 1 : -1])
                if len(missing) > _BATCH_FILL_PARTS // 8:
                    self._fill_chunks(missing)
            # The missing part and the next few one at a time: new chunks come in runs (and all
            # of them do once the cache is full), one KeyError per part would cost more.
            for part in chain((part,), islice(rest, _MISS_RUN)):
                found = chunks.get(part)
                if found is None:
                    found = self._encode_pieces(" " + part)
                    if not chunks.full:
                        chunks.put(part, as_ids(found))
                out += found

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
        ``workers`` threads without the GIL; else the new chunks of all of them are encoded
        first, in one batch (:meth:`_fill_chunks`)."""
        if self._text_kernel is not None:
            return self._text_kernel.encode_texts(fragments, None, workers)[0]
        if self.space_chunks and len(fragments) > 1 and self._kernel is None:
            split = _SAFE_SPACE.split
            missing = self._missing_chunks(chain.from_iterable(split(t)[1:-1] for t in fragments))
            if len(missing) > _BATCH_FILL_PARTS // 8:
                self._fill_chunks(missing)
        encode = self.encode_fragment
        return [encode(fragment, True) for fragment in fragments]

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

    def _missing_chunks(self, parts) -> list[str]:
        """The distinct ``parts`` the chunk cache lacks, in order of first appearance (the cache's
        objects are then laid out in text order, which a warm pass reads faster)."""
        unique = list(dict.fromkeys(parts))
        return list(compress(unique, map(operator.not_, map(self._chunks.__contains__, unique))))

    def _fill_chunks(self, missing: list[str]) -> None:
        """Encode many chunks the cache lacks together (no kernel): one pre-tokenizer call over
        all of them, their new pieces through one batched BPE (:meth:`BytePairModel.encode_pieces`),
        then each chunk's ids cached.

        The first pass over a large text spends most of its time here, on words seen once.
        ``missing`` are inner parts of a :data:`_SAFE_SPACE` split (not a text's last part), so
        each ends in a character that is not whitespace: joined back to back, they are
        pre-tokenized as they would be in their texts.
        """
        import numpy as np  # here, not at import: a short text never needs it (load time counts)

        cache, chunks = self._cache, self._chunks
        # Room for about this many chunks (at least 100 bytes each) before the budget is spent.
        room = (chunks.budget - chunks.used) // 100
        missing = missing[: max(room, 0)]
        if not missing:
            return
        with gc_paused():  # many new lists that all live on
            pieces = self.pretokenizer.split(" " + " ".join(missing))
            unique = list(dict.fromkeys(pieces))
            known = list(map(cache.get, unique))
            new = list(compress(unique, map(operator.is_, known, repeat(None))))  # not cached ([] is: all bytes dropped)
            encoded = dict(zip(new, self.bpe.encode_pieces([p.encode("utf-8", "surrogatepass") for p in new])))
            ids_of: dict[str, Any] = dict(zip(unique, known))  # None: in encoded
            ids_of.update(encoded)
            # Cut the pieces back into chunks (a piece never crosses a chunk boundary: that is the
            # space_chunks promise): chunk k ends at character offset sum(len(" " + part)) of the
            # parts up to it, which is the end of a piece; searchsorted finds which. No Python loop.
            piece_ends = np.cumsum(np.fromiter(map(len, pieces), np.int64, len(pieces)))
            chunk_ends = np.cumsum(np.fromiter(map(len, missing), np.int64, len(missing)) + 1)
            stops = np.searchsorted(piece_ends, chunk_ends, "right").tolist()
            starts = [0]
            starts += stops[:-1]
            piece_ids = list(map(ids_of.__getitem__, pieces))
            chunks.put_many(
                missing, map(as_ids, map(chain.from_iterable, map(piece_ids.__getitem__, map(slice, starts, stops))))
            )
            cache.put_many(
                (piece for piece in encoded if len(piece) <= LONGEST_KEY),
                (as_ids(found) for piece, found in encoded.items() if len(piece) <= LONGEST_KEY),
            )
