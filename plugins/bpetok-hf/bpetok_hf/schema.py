"""Reading a JSON file that may be hostile: bounded in size and nesting, every value type-checked.

The reader of tokenizer.json (and its pre-tokenizer passes) takes each value through these
helpers, so a wrong type, an id out of range or a gzip bomb is a :class:`bpetok.VocabularyError`
naming the file and the key (``model.vocab['abc']``), not a TypeError from deep inside.
"""

from __future__ import annotations

import json
import os

from bpetok import GGUFError, VocabularyError
from bpetok.vocab import gguf

__all__ = ["MAX_JSON_VALUES", "load_json", "describe", "count", "bad", "key_of", "section", "array", "flag", "text_of", "token_id"]

# JSON values a file may hold (counted from its commas and brackets, an upper bound): a 1M-token
# vocabulary with its merges has about 4M. Python makes ~64 bytes of each, so 1 GiB of "[],[],..."
# (a few kB as gzip) would be 20 GB of lists; this keeps a parse to about 1 GiB.
MAX_JSON_VALUES = 1 << 24
_FIX = "the file is damaged or not a Hugging Face tokenizer.json: re-download or re-export it"


def load_json(path: str, what: str = "a tokenizer.json") -> object:
    """The parsed JSON of ``path`` (``.gz`` inflated), at most ``bpetok.vocab.gguf.MAX_GUNZIPPED`` bytes of
    text: the bound of a .gguf.gz (a tokenizer.json is tens of MB), and the same inflate."""
    try:
        if path.lower().endswith(".gz"):
            raw = gguf._gunzip(path)
        else:
            size = os.path.getsize(path)
            if size > gguf.MAX_GUNZIPPED:
                raise VocabularyError(f"{path}: {size} bytes, more than {gguf.MAX_GUNZIPPED}; is it {what}?")
            with open(path, "rb") as f:
                raw = f.read()
        text = raw.decode("utf-8")
        del raw
        values = text.count(",") + text.count("[") + text.count("{")
        if values > MAX_JSON_VALUES:
            raise VocabularyError(
                f"{path}: {values} commas and brackets, more than the {MAX_JSON_VALUES} JSON values bpetok-hf reads "
                f"(a 1M-token vocabulary has about 4M); is it {what}?"
            )
        return json.loads(text)
    except GGUFError as e:  # the inflate's refusal, named as this loader's
        raise VocabularyError(str(e)) from None
    except RecursionError:
        raise VocabularyError(f"{path}: JSON nested too deeply to read; is it {what}?") from None
    except (UnicodeDecodeError, ValueError, OSError) as e:
        raise VocabularyError(f"{path}: cannot read it as JSON ({e}); is it {what}?") from e


def describe(value: object) -> str:
    """A short description of a JSON value for a message: cheap even for a whole vocabulary."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "NaN" if value != value else repr(value)
    if isinstance(value, int):
        return str(value) if value.bit_length() < 100 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    if isinstance(value, list):
        return f"a list of {count(len(value), 'item')}"
    if isinstance(value, dict):
        return f"an object of {count(len(value), 'key')}"
    return type(value).__name__


def count(n: int, noun: str) -> str:
    """``1 vocab entry``, ``2 added tokens``: a count with its noun, singular or plural."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun[:-1] + 'ies' if noun.endswith('y') else noun + 's'}"


def bad(path: str, where: str, value: object, expected: str) -> VocabularyError:
    return VocabularyError(f"{path}: {where} is {describe(value)}, not {expected}; {_FIX}")


def key_of(where: str, key: str) -> str:
    """``where[key]`` as a message names it (a long token text cut short)."""
    return f"{where}[{key[:40]!r}{'...' if len(key) > 40 else ''}]"


def section(node: dict, key: str, path: str, where: str) -> dict | None:
    """An optional object (absent or null: None)."""
    value = node.get(key)
    if value is None or isinstance(value, dict):
        return value
    raise bad(path, f"{where}{key}", value, "an object or null")


def array(node: dict, key: str, path: str, where: str, required: bool = False) -> list:
    """A list (absent or null: empty, unless ``required``)."""
    value = node.get(key)
    if isinstance(value, list) or (value is None and not required):
        return value or []
    raise bad(path, f"{where}{key}", value, "a list")


def flag(node: dict, key: str, path: str, where: str, default: bool = False) -> bool:
    value = node.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise bad(path, f"{where}{key}", value, "true or false")


def text_of(node: dict, key: str, path: str, where: str) -> str | None:
    """An optional string."""
    value = node.get(key)
    if value is None or isinstance(value, str):
        return value
    raise bad(path, f"{where}{key}", value, "a string or null")


def token_id(value: object, path: str, where: str, limit: int, size_note: str) -> int:
    """A token id: an integer (not true/false) in ``0 .. limit - 1``, the ids the file has room for."""
    if type(value) is not int:
        raise bad(path, where, value, "a non-negative integer token id")
    if not 0 <= value < limit:
        raise VocabularyError(
            f"{path}: {where} is {describe(value)}, outside the file's ids 0..{limit - 1} ({size_note}); {_FIX}"
        )
    return value
