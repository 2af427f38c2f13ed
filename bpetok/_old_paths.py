"""The modules' import paths before the engine / vocabulary I/O / applications layout, kept working.

``import bpetok.chat`` (a path docs and users had) gives the very module ``bpetok.apps.chat``, not a
copy: one module object under two names, so a ``monkeypatch`` or an ``isinstance`` through either
name holds for both. :data:`MOVED` is the whole table; the new paths are the ones to write.
Importing this module (``bpetok/__init__.py`` does, first) installs the finder.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

__all__ = ["MOVED", "install"]

# old path -> new path
MOVED = {
    "bpetok.gguf": "bpetok.vocab.gguf",
    "bpetok.gguf_writer": "bpetok.vocab.gguf_writer",
    "bpetok.overrides": "bpetok.vocab.overrides",
    "bpetok.cli": "bpetok.apps.cli",
    "bpetok.server": "bpetok.apps.server",
    "bpetok.server_http": "bpetok.apps.server_http",
    "bpetok.server_io": "bpetok.apps.server_io",
    "bpetok.playground": "bpetok.apps.playground",
    "bpetok.chat": "bpetok.apps.chat",
    "bpetok.chat_limits": "bpetok.apps.chat_limits",
    "bpetok.chat_spans": "bpetok.apps.chat_spans",
    "bpetok.datasets": "bpetok.apps.datasets",
    "bpetok._dask": "bpetok.apps._dask",
    "bpetok._outdir": "bpetok.apps._outdir",
}


# old path -> the spec of the module at its new path, between create_module and exec_module
_REAL_SPECS: dict = {}


class _OldPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of :data:`MOVED` and loads it as the module at its new path."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        _REAL_SPECS[spec.name] = module.__spec__  # the import system is about to set the old path's
        return module

    def exec_module(self, module) -> None:
        # Already run under its new name; give it back its own spec (importlib.resources and
        # pickle read it: the old path's has no package locations).
        module.__spec__ = _REAL_SPECS.pop(module.__spec__.name)


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once: before the path finders, so that no stale
    ``bpetok/chat.py`` (an older checkout, an editable install's mapping) answers for an old path."""
    if not any(isinstance(finder, _OldPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldPathFinder())


install()
