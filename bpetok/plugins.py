"""The plugin manager: built-in plugins, entry-point plugins, and the model and pre-tokenizer registries.

The built-in plugins (:data:`BUILTIN_PLUGINS`, :data:`BUILTIN_PRETOKENIZERS`: module lists, as
llm's DEFAULT_PLUGINS) implement the same hooks a third-party plugin does, including
``bpetok_register_commands`` for the CLI's ``train``, ``extend``, ``serve``, ``chat`` and
``encode-dataset``. Entry points are for third-party plugins.

Entry points in the ``bpetok`` group are loaded lazily, once, on first use (llm's plugins.py).
Set ``BPETOK_DISABLE_PLUGINS`` to a comma-separated list of plugin names (an entry point's name, or
a built-in pre-tokenizer's) to block them (tox's TOX_DISABLED_EXTERNAL_PLUGINS).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import weakref
from typing import Any, cast
from dataclasses import dataclass, replace

import pluggy

from bpetok import hookspecs
from bpetok.errors import PluginError
from bpetok.models import ModelSpec
from bpetok.pretok import PreTokenizerSpec

__all__ = [
    "get_plugin_manager",
    "make_plugin_manager",
    "PreTokenizerRegistry",
    "ModelRegistry",
    "get_registry",
    "get_model_registry",
    "reset",
]

DISABLE_ENV = "BPETOK_DISABLE_PLUGINS"

# bpetok's own hook implementations: the GGUF loader, llama.cpp's attribute overrides, the
# built-in tokenizer models (bpetok_register_models), and the modules that add CLI subcommands
# (bpetok_register_commands): train, serve, chat, encode-dataset.
BUILTIN_PLUGINS = (
    "bpetok.vocab.vocabulary",
    "bpetok.vocab.overrides",
    "bpetok.models.gpt2",
    "bpetok.models.llama",
    "bpetok.models.gemma4",
    "bpetok.models.rwkv",
    "bpetok.models.plamo2",
    "bpetok.models.whitespace_bpe",
    "bpetok.models.hybriddna",
    "bpetok.models.wpm",
    "bpetok.models.ugm",
    "bpetok.apps.server_cli",
    "bpetok.apps.train_cli",
    "bpetok.apps.chat",
    "bpetok.apps.datasets",
)
# The built-in pre-tokenizers, bpetok/pretok/NAME.py, each registered as plugin NAME (the names
# BPETOK_DISABLE_PLUGINS and the registry's `plugin` column use).
BUILTIN_PRETOKENIZERS = (
    "default", "gpt2", "smollm", "llama3", "qwen2", "deepseek", "gpt4o", "tekken", "bloom", "chameleon", "superbpe",
    "kimi_k2", "afmoe", "gemma4", "whitespace",
)
# Of those, the modules whose one hook is bpetok_register_commands: each is registered as a
# stand-in (:class:`_CommandModule`) that imports it when the CLI builds its parser, so loading
# a tokenizer does not import the server, training, chat and dataset commands.
COMMAND_MODULES = ("bpetok.apps.server_cli", "bpetok.apps.train_cli", "bpetok.apps.chat", "bpetok.apps.datasets")


def make_plugin_manager(*, load_entry_points: bool = True) -> pluggy.PluginManager:
    """A fresh plugin manager with the hook specs, the built-ins and (optionally) entry points."""
    pm = _PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for name in os.environ.get(DISABLE_ENV, "").split(","):
        if name.strip():
            pm.set_blocked(name.strip())
    # A built-in that fails to import is a bug in bpetok: let the ImportError show.
    for name in BUILTIN_PLUGINS:
        plugin = _CommandModule(name) if name in COMMAND_MODULES else importlib.import_module(name)
        pm.register(plugin, name=name)
    for name in BUILTIN_PRETOKENIZERS:
        pm.register(importlib.import_module(f"bpetok.pretok.{name}"), name=name)  # skipped if blocked
    if load_entry_points:
        try:
            pm.load_setuptools_entrypoints(hookspecs.PROJECT_NAME)
        except Exception as e:
            raise PluginError(
                f"a plugin in the {hookspecs.PROJECT_NAME!r} entry-point group failed to load ({type(e).__name__}: {e}); "
                f"reinstall or uninstall it, or block it with {DISABLE_ENV}=<entry point name>"
            ) from e
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        raise PluginError(f"plugin {e.plugin!r} implements a hook bpetok does not define: {e}") from e
    return pm


class _PluginManager(pluggy.PluginManager):
    """A plugin object is registered once: the metadata of an older bpetok (an editable install of
    another checkout) still lists built-in pre-tokenizers as entry points, and loading one of
    them again, under any name, is a no-op rather than pluggy's "already registered" error."""

    def register(self, plugin, name=None):
        if self.is_registered(plugin):
            return None
        return super().register(plugin, name)


class _CommandModule:
    """Stands in for a built-in module of :data:`COMMAND_MODULES`: its commands, imported when asked for."""

    def __init__(self, name: str):
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        self.__name__ = name

    @hookspecs.hookimpl
    def bpetok_register_commands(self, subparsers) -> None:
        importlib.import_module(self.__name__).bpetok_register_commands(subparsers)


@dataclass(frozen=True)
class RegisteredPreTokenizer:
    """One registry row: a (model, pre) key and the spec that serves it."""

    model: str
    pre: str
    spec: PreTokenizerSpec
    distribution: str | None
    version: str | None


@dataclass(frozen=True)
class RegisteredModel:
    """One model registry row: a ``tokenizer.ggml.model`` value and the spec that serves it."""

    name: str
    spec: ModelSpec
    distribution: str | None
    version: str | None


class _Registry:
    """Rows filled through one ``register`` hook, each registration tagged with its plugin.

    Each implementation is called through pluggy (a subset hook caller holding only its
    plugin), so an implementation that takes fewer arguments than the spec works, as
    hookspecs.py promises, and each ``register`` call knows which plugin made it.
    """

    hook_name = ""
    spec_type: Any = object

    def __init__(self, pm: pluggy.PluginManager):
        self._rows: dict = {}
        dists = {pm.get_name(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
        # Reading a distribution's metadata parses its METADATA file: read each distribution once.
        described: dict[int, tuple[str | None, str | None]] = {}
        for impl in getattr(pm.hook, self.hook_name).get_hookimpls():
            dist = dists.get(impl.plugin_name)
            if dist is None or impl.plugin_name in _BUILTIN_DISTRIBUTION:
                dist_name = _BUILTIN_DISTRIBUTION.get(impl.plugin_name)
                version = _bpetok_version() if dist_name else None
            else:
                key = id(getattr(dist, "_dist", dist))  # pluggy's DistFacade wraps one object per distribution
                if key not in described:
                    described[key] = (dist.metadata["name"], dist.version)
                dist_name, version = described[key]

            def register(spec: Any, _plugin=impl.plugin_name, _dist=dist_name, _ver=version) -> None:
                if not isinstance(spec, self.spec_type):
                    raise PluginError(
                        f"plugin {_plugin!r} registered a {type(spec).__name__}, expected a "
                        f"bpetok.{self.spec_type.__name__}"
                    )
                self._add(replace(spec, plugin=_plugin), _dist, _ver)

            others = [p for p in pm.get_plugins() if p is not impl.plugin]
            pm.subset_hook_caller(self.hook_name, remove_plugins=others)(register=register)

    def _add(self, spec, distribution: str | None, version: str | None) -> None:
        raise NotImplementedError

    def rows(self) -> list:
        """Every row, sorted by key."""
        return [self._rows[k] for k in sorted(self._rows)]

    def keys(self) -> list:
        return sorted(self._rows)


class PreTokenizerRegistry(_Registry):
    """(model, pre) -> pre-tokenizer spec, filled through ``bpetok_register_pretokenizers``."""

    hook_name = "bpetok_register_pretokenizers"
    spec_type = PreTokenizerSpec

    def _add(self, spec: PreTokenizerSpec, distribution: str | None, version: str | None) -> None:
        if not spec.pre_names:
            raise PluginError(f"plugin {spec.plugin!r} registered pre-tokenizer {spec.name!r} for no pre names")
        for pre in spec.pre_names:
            key = (spec.model, pre)
            taken = self._rows.get(key)
            if taken is not None:
                raise PluginError(
                    f"pre-tokenizer key (model={spec.model!r}, pre={pre!r}) is registered by both plugin "
                    f"{taken.spec.plugin!r} and plugin {spec.plugin!r}; uninstall one, or block one with "
                    f"{DISABLE_ENV}={spec.plugin}"
                )
            self._rows[key] = RegisteredPreTokenizer(spec.model, pre, spec, distribution, version)

    def get(self, model: str, pre: str) -> RegisteredPreTokenizer | None:
        return self._rows.get((model, pre))


class ModelRegistry(_Registry):
    """``tokenizer.ggml.model`` value -> model spec, filled through ``bpetok_register_models``."""

    hook_name = "bpetok_register_models"
    spec_type = ModelSpec

    def _add(self, spec: ModelSpec, distribution: str | None, version: str | None) -> None:
        taken = self._rows.get(spec.name)
        if taken is not None:
            raise PluginError(
                f"tokenizer model {spec.name!r} is registered by both plugin {taken.spec.plugin!r} and plugin "
                f"{spec.plugin!r}; uninstall one, or block one with {DISABLE_ENV}={spec.plugin}"
            )
        self._rows[spec.name] = RegisteredModel(spec.name, spec, distribution, version)

    def get(self, name: str) -> RegisteredModel | None:
        return self._rows.get(name)

    def describe(self) -> str:
        """The installed models and their plugins, for error messages."""
        return ", ".join(f"{row.name} ({row.spec.plugin})" for row in self.rows()) or "none"


# Plugins registered by make_plugin_manager itself (not through an entry point) belong to bpetok.
_BUILTIN_DISTRIBUTION = {name: "bpetok" for name in BUILTIN_PLUGINS + BUILTIN_PRETOKENIZERS}


@functools.lru_cache(maxsize=None)  # one metadata read per process, not one per built-in hook
def _bpetok_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bpetok")
    except PackageNotFoundError:
        return None


# One registry of each kind per plugin manager, rebuilt only when its set of plugins changes.
_registries: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _registry_for(pm: pluggy.PluginManager, kind: type) -> _Registry:
    plugins = pm.list_name_plugin()
    cached = _registries.setdefault(pm, {}).get(kind)
    if cached is not None and cached[0] == plugins:
        return cached[1]
    registry = kind(pm)
    _registries[pm][kind] = (plugins, registry)
    return registry


_pm: pluggy.PluginManager | None = None


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, created (and entry points loaded) on first use."""
    global _pm
    if _pm is None:
        _pm = make_plugin_manager()
    return _pm


def get_registry(plugin_manager: pluggy.PluginManager | None = None) -> PreTokenizerRegistry:
    """The pre-tokenizer registry of ``plugin_manager`` (default: the process-wide one)."""
    return cast(PreTokenizerRegistry, _registry_for(plugin_manager or get_plugin_manager(), PreTokenizerRegistry))


def get_model_registry(plugin_manager: pluggy.PluginManager | None = None) -> ModelRegistry:
    """The model registry of ``plugin_manager`` (default: the process-wide one)."""
    return cast(ModelRegistry, _registry_for(plugin_manager or get_plugin_manager(), ModelRegistry))


def reset() -> None:
    """Forget the process-wide manager and its registries (tests; after installing a plugin)."""
    global _pm
    _pm = None
