"""Where message text landed in a rendered chat, for ``apply_chat_template(...,
parse_special_in_messages=False)``: the spans of the prompt no special token may overlap.

The inputs arrive as plain JSON-like data (bpetok.apps.chat._plain), already rendered once.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from bpetok.errors import ChatTemplateError

if TYPE_CHECKING:
    from bpetok.tokenizer import Tokenizer


def message_spans(tokenizer: Tokenizer, prompt: str, name: str, render, messages, tools, variables):
    """The (start, end) spans of ``prompt`` where special-token text from the messages landed.

    Rendered a second time with each special-token match in the input strings replaced by a run of
    one private-use character as long as the match: the runs mark where those matches are. The two
    renderings must agree everywhere else, or the template treated the special-token text as more
    than text (split at it, compared it), and which markers are whose cannot be told."""
    finder = tokenizer._special_finder[True]
    inputs = (messages, tools, variables.get("documents"))
    if finder is None or not any(finder.search(text) for text in _strings(inputs)):
        return []
    mark = next((chr(c) for c in range(0xE000, 0xF900) if chr(c) not in prompt), None)
    if mark is None:
        raise ChatTemplateError(
            f"{name}: parse_special_in_messages=False needs a private-use character (U+E000..U+F8FF) the "
            "prompt does not hold, and it holds all 6,400"
        )
    blank = functools.partial(finder.sub, lambda m: mark * len(m.group()))
    documents = variables.get("documents")
    masked_variables = {**variables, "documents": _map_strings(documents, blank)} if documents is not None else variables
    masked = render(_map_strings(messages, blank), _map_strings(tools, blank), masked_variables)
    spans = [m.span() for m in re.finditer(re.escape(mark) + "+", masked)]
    ends = [0] + [end for _, end in spans]
    starts = [start for start, _ in spans] + [len(masked)]
    if len(masked) != len(prompt) or any(prompt[a:b] != masked[a:b] for a, b in zip(ends, starts)):
        raise ChatTemplateError(
            f"{name}: parse_special_in_messages=False, but the template does more with the special-token text "
            "in the messages than print it (it splits or compares at it), so its own markers cannot be told "
            "from the messages'; remove the special-token text from the messages (or leave the option on)"
        )
    return spans


def _strings(value):
    """Every str in nested lists, tuples and dicts (keys included)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _map_strings(value, change):
    """``value`` with ``change`` applied to every str in it."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, Mapping):
        return {_map_strings(k, change): _map_strings(v, change) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_map_strings(v, change) for v in value]
    return value
