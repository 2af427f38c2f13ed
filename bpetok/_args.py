"""Checks of the public API's argument types, shared by the tokenizer, the trainer and extend.

Integers are what :func:`operator.index` accepts (``int``, ``numpy.int64``, ...), except ``bool``:
``True`` as a token id or a worker count is a mistake, not the number 1. Flags must be ``bool``
(``parse_special="no"`` is truthy). A ``str`` is never taken for a sequence of texts or ids.
Wrong types raise :class:`TypeError` naming the function and the argument; wrong values (an id
out of range) stay :class:`bpetok.BpetokError`.
"""

from __future__ import annotations

import operator
import os
from itertools import repeat
from typing import Any


def as_int(value: Any, what: str) -> int:
    """``value`` as an int, or TypeError: ``what`` names it ("token id", "workers")."""
    if value.__class__ is int:
        return value
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{what} must be an integer, not {type(value).__name__} {value!r}")


def check_flag(value: Any, what: str) -> bool:
    """``value`` if it is True or False, else TypeError (numpy's bool_ is accepted as its bool)."""
    if value.__class__ is bool:
        return value
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        return bool(value)
    raise TypeError(f"{what} must be True or False, not {type(value).__name__} {value!r}")


def check_not_text(value: Any, what: str, expected: str) -> None:
    """TypeError when ``value`` is a str or bytes-like, where ``expected`` (a sequence of ...) is wanted."""
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"{what} takes {expected}, not a single {type(value).__name__}; wrap it in a list")


def batch_arguments(name: str, texts, parse_special, workers) -> tuple[list[str], bool, int]:
    """A batch call's arguments checked: the texts as a list of str, the flag, and ``workers``
    (None: every CPU this process may run on). ``name`` is the method, for the errors."""
    check_not_text(texts, f"{name}()", "a sequence of str texts")
    texts = list(texts)
    if not all(map(isinstance, texts, repeat(str))):
        wrong = next(t for t in texts if not isinstance(t, str))
        raise TypeError(f"{name}() takes str texts, not {type(wrong).__name__}")
    parse_special = check_flag(parse_special, f"{name}(parse_special=...)")
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    else:
        workers = as_int(workers, f"{name}(workers=...)")
    if workers < 1:
        raise ValueError(f"{name}(workers={workers}): workers must be at least 1 (or None for all CPUs)")
    return texts, parse_special, workers
