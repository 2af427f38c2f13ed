"""Hook specifications: the contract between bpetok's engine and its plugins.

Data flows one way through these hooks:
load a vocabulary -> adjust token attributes -> (special tokens, pre-tokenizer, model) -> ids.
One more hook, outside that flow, adds subcommands to the ``bpetok`` command line.

Implementations may accept any subset of the arguments below (pluggy passes them by name), so
specs grow by new arguments and never lose or rename one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pluggy

if TYPE_CHECKING:
    import argparse

    from bpetok.models import ModelSpec
    from bpetok.pretok import PreTokenizerSpec
    from bpetok.vocab import Vocabulary

PROJECT_NAME = "bpetok"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# -- loading ---------------------------------------------------------------------------------


@hookspec(firstresult=True)
def bpetok_load_vocabulary(path: str) -> Vocabulary | None:
    """Read a vocabulary file into a :class:`bpetok.vocab.Vocabulary`.

    Called by :func:`bpetok.load_vocabulary` for every path the user opens.
    Stops at the first non-None result.

    :param path: the file to read.
    :returns: the vocabulary, or None when the file is not in this loader's format.
    """


# -- models ------------------------------------------------------------------------------------


@hookspec
def bpetok_register_models(register: Callable[[ModelSpec], None]) -> None:
    """Register tokenizer models, one per ``tokenizer.ggml.model`` value (``gpt2``, ``llama``...).

    Called once per plugin manager, the first time a model is looked up or listed. Registering
    a model name another plugin already registered raises :class:`bpetok.PluginError` naming
    both plugins.

    :param register: call it with one :class:`bpetok.models.ModelSpec` per model.
    """


# -- pre-tokenizers ------------------------------------------------------------------------------


@hookspec
def bpetok_register_pretokenizers(register: Callable[[PreTokenizerSpec], None]) -> None:
    """Register pre-tokenizers for (``tokenizer.ggml.model``, ``tokenizer.ggml.pre``) keys.

    Called once per plugin manager, the first time a pre-tokenizer is looked up or listed.
    Registering a key another plugin already registered raises :class:`bpetok.PluginError`
    naming both plugins.

    :param register: call it with one :class:`bpetok.pretok.PreTokenizerSpec` per pre-tokenizer.
    """


# -- token attributes --------------------------------------------------------------------------


@hookspec
def bpetok_adjust_token_attributes(vocabulary: Vocabulary) -> None:
    """Adjust token attributes, special ids and the end-of-generation set after loading.

    Called once for every loaded vocabulary, before the special-token table is built.
    Implementations change ``vocabulary.attrs``, ``vocabulary.special_ids`` and
    ``vocabulary.eog_ids`` in place. bpetok's built-in implementation reproduces
    llama.cpp's text-based overrides; a plugin that must see its result uses ``trylast``.

    :param vocabulary: the vocabulary being loaded.
    """


# -- command line ------------------------------------------------------------------------------


@hookspec
def bpetok_register_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add subcommands to the ``bpetok`` command line (simonw/llm's ``register_commands``).

    Called once each time :func:`bpetok.apps.cli.build_parser` builds the parser. Add each command with
    ``subparsers.add_parser(name, help=...)`` and set ``func`` with ``set_defaults(func=...)``: it
    is called with the parsed arguments and returns the exit status (None means 0). Raise a
    :class:`bpetok.BpetokError` for a failure the user can fix; it is printed as one line.
    Built-in implementations: :mod:`bpetok.apps.train_cli` (``train``, ``extend``), :mod:`bpetok.apps.server_cli`
    (``serve``), :mod:`bpetok.apps.chat` (``chat``) and :mod:`bpetok.apps.datasets` (``encode-dataset``).

    :param subparsers: the ``argparse`` sub-parsers action of the ``bpetok`` parser.
    """
