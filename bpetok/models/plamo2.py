"""PLaMo-2's tokenizer, llama.cpp's ``plamo2`` model (src/llama-vocab.cpp, ``llm_tokenizer_plamo2``).

A unigram-style best path over the code points of each fragment of text between special tokens:
llama.cpp builds a table of every token and every suffix of one, sorted by reversed text, and runs
a dynamic program from the end of the text. What it computes, said plainly:

- the first code point is dropped when it is a byte order mark (U+FEFF), per fragment;
- ``cost[i]`` is the cheapest way to tokenize ``text[i:]``: each token (any type but BYTE) that
  the text at ``i`` starts with costs ``-round(score * 1e4)``; one code point as its UTF-8
  ``<0xXX>`` byte tokens costs 10,000,000. Tokens are tried longest first and a cheaper one
  replaces the best so far only when strictly cheaper; a NaN or infinite score (and any score
  at or below -2000) is never taken, and a token whose score is exactly -1000 ends the
  search at its position as the byte fallback does;
- the path is read from the start.

``bpetok/models/_trie.c`` (``Dictionary.best_path``) runs the same program in C over a byte trie
of the candidates' UTF-8 texts, on whole fragments; without it the Python twin runs, on chunks cut where
no token can span (before a space no token holds after its preceding character), each chunk's ids
cached.

Special tokens llama.cpp finds in the text (``parse_special``) are dropped, not emitted: its
``plamo2`` branch of ``tokenize`` does not copy them to the output. A piece is a BYTE token's byte
(its text must be exactly ``<0xXX>``), else the token's text as stored, whatever its type.
"""

from __future__ import annotations

import math
import re
from array import array
from contextlib import suppress
from functools import cached_property, partial
from itertools import accumulate

from bpetok.compiled import compiled_module, warn_not_built
from bpetok.errors import VocabularyError
from bpetok.hookspecs import hookimpl
from bpetok.models import ModelSpec
from bpetok.models.base import CachingModel
from bpetok.vocab import TokenAttr

__all__ = ["Plamo2Model"]

_INVALID_SCORE = -20_000_000
_UNKNOWN_SCORE = -10_000_000
_NOWHERE = (None, False)  # a text no token starts with
_UNREACHED = 1 << 60  # llama.cpp's initial cost of every position
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _byte_of(text: bytes) -> int | None:
    """The byte a BYTE token stands for, llama.cpp's test: exactly ``<0x`` two hex digits ``>``."""
    if len(text) == 6 and text[:3] == b"<0x" and text[5:] == b">" and text[3] in _HEX and text[4] in _HEX:
        return int(text[3:5], 16)
    return None


def _fixed_score(score: float) -> int:
    """llama.cpp's ``(int32_t) std::round(score * 1e4)``; INVALID for NaN, infinities and scores
    past int32 (which C leaves undefined: such a token is never taken)."""
    if not math.isfinite(score):
        return _INVALID_SCORE
    scaled = score * 1e4
    value = math.floor(scaled + 0.5) if scaled >= 0 else -math.floor(-scaled + 0.5)  # halves away from zero
    return value if -(2**31) <= value < 2**31 else _INVALID_SCORE


_PARTITIONED = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN  # cut out of the text first


class Plamo2Model(CachingModel):
    """The best-score path over code points (see the module docstring)."""

    emits_special_tokens = False  # llama.cpp's plamo2 branch of tokenize drops them
    may_add_eos = False  # and adds BOS only (when tokenizer.ggml.add_bos_token says so)

    def __init__(self, vocabulary, pretokenizer=None):
        self.path = vocabulary.path
        attrs = vocabulary.attrs
        byte_attrs = {a for a in set(attrs) if a & TokenAttr.BYTE}  # set tests: enum.Flag's & is slow
        scores = vocabulary.scores or [0.0] * vocabulary.n_tokens
        self.byte_ids: list[int] = [0] * 256
        # Candidate tokens: text -> (id, fixed score); llama.cpp keys its table by text, the last id wins.
        candidates: dict[str, tuple[int, int]] = {}
        for token_id, text in enumerate(vocabulary.tokens):
            if attrs[token_id] in byte_attrs:
                b = _byte_of(text)
                if b is not None:
                    self.byte_ids[b] = token_id
                continue
            try:
                key = text.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                continue  # llama.cpp's text is decoded code points: such a token never matches
            if key:
                candidates[key] = (token_id, _fixed_score(scores[token_id]))
        missing = [b for b in range(256) if self.byte_ids[b] == 0]
        if missing:
            raise VocabularyError(
                f"{vocabulary.path}: a plamo2 vocabulary needs a BYTE token <0x{missing[0]:02X}> for every byte, "
                f"and {len(missing)} are missing (llama.cpp refuses to load it too)"
            )
        self.candidates = {k: v for k, v in candidates.items() if v[1] > _INVALID_SCORE}
        # what token_offsets skips: the special tokens' texts (a special token's piece is its text)
        specials = sorted({t for t, a in zip(vocabulary.tokens, attrs) if a & _PARTITIONED and t}, key=len, reverse=True)
        self._special_texts = [t.decode("utf-8", "replace") for t in specials]
        self._special_gaps = re.compile(b"|".join(map(re.escape, specials)) or b"(?!)")
        module = compiled_module("bpetok.models._trie")
        if module is None:
            warn_not_built("bpetok.models._trie")
        self._dictionary = None
        if module is not None:
            with suppress(OverflowError):  # a trie past the double array's 4M slots: the Python twin runs
                self._dictionary = self._build_dictionary(module)
        self.compiled = self._dictionary is not None  # the C path (bpetok/models/_trie.c)

    def _build_dictionary(self, module):
        """The candidates for ``bpetok/models/_trie.c``: UTF-8 texts sorted, back to back (it builds
        their trie; OverflowError past its size)."""
        rows = sorted((text.encode("utf-8", "surrogatepass"), found) for text, found in self.candidates.items())
        texts = [text for text, _ in rows]
        return module.Dictionary(
            b"".join(texts),
            array("Q", [0, *accumulate(map(len, texts))]),
            array("i", [found[0] for _, found in rows]),
            array("i", [found[1] for _, found in rows]),
            array("I", self.byte_ids),
        )

    @cached_property
    def steps(self) -> dict[str, tuple[tuple[int, int] | None, bool]]:
        """One lookup per step of the Python walk: every candidate and every prefix of one ->
        (its token or None, whether a longer candidate starts so); built on first use."""
        prefixes: set[str] = set()
        for text in self.candidates:
            prefixes.update(text[:k] for k in range(1, len(text)))
        steps: dict[str, tuple[tuple[int, int] | None, bool]] = dict.fromkeys(prefixes, (None, True))
        for text, found in self.candidates.items():
            steps[text] = (found, text in prefixes)
        return steps

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment of text between special tokens.

        The text is cut before each space that no token holds after the character before it: no
        token spans such a cut, so every path passes through it and the best path is the best
        paths of the chunks joined (ties too: each position's choice sees only its right side).
        Each chunk's ids are cached."""
        if text[:1] == "\ufeff":
            text = text[1:]
        if self._dictionary is not None:  # the C path, whole: faster than cutting and caching
            return self._dictionary.best_path(text.encode("utf-8", "surrogatepass"))
        return self._cache.ids_of(self._space_cut.split(text), self._best_path)

    def text_encoder(self, automata):
        """Where the C path runs: ``Dictionary.encode_cut``, which takes the special tokens' cuts
        from the automaton (``Automaton.cuts``) and runs the best path over each fragment in the
        text's own UTF-8, its byte order mark dropped and the specials' ids too, as the
        Tokenizer's partition and :meth:`encode_fragment` would (a subclass with its own
        :meth:`encode_fragment` is left to those)."""
        built = self._own_automata(automata, Plamo2Model) if self._dictionary is not None else None
        if built is None:
            return None
        return partial(self._dictionary.encode_cut, self.emits_special_tokens, *built)

    @cached_property
    def _space_cut(self) -> re.Pattern:
        """Matches where chunks are cut: before each space after a character no token has a space after."""
        before = re.compile(r"(.)(?= )", re.S)
        before_space = {c for text in self.candidates if " " in text for c in before.findall(text)}
        others = "".join(re.escape(c) for c in sorted(before_space))
        return re.compile(r"(?<=[^" + others + r"])(?= )" if others else r"(?<=.)(?= )", re.S)

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """llama.cpp's ``llm_tokenizer_plamo2::encode``: the dynamic program from the end, over
        the whole fragment."""
        return self._best_path(text[1:] if text[:1] == "\ufeff" else text)

    def _best_path(self, text: str) -> list[int]:
        """The ids of the cheapest path through ``text`` (module docstring); the readable twin
        of ``Dictionary.best_path`` in ``bpetok/models/_trie.c``."""
        n = len(text)
        if not n:
            return []
        steps = self.steps
        cost = [0] * (n + 1)
        step: list[tuple[int, int]] = [(1, -1)] * (n + 1)  # (code points, token id or -1 for bytes)
        for i in range(n - 1, -1, -1):
            matches = []
            end = i + 1
            while end <= n:
                found, more = steps.get(text[i:end], _NOWHERE)
                if found is not None:
                    matches.append((end - i, found))
                if not more:
                    break
                end += 1
            best, best_step = _UNREACHED, (1, -1)
            for length, (token_id, score) in reversed(matches):  # longest first
                total = cost[i + length] - score
                if total < best:
                    best, best_step = total, (length, token_id)
                if score == _UNKNOWN_SCORE:
                    break
            else:  # one code point as its bytes
                total = cost[i + 1] - _UNKNOWN_SCORE
                if total < best:
                    best, best_step = total, (1, -1)
            cost[i], step[i] = best, best_step
        out: list[int] = []
        pos = 0
        byte_ids = self.byte_ids
        while pos < n:
            length, token_id = step[pos]
            if token_id >= 0:
                out.append(token_id)
            else:
                out += [byte_ids[b] for b in text[pos].encode("utf-8", "surrogatepass")]
            pos += length
        return out

    def render_piece(self, token_id: int, text: bytes, attr: int) -> bytes | None:
        """A BYTE token ``<0xXX>`` is its byte; any other token its text as stored."""
        if attr & TokenAttr.BYTE:
            b = _byte_of(text)
            if b is not None:
                return bytes((b,))
        return text

    def normal_piece(self, text: bytes) -> bytes:
        """A NORMAL token's bytes: its text as stored (PLaMo's pieces hold real spaces)."""
        return text

    def aligns_offsets(self, text: str) -> bool:
        """Where the text holds a special token's text, which llama.cpp's plamo2 drops."""
        return any(t in text for t in self._special_texts)

    def token_offsets(self, tok, text: str, ids: list[int], add_special: bool):
        """Spans with a gap where a special token's text was (llama.cpp's plamo2 drops them)."""
        from bpetok.offsets import offsets_by_walk

        return offsets_by_walk(tok, text, ids, add_special=add_special, gap=self.special_gap)

    def special_gap(self, data: bytes, at: int) -> int:
        """Where a special token's text at byte ``at`` ends (``at``: none there): what token_offsets skips."""
        found = self._special_gaps.match(data, at)
        return found.end() if found else at


# What this plugin registers: the model, and llama.cpp's defaults for it.
MODEL_SPEC = ModelSpec(
    name="plamo2", factory=Plamo2Model, pretokenized=False,
    description="PLaMo-2: best-score path over code points (suffix-table DP), <0xXX> byte fallback",
    special_ids={"bos": 1, "eos": 2, "unk": 0, "pad": 3}, add_bos=False, clean_spaces=False,
)


@hookimpl
def bpetok_register_models(register) -> None:
    register(MODEL_SPEC)
