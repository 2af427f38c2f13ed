"""Where bpetok finds its optional C modules (setup.py builds them where it can).

Each has a pure-Python twin that the tests hold it equal to; the twin runs when the module is not
built, or everywhere when ``BPETOK_PURE_PYTHON=1`` asks for the pure-Python engine.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

# How to get the C modules, for the messages below.
BUILD_HINT = (
    "build it with a C compiler installed: `pip install .` in bpetok's source tree "
    "(or `python setup.py build_ext --inplace` to work in the tree)"
)
_warned = False  # the not-built warning is given once per process


def pure_python_forced() -> bool:
    """Whether ``BPETOK_PURE_PYTHON`` is set (to anything but ``0``)."""
    return os.environ.get("BPETOK_PURE_PYTHON", "").strip() not in ("", "0")


def compiled_module(name: str) -> ModuleType | None:
    """The C module ``name`` (e.g. ``bpetok.models.gpt2._kernel``), or None: not built, or pure Python forced."""
    if pure_python_forced():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def pure_python_reason(name: str = "bpetok.models.gpt2._kernel") -> str | None:
    """Why C module ``name`` does not run: ``BPETOK_PURE_PYTHON`` asked for that, or it is not
    built (with how to build it); None when it runs."""
    if pure_python_forced():
        return "BPETOK_PURE_PYTHON is set"
    if compiled_module(name) is None:
        return f"the C kernel is not built; {BUILD_HINT}"
    return None


def warn_not_built(name: str) -> None:
    """Warn once per process (a RuntimeWarning) when C module ``name`` is missing because it was
    not built, so the slow pure-Python engine runs; say nothing when BPETOK_PURE_PYTHON asked for it."""
    global _warned
    if _warned or pure_python_forced() or compiled_module(name) is not None:
        return
    _warned = True
    warnings.warn(
        f"bpetok runs its pure-Python engine, several times slower, because its C kernel ({name}) is not "
        f"built; {BUILD_HINT}. Set BPETOK_PURE_PYTHON=1 to choose the pure-Python engine and silence this.",
        RuntimeWarning,
        stacklevel=3,
    )
