"""Checks of the public API's argument types, shared by the tokenizer, the trainer and extend.

Integers are what :func:`operator.index` accepts (``int``, ``numpy.int64``, ...), except ``bool``:
``True`` as a token id or a worker count is a mistake, not the number 1. Flags must be ``bool``
(``parse_special="no"`` is truthy). A ``str`` is never taken for a sequence of texts or ids.
Wrong types raise :class:`TypeError` naming the function and the argument; wrong values (an id
out of range) stay :class:`bpetok.BpetokError`.
"""

from __future__ import annotations

import operator
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
