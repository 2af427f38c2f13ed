"""Where bpetok finds its optional C modules (setup.py builds them where it can).

Each has a pure-Python twin that the tests hold it equal to; the twin runs when the module is not
built, or everywhere when ``BPETOK_PURE_PYTHON=1`` asks for the pure-Python engine.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def pure_python_forced() -> bool:
    """Whether ``BPETOK_PURE_PYTHON`` is set (to anything but ``0``)."""
    return os.environ.get("BPETOK_PURE_PYTHON", "").strip() not in ("", "0")


def compiled_module(name: str) -> ModuleType | None:
    """The C module ``name`` (e.g. ``bpetok.models._bpe``), or None: not built, or pure Python forced."""
    if pure_python_forced():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
