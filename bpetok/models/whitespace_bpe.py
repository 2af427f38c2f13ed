"""llama.cpp's ``whitespace`` model (src/llama-vocab.cpp, ``llm_tokenizer_whitespace_session``).

A ``tokenizer.ggml.model = whitespace`` file is byte-pair encoded as a ``gpt2`` vocabulary with the
same ``tokenizer.ggml.pre`` (its converter writes ``pre = whitespace`` too, llama.cpp's WHITESPACE
type: ``\\S+`` runs over raw UTF-8), except that each fragment of text between special tokens is
first cut at whitespace (llama.cpp's whitespace code points), which is dropped, and each run
between is encoded on its own. llama.cpp's lower-casing option is off for ``pre = whitespace``.

The runs go to the gpt2 model itself (:class:`Gpt2Runs`, the model the registry gives a gpt2
vocabulary with this pre), so the merges, the byte fallback and the pieces are the gpt2 model's.
With ``pre = whitespace`` (``\\S+``, raw UTF-8) the gpt2 model's split would give each run back
whole, so the runs go straight to its merge loop: with the C loop the whole fragment in one call
(``Merger.encode_runs``: the cut, its word cache, the merges), else looked up in its piece cache
all at once and only the missing ones merged (:meth:`WhitespaceModel.encode_fragment`;
``encode_fragment_reference`` is the plain twin, each run through the gpt2 model's reference path).
"""

from __future__ import annotations

import re
from array import array
from itertools import chain
from typing import TYPE_CHECKING

from bpetok.cache import LONGEST_KEY, as_ids
from bpetok.errors import UnsupportedVocabularyError
from bpetok.hookspecs import hookimpl
from bpetok.models import ModelSpec, TokenizerModel
from bpetok.pretok.unicode_data import WHITESPACE
from bpetok.vocab import TokenAttr

if TYPE_CHECKING:
    import numpy as np  # offsets only: loading a tokenizer does not import numpy

__all__ = ["Gpt2Runs", "Gpt2RunsModel", "WhitespaceModel"]

_WHITESPACE_RUNS = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(WHITESPACE)) + "]+")
_WHITESPACE_UTF8 = re.compile(b"(?:" + b"|".join(re.escape(chr(c).encode()) for c in sorted(WHITESPACE)) + b")+")
# The same code points as the C loop's ``breaks`` (``Merger.encode_runs``): bit c % 8 of byte c // 8.
_WHITESPACE_BITS = bytearray(max(WHITESPACE) // 8 + 1)
for _c in WHITESPACE:
    _WHITESPACE_BITS[_c // 8] |= 1 << (_c % 8)
_WHITESPACE_BREAKS = bytes(_WHITESPACE_BITS)
del _c, _WHITESPACE_BITS
# A character's code for offsets (WhitespaceModel._char_codes): its UTF-8 bytes (_SIZE's bits),
# plus _DROPPED where the model drops it.
_SIZE, _DROPPED = 7, 8


class Gpt2Runs:
    """The gpt2 model for ``vocabulary``'s pre (the one the registries give a gpt2 vocabulary
    with this pre: byte-level, or its raw-UTF-8 variant), run on text without special tokens
    through its own :class:`~bpetok.models.TokenizerModel` methods, caches and C kernel included."""

    def __init__(self, vocabulary):
        from bpetok.plugins import get_model_registry, get_registry

        row = get_registry().get("gpt2", vocabulary.pre)
        gpt2 = get_model_registry().get("gpt2")
        if row is None or gpt2 is None:
            raise UnsupportedVocabularyError(
                f"{vocabulary.path}: tokenizer.ggml.model={vocabulary.model!r} runs the gpt2 model with "
                f"tokenizer.ggml.pre={vocabulary.pre!r}, and no installed pre-tokenizer handles that pre "
                "for gpt2: set a pre llama.cpp knows (see `bpetok list-pretokenizers`)"
            )
        self.spec = row.spec
        self.model: TokenizerModel = gpt2.spec.factory(vocabulary, row.spec)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (no special tokens in it) as the gpt2 model gives them."""
        return self.model.encode_fragment(text, False)

    def encode_reference(self, text: str) -> list[int]:
        """:meth:`encode` the plain way: no cache, the gpt2 model's reference merge."""
        return self.model.encode_fragment_reference(text, False)


class Gpt2RunsModel(TokenizerModel):
    """What whitespace and hybriddna share: a gpt2 model (:class:`Gpt2Runs`) that encodes the
    runs of text they cut, whose caches, C kernel, pre-tokenizer flags and pieces are theirs."""

    def __init__(self, vocabulary):
        self.runs = Gpt2Runs(vocabulary)
        self.flags_pretokenizer = self.runs.spec  # its add_bos / clean_spaces are the file's defaults
        self.compiled = self.runs.model.compiled

    def use_cache_budget(self, cache_bytes: int) -> None:
        """The gpt2 model's caches take the whole budget (runs are its texts' heads)."""
        self.runs.model.use_cache_budget(cache_bytes)

    def cache_info(self) -> dict[str, dict[str, int]]:
        return self.runs.model.cache_info()

    def normal_piece(self, text: bytes) -> bytes:
        """A NORMAL token's bytes, as the gpt2 model renders them."""
        return self.runs.model.normal_piece(text)


class WhitespaceModel(Gpt2RunsModel):
    """Whitespace dropped, each run between byte-pair encoded by the gpt2 model (module docstring)."""

    def __init__(self, vocabulary, pretokenizer=None):
        super().__init__(vocabulary)
        self._spelled_table: np.ndarray | None = None  # offsets: each token's spelling (_spelled), filled as met
        self._codes: np.ndarray | None = None  # offsets: each code point's (_char_codes), filled as met
        self._ascii_codes = b""  # _codes of 0..255 as a bytes.translate table (ASCII text)
        from bpetok.models.raw_utf8 import RawUtf8Model

        model = self.runs.model
        # Runs go straight to the piece cache where the gpt2 split keeps each run whole: \S+ over
        # raw UTF-8 with no escaping or re-cutting (tests hold the split to that).
        self._pieces_whole = (
            isinstance(model, RawUtf8Model) and self.runs.spec.name == "whitespace"
            and not (model.escape_whitespaces or model.metaspace or model.newline_runs_whole)
        )
        # The whole fragment in one C call where the runs go straight to the merge loop: the cut at
        # whitespace, the word cache and the merges (bpetok/models/_fragments.h, encode_runs).
        merger = model.merger() if self._pieces_whole else None
        self._run_merger = merger if merger is not None and hasattr(merger, "encode_runs") else None

    def use_cache_budget(self, cache_bytes: int) -> None:
        """The gpt2 model's caches take the whole budget; where the C loop encodes the runs, its
        word cache is the pieces cache (one cache, not two)."""
        super().use_cache_budget(cache_bytes)
        if self._run_merger is not None:
            self.runs.model.hand_cache_to(self._run_merger)

    def cache_info(self) -> dict[str, dict[str, int]]:
        if self._run_merger is not None:
            return {"pieces": self._run_merger.cache_info()}
        return super().cache_info()

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment of text between special tokens (each run's cached by the gpt2 model)."""
        merger = self._run_merger
        if merger is not None:
            found = merger.encode_runs(text, _WHITESPACE_BREAKS)
            if found is not None:
                return found
            # None: lone surrogates, or a byte without a token (the path below says which)
        if self._pieces_whole:
            model = self.runs.model
            cache = model._cache  # a RawUtf8Model's (see __init__)
            keys = [run.encode("utf-8", "surrogatepass") for run in _WHITESPACE_RUNS.split(text) if run]
            found = list(map(cache.get, keys))
            if None in found:  # merge each missing run once, then cache them together
                fresh: dict[bytes, array] = {}
                # the C merge loop straight (encode_piece's newline check is off: see __init__)
                merger = model.merger()
                for k, ids in enumerate(found):
                    if ids is None:
                        ids = fresh.get(keys[k])
                        if ids is None:
                            merged = merger.encode(keys[k]) if merger is not None else None
                            ids = fresh[keys[k]] = as_ids(merged if merged is not None else model.encode_piece(keys[k]))
                        found[k] = ids
                kept = [key for key in fresh if len(key) <= LONGEST_KEY]
                cache.put_many(kept, [fresh[key] for key in kept])
            return list(chain.from_iterable(found))  # every miss was filled above
        encode = self.runs.encode
        out: list[int] = []
        for run in _WHITESPACE_RUNS.split(text):
            if run:
                out += encode(run)
        return out

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` by the gpt2 model's reference merge."""
        encode = self.runs.encode_reference
        return [i for run in _WHITESPACE_RUNS.split(text) if run for i in encode(run)]

    def aligns_offsets(self, text: str) -> bool:
        return True

    def encode_with_offsets(self, tok, text: str, parse_special: bool, add_special: bool):
        """encode, then :meth:`token_offsets`'s spans, from encode's ids as an array (a list of
        them and back cost more than the spans)."""
        from bpetok.offsets import _added

        body = self._ids_array(tok, text, parse_special)
        head, tail = _added(tok, add_special)
        found = self._fast_offsets(tok, text, body, (head, tail))
        return found if found is not None else self.walk_offsets(tok, text, head + body.tolist() + tail, add_special)

    def _ids_array(self, tok, text: str, parse_special: bool):
        """``tok.encode(text, parse_special=parse_special)`` as a numpy array: a text without special
        tokens straight from the C loop as int32 (encode's own call: :meth:`encode_fragment`)."""
        import numpy as np

        merger = self._run_merger
        if merger is not None and text:
            fragments = tok._partition(text, parse_special)
            if len(fragments) == 1 and fragments[0].__class__ is str:
                found = merger.encode_runs(text, _WHITESPACE_BREAKS, True)
                if found is not None:
                    return np.frombuffer(found, dtype=np.int32)
        return tok.encode_batch_to_numpy([text], parse_special=parse_special, workers=1)[0]

    def token_offsets(self, tok, text: str, ids: list[int], add_special: bool):
        """Spans with a gap where the dropped whitespace was (no token holds whitespace): the
        tokens spell the rest of the text in order, unless the model dropped more (a character
        without a token), which :meth:`walk_offsets` finds."""
        import numpy as np

        from bpetok.offsets import _added

        head, tail = _added(tok, add_special)
        if ids[: len(head)] == head and ids[len(ids) - len(tail) :] == tail:
            body = np.array(ids[len(head) : len(ids) - len(tail)], dtype=np.int64)
            found = self._fast_offsets(tok, text, body, (head, tail))
            if found is not None:
                return found
        return self.walk_offsets(tok, text, ids, add_special)

    def _fast_offsets(self, tok, text: str, body, added):
        """The spans as running sums over the characters the model keeps (tokens of whole
        characters), else over the bytes it keeps; None where a special token is among ``body``,
        or what the tokens spell does not add up to what was kept (the walk then decides)."""
        import numpy as np

        from bpetok.offsets import _LOW, spans_over_kept_bytes, spans_over_kept_chars

        spelled = self._spelled(tok, body)
        if spelled is None:
            return None
        codes = self._char_codes(tok, text)
        if (spelled & _LOW).all():
            return spans_over_kept_chars(text, body, added, spelled, codes >= _DROPPED, codes & _SIZE)
        lengths = spelled >> 32
        if lengths.all():
            return spans_over_kept_bytes(text, body, added, lengths, np.repeat(codes >= _DROPPED, codes & _SIZE))
        return None

    def _char_codes(self, tok, text: str):
        """Each character of ``text``: its UTF-8 bytes, plus ``_DROPPED`` where the model drops
        it (whitespace; over raw UTF-8 a character that is no token: llama.cpp drops it when no
        byte token stands in, and where one does the sums do not add up and the walk decides)."""
        import numpy as np

        if self._codes is None:  # per code point, 0 until met; ASCII's all at once (the translation below)
            self._codes = np.zeros(0x110000, dtype=np.int8)
            self._fill_codes(tok, self._codes, range(128))
            self._ascii_codes = self._codes[:256].tobytes()
        if text.isascii():
            return np.frombuffer(text.encode("ascii").translate(self._ascii_codes), dtype=np.int8)
        # the code points: numpy holds a str as UTF-32 (a copy, faster than encoding it; a lone
        # surrogate is its code point); "[:len]": numpy gives an empty str one character
        points = np.array(text).reshape(1).view(np.uint32)[: len(text)]
        codes = self._codes.take(points)
        if not codes.all():
            self._fill_codes(tok, self._codes, np.unique(points[codes == 0]).tolist())
            codes = self._codes.take(points)
        return codes

    def _fill_codes(self, tok, table, points) -> None:
        """:meth:`_char_codes`' ``table`` for the code points ``points``."""
        index, raw = tok.vocabulary.token_index(), self._raw
        for point in points:
            char = chr(point).encode("utf-8", "surrogatepass")
            table[point] = len(char) + (_DROPPED if point in WHITESPACE or (raw and char not in index) else 0)

    @property
    def _raw(self) -> bool:
        """BPE over raw UTF-8 (llama.cpp's byte_encode=false) without escaping spaces."""
        return not getattr(self.runs.spec, "byte_encode", True) and not getattr(self.runs.spec, "escape_whitespaces", False)

    def _spelled(self, tok, body):
        """Each token's spelled bytes (:meth:`_spelling`) * ``_PACK`` + its characters (0 where the
        bytes are not whole characters), 0 for a special token; None where an id is out of range."""
        import numpy as np

        from bpetok.offsets import _PACK

        if self._spelled_table is None:  # per token, -1 until met
            self._spelled_table = np.full(tok.n_tokens, -1, dtype=np.int64)
        if len(body) and (int(body.min()) < 0 or int(body.max()) >= tok.n_tokens):
            return None
        found = self._spelled_table.take(body)
        if (found < 0).any():
            attrs = tok.vocabulary.attrs
            for token_id in np.unique(body[found < 0]).tolist():
                packed = 0
                if not attrs[token_id] & (TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN):
                    spelling = self._spelling(tok, token_id)
                    try:
                        packed = len(spelling) * _PACK + len(spelling.decode("utf-8", "surrogatepass"))
                    except UnicodeDecodeError:  # part of a character: only the bytes' sums hold
                        packed = len(spelling) * _PACK
                self._spelled_table[token_id] = packed
            found = self._spelled_table.take(body)
        return found

    def _spelling(self, tok, token_id: int) -> bytes:
        """What a token matched in the text: over raw UTF-8 a NORMAL token's stored text, which its
        piece (read through GPT-2's alphabet) need not be."""
        if self._raw and tok.vocabulary.attrs[token_id] & TokenAttr.NORMAL:
            return tok.vocabulary.tokens[token_id]
        return tok.piece(token_id)

    def walk_offsets(self, tok, text: str, ids: list[int], add_special: bool):
        """:meth:`token_offsets` token by token (bpetok.offsets' walk, told what the model drops):
        the readable twin, and the way when a character without a token was dropped."""
        from bpetok.offsets import offsets_by_walk

        raw, index = self._raw, tok.vocabulary.token_index()

        def gap(data: bytes, at: int) -> int:
            """Whitespace, or over raw UTF-8 a character that is no token (llama.cpp drops it)."""
            found = _WHITESPACE_UTF8.match(data, at)
            if found:
                return found.end()
            end = at + 1
            while end < len(data) and 0x80 <= data[end] < 0xC0:
                end += 1
            return end if raw and data[at:end] not in index else at

        return offsets_by_walk(tok, text, ids, add_special=add_special, gap=gap, spelling=lambda i: self._spelling(tok, i))


def gpt2_runs_spec(name: str, factory: type[Gpt2RunsModel], description: str) -> ModelSpec:
    """The ModelSpec of a model that runs the gpt2 model on parts of its text (this one, hybriddna):
    it cuts the text itself (not pretokenized), with llama.cpp's defaults for BPE, as for gpt2."""
    return ModelSpec(name=name, factory=factory, pretokenized=False, description=description,
                     special_ids={"bos": 11, "eos": 11})


# What this plugin registers: the model, and llama.cpp's defaults for it.
MODEL_SPEC = gpt2_runs_spec("whitespace", WhitespaceModel, "gpt2 BPE of each run between whitespace, the whitespace dropped")


@hookimpl
def bpetok_register_models(register) -> None:
    register(MODEL_SPEC)
