"""A vocabulary through the plugins: read by a loader plugin, its model's defaults and the
attribute overrides applied (once), and the pre-tokenizer registered for its (model, pre) found.
What :mod:`bpetok.tokenizer` builds a :class:`~bpetok.Tokenizer` from.
"""

from __future__ import annotations

import os
import stat

import pluggy

from bpetok.errors import BpetokError, UnsupportedVocabularyError
from bpetok.models import ModelSpec
from bpetok.pretok import PreTokenizerSpec
from bpetok.vocab import Vocabulary

__all__ = ["load_vocabulary", "prepare_vocabulary", "find_pretokenizer"]


def load_vocabulary(path: str | os.PathLike, *, plugin_manager: pluggy.PluginManager | None = None) -> Vocabulary:
    """Load a vocabulary file through the loader plugins and apply the attribute overrides."""
    from bpetok.plugins import get_plugin_manager

    pm = plugin_manager or get_plugin_manager()
    path = os.fspath(path)
    is_dir = os.path.isdir(path)  # a loader plugin may read a folder (bpetok-hf: a Hugging Face model's)
    if not is_dir:
        _check_regular_file(path)
    vocab = pm.hook.bpetok_load_vocabulary(path=path)
    if vocab is None and is_dir:
        _check_regular_file(path)  # no loader reads this folder: refused as a directory
    if vocab is None:
        raise BpetokError(
            f"{path}: no installed vocabulary loader recognises this file; bpetok reads GGUF files "
            "(a loader plugin can add other formats)"
        )
    prepare_vocabulary(vocab, pm)
    return vocab


def _check_regular_file(path: str) -> None:
    """Refuse a path that is not a regular file, saying what it is (a FIFO would block the reader)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file; pass the path of a GGUF model or vocabulary file") from None
    if stat.S_ISREG(mode):
        return
    kind = (
        "a directory" if stat.S_ISDIR(mode)
        else "a named pipe (FIFO)" if stat.S_ISFIFO(mode)
        else "a character device" if stat.S_ISCHR(mode)
        else "a block device" if stat.S_ISBLK(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "not a regular file"
    )
    why = "" if stat.S_ISDIR(mode) else " (a vocabulary is read with random access: it cannot be streamed in)"
    raise BpetokError(f"{path}: is {kind}, not a file; pass the path of a GGUF model or vocabulary file{why}")


def prepare_vocabulary(vocab: Vocabulary, pm: pluggy.PluginManager) -> ModelSpec:
    """The model spec for ``vocab``; the first time, also the model's defaults and the
    attribute-override hook, applied to the vocabulary in place.

    The one place the hook runs, once per vocabulary, whether it came from a file or was built
    in memory (the trainer's): llama.cpp's special ids start from the model's defaults, so the
    model is found first, and an unknown one is refused here, at load.
    """
    from bpetok.plugins import get_model_registry

    registry = get_model_registry(pm)
    row = registry.get(vocab.model)
    if row is None:
        raise UnsupportedVocabularyError(
            f"{vocab.path}: no installed tokenizer model handles tokenizer.ggml.model={vocab.model!r}. "
            f"Installed: {registry.describe()}. A plugin can provide it: install a package that registers "
            f"model {vocab.model!r} through the bpetok_register_models hook in the 'bpetok' entry-point "
            "group (see docs/hooks.md)"
        )
    spec = row.spec
    if not vocab.attributes_adjusted:
        if spec.pre is not None:
            vocab.pre = spec.pre  # llama.cpp's rule for this model, whatever the file says
        vocab.special_ids = dict(spec.special_ids)
        pm.hook.bpetok_adjust_token_attributes(vocabulary=vocab)
        vocab.attributes_adjusted = True
    return spec


def find_pretokenizer(vocab: Vocabulary, pm: pluggy.PluginManager) -> PreTokenizerSpec:
    from bpetok.plugins import get_registry

    registry = get_registry(pm)
    row = registry.get(vocab.model, vocab.pre)
    if row is None:
        installed = ", ".join(f"{pre} ({model})" for model, pre in registry.keys()) or "none"
        raise UnsupportedVocabularyError(
            f"{vocab.path}: no installed pre-tokenizer handles tokenizer.ggml.model={vocab.model!r}, "
            f"tokenizer.ggml.pre={vocab.pre!r}. Installed: {installed}. A plugin can provide it: install a "
            f"package that registers pre-tokenizer {vocab.pre!r} for model {vocab.model!r} through the "
            "'bpetok' entry-point group (see docs/plugins.md)"
        )
    return row.spec
