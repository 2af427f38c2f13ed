"""Tokenizer models, named after ``tokenizer.ggml.model``: what turns text between special tokens into ids.

A model arrives through the ``bpetok_register_models`` hook as a :class:`ModelSpec`; the built-in
ones (``gpt2`` byte-level BPE, ``llama`` SentencePiece-style BPE, ``gemma4``) register through it
like any plugin. The Tokenizer cuts special tokens out of the text and hands each remaining
fragment to the model in one of two ways, which the spec chooses:

- ``pretokenized=True``: the Tokenizer splits the fragment with the pre-tokenizer registered for
  (model, pre) and calls ``model.encode_piece(piece_bytes)`` per piece (and, when the model has
  it, ``model.encode_pieces(list)`` for many at once), caching ids by piece and by space chunk.
- ``pretokenized=False``: the Tokenizer calls ``model.encode_fragment(text, at_start)`` once per
  fragment; ``at_start`` is True for the text's first fragment and for one right after a special
  token (where SentencePiece-style models add their space prefix).

A model object may set its own ``pretokenized = False`` to take whole fragments although its spec
splits first: gpt2's raw-UTF-8 variant (:mod:`bpetok.models.raw_utf8`) escapes spaces before it
runs the pre-tokenizer, so it splits each fragment itself.

Either way the model also gives ``normal_piece(text) -> bytes``, the bytes a NORMAL token's
stored text stands for (llama.cpp's ``token_to_piece``); special, byte and other tokens are
rendered by the Tokenizer, the same for every model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from bpetok.pretok import PreTokenizerSpec
    from bpetok.vocab import Vocabulary

__all__ = ["ModelSpec", "TokenizerModel"]


class TokenizerModel(Protocol):
    """What the Tokenizer asks of a model (see the module docstring for which calls are made)."""

    def encode_piece(self, piece: bytes) -> list[int]:
        """Ids of one pre-tokenized piece (``pretokenized`` models)."""

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment of text between special tokens (other models)."""

    def normal_piece(self, text: bytes) -> bytes:
        """The bytes a NORMAL token whose stored text is ``text`` decodes to."""


@dataclass(frozen=True)
class ModelSpec:
    """What a plugin registers for one ``tokenizer.ggml.model`` value.

    - ``factory(vocabulary, pretokenizer)`` builds the model for a loaded vocabulary;
      ``pretokenizer`` is the :class:`~bpetok.pretok.PreTokenizerSpec` chosen for it (None when
      ``pretokenized`` is False).
    - ``pretokenized``: fragments are split by the pre-tokenizer registered for (``name``, pre)
      and handed over piece by piece; otherwise whole, to ``encode_fragment``.
    - ``pre``: a ``tokenizer.ggml.pre`` value that replaces the file's (llama.cpp forces
      ``gemma4`` for the gemma4 model).
    - ``special_ids``: the ids of special roles (``bos``, ``eos``, ``unk``...) before the file's
      keys are read, llama.cpp's defaults for this model.
    - ``add_bos``, ``clean_spaces``: llama.cpp's defaults for the model; None takes them from
      the pre-tokenizer spec. ``add_space_prefix``: the default of
      ``tokenizer.ggml.add_space_prefix``; the decoder drops the first piece's leading space when
      it is set, as llama.cpp does. ``add_eos``: the default of ``tokenizer.ggml.add_eos_token``.
    - ``adds_bos_sep``: ``add_special`` puts BOS before the text and SEP after it, whatever the
      file's add_bos/add_eos/add_sep keys say (llama.cpp's WordPiece session: ``[CLS] ... [SEP]``).
    """

    name: str
    # Returns a TokenizerModel; typed Any because a model implements only the calls its
    # ``pretokenized`` flag asks for (a Protocol would demand all of them).
    factory: Callable[[Vocabulary, PreTokenizerSpec | None], Any]
    pretokenized: bool = True
    pre: str | None = None
    special_ids: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    add_bos: bool | None = None
    clean_spaces: bool | None = None
    add_space_prefix: bool = False
    add_eos: bool = False
    adds_bos_sep: bool = False
    description: str = ""
    # Filled in by the registry: which plugin registered this spec.
    plugin: str = field(default="", compare=False)
