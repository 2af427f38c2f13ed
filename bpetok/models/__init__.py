"""Tokenizer models, named after ``tokenizer.ggml.model``: what turns text between special tokens into ids.

A model arrives through the ``bpetok_register_models`` hook as a :class:`ModelSpec`; the built-in
ones (``gpt2`` byte-level BPE, ``llama`` SentencePiece-style BPE, ``gemma4``) register through it
like any plugin. The spec's factory builds a :class:`TokenizerModel` (:mod:`bpetok.models.base`):
the Tokenizer cuts special tokens out of the text and hands each fragment to it, whole; a model
that splits text first (gpt2) does so itself, with the pre-tokenizer spec its factory is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable

from bpetok.models.base import TokenizerModel

if TYPE_CHECKING:
    from bpetok.pretok import PreTokenizerSpec
    from bpetok.vocab import Vocabulary

__all__ = ["ModelSpec", "TokenizerModel"]


@dataclass(frozen=True)
class ModelSpec:
    """What a plugin registers for one ``tokenizer.ggml.model`` value.

    - ``factory(vocabulary, pretokenizer)`` builds the :class:`TokenizerModel` for a loaded
      vocabulary; ``pretokenizer`` is the :class:`~bpetok.pretok.PreTokenizerSpec` chosen for it
      (None when ``pretokenized`` is False).
    - ``pretokenized``: the model splits fragments by a pre-tokenizer: the one registered for
      (``name``, pre) is looked up at load (an unknown pre is refused there) and given to the factory.
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
    factory: Callable[[Vocabulary, PreTokenizerSpec | None], TokenizerModel]
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
