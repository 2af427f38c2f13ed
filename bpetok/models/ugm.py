"""Unigram, llama.cpp's ``t5`` model (src/llama-vocab.cpp, ``llm_tokenizer_ugm_session``).

T5, mT5, XLM-RoBERTa-based embedders (nomic-embed v2, bge-m3...) say ``tokenizer.ggml.model =
t5``. Each fragment of text between special tokens is

1. normalized (``normalize``), left to right over its bytes: a USER_DEFINED token's text is kept
   as it is; else the longest prefix the precompiled character map knows is replaced
   (:mod:`bpetok.models.charsmap`); else one UTF-8 character is kept (a byte that starts none
   becomes U+FFFD). Then the normalized text's spaces become ``▁``: with
   ``remove_extra_whitespaces`` each run of non-spaces gets one ``▁`` in front and spaces go;
   otherwise each space is a ``▁``, and ``add_space_prefix`` puts one before the first non-space
   (llama.cpp never reads ``treat_whitespace_as_suffix``: it is always false);
2. cut by Viterbi: the best sum of token scores (NORMAL, USER_DEFINED at 0, UNUSED tokens),
   summed in double precision; a character no token starts with costs the unknown score (the
   lowest NORMAL score minus 10, in float32) and gives ``<unk>``; consecutive ``<unk>`` merge.

The Viterbi runs in C (``bpetok/models/_ugm.c``) when the module is built, and so does step 1
unless the vocabulary has USER_DEFINED tokens (the byte walk of the charsmap, then the spaces:
:meth:`UnigramModel.normalize` is its twin). When no token holds a
``▁`` past its first character, every cut falls before each ``▁``, so the Viterbi runs per word
(``▁`` and what follows up to the next one) with ids cached per word: in C (its own word cache)
or in pure Python; otherwise over the whole normalized fragment. (Per word, a word's score sums start from 0 rather than
from the text so far; both are exact in doubles for float32 scores short of ~10^8 tokens.)
:meth:`UnigramModel.encode_fragment_reference` runs the Python Viterbi over the whole fragment
after the byte-by-byte charsmap walk: the readable twin tests hold both fast paths equal to.

Token offsets: each normalized byte keeps the input bytes it came from
(:meth:`UnigramModel.normalize_with_sources`), and a token spans from the source of its first
byte to the end of the source of its last (:meth:`UnigramModel.fragment_spans`, the readable
twin). Where the normalizer runs in C, the kernel carries the same sources through its
normalizer and Viterbi and gives the ids with their spans in one pass
(:meth:`UnigramModel.fragment_span_rows`, ``Lattice.encode_with_spans``), held equal to the twin.
"""

from __future__ import annotations

import functools
import re
import struct
from array import array
from typing import TYPE_CHECKING, Any

from bpetok.compiled import compiled_module, warn_not_built
from bpetok.errors import VocabularyError
from bpetok.hookspecs import hookimpl
from bpetok.models import ModelSpec
from bpetok.models.base import CachingModel
from bpetok.models.charsmap import CharsMap
from bpetok.vocab import CHARSMAP_KEY, TokenAttr

if TYPE_CHECKING:
    import numpy as np  # offsets only: loading a tokenizer does not import numpy

__all__ = ["UnigramModel"]

SPACE = "\u2581"
_SPACE_BYTES = SPACE.encode()
_UNKNOWN_PENALTY = 10.0
# unicode_len_utf8: a sequence's length from its first byte's high nibble (continuation bytes: 1).
_LENGTH_OF_NIBBLE = (1,) * 12 + (2, 2, 3, 4)
_WORDS = re.compile(rb"\xe2\x96\x81(?:(?!\xe2\x96\x81).)*|(?:(?!\xe2\x96\x81).)+", re.S)


def _float32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


class UnigramModel(CachingModel):
    """Viterbi over token scores after the character-map normalizer (see the module docstring)."""

    def __init__(self, vocabulary, pretokenizer=None):
        self.path = vocabulary.path
        attrs, tokens = vocabulary.attrs, vocabulary.tokens
        scores = vocabulary.scores or [0.0] * vocabulary.n_tokens
        unk = vocabulary.special_ids.get("unk")
        if unk is None:
            raise VocabularyError(
                f"{vocabulary.path}: a t5 (unigram) vocabulary needs an unknown token; "
                "set tokenizer.ggml.unknown_token_id"
            )
        self.unk = unk
        self.tokens = tokens
        self.pieces, self.unknown_score, user_defined = self.scored_pieces(tokens, attrs, scores)
        self.longest = max(map(len, self.pieces), default=0)
        self.user_defined = sorted(set(user_defined), key=len, reverse=True)
        self.add_space_prefix = bool(vocabulary.flags.get("add_space_prefix", False))
        self.remove_extra_whitespaces = bool(vocabulary.flags.get("remove_extra_whitespaces", False))
        self.treat_whitespace_as_suffix = False  # llama.cpp has no key for it
        self.charsmap = CharsMap(vocabulary.metadata.get(CHARSMAP_KEY, b""), f"{vocabulary.path}: key {CHARSMAP_KEY!r}")
        self.per_word = not any(_SPACE_BYTES in text[1:] for text in self.pieces)
        self._lattice: Any = None
        self._lattice_built = False
        # The C trie is part of loading (a quarter of a second for 250k tokens).
        lattice = self.lattice()
        self.compiled = lattice is not None  # the C Viterbi (bpetok/models/_ugm.c)
        # The C normalizer too, where no USER_DEFINED token must be kept as it is (then the
        # Python walk, _map_reference, runs).
        self._normalizes_in_c = lattice is not None and not self.user_defined
        if self._normalizes_in_c:
            lattice.set_normalizer(
                array("I", self.charsmap.nodes).tobytes(), self.charsmap.strings,
                self.remove_extra_whitespaces, self.add_space_prefix,
            )

    def scored_pieces(self, tokens, attrs, scores) -> tuple[dict[bytes, tuple[int, float]], float, list[bytes]]:
        """(text -> (id, score) of the tokens the Viterbi matches, the unknown score, the USER_DEFINED
        texts): llama.cpp's token_matcher (a later text wins). A subclass may match others (bpetok-hf:
        Hugging Face's Unigram matches every piece)."""
        matched = TokenAttr.NORMAL | TokenAttr.USER_DEFINED | TokenAttr.UNUSED
        pieces: dict[bytes, tuple[int, float]] = {}
        normal_scores = []
        user_defined = []
        for token_id, (text, attr) in enumerate(zip(tokens, attrs)):
            if attr & TokenAttr.NORMAL:
                normal_scores.append(scores[token_id])
            if attr & matched:
                score = 0.0 if attr & TokenAttr.USER_DEFINED else scores[token_id]
                pieces[text] = (token_id, score)
            if attr & TokenAttr.USER_DEFINED:
                user_defined.append(text)
        min_score = min(normal_scores) if normal_scores else 3.4028234663852886e38  # FLT_MAX
        return pieces, _float32(min_score - _UNKNOWN_PENALTY), user_defined

    def lattice(self):
        """The C Viterbi over this vocabulary's trie, built on first use; None when not built or
        ``BPETOK_PURE_PYTHON`` is set."""
        if not self._lattice_built:
            module = compiled_module("bpetok.models._ugm")
            if module is None:
                warn_not_built("bpetok.models._ugm")
            else:
                texts = list(self.pieces)
                values = list(self.pieces.values())
                try:
                    self._lattice = module.Lattice(
                        texts, [v[0] for v in values], [v[1] for v in values], self.unk, self.unknown_score
                    )
                except OverflowError:  # a trie past 2**24 nodes: the Python Viterbi takes it
                    self._lattice = None
            self._lattice_built = True
        return self._lattice

    def use_cache_budget(self, cache_bytes: int) -> None:
        """The word cache (the C Viterbi's own, or the pure-Python engine's): a quarter of ``cache_bytes``."""
        super().use_cache_budget(cache_bytes)
        lattice = self.lattice()
        if lattice is not None:
            lattice.set_cache_budget(self._cache.budget)

    def cache_info(self) -> dict[str, dict[str, int]]:
        lattice = self.lattice()
        if lattice is None:
            return super().cache_info()
        entries, used, budget = lattice.cache_stats()
        return {"pieces": {"entries": entries, "bytes": used, "budget": budget}}

    # -- normalization -------------------------------------------------------------------------

    def normalize(self, data: bytes) -> bytes:
        """llama.cpp's ``normalize``: the character map, then spaces as ``▁`` (see the module docstring)."""
        return self._spaces(self._map(data))

    def _map(self, data: bytes) -> bytes:
        """Each prefix replaced: a user-defined token kept, else the character map's (fast path)."""
        return self._map_reference(data) if self.user_defined else self.charsmap.normalize(data)

    def _map_reference(self, data: bytes) -> bytes:
        """:meth:`_map` prefix by prefix, as llama.cpp's ``normalize_prefix`` walks."""
        return b"".join(replacement for replacement, _, _ in self._map_steps(data))

    def _map_steps(self, data: bytes) -> list[tuple[bytes, int, int]]:
        """Each step of :meth:`_map_reference`: (replacement, start, end of the bytes it replaced)."""
        out, i, n = [], 0, len(data)
        user_defined, charsmap = self.user_defined, self.charsmap
        while i < n:
            for text in user_defined:  # longest first
                if data.startswith(text, i):
                    out.append((text, i, i + len(text)))
                    i += len(text)
                    break
            else:
                replacement, used = charsmap.prefix(data, i)
                out.append((replacement, i, i + used))
                i += used
        return out

    def _spaces(self, data: bytes) -> bytes:
        if self.remove_extra_whitespaces:
            return b"".join(_SPACE_BYTES + word for word in data.split(b" ") if word)
        out = data.replace(b" ", _SPACE_BYTES)
        if self.add_space_prefix and data.strip(b" "):
            # One ▁ before the first non-space: after the leading spaces' own ▁s.
            lead = len(data) - len(data.lstrip(b" "))
            out = _SPACE_BYTES * lead + _SPACE_BYTES + out[lead * 3 :]
        return out

    # -- Viterbi ---------------------------------------------------------------------------------

    def viterbi(self, data: bytes) -> list[int]:
        """The best-scoring ids of normalized ``data`` (llama.cpp's loop and tie rules)."""
        return [token_id for token_id, _, _ in self.viterbi_spans(data)]

    def viterbi_spans(self, data: bytes) -> list[tuple[int, int, int]]:
        """:meth:`viterbi`'s tokens as (id, start, end) in ``data`` (merged unknowns: all their bytes)."""
        n = len(data)
        if not n:
            return []
        unk, unknown_score, pieces, longest = self.unk, self.unknown_score, self.pieces, self.longest
        best_score = [0.0] + [-1.7976931348623157e308] * n  # -DBL_MAX
        best_id = [unk] * (n + 1)
        best_start = [0] * (n + 1)
        get = pieces.get
        i = 0
        while i < n:
            units = min(_LENGTH_OF_NIBBLE[data[i] >> 4], n - i)
            base = best_score[i]
            whole_found = False
            for end in range(i + 1, min(n, i + longest) + 1):
                found = get(data[i:end])
                if found is None:
                    continue
                if end - i == units:
                    whole_found = True
                score = base + found[1]
                if score > best_score[end]:
                    best_score[end], best_id[end], best_start[end] = score, found[0], i
            if not whole_found:
                end = i + units
                score = base + unknown_score
                if score > best_score[end]:
                    best_score[end], best_id[end], best_start[end] = score, unk, i
            i += units
        out: list[tuple[int, int, int]] = []
        at, previous_unknown = n, False
        while True:
            token_id = best_id[at]
            is_unknown = token_id == unk
            if previous_unknown and is_unknown:
                out[-1] = (unk, best_start[at], out[-1][2])
            else:
                out.append((token_id, best_start[at], at))
            if best_start[at] == 0:
                break
            previous_unknown = is_unknown
            at = best_start[at]
        out.reverse()
        return out

    # -- the model contract ----------------------------------------------------------------------

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment of text between special tokens."""
        data = text.encode("utf-8", "surrogatepass")
        if self._normalizes_in_c:  # encode_fragment_bytes' first step, one call less per text
            found = self._lattice.encode(data, self.per_word)
            if found is not None:
                return found
        return self.encode_fragment_bytes(data, at_start)

    def text_encoder(self, automata):
        """Where the C normalizer runs: the lattice's ``encode_cut``, which takes the special
        tokens' cuts from the automaton (``Automaton.cuts``) and normalizes and encodes each
        fragment from the text's own UTF-8, as the Tokenizer's partition and
        :meth:`encode_fragment` would (a subclass with its own :meth:`encode_fragment` is left
        to those)."""
        built = self._own_automata(automata, UnigramModel) if self._normalizes_in_c else None
        if built is None:
            return None
        return functools.partial(self._lattice.encode_cut, self.per_word, *built)

    def encode_fragment_bytes(self, data: bytes, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` of raw bytes (llama.cpp normalizes the bytes themselves)."""
        lattice = self.lattice()
        if self._normalizes_in_c:
            found = lattice.encode(data, self.per_word)
            if found is not None:
                return found  # None: the charsmap points outside itself, which normalize() reports
        normalized = self.normalize(data)
        if lattice is not None:  # the C Viterbi, per word with its own word cache where it may
            return lattice.viterbi_words(normalized) if self.per_word else lattice.viterbi(normalized)
        if not self.per_word:
            return self.viterbi(normalized)
        ids: list[int] = []
        cache, viterbi, unk = self._cache, self.viterbi, self.unk
        for word in _WORDS.findall(normalized):
            found = cache.get(word)
            if found is None:
                found = viterbi(word)
                cache.keep(word, found)
            if ids and ids[-1] == unk and found and found[0] == unk:
                ids += found[1:]  # consecutive unknowns merge across words too
            else:
                ids += found
        return ids

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` the plain way: one Viterbi over the whole fragment, no cache."""
        return self.viterbi(self._spaces(self._map_reference(text.encode("utf-8", "surrogatepass"))))

    def normal_piece(self, text: bytes) -> bytes:
        """A NORMAL token's bytes: its text with ``▁`` back to spaces."""
        return text.replace(_SPACE_BYTES, b" ")

    def aligns_offsets(self, text: str) -> bool:
        return True

    def token_offsets(self, tok, text: str, ids: list[int], add_special: bool):
        """Each token's span (:mod:`bpetok.models.norm_offsets`, in bytes): each normalized byte
        keeps the input bytes it came from. A charsmap replacement's bytes all come from the
        whole input it replaced (a token holding part of one spans all of it, as in HF
        tokenizers); a ``▁`` for a space spans that space; one the model adds (add_space_prefix,
        remove_extra_whitespaces) has no width, at the start of the word it precedes; text
        mapped to nothing or spaces removed are in no token's span. The kernel's spans where it
        normalizes (:meth:`fragment_span_rows`), else, or where they do not give ``ids``, the
        twin's (:meth:`fragment_spans`)."""
        from bpetok.models.norm_offsets import spans_of_fragment_arrays, spans_of_fragments

        if self._normalizes_in_c:
            found = spans_of_fragment_arrays(tok, text, ids, add_special, self.fragment_span_rows)
            if found is not None:
                return found
        return spans_of_fragments(tok, text, ids, add_special, self.fragment_spans, in_bytes=True)

    def encode_with_offsets(self, tok, text: str, parse_special: bool, add_special: bool):
        """The ids and spans in one pass of the kernel (normalizer and Viterbi), which gives
        :meth:`encode_fragment`'s ids (not where a subclass cuts otherwise: encode, then
        :meth:`token_offsets`)."""
        if not self._normalizes_in_c or type(self).encode_fragment is not UnigramModel.encode_fragment:
            return None
        from bpetok.models.norm_offsets import encode_with_fragment_arrays

        return encode_with_fragment_arrays(tok, text, parse_special, add_special, self.fragment_span_rows)

    def fragment_span_rows(self, fragment: str) -> np.ndarray | None:
        """:meth:`fragment_spans` from the kernel, in characters and bytes: an ``(n, 5)`` int64
        array of id, character start and end, byte start and end; None where the charsmap is
        corrupt or a span would start or end inside a character (the twin says so)."""
        import numpy as np

        found = self._lattice.encode_with_spans(fragment.encode("utf-8", "surrogatepass"), self.per_word)
        return None if found is None else np.frombuffer(found, dtype=np.int64).reshape(-1, 5)

    def fragment_spans(self, fragment: str) -> list[tuple[int, int, int]]:
        """(id, start, end) of each token of ``fragment`` in its UTF-8 bytes: the reference's cut."""
        normalized, starts, ends = self.normalize_with_sources(fragment.encode("utf-8", "surrogatepass"))
        return [(token_id, starts[a], ends[b - 1]) for token_id, a, b in self.token_spans(normalized)]

    def token_spans(self, data: bytes) -> list[tuple[int, int, int]]:
        """:meth:`viterbi_spans` (held equal to it by tests), by the C Viterbi where it can: each of
        its ids as long as its text, unless an ``<unk>`` is among them (the ids do not say how many
        bytes it stands for: the Python Viterbi says)."""
        lattice = self.lattice()
        if lattice is not None:
            ids = lattice.viterbi(data)
            if self.unk not in ids:
                out, at = [], 0
                for token_id in ids:
                    end = at + len(self.tokens[token_id])
                    out.append((token_id, at, end))
                    at = end
                if at == len(data):
                    return out
        return self.viterbi_spans(data)

    def normalize_with_sources(self, data: bytes) -> tuple[bytes, list[int], list[int]]:
        """:meth:`normalize` of ``data`` with, for each of its bytes, the span of ``data`` it came from."""
        mapped, starts, ends = bytearray(), [], []
        for replacement, start, end in self._map_steps(data):
            mapped += replacement
            starts += [start] * len(replacement)
            ends += [end] * len(replacement)
        out, out_starts, out_ends = bytearray(), [], []

        def put(chunk: bytes, start: int, end: int) -> None:
            out.extend(chunk)
            out_starts.extend([start] * len(chunk))
            out_ends.extend([end] * len(chunk))

        space = ord(" ")
        if self.remove_extra_whitespaces:
            for k, byte in enumerate(mapped):
                if byte == space:
                    continue
                if k == 0 or mapped[k - 1] == space:  # a word starts: its ▁, of no width
                    put(_SPACE_BYTES, starts[k], starts[k])
                put(bytes((byte,)), starts[k], ends[k])
        else:
            lead = len(mapped) - len(mapped.lstrip(b" "))
            for k, byte in enumerate(mapped):
                if k == lead and self.add_space_prefix:  # before the first non-space
                    put(_SPACE_BYTES, starts[k], starts[k])
                put(_SPACE_BYTES if byte == space else bytes((byte,)), starts[k], ends[k])
        return bytes(out), out_starts, out_ends


# What this plugin registers: the model, and llama.cpp's defaults for it.
MODEL_SPEC = ModelSpec(
    name="t5", factory=UnigramModel, pretokenized=False,
    description="Unigram (T5, XLM-R): precompiled charsmap normalizer, Viterbi over token scores",
    special_ids={"eos": 1, "unk": 2, "pad": 0}, add_bos=False, add_eos=True, clean_spaces=False, add_space_prefix=False,
)


@hookimpl
def bpetok_register_models(register) -> None:
    register(MODEL_SPEC)
