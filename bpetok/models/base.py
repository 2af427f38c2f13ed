"""The model contract: what every tokenizer model gives the :class:`~bpetok.Tokenizer`.

The Tokenizer cuts special tokens out of a text and hands each fragment between them to its
model; the model turns a fragment into ids, and a NORMAL token's stored text back into bytes.
That is all a model must write (:meth:`TokenizerModel.encode_fragment` and
:meth:`TokenizerModel.normal_piece`); every other call the Tokenizer makes has a default here
built on those two, which a model overrides only to go faster (gpt2 batches and runs C).

What the Tokenizer needs to know about a model is declared, not probed: the class attributes
below, with their defaults.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import re
from array import array
from abc import ABC, abstractmethod
from itertools import chain
from typing import TYPE_CHECKING, Any, Callable, Sequence

from bpetok.cache import IdCache
from bpetok.utf8 import BeyondUnicode, decode_llama_utf8

if TYPE_CHECKING:
    from bpetok.pretok import PreTokenizerSpec

__all__ = ["TokenizerModel", "CachingModel", "decode_llama_utf8", "BeyondUnicode", "gc_paused"]


class TokenizerModel(ABC):
    """One vocabulary's model (``tokenizer.ggml.model``), built by its :class:`ModelSpec`'s factory.

    Fragments reach the model without special tokens. ``at_start`` is True for a fragment that
    starts the text or follows a special token (where SentencePiece-style models add their space
    prefix). A model is used from several threads at once (``encode_batch``): caches it keeps must
    tolerate that (a dict's get/set does).
    """

    #: Whether the model runs compiled code (``Tokenizer.engine`` says ``"C kernel"``).
    compiled: bool = False
    #: Whether :meth:`encode_texts` runs without the GIL on ``workers`` threads (then threads
    #: sharing the tokenizer scale with cores: ``Tokenizer.encodes_without_gil``).
    releases_gil: bool = False
    #: Whether the special tokens found in a text are among its ids (llama.cpp's plamo2 drops them).
    emits_special_tokens: bool = True
    #: Whether ``add_special`` may add BOS / EOS as the file's flags say (llama.cpp's rwkv adds
    #: neither, plamo2 no EOS, whatever ``tokenizer.ggml.add_*_token`` say).
    may_add_bos: bool = True
    may_add_eos: bool = True
    #: Whether a fragment right after a special token counts as a start (``at_start``); False:
    #: only the text's first fragment does (HF's Metaspace with ``prepend_scheme: first``).
    start_after_special: bool = True
    #: Whether the model writes a space in front of a fragment that starts the text or follows a
    #: special token (SentencePiece's dummy prefix); offsets give that space an empty span.
    add_space_prefix: bool = False
    #: The pre-tokenizer spec a model that takes whole fragments runs itself (whitespace and
    #: hybriddna split with a gpt2 one): its ``add_bos`` / ``clean_spaces`` are the defaults when
    #: the Tokenizer was given no pre-tokenizer. None: the model's spec's own defaults (else False).
    flags_pretokenizer: PreTokenizerSpec | None = None
    #: Whether the callable :meth:`text_encoder` gives also takes ``as_bytes`` (a third argument):
    #: True gives the ids as int32 bytes in native order, which numpy reads without an int per id
    #: (:mod:`bpetok.offsets`' running sums).
    text_encoder_gives_bytes: bool = False

    # -- what a model must write --------------------------------------------------------------

    @abstractmethod
    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment of text between special tokens."""

    @abstractmethod
    def normal_piece(self, text: bytes) -> bytes:
        """The bytes a NORMAL token whose stored text is ``text`` stands for (llama.cpp's
        ``token_to_piece``; special, byte and other tokens are rendered by the Tokenizer)."""

    # -- what it may override ---------------------------------------------------------------

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` the plain way (no caches, the readable merge loop), which
        tests hold the fast path to; the default is :meth:`encode_fragment` itself."""
        return self.encode_fragment(text, at_start)

    def encode_fragment_bytes(self, data: bytes, at_start: bool) -> list[int]:
        """Ids of a fragment given as raw bytes, invalid UTF-8 included. The default decodes them
        as llama.cpp does (:func:`bpetok.utf8.decode_llama_utf8`) and calls :meth:`encode_fragment`; a model
        whose llama.cpp session reads bytes (SentencePiece's) overrides it."""
        return self.encode_fragment(decode_llama_utf8(data), at_start)

    def aligns_offsets(self, text: str) -> bool:
        """Whether :meth:`token_offsets` gives ``text``'s spans: a model whose pieces are not the
        text's bytes there (it normalizes, drops text). The default, False: :mod:`bpetok.offsets`
        derives them from the pieces, which fits every model that does not."""
        return False

    def token_offsets(self, tok, text: str, ids: list[int], add_special: bool):
        """Each token's span in ``text`` (a :class:`bpetok.offsets.TokenOffsets`), where
        :meth:`aligns_offsets` says so, or None: :mod:`bpetok.offsets`' own after all."""
        return None

    def encode_with_offsets(self, tok, text: str, parse_special: bool, add_special: bool):
        """``tok.encode_with_offsets(text, ...)`` in one pass, where the model's kernel gives the
        ids and their spans together (held equal to encode then :meth:`token_offsets`), or None."""
        return None

    def count_fragment(self, text: str, at_start: bool) -> int:
        """``len(self.encode_fragment(text, at_start))``; a model with cached ids may count
        without building the list."""
        return len(self.encode_fragment(text, at_start))

    def encode_parts(self, fragments: list) -> list[int] | None:
        """The ids of a whole text cut at its special tokens (str fragments and special ids, as
        ``Tokenizer._encode_parts`` takes them) in one call, or None: the Tokenizer then encodes
        fragment by fragment, which is what a model that overrides this must equal."""
        return None

    def text_encoder(
        self, automata: Callable[[], tuple[Any, Any] | None]
    ) -> Callable[[str, bool], list[int] | None] | None:
        """A callable ``(text, parse_special)`` giving a whole text's ids in one C call, special
        tokens cut by the automata ``automata()`` builds (the ``bpetok._specials.Automaton`` of
        parse_special False and True, None for a mode without specials; ``automata()`` is None
        where the C twin does not run); it returns a new list, or None where the Tokenizer must
        partition and encode as usual, which is what it must equal. None (the default): the model
        has no such call, and the automata are not built."""
        return None

    def _own_automata(
        self, automata: Callable[[], tuple[Any, Any] | None], defined_in: type[TokenizerModel]
    ) -> tuple[Any, Any] | None:
        """For a :meth:`text_encoder`: ``automata()`` where this model encodes fragments as
        ``defined_in`` wrote it, else None (a subclass with its own :meth:`encode_fragment` is
        left to the Tokenizer's partition, which calls it)."""
        if type(self).encode_fragment is not defined_in.encode_fragment:
            return None
        return automata()

    def encode_fragments(self, fragments: Sequence[str], *, workers: int = 1) -> list[list[int]]:
        """:meth:`encode_fragment` of many fragments, each at the start (each starts a text or
        follows a special token). ``workers``: threads the model may use."""
        encode = self.encode_fragment
        return [encode(fragment, True) for fragment in fragments]

    def encode_texts(
        self, texts: Sequence[str], specials: tuple[str, ...], workers: int = 1
    ) -> tuple[list[list[int]], list[int]]:
        """The ids of whole texts, each one fragment (an empty text: none), and ``held``: the
        indices of the texts that contain one of ``specials`` (their lists are left empty for the
        Tokenizer, which cuts them at their special tokens and calls :meth:`encode_fragments`).

        The default finds the specials with one regular expression and encodes the other texts
        by :meth:`encode_fragments`; a model that looks for them in C overrides it."""
        finder = _finder(specials)
        held = [i for i, text in enumerate(texts) if finder.search(text)] if finder is not None else []
        if not held and all(texts):
            return self.encode_fragments(texts, workers=workers), held
        # An empty text has no ids (not even a space prefix: it has no fragment).
        skip = set(held)
        plain = [i for i, text in enumerate(texts) if text and i not in skip]
        lists: list[list[int]] = [[] for _ in texts]
        for i, ids in zip(plain, self.encode_fragments([texts[i] for i in plain], workers=workers)):
            lists[i] = ids
        return lists, held

    def encode_texts_to_numpy(
        self, texts: Sequence[str], specials: tuple[str, ...], workers: int = 1
    ) -> tuple[Any, Any, list[int]]:
        """:meth:`encode_texts` as numpy arrays: every text's ids one after the other (``uint32``),
        each text's count (``int64``, 0 for a held text) and ``held``. The default converts
        :meth:`encode_texts`' lists; a model that makes machine words directly overrides it."""
        import numpy as np

        lists, held = self.encode_texts(texts, specials, workers)
        counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        if len(lists) == 1:  # one text (encode_with_offsets): array's conversion, about 3x numpy's
            return np.frombuffer(array("I", lists[0]), dtype=np.uint32), counts, held
        ids = np.fromiter(chain.from_iterable(lists), dtype=np.uint32, count=int(counts.sum()))
        return ids, counts, held

    def render_piece(self, token_id: int, text: bytes, attr: int) -> bytes | None:
        """The piece of token ``token_id`` (stored ``text``, attributes ``attr``) when the model
        renders its own pieces (rwkv's are its unescaped bytes, whatever their type), else None:
        the Tokenizer's rules apply (the default)."""
        return None

    def use_cache_budget(self, cache_bytes: int) -> None:
        """Called by the Tokenizer once, before it encodes anything: the byte budget of all of
        this model's caches together (0: cache nothing). The default keeps no cache."""

    def cache_info(self) -> dict[str, dict[str, int]]:
        """Each cache's ``entries``, ``bytes`` used and ``budget`` (``Tokenizer.cache_info``)."""
        return {}


class CachingModel(TokenizerModel):
    """A model with one cache of ids (``"pieces"``: fragments, words or chunks, as the model
    keys it), a quarter of the Tokenizer's byte budget, the share byte-level BPE gives its piece
    cache. A subclass reads and fills ``self._cache``."""

    _cache: IdCache = IdCache(0)

    def use_cache_budget(self, cache_bytes: int) -> None:
        """Cache ids within a quarter of ``cache_bytes`` (an empty cache)."""
        self._cache = IdCache(int(cache_bytes * 0.25))

    def cache_info(self) -> dict[str, dict[str, int]]:
        cache = self._cache
        return {"pieces": {"entries": len(cache), "bytes": cache.used, "budget": cache.budget}}

    def hand_cache_to(self, merger: Any) -> None:
        """Where a compiled merger caches the words itself (``merger`` not None), its cache is the
        pieces cache: it takes this model's budget and this model caches nothing (one cache, not
        two). Call after :meth:`use_cache_budget`; :meth:`cache_info` then reads ``merger``'s."""
        if merger is not None:
            merger.set_cache_budget(self._cache.budget)
            self._cache = IdCache(0)


@functools.lru_cache(maxsize=16)
def _finder(specials: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern for all of ``specials`` (None: there are none)."""
    if not specials:
        return None
    return re.compile("|".join(map(re.escape, sorted(specials, key=len, reverse=True))))


# -- llama.cpp's UTF-8 decoding ------------------------------------------------------------------


@contextlib.contextmanager
def gc_paused():
    """No cyclic garbage collection within: for building many objects that all live on (a
    collection would only rescan them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
