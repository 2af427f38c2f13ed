"""Gemma 4's BPE, llama.cpp's ``gemma4`` model (src/llama-vocab.cpp, ``llm_tokenizer_bpe_session``
with ``LLAMA_VOCAB_PRE_TYPE_GEMMA4``).

llama.cpp runs its BPE session without GPT-2's byte alphabet here: spaces become ``▁`` (U+2581),
the text is split only into runs of non-newlines and runs of newlines (``[^\\n]+|[\\n]+``), and on
each run:

- a run of newlines that is a token is emitted whole (llama.cpp's fix for Gemma 4's newline tokens);
- otherwise every UTF-8 character is a symbol and adjacent pairs are merged by merge rank (lowest
  first, leftmost on ties), whether or not the merged text is a token;
- each final symbol that is a token is emitted, any other falls back to its bytes' ``<0xXX>``
  tokens (a byte without one is dropped).

llama.cpp forces ``tokenizer.ggml.pre`` to ``gemma4`` for this model and BOS on (the overrides
plugin does the latter). The newline split is part of the model, which takes whole fragments:
llama.cpp writes ``▁`` for the spaces of the raw bytes *before* it decodes them, so only the model,
given the raw bytes, can tell a space from an overlong encoding of one (on which llama.cpp
aborts: ``find_bpe_rank`` asserts that no symbol holds a space).
"""

from __future__ import annotations

import functools
import re

from bpetok.errors import InputError, VocabularyError
from bpetok.hookspecs import hookimpl
from bpetok.models import ModelSpec
from bpetok.models.llama import SPACE, CompiledMergeLoop, merge_symbols
from bpetok.utf8 import decode_llama_utf8

__all__ = ["RawBytePairModel"]

_SPACE_BYTES = SPACE.encode()
# llama.cpp's gemma4 split, [^\n]+|[\n]+: runs of newlines and the text between them.
_NEWLINE_RUNS = re.compile(rb"[^\n]+|\n+")


class RawBytePairModel(CompiledMergeLoop):
    """BPE by merge rank over the UTF-8 characters of a piece, ``▁`` for spaces (see the module docstring)."""

    newline_runs_whole = True  # llama.cpp's gemma4 looks a run of newlines that is a token up whole

    def __init__(self, vocabulary, pretokenizer=None):
        self.path = vocabulary.path
        if not vocabulary.merges:
            raise VocabularyError(
                f"{vocabulary.path}: key 'tokenizer.ggml.merges' is missing or empty; a {vocabulary.model} "
                "vocabulary needs merges (llama.cpp refuses it too)"
            )
        self.ids = vocabulary.token_index()
        self.n_tokens = vocabulary.n_tokens
        self.merges = vocabulary.merges
        self.byte_ids = [self.ids.get(b"<0x%02X>" % b) for b in range(256)]
        if self.merger() is None:  # the tables are built at load, not by the first encode
            self.ranks  # noqa: B018 - the Python loop's, then

    @functools.cached_property
    def ranks(self) -> dict[bytes, int]:
        """Merge text -> rank, looked up as left + b" " + right (the Python loop's table).

        llama.cpp keys its map by the two halves of the text cut at the first space at index >= 1;
        symbols never hold a space (spaces are ▁ by then), so a lookup can only find a merge of
        exactly one space, cut where llama.cpp cuts it. dict() keeps a key's last value: fed in
        reverse, a duplicate merge keeps its first rank, as llama.cpp's emplace does."""
        merges = self.merges
        return dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))

    def build_merger(self, module):
        """This vocabulary's tables in ``module`` (``bpetok.models._symbols``: ``rank_merger``
        reads the merge strings as :attr:`ranks` does), or None if it is None."""
        if module is None:
            return None
        return module.rank_merger(self.ids, list(self.merges), self.n_tokens, self.byte_ids)

    def normal_piece(self, text: bytes) -> bytes:
        """A NORMAL token's bytes: its text with ``▁`` back to spaces."""
        return text.replace(_SPACE_BYTES, b" ")

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment of text between special tokens."""
        return self._encode_escaped(text.replace(" ", SPACE).encode("utf-8", "surrogatepass"))

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` the plain way: no cache, each run by :func:`merge_symbols`."""
        data = text.replace(" ", SPACE).encode("utf-8", "surrogatepass")
        return [i for piece in _NEWLINE_RUNS.findall(data) for i in self.encode_piece_reference(piece)]

    def encode_fragment_bytes(self, data: bytes, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` of raw bytes: spaces become ``▁``, then the bytes are decoded
        as llama.cpp decodes them (:func:`bpetok.utf8.decode_llama_utf8`)."""
        text = decode_llama_utf8(data.replace(b" ", _SPACE_BYTES))
        # An overlong space decodes to a real one; llama.cpp's find_bpe_rank asserts that no
        # symbol holds a space, so it aborts as soon as such a symbol has a neighbour.
        if " " in text and any(" " in run and len(run) > 1 for run in re.findall(r"[^\n]+|\n+", text)):
            raise InputError(
                f"bytes {data!r} hold an overlong encoding of a space; llama.cpp aborts on it "
                "(GGML_ASSERT in find_bpe_rank), so it has no token ids: remove or replace these bytes"
            )
        return self._encode_escaped(text.encode("utf-8", "surrogatepass"))

    def _encode_escaped(self, data: bytes) -> list[int]:
        return self._cache.ids_of(_NEWLINE_RUNS.findall(data), self.encode_piece)

    def encode_piece(self, data: bytes) -> list[int]:
        """Ids of one newline run, or one run without newlines, its spaces already ``▁``."""
        whole = self._whole_newlines(data)
        if whole is not None:
            return [whole]
        merger = self.merger()
        found = merger.encode(data) if merger is not None else None  # None for 2 GiB and more
        return found if found is not None else self._emit(data, self.merge(data))

    def encode_piece_reference(self, data: bytes) -> list[int]:
        """:meth:`encode_piece` by :func:`merge_symbols`, the readable twin of the C loop."""
        whole = self._whole_newlines(data)
        return [whole] if whole is not None else self._emit(data, self.merge(data))

    def _whole_newlines(self, data: bytes) -> int | None:
        """A run of newlines that is a token is that token, whole (where newline_runs_whole)."""
        if not self.newline_runs_whole or data.strip(b"\n"):
            return None
        return self.ids.get(data)

    def merge(self, data: bytes) -> list[tuple[int, int]]:
        """The final symbols of ``data`` as (start, length) byte spans, llama.cpp's merge loop."""
        ranks = self.ranks
        return merge_symbols(data, lambda left, right: ranks.get(left + b" " + right))

    def _emit(self, data: bytes, spans: list[tuple[int, int]]) -> list[int]:
        ids, byte_ids, out = self.ids, self.byte_ids, []
        for begin, length in spans:
            symbol = data[begin : begin + length]
            token_id = ids.get(symbol)
            if token_id is not None:
                out.append(token_id)
                continue
            for b in symbol:  # not a token: its bytes' <0xXX> tokens, a byte without one dropped
                fallback = byte_ids[b]
                if fallback is not None:
                    out.append(fallback)
        return out


# What this plugin registers: the model, and llama.cpp's defaults for it.
MODEL_SPEC = ModelSpec(
    name="gemma4", factory=RawBytePairModel, pretokenized=False,
    description="BPE by merge rank over raw UTF-8 lines, ▁ for spaces, <0xXX> fallback (Gemma 4)",
    pre="gemma4",  # llama.cpp sets tokenizer_pre = "gemma4" for this model, whatever the file says
    clean_spaces=True,
)


@hookimpl
def bpetok_register_models(register) -> None:
    register(MODEL_SPEC)
