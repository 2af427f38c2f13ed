"""bpetok: llama.cpp-exact byte-level BPE tokenization from Python, with a plugin system and a trainer.

>>> import bpetok
>>> tok = bpetok.from_file("model.gguf")  # doctest: +SKIP
>>> tok.encode("Hello world")
[9707, 1879]

(The examples in bpetok's docstrings run as doctests with ``tok``, Qwen3's tokenizer from
tests/data: ``pytest --doctest-modules bpetok``.)
"""

from typing import TYPE_CHECKING

import bpetok._old_paths  # noqa: F401  (first: it makes the old paths such as bpetok.gguf import)
from bpetok.errors import (
    BpetokError,
    ChatTemplateError,
    GGUFError,
    PluginError,
    UnsupportedVocabularyError,
    VocabularyError,
)
from bpetok.hookspecs import hookimpl
from bpetok.pretok import PreTokenizerSpec
from bpetok.tokenizer import Tokenizer, from_file, from_gguf, load_vocabulary
from bpetok.train import extend, train
from bpetok.vocab import TokenAttr, TokenType, Vocabulary

if TYPE_CHECKING:
    from bpetok.apps.datasets import encode_dataset

__version__ = "0.1.0"

__all__ = [
    "BpetokError",
    "ChatTemplateError",
    "GGUFError",
    "PluginError",
    "PreTokenizerSpec",
    "TokenAttr",
    "TokenType",
    "Tokenizer",
    "UnsupportedVocabularyError",
    "VocabularyError",
    "Vocabulary",
    "encode_dataset",
    "extend",
    "from_file",
    "from_gguf",
    "hookimpl",
    "load_vocabulary",
    "train",
]


def __getattr__(name: str):
    # bpetok.encode_dataset, imported on first use: loading a tokenizer needs none of the dataset code.
    if name == "encode_dataset":
        from bpetok.apps.datasets import encode_dataset

        return encode_dataset
    raise AttributeError(f"module 'bpetok' has no attribute {name!r}")
