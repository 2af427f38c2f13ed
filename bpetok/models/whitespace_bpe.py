"""llama.cpp's ``whitespace`` model (src/llama-vocab.cpp, ``llm_tokenizer_whitespace_session``).

A ``tokenizer.ggml.model = whitespace`` file is byte-pair encoded as a ``gpt2`` vocabulary with the
same ``tokenizer.ggml.pre`` (its converter writes ``pre = whitespace`` too, llama.cpp's WHITESPACE
type: ``\\S+`` runs over raw UTF-8), except that each fragment of text between special tokens is
first cut at whitespace (llama.cpp's whitespace code points), which is dropped, and each run
between is encoded on its own. llama.cpp's lower-casing option is off for ``pre = whitespace``.

The runs go to the gpt2 model itself (:class:`Gpt2Runs`, the model the registry gives a gpt2
vocabulary with this pre), so the merges, the byte fallback and the pieces are the gpt2 model's.
"""

from __future__ import annotations

import re

from bpetok.cache import IdCache, as_ids
from bpetok.errors import UnsupportedVocabularyError
from bpetok.hookspecs import hookimpl
from bpetok.models import ModelSpec
from bpetok.pretok.unicode_data import WHITESPACE

__all__ = ["Gpt2Runs", "WhitespaceModel"]

_WHITESPACE_RUNS = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(WHITESPACE)) + "]+")
# A piece longer than this many characters is never cached (the Tokenizer's rule for its pieces).
_CACHE_LONGEST = 1024


class Gpt2Runs:
    """The gpt2 model for ``vocabulary``'s pre, run on text as the Tokenizer runs it for a gpt2
    vocabulary: split by the pre-tokenizer, each piece merged (by the C kernel where it is built,
    else in Python with a cache); the raw-UTF-8 variant splits its text itself."""

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
        self.spec = spec = row.spec
        self.model = gpt2.spec.factory(vocabulary, spec)
        self.whole = not getattr(self.model, "pretokenized", True)  # the raw-UTF-8 variant
        self.splitter = None if self.whole else (spec.for_vocabulary(vocabulary) if spec.for_vocabulary else spec.factory())
        self._cache = IdCache(0)
        self._kernel = None

    def use_cache(self, cache: IdCache) -> None:
        """Cache pieces' ids in ``cache`` (the Tokenizer's, so that its byte budget holds); the C
        kernel, where there is one, gets a cache of the same budget."""
        self._cache = cache
        if self.whole:
            self.model.use_cache(cache)
        else:
            make_kernel = getattr(self.model, "make_kernel", None)
            self._kernel = make_kernel(cache.budget, 0, split=self.spec.kernel_split) if make_kernel else None

    @property
    def compiled(self) -> bool:
        return self._kernel is not None or bool(getattr(self.model, "compiled", False))

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (no special tokens in it) as the gpt2 model gives them."""
        if self.whole:
            return self.model.encode_fragment(text, False)
        kernel = self._kernel
        if kernel is not None:
            return kernel.encode_text(text) if kernel.split else kernel.encode(self.splitter.split(text))
        ids: list[int] = []
        cache, encode_piece = self._cache, self.model.encode_piece
        for piece in self.splitter.split(text):
            found = cache.get(piece)
            if found is None:
                found = encode_piece(piece.encode("utf-8", "surrogatepass"))
                if len(piece) <= _CACHE_LONGEST and not cache.full:
                    cache.put(piece, as_ids(found))
            ids += found
        return ids

    def encode_reference(self, text: str) -> list[int]:
        """:meth:`encode` the plain way: no cache, the gpt2 model's reference merge."""
        if self.whole:
            return self.model.encode_fragment_reference(text, False)
        model = self.model
        return [i for piece in self.splitter.split(text) for i in model.encode_piece_reference(piece.encode("utf-8", "surrogatepass"))]

    def normal_piece(self, text: bytes) -> bytes:
        return self.model.normal_piece(text)


class WhitespaceModel:
    """Whitespace dropped, each run between byte-pair encoded by the gpt2 model (module docstring)."""

    def __init__(self, vocabulary, pretokenizer=None):
        self.runs = Gpt2Runs(vocabulary)
        self.pretokenizer = self.runs.spec  # its flags are the file's defaults (add_bos, clean_spaces)
        self._cache = IdCache(0)

    def use_cache(self, cache: IdCache) -> None:
        """Cache runs' ids in ``cache`` (str keys), shared with the gpt2 model (bytes keys)."""
        self._cache = cache
        self.runs.use_cache(cache)

    @property
    def compiled(self) -> bool:
        return self.runs.compiled

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment of text between special tokens, each run's cached."""
        encode, cache = self.runs.encode, self._cache
        out: list[int] = []
        for run in _WHITESPACE_RUNS.split(text):
            if not run:
                continue
            found = cache.get(run)
            if found is None:
                found = encode(run)
                if len(run) <= _CACHE_LONGEST and not cache.full:
                    cache.put(run, as_ids(found))
            out += found
        return out

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` by the gpt2 model's reference merge."""
        encode = self.runs.encode_reference
        return [i for run in _WHITESPACE_RUNS.split(text) if run for i in encode(run)]

    def normal_piece(self, text: bytes) -> bytes:
        """A NORMAL token's bytes, as the gpt2 model renders them."""
        return self.runs.normal_piece(text)


@hookimpl
def bpetok_register_models(register) -> None:
    register(
        ModelSpec(
            name="whitespace",
            factory=WhitespaceModel,
            pretokenized=False,
            special_ids={"bos": 11, "eos": 11},  # llama.cpp's BPE defaults, as for gpt2
            description="gpt2 BPE of each run between whitespace, the whitespace dropped",
        )
    )
