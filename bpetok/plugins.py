"""The plugin manager: built-in plugins, entry-point plugins, and the pre-tokenizer registry.

The built-in plugins (:data:`BUILTIN_PLUGINS`) implement the same hooks a third-party plugin does,
including ``bpetok_register_commands`` for the CLI's ``train``, ``extend`` and ``serve``.

Entry points in the ``bpetok`` group are loaded lazily, once, on first use (llm's plugins.py).
Set ``BPETOK_DISABLE_PLUGINS`` to a comma-separated list of entry-point names to block them
(tox's TOX_DISABLED_EXTERNAL_PLUGINS).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, replace

import pluggy

from bpetok import hookspecs
from bpetok.errors import PluginError
from bpetok.pretok import PreTokenizerSpec

__all__ = ["get_plugin_manager", "make_plugin_manager", "PreTokenizerRegistry", "get_registry", "reset"]

DISABLE_ENV = "BPETOK_DISABLE_PLUGINS"

# bpetok's own hook implementations: the GGUF loader, llama.cpp's attribute overrides, and the
# modules that add CLI subcommands (bpetok_register_commands): train, serve, chat.
BUILTIN_PLUGINS = ("bpetok.vocab", "bpetok.overrides", "bpetok.server", "bpetok.train", "bpetok.chat")


def make_plugin_manager(*, load_entry_points: bool = True) -> pluggy.PluginManager:
    """A fresh plugin manager with the hook specs, the built-ins and (optionally) entry points."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for name in BUILTIN_PLUGINS:
        # A built-in that fails to import is a bug in bpetok: let the ImportError show.
        pm.register(importlib.import_module(name), name=name)
    if load_entry_points:
        for name in os.environ.get(DISABLE_ENV, "").split(","):
            if name.strip():
                pm.set_blocked(name.strip())
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


@dataclass(frozen=True)
class RegisteredPreTokenizer:
    """One registry row: a (model, pre) key and the spec that serves it."""

    model: str
    pre: str
    spec: PreTokenizerSpec
    distribution: str | None
    version: str | None


class PreTokenizerRegistry:
    """(model, pre) -> pre-tokenizer spec, filled through ``bpetok_register_pretokenizers``."""

    def __init__(self, pm: pluggy.PluginManager):
        self._rows: dict[tuple[str, str], RegisteredPreTokenizer] = {}
        dists = {pm.get_name(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
        # Call each implementation on its own so every registration knows its plugin.
        for impl in pm.hook.bpetok_register_pretokenizers.get_hookimpls():
            dist = dists.get(impl.plugin_name)
            dist_name = dist.metadata["name"] if dist is not None else None
            version = dist.version if dist is not None else None

            def register(spec: PreTokenizerSpec, _plugin=impl.plugin_name, _dist=dist_name, _ver=version) -> None:
                if not isinstance(spec, PreTokenizerSpec):
                    raise PluginError(
                        f"plugin {_plugin!r} registered a {type(spec).__name__}, expected a bpetok.PreTokenizerSpec"
                    )
                self._add(replace(spec, plugin=_plugin), _dist, _ver)

            impl.function(register=register)

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

    def rows(self) -> list[RegisteredPreTokenizer]:
        """Every key, sorted by (model, pre)."""
        return [self._rows[k] for k in sorted(self._rows)]

    def keys(self) -> list[tuple[str, str]]:
        return sorted(self._rows)


_pm: pluggy.PluginManager | None = None
_registry: PreTokenizerRegistry | None = None


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, created (and entry points loaded) on first use."""
    global _pm
    if _pm is None:
        _pm = make_plugin_manager()
    return _pm


def get_registry() -> PreTokenizerRegistry:
    global _registry
    if _registry is None:
        _registry = PreTokenizerRegistry(get_plugin_manager())
    return _registry


def reset() -> None:
    """Forget the process-wide manager and registry (tests; after installing a plugin)."""
    global _pm, _registry
    _pm = _registry = None
