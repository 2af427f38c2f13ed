"""SentencePiece-style BPE, llama.cpp's ``llama`` model (src/llama-vocab.cpp, ``llm_tokenizer_spm_session``).

Llama 2, Mistral 7B, Mixtral, Gemma 1-3, Phi-3, Yi, Baichuan and InternLM GGUFs say
``tokenizer.ggml.model = llama``. There is no pre-tokenizer: each fragment of text between special
tokens gets a space in front where llama.cpp adds one (``add_space_prefix``, at the start of the
text and after a special token), its spaces become ``▁`` (U+2581), and then:

- every character is a symbol; every adjacent pair whose concatenation is a token is queued by
  that token's score;
- the highest score is merged first, the leftmost on ties, and the merged symbol's new pairs are
  queued, until the queue is empty;
- each final symbol that is a token is emitted; any other (a character with no token of its own)
  falls back to its UTF-8 bytes, each ``<0xXX>``'s id (or, failing that, the one-byte token's).

llama.cpp keeps a reverse-merge map to re-split a merged symbol that is not a token, but a merge
only ever forms a token, so that branch never runs; this module has no such map.

:func:`merge_symbols` is the readable merge loop; ``bpetok/models/_symbols.c`` runs the same loop,
with tables built at load (``spm_merger`` for this model: the token texts, a pair merging when its
span of the input is a token; ``rank_merger`` for gemma4: id tables from its merge strings). Where
no token that merges can form holds a ``▁`` after another character, checked at load, no merge
joins two words: the C loop then merges and caches word by word (also cut between two ASCII
characters, one a control character, that no token holds side by side: a newline in Llama 2), and
takes a whole partitioned text in one call (:meth:`SentencePieceModel.encode_parts`), or a whole
text with the special tokens' C automaton, its fragments read from the text's own UTF-8
(:meth:`SentencePieceModel.text_encoder`, what ``Tokenizer.encode`` calls).
tests/test_symbols.py and tests/test_spm_words.py hold it equal to the Python loop. The C one runs
when it is built and ``BPETOK_PURE_PYTHON`` is unset.
"""

from __future__ import annotations

import functools
import heapq
from itertools import accumulate, repeat
from typing import Any

from bpetok.compiled import compiled_module, warn_not_built
from bpetok.errors import BpetokError
from bpetok.hookspecs import hookimpl
from bpetok.models import ModelSpec
from bpetok.models.base import CachingModel

__all__ = ["SentencePieceModel", "SPACE", "byte_token_ids", "merge_symbols", "merger_module"]

SPACE = "\u2581"  # "▁", SentencePiece's visible space
_SPACE_BYTES = SPACE.encode()
ADD_SPACE_PREFIX = True  # llama.cpp's default for this model; tokenizer.ggml.add_space_prefix overrides


def byte_token_ids(token_to_id: dict[bytes, int]) -> list[int | None]:
    """Each byte's fallback token as llama.cpp's ``byte_to_token`` finds it for SentencePiece
    vocabularies: ``<0xXX>`` (upper-case hex), else the one-byte token, else None."""
    out: list[int | None] = []
    for b in range(256):
        token_id = token_to_id.get(b"<0x%02X>" % b)
        if token_id is None:
            token_id = token_to_id.get(bytes((b,)))
        out.append(token_id)
    return out


# unicode_len_utf8: a sequence's length from its first byte's high nibble (continuation bytes: 1).
_LENGTH_OF_NIBBLE = (1,) * 12 + (2, 2, 3, 4)


def _symbol_starts(data: bytes) -> list[int]:
    """Where each symbol starts: every character of well-formed UTF-8; llama.cpp's rule otherwise.

    >>> _symbol_starts("a▁é".encode()), _symbol_starts(b"a\\xffbcde")
    ([0, 1, 4], [0, 1, 5])
    """
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        starts, i, n = [], 0, len(data)
        while i < n:
            starts.append(i)
            i += _LENGTH_OF_NIBBLE[data[i] >> 4]
        return starts
    if len(text) == len(data):
        return list(range(len(data)))
    lengths = map(len, map(str.encode, text, repeat("utf-8"), repeat("surrogatepass")))
    return [0, *accumulate(lengths)][:-1]


def merger_module():
    """The compiled merge loop (``bpetok/models/_symbols.c``), or None: not built, or ``BPETOK_PURE_PYTHON=1``."""
    return compiled_module("bpetok.models._symbols")


def merge_symbols(data: bytes, priority) -> list[tuple[int, int]]:
    """llama.cpp's merge loop over ``data``'s UTF-8 symbols: the final symbols as (start, length) spans.

    ``priority(left, right)`` ranks merging two adjacent symbols' bytes (lowest first, leftmost on
    ties), or is None where they do not merge. SPM ranks by token score, gemma4 by merge rank.
    """
    start = _symbol_starts(data)
    count = len(start)
    start.append(len(data))
    size = [start[i + 1] - start[i] for i in range(count)]  # bytes; 0 once merged leftwards
    nxt = list(range(1, count + 1))
    prv = list(range(-1, count - 1))
    heap: list[tuple[Any, int, int, int]] = []  # (priority, left, right, bytes of the pair)
    for left in range(count - 1):
        rank = priority(data[start[left] : start[left + 1]], data[start[left + 1] : start[left + 2]])
        if rank is not None:
            heap.append((rank, left, left + 1, start[left + 2] - start[left]))
    heapq.heapify(heap)
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        _, left, right, pair_size = pop(heap)
        # Stale: one side was merged away, or a side grew since this pair was queued.
        if not size[left] or not size[right] or size[left] + size[right] != pair_size:
            continue
        size[left] = pair_size
        size[right] = 0
        after = nxt[left] = nxt[right]
        if after < count:
            prv[after] = left
        merged = data[start[left] : start[left] + pair_size]
        before = prv[left]
        if before >= 0:
            rank = priority(data[start[before] : start[left]], merged)
            if rank is not None:
                push(heap, (rank, before, left, size[before] + pair_size))
        if after < count:
            rank = priority(merged, data[start[after] : start[after] + size[after]])
            if rank is not None:
                push(heap, (rank, left, after, pair_size + size[after]))
    spans, i = [], 0
    while i < count:
        spans.append((start[i], size[i]))
        i = nxt[i]
    return spans


class CompiledMergeLoop(CachingModel):
    """What the models on the C merge loop share: its tables, built on first use (:meth:`merger`),
    and one cache of ids, a quarter of the Tokenizer's byte budget (:meth:`use_cache_budget`). A
    model defines ``build_merger``."""

    _merger: Any = None
    _merger_built = False

    @property
    def compiled(self) -> bool:  # type: ignore[override]  # computed: the merger is built on first use
        """Whether the C merge loop runs (``bpetok/models/_symbols.c``)."""
        return self.merger() is not None

    def merger(self):
        """The C merge loop for this vocabulary, or None (not built, BPETOK_PURE_PYTHON, or
        ``build_merger`` declined: NaN scores)."""
        if not self._merger_built:
            module = merger_module()
            if module is None:
                warn_not_built("bpetok.models._symbols")
            self._merger = self.build_merger(module)
            self._merger_built = True
        return self._merger

    def build_merger(self, module):
        raise NotImplementedError


class SentencePieceModel(CompiledMergeLoop):
    """Score-ordered merges over the characters of one fragment (see the module docstring)."""

    def __init__(self, vocabulary, pretokenizer=None):
        self.path = vocabulary.path
        self.ids = index = vocabulary.token_index()
        self.n_tokens = vocabulary.n_tokens
        scores = vocabulary.scores
        # A tuple: of floats only, the garbage collector stops walking it (a list it walks every time).
        self.scores: tuple[float, ...] = tuple(scores) if scores else (0.0,) * self.n_tokens
        self.byte_ids = byte_token_ids(index)
        self.add_space_prefix = vocabulary.flags.get("add_space_prefix", ADD_SPACE_PREFIX)
        merger = self.merger()  # the tables are built at load, not by the first encode
        # The C loop that merges word by word, caching words (where no token spans a word start,
        # checked at load): it takes the whole fragment. Otherwise fragments' ids are cached.
        self._word_merger = merger if merger is not None and merger.words else None

    def build_merger(self, module):
        """This vocabulary's tables in ``module`` (``bpetok.models._symbols``), or None if it is None."""
        if module is None:
            return None
        # Two adjacent symbols merge when their text is a token, the highest score first (equal
        # scores: the leftmost); the tables, a 262k-token vocabulary's too, are built in C. None
        # for a NaN score: no order to reproduce (nor does llama.cpp's heap have one).
        return module.spm_merger(self.ids, self.scores, self.n_tokens, self.byte_ids, True)

    def use_cache_budget(self, cache_bytes: int) -> None:
        """Cache fragments within a quarter of ``cache_bytes``, or, when the C loop caches words,
        give it that budget (one cache either way)."""
        super().use_cache_budget(cache_bytes)
        self.hand_cache_to(self._word_merger)

    def cache_info(self) -> dict[str, dict[str, int]]:
        if self._word_merger is not None:
            return {"pieces": self._word_merger.cache_info()}
        return super().cache_info()

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment; ``at_start``: it starts the text or follows a special token."""
        if self._word_merger is not None:
            found = self._word_merger.encode_text(text, self.add_space_prefix and at_start)
            if found is not None:
                return found
            # None: lone surrogates, or a byte without a token (the reference below says which)
        if self.add_space_prefix and at_start:
            text = " " + text
        text = text.replace(" ", SPACE)
        found = self._cache.get(text)
        if found is not None:
            return list(found)
        ids = self.encode_escaped(text.encode("utf-8", "surrogatepass"))
        self._cache.keep(text, ids)
        return ids

    def _one_call(self) -> bool:
        """Whether a whole text may go to the C loop in one call: it caches words, and
        :meth:`encode_fragment` is this class's (a subclass with its own rule, such as bpetok-hf's
        Metaspace prefix, encodes fragment by fragment)."""
        return self._word_merger is not None and type(self).encode_fragment is SentencePieceModel.encode_fragment

    def encode_parts(self, fragments: list) -> list[int] | None:
        """A partitioned text's ids in one C call where :meth:`_one_call` allows (else None): each
        str fragment as :meth:`encode_fragment` gives it, special ids as they are."""
        if not self._one_call():
            return None
        return self._word_merger.encode_parts(fragments, self.add_space_prefix, self.start_after_special, self.emits_special_tokens)

    def text_encoder(self, automata):
        """Where the C loop caches words: its ``encode_cut``, which takes the special tokens'
        cuts from the automaton (``Automaton.cuts``) and encodes the fragments from the text's
        own UTF-8, as :meth:`encode_parts` encodes the partition's str fragments."""
        built = automata() if self._one_call() else None
        if built is None:
            return None
        flags = (self.add_space_prefix, self.start_after_special, self.emits_special_tokens)
        return functools.partial(self._word_merger.encode_cut, *flags, *built)

    text_encoder_gives_bytes = True  # encode_cut's as_bytes

    def encode_fragment_bytes(self, data: bytes, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` of raw bytes, invalid UTF-8 included: llama.cpp's session
        works on bytes, a symbol being as long as its first byte says (``unicode_len_utf8``)."""
        try:
            return self.encode_fragment(data.decode("utf-8", "surrogatepass"), at_start)
        except UnicodeDecodeError:
            pass  # invalid UTF-8: merged as it is, not cached
        if self.add_space_prefix and at_start:
            data = b" " + data
        return self.encode_escaped(data.replace(b" ", _SPACE_BYTES))

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` the plain way: the whole fragment by :func:`merge_symbols`."""
        if self.add_space_prefix and at_start:
            text = " " + text
        return self.encode_escaped_reference(text.replace(" ", SPACE).encode("utf-8", "surrogatepass"))

    def encode_escaped(self, data: bytes) -> list[int]:
        """llama.cpp's ``llm_tokenizer_spm_session::tokenize`` on bytes whose spaces are already ``▁``."""
        if not data:
            return []
        merger = self.merger()
        if merger is not None:
            found = merger.encode(data)
            if found is not None:
                return found
            # None: a byte without a token (the loop below says which) or an input of 2 GiB.
        return self.encode_escaped_reference(data)

    def encode_escaped_reference(self, data: bytes) -> list[int]:
        """:meth:`encode_escaped` by :func:`merge_symbols`, the readable twin of the C loop."""
        return self._emit(data, self.merge(data))

    def merge(self, data: bytes) -> list[tuple[int, int]]:
        """The final symbols of ``data`` as (start, length) byte spans, llama.cpp's merge loop."""
        ids, scores = self.ids, self.scores

        def priority(left: bytes, right: bytes) -> float | None:  # the highest score first
            token_id = ids.get(left + right)
            return None if token_id is None else -scores[token_id]

        return merge_symbols(data, priority)

    def _emit(self, data: bytes, spans: list[tuple[int, int]]) -> list[int]:
        ids, out = self.ids, []
        for begin, length in spans:
            symbol = data[begin : begin + length]
            token_id = ids.get(symbol)
            if token_id is not None:
                out.append(token_id)
            else:
                out += self._byte_fallback(symbol)
        return out

    def _byte_fallback(self, symbol: bytes) -> list[int]:
        out = []
        for b in symbol:
            token_id = self.byte_ids[b]
            if token_id is None:
                # llama.cpp's byte_to_token throws here (std::map::at): no ids to reproduce.
                raise BpetokError(
                    f"{self.path}: the text needs byte {b:#04x}, which has no <0x{b:02X}> token in this vocabulary; "
                    "llama.cpp cannot tokenize it either"
                )
            out.append(token_id)
        return out

    def normal_piece(self, text: bytes) -> bytes:
        """A NORMAL token's bytes: its text with ``▁`` back to spaces."""
        return text.replace(_SPACE_BYTES, b" ")


# What this plugin registers: the model, and llama.cpp's defaults for it.
MODEL_SPEC = ModelSpec(
    name="llama", factory=SentencePieceModel, pretokenized=False,
    description="SentencePiece-style BPE: merges by token score, ▁ for spaces, <0xXX> byte fallback",
    special_ids={"bos": 1, "eos": 2, "unk": 0}, add_bos=True, clean_spaces=False, add_space_prefix=ADD_SPACE_PREFIX,
)


@hookimpl
def bpetok_register_models(register) -> None:
    register(MODEL_SPEC)
