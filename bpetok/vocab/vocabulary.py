"""The vocabulary: what a loader reads from a model file, before any tokenizing structure is built.

:class:`Vocabulary` is plain data (token texts, types, merges, special ids, flags). The GGUF
loader, a built-in plugin of the ``bpetok_load_vocabulary`` hook, fills it from the
``tokenizer.*`` keys exactly as llama.cpp reads them (src/llama-vocab.cpp, ``impl::load``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag
from itertools import repeat
from typing import Any

from bpetok.errors import GGUFError, UnsupportedVocabularyError, VocabularyError
from bpetok.vocab.gguf import GGUFValueType, read_gguf
from bpetok.hookspecs import hookimpl

__all__ = ["TokenType", "TokenAttr", "Vocabulary", "SPECIAL_ID_KEYS"]


class TokenType(IntEnum):
    """``tokenizer.ggml.token_type`` values (llama.h)."""

    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


class TokenAttr(IntFlag):
    """llama.cpp's token attribute bits (llama.h); overrides can combine them, e.g. NORMAL|CONTROL."""

    UNDEFINED = 0
    UNKNOWN = 1
    UNUSED = 2
    NORMAL = 4
    CONTROL = 8
    USER_DEFINED = 16
    BYTE = 32
    NORMALIZED = 64
    LSTRIP = 128
    RSTRIP = 256
    SINGLE_WORD = 512


# Initial attribute of each stored type; any other value is UNDEFINED (llama-vocab.cpp).
ATTR_OF_TYPE = {
    TokenType.NORMAL: TokenAttr.NORMAL,
    TokenType.UNKNOWN: TokenAttr.UNKNOWN,
    TokenType.CONTROL: TokenAttr.CONTROL,
    TokenType.USER_DEFINED: TokenAttr.USER_DEFINED,
    TokenType.UNUSED: TokenAttr.UNUSED,
    TokenType.BYTE: TokenAttr.BYTE,
}

# Special-id roles and their GGUF keys, in the order llama.cpp applies them; the deprecated
# prefix/suffix/middle keys come last and so win over fim_pre/suf/mid.
SPECIAL_ID_KEYS = (
    ("bos", "tokenizer.ggml.bos_token_id"),
    ("eos", "tokenizer.ggml.eos_token_id"),
    ("eot", "tokenizer.ggml.eot_token_id"),
    ("eom", "tokenizer.ggml.eom_token_id"),
    ("unk", "tokenizer.ggml.unknown_token_id"),
    ("sep", "tokenizer.ggml.seperator_token_id"),  # sic, as llama.cpp spells it
    ("pad", "tokenizer.ggml.padding_token_id"),
    ("mask", "tokenizer.ggml.mask_token_id"),
    ("fim_pre", "tokenizer.ggml.fim_pre_token_id"),
    ("fim_suf", "tokenizer.ggml.fim_suf_token_id"),
    ("fim_mid", "tokenizer.ggml.fim_mid_token_id"),
    ("fim_pad", "tokenizer.ggml.fim_pad_token_id"),
    ("fim_rep", "tokenizer.ggml.fim_rep_token_id"),
    ("fim_sep", "tokenizer.ggml.fim_sep_token_id"),
    ("fim_pre", "tokenizer.ggml.prefix_token_id"),
    ("fim_suf", "tokenizer.ggml.suffix_token_id"),
    ("fim_mid", "tokenizer.ggml.middle_token_id"),
)
SPECIAL_ROLES = tuple(dict.fromkeys(role for role, _ in SPECIAL_ID_KEYS))
BOOL_KEYS = {
    "add_bos": "tokenizer.ggml.add_bos_token",
    "add_eos": "tokenizer.ggml.add_eos_token",
    "add_sep": "tokenizer.ggml.add_sep_token",
    "add_space_prefix": "tokenizer.ggml.add_space_prefix",
    "remove_extra_whitespaces": "tokenizer.ggml.remove_extra_whitespaces",
    "normalizer_lowercase": "tokenizer.ggml.normalizer.lowercase",
    "normalizer_strip_accents": "tokenizer.ggml.normalizer.strip_accents",
}
# The unigram (t5) normalizer's table, kept as bytes in Vocabulary.metadata under this key.
CHARSMAP_KEY = "tokenizer.ggml.precompiled_charsmap"


@dataclass
class Vocabulary:
    """A loaded vocabulary. Loaders fill the stored fields; overrides adjust ``attrs`` and ids.

    - ``tokens[i]``: token text as stored (bytes; byte-level tokens in GPT-2's printable alphabet).
    - ``token_types[i]``: the stored :class:`TokenType` value.
    - ``merges``: merge strings in rank order (``b"\\xc4\\xa0 t"``).
    - ``scores``: ``tokenizer.ggml.scores`` (SentencePiece-style models merge by score), or empty.
    - ``special_id_keys``: (role, key, id) for each special-id key the file sets, in llama.cpp's order.
    - ``special_ids``: role (``bos``, ``eos``, ``fim_pre``...) -> id or None, resolved by the overrides.
    - ``flags``: ``add_bos``, ``add_eos``... as given by the file (absent when not given).
    - ``attrs``: llama.cpp's attribute bits per token, starting from the types.
    - ``eog_ids``: llama.cpp's end-of-generation set, filled by the overrides.
    """

    path: str
    model: str
    pre: str
    tokens: list[bytes]
    token_types: list[int]
    merges: list[bytes]
    special_id_keys: list[tuple[str, str, int]] = field(default_factory=list)
    special_ids: dict[str, int | None] = field(default_factory=dict)
    flags: dict[str, bool] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    attrs: list[int] = field(default_factory=list)
    eog_ids: set[int] = field(default_factory=set)
    scores: list[float] = field(default_factory=list)
    # Set once the attribute-override hook has run on this vocabulary (it runs once only).
    attributes_adjusted: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if not self.attrs:
            # map(dict.get) rather than a comprehension: this runs over 150k tokens at load.
            self.attrs = list(map(ATTR_OF_TYPE.get, self.token_types, repeat(TokenAttr.UNDEFINED)))  # type: ignore[arg-type]

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def id_of(self, text: bytes) -> int | None:
        """The id of a token text, or None (builds the index on first use)."""
        return self.token_index().get(text)

    def token_index(self) -> dict[bytes, int]:
        """Token text -> id (the last id of a duplicated text), built once and shared.

        The loader, the overrides and the BPE model all need this 150k-entry dict; building it
        once saves ~15 ms per copy at load. It is rebuilt if ``tokens`` is replaced or resized
        (a plugin may swap the list); edit tokens in place only before first use.
        """
        cached = self.__dict__.get("_index")
        tokens = self.tokens
        if cached is None or cached[0] is not tokens or cached[1] != len(tokens):
            return self.adopt_token_index(dict(zip(tokens, range(len(tokens)))))
        return cached[2]

    def adopt_token_index(self, index: dict[bytes, int]) -> dict[bytes, int]:
        """Keep ``index``, built from the current ``tokens`` (a loader builds one to find
        duplicates), as what :meth:`token_index` returns; returns it."""
        self.__dict__["_index"] = (self.tokens, len(self.tokens), index)
        return index


# -- the built-in GGUF loader ------------------------------------------------------------------


# The chat templates (read by bpetok.apps.chat): tokenizer.chat_template and tokenizer.chat_template.NAME.
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"


def _wanted(key: str) -> bool:
    return key.startswith(("tokenizer.ggml.", CHAT_TEMPLATE_KEY)) or key in ("general.architecture", "general.name")


def _expect(gguf, key: str, vtype: GGUFValueType, elem: GGUFValueType | None = None, *, required: bool = False):
    """Return a key's value, checking its type as strictly as llama.cpp's get_key does."""
    if key not in gguf.types:
        if required:
            raise GGUFError(f"{gguf.path}: required key {key!r} is missing; this file has no usable tokenizer")
        return None
    actual, actual_elem = gguf.types[key]
    if actual != vtype or (elem is not None and actual_elem != elem):
        def name(t, e):
            return f"array[{e.name.lower() if e is not None else '?'}]" if t == GGUFValueType.ARRAY else t.name.lower()
        raise GGUFError(
            f"{gguf.path}: key {key!r} has type {name(actual, actual_elem)}, expected {name(vtype, elem)} "
            "(llama.cpp refuses to load this file too)"
        )
    return gguf.metadata[key]


def _text(value: bytes, path: str, key: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GGUFError(f"{path}: key {key!r} is not valid UTF-8") from e


def _read_scores(gguf, n: int) -> list[float]:
    """``tokenizer.ggml.scores`` as llama.cpp reads them: float32 or int32, at least one per token."""
    key = "tokenizer.ggml.scores"
    if key not in gguf.types:
        return []
    actual, elem = gguf.types[key]
    if actual != GGUFValueType.ARRAY or elem not in (GGUFValueType.FLOAT32, GGUFValueType.INT32):
        raise GGUFError(f"{gguf.path}: key {key!r} must be an array of float32 or int32 (llama.cpp refuses it too)")
    values = gguf.metadata[key]
    if len(values) < n:
        raise GGUFError(
            f"{gguf.path}: key {key!r} has {len(values)} entries for {n} tokens; the file is corrupt: re-convert the model"
        )
    scores = values[:n].tolist()
    return scores if elem == GGUFValueType.FLOAT32 else [float(v) for v in scores]  # float32 ones are floats already


# tokenizer.ggml.model values that mean the file has no vocabulary at all.
NO_VOCABULARY_MODELS = ("none", "no_vocab")


def _read_charsmap(gguf) -> bytes | None:
    """``tokenizer.ggml.precompiled_charsmap`` as llama.cpp reads it: an array of int8 or uint8."""
    if CHARSMAP_KEY not in gguf.types:
        return None
    actual, elem = gguf.types[CHARSMAP_KEY]
    if actual != GGUFValueType.ARRAY or elem not in (GGUFValueType.INT8, GGUFValueType.UINT8):
        raise GGUFError(
            f"{gguf.path}: key {CHARSMAP_KEY!r} must be an array of uint8 or int8 (llama.cpp refuses it too)"
        )
    value = gguf.metadata[CHARSMAP_KEY]
    return value.tobytes() if hasattr(value, "tobytes") else bytes(x & 0xFF for x in value)


def load_gguf_vocabulary(path: str) -> Vocabulary:
    """Read the tokenizer of a GGUF file as llama.cpp does."""
    gguf = read_gguf(path, want=_wanted, numpy=False)  # no numpy import: ~0.07 s of a cold load
    model = _text(_expect(gguf, "tokenizer.ggml.model", GGUFValueType.STRING, required=True), path, "tokenizer.ggml.model")
    if model in NO_VOCABULARY_MODELS:
        raise UnsupportedVocabularyError(
            f"{path}: tokenizer.ggml.model={model!r} says this file has no vocabulary (llama.cpp's "
            "LLAMA_VOCAB_TYPE_NONE: a model without a tokenizer), so there is nothing to tokenize with: "
            "load the GGUF of a model that ships its vocabulary"
        )
    pre_raw = _expect(gguf, "tokenizer.ggml.pre", GGUFValueType.STRING)
    pre = _text(pre_raw, path, "tokenizer.ggml.pre") if pre_raw is not None else ""
    tokens = _expect(gguf, "tokenizer.ggml.tokens", GGUFValueType.ARRAY, GGUFValueType.STRING, required=True)
    n = len(tokens)
    types = _expect(gguf, "tokenizer.ggml.token_type", GGUFValueType.ARRAY, GGUFValueType.INT32)
    if types is None:
        token_types: list[int] = [TokenType.NORMAL] * n  # llama.cpp: no type array means every token is NORMAL
    elif len(types) < n:
        raise GGUFError(
            f"{path}: key 'tokenizer.ggml.token_type' has {len(types)} entries for {n} tokens; "
            "the file is corrupt: re-convert the model"
        )
    else:
        token_types = types[:n].tolist()
    scores = _read_scores(gguf, n)
    merges = _expect(gguf, "tokenizer.ggml.merges", GGUFValueType.ARRAY, GGUFValueType.STRING)
    if merges is None:
        # llama.cpp lets a kimi-k2 file go without merges (its BPE then merges nothing).
        if model == "gpt2" and pre != "kimi-k2":
            raise GGUFError(f"{path}: key 'tokenizer.ggml.merges' is missing; a gpt2 (BPE) vocabulary needs merges")
        merges = []
    # llama.cpp reads strings as C strings (truncated at a NUL) and renames empty tokens. Each
    # list is rebuilt only when needed: one C-speed check instead of a loop over 150k strings.
    if b"\0" in b"".join(tokens):
        tokens = [t.split(b"\0", 1)[0] for t in tokens]
    if not all(tokens):
        tokens = [t if t else f"[EMPTY_{i}]".encode() for i, t in enumerate(tokens)]
    if b"\0" in b"".join(merges):
        merges = [m.split(b"\0", 1)[0] for m in merges]
    index = dict(zip(tokens, range(n)))  # shared with the overrides and the BPE model
    if len(index) != n:
        seen, dup = set(), None
        for i, t in enumerate(tokens):
            if t in seen:
                dup = (i, t)
                break
            seen.add(t)
        assert dup is not None  # the index lost an entry, so some text repeats
        raise VocabularyError(
            f"{path}: token {dup[0]} {dup[1]!r} appears twice in 'tokenizer.ggml.tokens'; llama.cpp refuses such a "
            "vocabulary (each token text must be unique)"
        )
    special_id_keys = []
    for role, key in SPECIAL_ID_KEYS:
        value = _expect(gguf, key, GGUFValueType.UINT32)
        if value is not None:
            special_id_keys.append((role, key, int(value)))
    flags = {}
    for name, key in BOOL_KEYS.items():
        value = _expect(gguf, key, GGUFValueType.BOOL)
        if value is not None:
            flags[name] = bool(value)
    metadata = {}
    for key in ("general.architecture", "general.name"):
        value = _expect(gguf, key, GGUFValueType.STRING)
        if value is not None:
            metadata[key] = value.decode("utf-8", "replace")
    charsmap = _read_charsmap(gguf)
    if charsmap is not None:
        metadata[CHARSMAP_KEY] = charsmap
    for key, (vtype, _) in gguf.types.items():
        # Kept as text for bpetok.apps.chat; a template of another type is left out (the tokenizer
        # does not need it, so it is no reason to refuse the file).
        if (key == CHAT_TEMPLATE_KEY or key.startswith(CHAT_TEMPLATE_KEY + ".")) and vtype == GGUFValueType.STRING:
            metadata[key] = gguf.metadata[key].decode("utf-8", "replace")
    vocabulary = Vocabulary(
        path=path,
        model=model,
        pre=pre,
        tokens=tokens,
        token_types=token_types,
        merges=merges,
        scores=scores,
        special_id_keys=special_id_keys,
        flags=flags,
        metadata=metadata,
    )
    vocabulary.adopt_token_index(index)
    return vocabulary


@hookimpl
def bpetok_load_vocabulary(path: str) -> Vocabulary | None:
    if os.path.isdir(path):
        return None  # a folder: another loader's, if any
    with open(path, "rb") as f:
        magic = f.read(4)
    name = os.fspath(path).lower()
    if magic != b"GGUF" and not name.endswith((".gguf", ".gguf.gz")):
        return None  # not ours: let another loader try
    return load_gguf_vocabulary(path)
