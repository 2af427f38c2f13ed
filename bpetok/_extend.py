"""Extending an existing GGUF vocabulary with pinned terms as USER_DEFINED tokens (``bpetok extend``).

llama.cpp cuts user-defined tokens out of the text before pre-tokenizing and BPE (with or
without parse_special), and no merge is added, so every text that does not contain a pinned form
is tokenized exactly as with the base file (see docs/training.md for why merges cannot promise
that). The pin list helpers are shared with :func:`bpetok.train.train`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

from bpetok._args import check_not_text
from bpetok.errors import BpetokError
from bpetok.vocab.gguf import GGUFValueType
from bpetok.vocab import TokenAttr, TokenType

__all__ = ["extend", "ExtendResult", "read_pin_file"]


# -- pin lists -------------------------------------------------------------------------------------


def _clean_pins(pins: Iterable[str]) -> list[str]:
    out: list[str] = []
    for term in pins:
        if not isinstance(term, str):
            raise TypeError(f"a pinned term must be a str, not {type(term).__name__} {term!r}")
        if not term:
            raise BpetokError("a pinned term is empty; give non-empty text")
        if term not in out:
            out.append(term)
    return out


def read_pin_file(path: str) -> list[str]:
    """One term per line; surrounding whitespace and empty lines are ignored."""
    try:
        with open(path, encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip()]
    except OSError as e:
        raise BpetokError(f"{path}: cannot read the pin file ({e.strerror})") from e
    except UnicodeDecodeError as e:
        raise BpetokError(f"{path}: the pin file is not UTF-8 ({e})") from e



# -- extending an existing vocabulary -------------------------------------------------------------


def _refuse_swallowing(base: str, form: str, controls: list[tuple[int, str]]) -> None:
    """Refuse a pinned form that would hide a control token (``<|im_end|>``) from the text.

    A USER_DEFINED token is cut out of the text like a special, longest first (ties: lower id
    first, and a new token's id is the highest). A form that contains a control token's text,
    or is longer and overlaps it at either end (``"...x<|im"`` in ``"...x<|im_end|>"``), would
    be cut first and leave no ``<|im_end|>`` to find: the end of a turn would vanish.
    """
    size = len(form.encode("utf-8"))
    for token_id, text in controls:
        if text == form:
            raise BpetokError(f"{base}: cannot pin {form!r}: it is control token {token_id}")
        if text in form:
            raise BpetokError(
                f"{base}: cannot pin {form!r}: it contains control token {token_id} {text!r}, which would "
                "then never be found in text that contains the pin; pin a term without it"
            )
        if size > len(text.encode("utf-8")):
            for k in range(1, len(text)):
                if form.endswith(text[:k]) or form.startswith(text[-k:]):
                    raise BpetokError(
                        f"{base}: cannot pin {form!r}: it overlaps control token {token_id} {text!r} and is "
                        "longer, so it would be cut out first and break that token where they meet; pin a "
                        "term that does not begin or end with part of it"
                    )


@dataclass
class ExtendResult:
    """What :func:`extend` did: the new ids of the pinned forms, and the forms already single tokens."""

    base: str
    n_tokens: int
    added: dict[str, int]  # form -> id of a new (or retyped) USER_DEFINED token
    already: dict[str, int]  # form -> id of the base token BPE already gives it
    items: list = field(repr=False)  # the GGUF key/values to write

    def write(self, path: str | os.PathLike) -> None:
        from bpetok.vocab.gguf_writer import write_gguf

        write_gguf(path, self.items)


def extend(base: str | os.PathLike, *, pins: Iterable[str], output: str | os.PathLike | None = None) -> ExtendResult:
    """Make ``pins`` single tokens in an existing GGUF vocabulary without changing any other text's ids.

    Each pinned term, bare and with a leading space, that the base does not already encode as one
    token is appended as a USER_DEFINED token. llama.cpp cuts user-defined tokens out of the text
    (longest first) before pre-tokenizing, whether or not special tokens are parsed, so a text
    without a pinned form goes through exactly the base's path; no merge is added. Every key of the
    base file is kept; the per-token arrays and ``<arch>.vocab_size`` grow.

    :raises BpetokError: unreadable or non-GGUF base, an empty pin, a pin that is, contains or
        overlaps a control token's text (it would hide that token, e.g. the end of a turn).
    """
    import numpy as np

    import bpetok
    from bpetok.vocab.gguf import read_gguf

    base = os.fspath(base)
    check_not_text(pins, "extend(pins=...)", "a list of terms")
    pins = _clean_pins(pins)
    if not pins:
        raise BpetokError("nothing to pin: give at least one term (--pin TERM or --pin-file FILE)")
    tok = bpetok.from_gguf(base)
    gguf = read_gguf(base)
    meta, types = gguf.metadata, gguf.types
    tokens = list(meta["tokenizer.ggml.tokens"])
    n_base = len(tokens)
    token_types = np.asarray(meta.get("tokenizer.ggml.token_type", np.full(n_base, TokenType.NORMAL)), dtype="<i4").copy()
    token_types = list(token_types[:n_base])
    ids = {t: i for i, t in enumerate(tokens)}
    added: dict[str, int] = {}
    already: dict[str, int] = {}

    def single(form: str) -> int | None:
        plain = tok.encode(form, parse_special=False)
        return plain[0] if len(plain) == 1 and plain == tok.encode(form, parse_special=True) else None

    controls = [(i, text) for i, text in tok._special_table.specials if tok.vocabulary.attrs[i] & TokenAttr.CONTROL]
    for term in pins:
        for form in (term, " " + term):
            _refuse_swallowing(base, form, controls)
        bare, spaced = single(term), single(" " + term)
        for form in (term, " " + term):
            if form in added or form in already:
                continue
            # subtle: once the bare form is cut out of text, " term" would become " " + term, so
            # the spaced form is added too even when the base already has it as one token.
            if bare is not None and form == term:
                already[form] = bare
                continue
            if bare is not None and spaced is not None:
                already[form] = spaced
                continue
            data = form.encode("utf-8")
            existing = ids.get(data)
            if existing is not None:
                if token_types[existing] == TokenType.CONTROL:
                    raise BpetokError(f"{base}: cannot pin {form!r}: it is control token {existing}")
                # A byte-level token with the same text (printable ASCII): make it user-defined; its
                # bytes are the same either way, and the merges that build it are untouched.
                token_types[existing] = TokenType.USER_DEFINED
                added[form] = existing
                continue
            ids[data] = len(tokens)
            added[form] = len(tokens)
            tokens.append(data)
            token_types.append(TokenType.USER_DEFINED)
    n_new = len(tokens) - n_base
    arch = meta.get("general.architecture", b"").decode("utf-8", "replace")
    items = []
    for key in gguf.keys:
        vtype, elem = types[key]
        value = meta[key]
        if key == "tokenizer.ggml.tokens":
            value = tokens
        elif key == "tokenizer.ggml.token_type":
            value = token_types
        elif key == "tokenizer.ggml.scores" and n_new:
            value = list(value) + [0.0] * n_new
        elif key == f"{arch}.vocab_size" and vtype != GGUFValueType.ARRAY:
            value = len(tokens)
        elif key.startswith("tokenizer.ggml.") and vtype == GGUFValueType.ARRAY and len(value) == n_base and n_new and key != "tokenizer.ggml.merges":
            raise BpetokError(f"{base}: per-token key {key!r} is not one bpetok knows how to extend")
        items.append((key, vtype, value, elem))
    if "tokenizer.ggml.token_type" not in types:
        items.append(("tokenizer.ggml.token_type", GGUFValueType.ARRAY, token_types, GGUFValueType.INT32))
    result = ExtendResult(base=base, n_tokens=len(tokens), added=added, already=already, items=items)
    if output is not None:
        result.write(output)
    return result
