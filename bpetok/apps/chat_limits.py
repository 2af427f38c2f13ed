"""Limits on rendering a chat template: time, output size, loop iterations, nesting.

A GGUF's chat template is code from the file. jinja2's sandbox keeps it away from Python's
internals, but not from the CPU or memory: nested ``range`` loops, ``'a' * 10**10``,
``10 ** (10**8)``, ``center(10**10)``, ``tojson(indent=10**9)``, a string doubled in a namespace.
:class:`ChatLimits` bounds each of those, and every limit exceeded is a
:class:`~bpetok.errors.ChatTemplateError` naming the limit and how to raise it.

How each is enforced (see :func:`limited_environment_class`):

- every ``{% for %}`` iterates through a counter that checks the iteration budget and the clock,
  so loops that write nothing still stop;
- the operators and calls that make big values (``*``, ``**``, ``+``, ``%``, ``~``, ``str.format``,
  ``center``/``ljust``/``rjust``/``zfill``/``replace``/``join``/``expandtabs``, and the filters
  ``center``, ``indent``, ``format``, ``replace``, ``join``, ``tojson``) check the size of their result
  before making it;
- the output is taken chunk by chunk from ``Template.generate()``, its size and the clock checked
  at each chunk;
- the messages, tools and variables are checked for nesting depth before rendering, and a
  RecursionError anywhere (a template of 500 nested ``{% if %}``) is a ChatTemplateError.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import math
import re
import string
import sys
import time
from collections.abc import Mapping
from typing import Any

from bpetok.errors import ChatTemplateError

__all__ = ["ChatLimits", "DEFAULT_LIMITS", "LimitExceeded", "check_nesting", "limited_environment_class"]


@dataclasses.dataclass(frozen=True)
class ChatLimits:
    """What one rendering of a chat template may use. Every real template renders a conversation
    within the defaults in a few milliseconds; raise them for trusted templates that need more."""

    #: wall-clock seconds for the whole rendering
    seconds: float = 10.0
    #: characters of output; also the largest string (or list, in items) any one operation may make
    output_chars: int = 10_000_000
    #: ``{% for %}`` iterations over the whole rendering
    loop_iterations: int = 1_000_000
    #: how deeply the messages, tools and variables may nest (lists and objects within each other)
    nesting: int = 64

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ChatTemplateError(f"ChatLimits({field.name}=...) must be a positive number, got {value!r}")

    @classmethod
    def from_options(cls, options: list[str], base: ChatLimits | None = None) -> ChatLimits:
        """Limits from ``NAME=VALUE`` strings (the CLI's ``--limit``), over ``base``."""
        names = [f.name for f in dataclasses.fields(cls)]
        changes: dict[str, Any] = {}
        for option in options:
            name, sep, value = option.partition("=")
            if not sep or name not in names:
                raise ChatTemplateError(
                    f"--limit {option!r}: expected NAME=NUMBER with NAME one of {', '.join(names)}, e.g. seconds=30"
                )
            try:
                changes[name] = float(value) if name == "seconds" else int(value.replace("_", ""))
            except ValueError:
                raise ChatTemplateError(f"--limit {option!r}: {value!r} is not a number") from None
        return dataclasses.replace(base or cls(), **changes)


DEFAULT_LIMITS = ChatLimits()

# Python refuses to print an int of more digits (int_max_str_digits); a template has no use for one.
_MAX_INT_BITS = int(4300 * math.log2(10))


class LimitExceeded(Exception):
    """Raised inside a rendering; chat.render_template turns it into a ChatTemplateError."""

    def __init__(self, limit: str, value: Any, what: str):
        super().__init__(what)
        self.limit, self.value, self.what = limit, value, what

    def describe(self) -> str:
        value = f"{self.value:g}" if isinstance(self.value, float) else self.value
        return (
            f"the chat template exceeded a limit: {self.what} (limit {self.limit}={value}); if the "
            f"template is trusted, raise it: limits=ChatLimits({self.limit}=...) in Python, "
            f"--limit {self.limit}=... on the command line"
        )


class Budget:
    """One rendering's account: its deadline, iterations and output so far."""

    def __init__(self, limits: ChatLimits):
        self.limits = limits
        self.deadline = time.monotonic() + limits.seconds
        self.iterations = 0
        self.output = 0

    def check_clock(self) -> None:
        if time.monotonic() > self.deadline:
            raise LimitExceeded("seconds", self.limits.seconds, f"rendering took over {self.limits.seconds:g} s")

    def add_output(self, chars: int) -> None:
        self.output += chars
        if self.output > self.limits.output_chars:
            raise LimitExceeded("output_chars", self.limits.output_chars, "the rendered prompt is too long")
        self.check_clock()

    def check_size(self, size: float, what: str) -> None:
        if size > self.limits.output_chars:
            raise LimitExceeded("output_chars", self.limits.output_chars, f"{what} would be {size:.3g} long")


_current: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("bpetok_chat_budget", default=None)


def budget() -> Budget:
    # outside a rendering (jinja2 folding constants while compiling) the default limits apply
    return _current.get() or Budget(DEFAULT_LIMITS)


def start(limits: ChatLimits) -> tuple[Budget, contextvars.Token]:
    account = Budget(limits)
    return account, _current.set(account)


def finish(token: contextvars.Token) -> None:
    _current.reset(token)


def check_nesting(value: Any, limits: ChatLimits, what: str) -> None:
    """Refuse ``value`` (the messages, tools...) if lists and objects nest deeper than the limit,
    before anything recursive (copying it, the template) meets it. Iterative: no RecursionError."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children = list(item.values())
        elif isinstance(item, (list, tuple)):
            children = list(item)
        else:
            continue
        if depth > limits.nesting:
            raise ChatTemplateError(
                f"{what} nest more than {limits.nesting} levels deep (lists and objects within each other); "
                f"pass flatter data, or raise the limit: limits=ChatLimits(nesting=...) in Python, "
                "--limit nesting=... on the command line"
            )
        stack.extend((child, depth + 1) for child in children)


# -- sizes of what an operation would make ----------------------------------------------------------


def _length(value: Any) -> int:
    try:
        return len(value)
    except TypeError:
        return len(str(value))


def _check_int_bits(bits: float) -> None:
    if bits > _MAX_INT_BITS:
        raise LimitExceeded("output_chars", budget().limits.output_chars, "a number over 4300 digits")


def check_binop(operator: str, left: Any, right: Any) -> None:
    account = budget()
    account.check_clock()
    ints = isinstance(left, int) and isinstance(right, int)
    if operator == "*":
        if ints:
            _check_int_bits(left.bit_length() + right.bit_length())
        elif isinstance(right, int) and isinstance(left, (str, bytes, list, tuple)):
            account.check_size(len(left) * right, f"{type(left).__name__} * {right}")
        elif isinstance(left, int) and isinstance(right, (str, bytes, list, tuple)):
            account.check_size(len(right) * left, f"{left} * {type(right).__name__}")
    elif operator == "**":
        if ints and right > 0 and abs(left) > 1:
            _check_int_bits(right * left.bit_length())
    elif operator == "+":
        if isinstance(left, (str, bytes, list, tuple)) and isinstance(right, (str, bytes, list, tuple)):
            account.check_size(len(left) + len(right), f"{type(left).__name__} + {type(right).__name__}")
    elif operator == "%" and isinstance(left, (str, bytes)):
        check_printf_format(left if isinstance(left, str) else left.decode("latin-1"), right)


# the widths and precisions of %-formatting and of str.format's fields
_PRINTF_SIZES = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_FORMAT_SIZES = re.compile(r"[<>=^]?[-+ ]?#?0?(\d+)?[,_]?(?:\.(\d+))?")


def check_printf_format(fmt: str, args: Any) -> None:
    if "*" in fmt:
        raise LimitExceeded("output_chars", budget().limits.output_chars, "a '*' width in %-formatting")
    widths = sum(int(w or 0) + int(p or 0) for w, p in _PRINTF_SIZES.findall(fmt))
    budget().check_size(len(fmt) + widths + _length(args), "%-formatting")


def check_format(fmt: str, args, kwargs) -> None:
    """str.format: the fields' widths and precisions (a nested ``{:{w}}`` width is refused)."""
    widths = 0
    for _, _, spec, _ in _formatter.parse(fmt):
        if spec:
            if "{" in spec:
                raise LimitExceeded("output_chars", budget().limits.output_chars, "a nested width in str.format")
            match = _FORMAT_SIZES.match(spec)
            if match:
                widths += int(match.group(1) or 0) + int(match.group(2) or 0)
    parts = sum(_length(a) for a in args) + sum(_length(v) for v in kwargs.values())
    budget().check_size(len(fmt) + widths + parts, "str.format")


_formatter = string.Formatter()  # only its parser of format strings is used


def _width(value: Any) -> int:
    return value if isinstance(value, int) else 0


def check_str_method(text: Any, name: str, args: tuple, kwargs: dict) -> None:
    """Refuse a call of a str (or bytes) method whose result would pass the size limit."""
    account = budget()
    if name in ("center", "ljust", "rjust", "zfill") and args:
        account.check_size(_width(args[0]), f"str.{name}({args[0]})")
    elif name == "expandtabs":
        size = _width(args[0] if args else kwargs.get("tabsize", 8))
        account.check_size(len(text) + text.count("\t" if isinstance(text, str) else b"\t") * size, "str.expandtabs()")
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], type(text)) and isinstance(args[1], type(text)):
        old, new = args[0], args[1]
        count = text.count(old) if old else len(text) + 1
        account.check_size(len(text) + count * max(len(new) - len(old), 0), "str.replace()")
    elif name == "join" and args:
        items = args[0]
        if isinstance(items, (list, tuple)):
            account.check_size(sum(_length(i) for i in items) + len(text) * len(items), "str.join()")
    elif name in ("format", "format_map") and isinstance(text, str):
        mapping = args[0] if name == "format_map" and args and isinstance(args[0], Mapping) else kwargs
        check_format(text, args if name == "format" else (), mapping)




def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (Mapping, list, tuple)):
            deepest = max(deepest, depth)
            stack.extend((c, depth + 1) for c in (item.values() if isinstance(item, Mapping) else item))
    return deepest


def checked_tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' tojson (no HTML escaping, takes separators), its output size bounded."""
    account = budget()
    if indent is not None:
        step = indent if isinstance(indent, int) else len(str(indent))
        account.check_size(step * _depth(x), f"tojson(indent={indent!r})")
    encoder = json.JSONEncoder(ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    parts, size = [], 0
    for part in encoder.iterencode(x):
        size += len(part)
        account.check_size(size, "tojson()")
        parts.append(part)
    return "".join(parts)


# -- the environment -------------------------------------------------------------------------------

# filters the instrumented template calls (a template naming them itself gains nothing)
_LOOP_FILTER = "bpetok_counted_loop"
_CONCAT_FILTER = "bpetok_checked_concat"


def _counted(iterable):
    """Every ``{% for %}``'s iterable passes through here: the iteration budget and the clock."""
    account = budget()
    limits = account.limits
    for item in iterable:
        account.iterations += 1
        if account.iterations > limits.loop_iterations:
            raise LimitExceeded("loop_iterations", limits.loop_iterations, "the template loops too many times")
        if not account.iterations & 1023:
            account.check_clock()
        yield item


def _concat(items):
    """``a ~ b``: str() of each part, joined, its size checked first."""
    parts = [str(item) for item in items]
    budget().check_size(sum(map(len, parts)), "a ~ concatenation")
    return "".join(parts)


def limited_environment_class(base):
    """A subclass of the jinja2 sandbox ``base`` that enforces the current :class:`Budget`."""
    from jinja2 import filters, nodes
    from jinja2.visitor import NodeTransformer

    class _Instrument(NodeTransformer):
        """Every loop's iterable through the counter, every ``~`` through the checked join."""

        def visit_For(self, node):
            node = self.generic_visit(node)
            node.iter = nodes.Filter(node.iter, _LOOP_FILTER, [], [], None, None, lineno=node.iter.lineno)
            return node

        def visit_Concat(self, node):
            node = self.generic_visit(node)
            parts = nodes.List(node.nodes, lineno=node.lineno)
            return nodes.Filter(parts, _CONCAT_FILTER, [], [], None, None, lineno=node.lineno)

    class LimitedEnvironment(base):
        intercepted_binops = frozenset(["*", "**", "+", "%"])

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.filters[_LOOP_FILTER] = _counted
            self.filters[_CONCAT_FILTER] = _concat
            self.filters["tojson"] = checked_tojson
            self.filters["center"] = _checked_filter(filters.do_center, lambda value, width=80, *a, **k: _width(width))
            self.filters["indent"] = _checked_filter(filters.do_indent, _indent_size)
            self.filters["format"] = _checked_filter(filters.do_format, _format_filter_size)
            self.filters["replace"] = _checked_filter(filters.do_replace, _replace_size, pass_first=True)
            self.filters["join"] = _checked_filter(filters.sync_do_join, _join_size, pass_first=True)
            # batch pads its last list to the batch's size; slice loops once per slice
            self.filters["batch"] = _checked_filter(filters.do_batch, lambda value, linecount, *a, **k: _width(linecount))
            self.filters["slice"] = _checked_filter(filters.sync_do_slice, lambda value, slices, *a, **k: _width(slices))

        def _parse(self, source, name, filename):
            return _Instrument().visit(super()._parse(source, name, filename))

        def call_binop(self, context, operator, left, right):
            check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def wrap_str_format(self, value):
            # the sandbox hands templates its own wrapper of str.format / format_map: check first
            wrapper = super().wrap_str_format(value)
            if wrapper is None:
                return None
            text, name = value.__self__, value.__name__

            def checked(*args, **kwargs):
                check_str_method(text, name, args, kwargs)
                return wrapper(*args, **kwargs)

            return checked

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's signature
            owner = getattr(__obj, "__self__", None)
            if isinstance(owner, (str, bytes)):  # a str (or bytes) method: some make big strings
                check_str_method(owner, getattr(__obj, "__name__", ""), args, kwargs)
            account = budget()
            account.check_clock()
            result = super().call(__context, __obj, *args, **kwargs)
            if isinstance(result, str):  # a macro's output, which jinja2 joins outside generate()
                account.check_size(len(result), "a call's result")
            return result

    return LimitedEnvironment


def _checked_filter(function, size_of, pass_first=False):
    """``function`` (a jinja2 filter) that first checks the size ``size_of(value, *args)`` would make;
    ``pass_first``: the filter takes jinja2's eval context first (kept, so it is passed)."""
    import functools

    @functools.wraps(function)
    def checked(*args, **kwargs):
        value_args = args[1:] if pass_first else args
        budget().check_size(size_of(*value_args, **kwargs), f"the {function.__name__[3:]} filter")
        return function(*args, **kwargs)

    return checked


def _indent_size(value, width=4, first=False, blank=False):
    step = _width(width) if not isinstance(width, str) else len(width)
    text = str(value)
    return len(text) + step * (text.count("\n") + 1)


def _format_filter_size(value, *args, **kwargs):
    check_printf_format(str(value), args or kwargs)
    return 0


def _replace_size(value, old, new, count=None):
    text, old, new = str(value), str(old), str(new)
    found = text.count(old) if old else len(text) + 1
    return len(text) + found * max(len(new) - len(old), 0)


def _join_size(value, d="", attribute=None):
    items = list(value) if isinstance(value, (list, tuple)) else []
    return sum(_length(i) for i in items) + len(str(d)) * len(items)


def recursion_message() -> str:
    return (
        "the chat template nests too deeply for Python (RecursionError: over "
        f"{sys.getrecursionlimit()} levels of blocks, parentheses or macro calls); simplify the template"
    )
