"""The tokenizer: llama.cpp's ``llama_tokenize`` and ``token_to_piece`` over a loaded vocabulary.

Data flows one way: a vocabulary is loaded and its attributes adjusted (plugins), then for each
call special tokens are cut out of the text (longest first) and each remaining fragment goes to
the tokenizer model registered for ``tokenizer.ggml.model`` (a plugin implementing
:class:`bpetok.models.TokenizerModel`), which turns it into ids however it likes (byte-level BPE
splits it by its pre-tokenizer first, with caches and a C kernel). Nothing here knows about a
particular model.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import Any, SupportsIndex

import pluggy

from bpetok._args import batch_arguments, check_flag
from bpetok.cache import cache_budget
from bpetok.decode import Decoding, check_byte_tokens
from bpetok.errors import BpetokError, InputError, PluginError
from bpetok.loading import find_pretokenizer, load_vocabulary, prepare_vocabulary
from bpetok.models import TokenizerModel
from bpetok.models.base import gc_paused
from bpetok.pretok import PreTokenizerSpec
from bpetok.specials import SpecialTable
from bpetok.utf8 import LLAMA_UTF8_ERRORS, BeyondUnicode
from bpetok.vocab import TokenAttr, TokenType, Vocabulary

__all__ = ["Tokenizer", "load_vocabulary", "from_file", "from_gguf", "from_vocabulary"]

# Fragments between special tokens up to this long are encoded once per encode()/count() call.
_FRAGMENT_MEMO_LONGEST = 256


def from_file(path: str | os.PathLike, *, plugin_manager: pluggy.PluginManager | None = None) -> Tokenizer:
    """Load a tokenizer from any vocabulary file a loader plugin reads (GGUF built in; e.g. a
    Hugging Face ``tokenizer.json`` with bpetok-hf); the pre-tokenizer is picked by its (model, pre).

    >>> tok = from_file("tests/data/ggml-vocab-qwen3.gguf.gz")
    >>> tok.encode("Hello world")
    [9707, 1879]
    """
    with gc_paused():  # hundreds of thousands of objects that all live on: nothing to collect
        vocab = load_vocabulary(path, plugin_manager=plugin_manager)
    tok = from_vocabulary(vocab, plugin_manager=plugin_manager)
    tok._source = os.path.abspath(path)  # what a pickle of it names (Tokenizer.__reduce__)
    return tok


def from_gguf(path: str | os.PathLike, *, plugin_manager: pluggy.PluginManager | None = None) -> Tokenizer:
    """:func:`from_file` under its first name: any file a loader plugin reads, GGUF or not."""
    return from_file(path, plugin_manager=plugin_manager)


def from_vocabulary(vocab: Vocabulary, *, plugin_manager: pluggy.PluginManager | None = None) -> Tokenizer:
    """A tokenizer for a vocabulary, with the model registered for its ``model`` (given, when it
    splits text first, the pre-tokenizer registered for its (model, pre))."""
    return Tokenizer(vocab, plugin_manager=plugin_manager)


class Tokenizer(Decoding):
    """Encode and decode exactly as llama.cpp does for one vocabulary.

    >>> tok = from_gguf("model.gguf")  # doctest: +SKIP
    >>> tok.decode(tok.encode("Hi <|im_end|>"))
    'Hi <|im_end|>'
    """

    def __init__(
        self,
        vocabulary: Vocabulary,
        spec: PreTokenizerSpec | None = None,
        *,
        plugin_manager: pluggy.PluginManager | None = None,
        cache_bytes: int | None = None,
    ):
        """``spec``: the pre-tokenizer the model splits text with (default: the one registered for
        the vocabulary's (model, pre), when its model spec is ``pretokenized``). The model is the
        one registered for ``vocabulary.model``; the attribute overrides run here if they have not
        yet. ``cache_bytes``: the byte budget of the model's caches together (default
        ``$BPETOK_CACHE_BYTES``, else :data:`bpetok.cache.DEFAULT_CACHE_BYTES`, 64 MiB; 0 turns
        caching off)."""
        self.cache_bytes = budget = cache_budget(cache_bytes)
        from bpetok.plugins import get_plugin_manager

        pm = plugin_manager or get_plugin_manager()
        self.model_spec = model_spec = prepare_vocabulary(vocabulary, pm)
        spec_given = spec
        if spec is None and model_spec.pretokenized:
            spec = find_pretokenizer(vocabulary, pm)
        self.vocabulary = vocabulary
        self.spec = spec
        # The tables are a few hundred thousand small objects that all live on: collecting
        # while building them is wasted time.
        with gc_paused():
            model = model_spec.factory(vocabulary, spec)
        if not isinstance(model, TokenizerModel):
            raise PluginError(
                f"plugin {model_spec.plugin!r}: the factory of model {model_spec.name!r} returned a "
                f"{type(model).__name__}, not a bpetok.models.TokenizerModel; subclass it and write "
                "encode_fragment and normal_piece (see docs/hooks.md)"
            )
        self.model: TokenizerModel = model
        model.use_cache_budget(budget)
        if spec is not None and not spec.bos_default and not any(
            role == "bos" and value < vocabulary.n_tokens for role, _, value in vocabulary.special_id_keys
        ):
            # llama.cpp has no default BOS id for this pre-tokenizer type (GLM-4), and the file
            # names none. The overrides ran before the type was known: drop their default here
            # (a new dict, so a vocabulary shared with another tokenizer keeps its own).
            vocabulary.special_ids = {**vocabulary.special_ids, "bos": None}

        # The model's defaults, else the pre-tokenizer's: the one given to the model, or the one a
        # whole-fragment model runs itself (whitespace, hybriddna: TokenizerModel.flags_pretokenizer).
        flags_spec = spec if spec is not None else model.flags_pretokenizer
        add_bos = model_spec.add_bos if model_spec.add_bos is not None else flags_spec is not None and flags_spec.add_bos
        clean_spaces = (
            model_spec.clean_spaces if model_spec.clean_spaces is not None
            else flags_spec is not None and flags_spec.clean_spaces
        )
        # A model may never add BOS or EOS whatever the file says (llama.cpp's rwkv adds neither).
        self.add_bos = vocabulary.flags.get("add_bos", bool(add_bos)) and model.may_add_bos
        self.add_eos = vocabulary.flags.get("add_eos", model_spec.add_eos) and model.may_add_eos
        self.add_sep = False
        if model_spec.adds_bos_sep:  # WordPiece: [CLS] text [SEP], whatever the file's keys say
            self.add_bos, self.add_eos, self.add_sep = True, False, True
        self.clean_spaces = bool(clean_spaces)
        self.add_space_prefix = vocabulary.flags.get("add_space_prefix", model_spec.add_space_prefix)
        self._build_special_table()
        check_byte_tokens(vocabulary)
        self._pieces: dict[int, bytes] = {}  # id -> rendered bytes: bounded by the vocabulary
        # What a pickle rebuilds this tokenizer from (__reduce__): the file from_file read, else
        # the vocabulary itself; and the pre-tokenizer spec, if one was given.
        self._source: str | None = None
        self._spec_given = spec_given

    @property
    def engine(self) -> str:
        """``"C kernel"`` or ``"pure Python"``: which engine this tokenizer's model runs."""
        return "C kernel" if self.model.compiled else "pure Python"

    @property
    def encodes_without_gil(self) -> bool:
        """Whether :meth:`encode_batch` runs without the GIL (the byte-level C kernel with its own
        splitter): then threads sharing this tokenizer scale with cores; else only processes do."""
        return self.model.releases_gil

    def cache_info(self) -> dict[str, dict[str, int]]:
        """Each of the model's caches: entries, bytes used (as :class:`bpetok.cache.IdCache`
        counts them) and budget."""
        return self.model.cache_info()

    # -- properties ------------------------------------------------------------------------------

    @property
    def n_tokens(self) -> int:
        return self.vocabulary.n_tokens

    @property
    def eog_ids(self) -> frozenset[int]:
        """llama.cpp's end-of-generation set."""
        return frozenset(self.vocabulary.eog_ids)

    @property
    def special_ids(self) -> dict[str, int | None]:
        return dict(self.vocabulary.special_ids)

    def token_type(self, token_id: int) -> TokenType:
        """The type stored in the file (the effective attributes are :meth:`token_attributes`)."""
        token_id = self._check_id(token_id)
        t = self.vocabulary.token_types[token_id]
        return TokenType(t) if t in TokenType._value2member_map_ else TokenType.UNDEFINED

    def token_attributes(self, token_id: int) -> TokenAttr:
        """llama.cpp's attributes after the load-time overrides (e.g. Qwen's ``</s>`` is NORMAL|CONTROL)."""
        token_id = self._check_id(token_id)
        return TokenAttr(self.vocabulary.attrs[token_id])

    def id(self, text: str | bytes) -> int | None:
        """The id of a token given its stored text (``"Ġthe"``, ``"<|im_end|>"``), or None."""
        if isinstance(text, str):
            key = text.encode("utf-8", "surrogatepass")
        elif isinstance(text, (bytes, bytearray, memoryview)):
            key = bytes(text)
        else:
            raise TypeError(f"id() takes a token's text (str or bytes), not {type(text).__name__}")
        return self.vocabulary.token_index().get(key)

    # -- special tokens ----------------------------------------------------------------------------

    def _build_special_table(self) -> None:
        # The table and its partition live in bpetok.specials; these names are what the rest reads.
        self._special_table = table = SpecialTable(self.vocabulary)
        # The model's one-call encoder of whole texts, specials cut by the table's C automata,
        # where it has one (TokenizerModel.text_encoder: it builds the automata, at load, only then).
        self._text_encoder = self.model.text_encoder(table.automata)
        self._special_finder = table.finders
        self._special_texts = table.texts  # what the kernel checks a batch of texts for (encode_texts(specials=...))

    def _partition(self, text: str, parse_special: bool, protected: list[tuple[int, int]] | None = None) -> list[str | int]:
        """Cut special tokens out of ``text`` as llama.cpp does: str fragments to pre-tokenize, ints
        already ids (:meth:`bpetok.specials.SpecialTable.partition`). ``protected``: spans of
        ``text`` no special token may overlap (a chat's message text, see bpetok.apps.chat)."""
        return self._special_table.partition(text, parse_special, protected)

    # -- encoding ------------------------------------------------------------------------------------

    def encode(self, text: str, *, parse_special: bool = True, add_special: bool = False) -> list[int]:
        """Token ids of ``text``, as llama.cpp's ``llama_tokenize(vocab, text, add_special, parse_special)``.

        ``parse_special``: CONTROL tokens written in the text (``<|im_end|>``) become their ids;
        USER_DEFINED ones (``<think>``) always do. ``add_special``: add BOS/EOS as the
        vocabulary's ``add_bos_token``/``add_eos_token`` say (``[CLS]``/``[SEP]`` for WordPiece).

        A lone surrogate (U+D800..U+DFFF) is encoded as its three UTF-8-style bytes, which is what
        llama.cpp does with those bytes.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, not {type(text).__name__}")
        if parse_special.__class__ is not bool:  # checked inline: this runs once per call
            parse_special = check_flag(parse_special, "encode(parse_special=...)")
        if add_special.__class__ is not bool:
            add_special = check_flag(add_special, "encode(add_special=...)")
        text_encoder = self._text_encoder
        if text_encoder is not None and not add_special and text:
            found = text_encoder(text, parse_special)  # a new list, or None: the way below
            if found is not None:
                return found
        ids: list[int] = []  # a new list: a model may return one it keeps
        if add_special and self.add_bos:
            ids.append(self._required_special("bos"))
        if text:
            ids += self._encode_partitioned(self._special_table.partition(text, parse_special))
        if add_special and self.add_eos:
            ids.append(self._required_special("eos"))
        if add_special and self.add_sep:
            ids.append(self._required_special("sep"))
        return ids

    def _encode_partitioned(self, fragments: list[str | int]) -> list[int]:
        """Ids of text cut by :meth:`_partition`: each fragment through the model."""
        first = fragments[0]
        if len(fragments) == 1 and first.__class__ is str:
            return self.model.encode_fragment(first, True)
        found = self.model.encode_parts(fragments)  # a model's loop over fragments in C, or None
        return found if found is not None else self._encode_parts(fragments, self.model.encode_fragment, memo=True)

    def encode_bytes(self, data: bytes, *, parse_special: bool = True, add_special: bool = False) -> list[int]:
        """Token ids of raw bytes, invalid UTF-8 included, as ``llama_tokenize`` gives them for those bytes.

        Valid UTF-8 gives ``encode(data.decode())``. Elsewhere llama.cpp's rule applies
        (``unicode_cpts_from_utf8``): special tokens are found in the raw bytes; then, in the text
        between them, a byte that does not start a sequence of the right number of continuation
        bytes is U+FFFD, one byte at a time (``e4 b8 61`` is U+FFFD U+FFFD "a"), and a well-formed
        sequence is decoded even when UTF-8 forbids it: overlongs (``c0 bc`` is "<"), encoded
        surrogates (``ed a0 80`` is U+D800). A sequence that decodes past U+10FFFF (``f4 90 80 80``)
        makes llama.cpp abort; here it raises :class:`~bpetok.errors.InputError` naming its offset.

        >>> tok.encode_bytes(b"a\\xffb") == tok.encode("a\\ufffdb")
        True
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"encode_bytes() takes bytes, not {type(data).__name__}; use encode() for a str")
        parse_special = check_flag(parse_special, "encode_bytes(parse_special=...)")
        add_special = check_flag(add_special, "encode_bytes(add_special=...)")
        data = bytes(data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:  # well-formed: llama.cpp decodes it as Python does
            return self.encode(text, parse_special=parse_special, add_special=add_special)
        ids: list[int] = []
        if add_special and self.add_bos:
            ids.append(self._required_special("bos"))
        # subtle: specials are cut from the raw bytes, before decoding. surrogateescape keeps each
        # invalid byte as its own U+DC80..U+DCFF, so a special (well-formed UTF-8) matches in the
        # escaped text exactly where it matches in the bytes; an overlong "<" does not join one.
        fragments = self._partition(data.decode("utf-8", "surrogateescape"), parse_special)
        raw = [f if f.__class__ is int else f.encode("utf-8", "surrogateescape") for f in fragments]  # type: ignore[union-attr]
        try:
            ids += self._encode_parts(raw, self.model.encode_fragment_bytes)
        except BeyondUnicode:
            raise _beyond_unicode_error(data) from None
        if add_special and self.add_eos:
            ids.append(self._required_special("eos"))
        if add_special and self.add_sep:
            ids.append(self._required_special("sep"))
        return ids

    def count(self, text: str, *, parse_special: bool = True) -> int:
        """``len(self.encode(text, parse_special=parse_special))``, without building the list where
        the model can count from its caches (byte-level BPE, once a text's words are cached).

        >>> tok.count("Hello world") == len(tok.encode("Hello world"))
        True
        """
        if not isinstance(text, str):
            raise TypeError(f"count() takes a str, not {type(text).__name__}")
        parse_special = check_flag(parse_special, "count(parse_special=...)")
        total = 0
        count_fragment = self.model.count_fragment
        keep_specials = self.model.emits_special_tokens
        seen: dict[str, int] = {}  # as in encode: each distinct short fragment counted once per call
        at_start = True
        for fragment in self._partition(text, parse_special) if text else ():
            if fragment.__class__ is int:
                total += keep_specials
                at_start = True
                continue
            n = seen.get(fragment) if at_start else None  # type: ignore[arg-type]  # a str
            if n is None:
                n = count_fragment(fragment, at_start)  # type: ignore[arg-type]
                if at_start and len(fragment) <= _FRAGMENT_MEMO_LONGEST:  # type: ignore[arg-type]
                    seen[fragment] = n  # type: ignore[index]
            total += n
            at_start = False
        return total

    def encode_batch(
        self, texts: Iterable[str], *, parse_special: bool = True, workers: SupportsIndex | None = None
    ) -> list[list[int]]:
        """``[self.encode(t, parse_special=parse_special) for t in texts]``, in order, on several cores.

        ``workers``: threads to use (default: the CPUs this process may run on). With the C
        kernel's splitter (the qwen2, llama3 and smollm pre-tokenizers) they are the kernel's own,
        sharing this tokenizer's caches: the whole batch, special tokens looked for included,
        runs without the GIL, in parts of about 256k code points that the threads take in turn
        (:attr:`encodes_without_gil`). Every other engine (pure Python, a pre-tokenizer without a
        compiled form, SentencePiece-style models) holds the GIL for most of its work, so threads
        would not help: the texts are encoded here, one after the other, whatever ``workers``
        says (``bpetok encode-dataset --workers`` spreads a dataset over processes). A small batch
        (one part) runs in this thread alone.
        With the kernel's splitter the lists are not tracked by Python's cycle collector (a
        list of ints cannot be in a reference cycle; scanning a batch's millions of ids was a
        third of its time): one you make part of a cycle yourself is not collected.

        >>> tok.encode_batch(["Hello", "world"]) == [tok.encode("Hello"), tok.encode("world")]
        True
        """
        texts, parse_special, workers = batch_arguments("encode_batch", texts, parse_special, workers)
        # The result lists all live on: a collection while they are built would only rescan them.
        with gc_paused():
            lists, held = self.model.encode_texts(texts, self._special_texts[parse_special], workers)
            for i, ids in zip(held, self._encode_holding_specials([texts[i] for i in held], parse_special, workers)):
                lists[i] = ids
        return lists

    def encode_batch_to_numpy(
        self, texts: Iterable[str], *, parse_special: bool = True, workers: SupportsIndex | None = None
    ) -> tuple[Any, Any]:
        """:meth:`encode_batch` as two numpy arrays: every text's ids one after the other
        (``uint32``), and ``offsets`` (``int64``, one more than there are texts): text ``i``'s ids
        are ``ids[offsets[i]:offsets[i + 1]]``. With the kernel's splitter no int object is made
        for an id, so this is the quick way to a dataset's tokens (``bpetok encode-dataset`` uses it).
        ``workers`` as for :meth:`encode_batch`.

        >>> ids, offsets = tok.encode_batch_to_numpy(["Hello", "world"])
        >>> [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == tok.encode_batch(["Hello", "world"])
        True
        """
        import numpy as np

        texts, parse_special, workers = batch_arguments("encode_batch_to_numpy", texts, parse_special, workers)
        ids, counts, held = self.model.encode_texts_to_numpy(texts, self._special_texts[parse_special], workers)
        if held:  # a held text has no ids yet: its end is where its ids go
            ends = np.cumsum(counts)
            parts, start = [], 0
            for i, text_ids in zip(held, self._encode_holding_specials([texts[i] for i in held], parse_special, workers)):
                parts += [ids[start : ends[i]], np.array(text_ids, dtype=np.uint32)]
                start = ends[i]
                counts[i] = len(text_ids)
            parts.append(ids[start:])
            ids = np.concatenate(parts)
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return ids, offsets

    def _encode_holding_specials(self, texts: list[str], parse_special: bool, workers: int) -> list[list[int]]:
        """The ids of texts that hold special tokens: each cut at them (:meth:`_partition`), the
        text between them all encoded by the model in one call (:meth:`TokenizerModel.encode_fragments`)."""
        if not texts:
            return []
        parts = [self._partition(t, parse_special) for t in texts]
        between = [f for p in parts for f in p if f.__class__ is str]
        encoded = iter(self.model.encode_fragments(between, workers=workers))
        next_encoded = lambda _fragment, _at_start: next(encoded)  # noqa: E731 - in the order they were sent
        return [self._encode_parts(p, next_encoded) for p in parts]

    def _encode_parts(self, fragments: list, encode_fragment, memo: bool = False) -> list[int]:
        """Ids of partitioned text: ids as they are (unless the model drops them:
        ``TokenizerModel.emits_special_tokens``), each fragment through ``encode_fragment``,
        told whether it starts the text or follows a special token (where SentencePiece-style
        models add their space prefix). ``memo``: text between specials repeats (a chat's "\\n",
        "user\\n"): encode each distinct short fragment once per call."""
        ids: list[int] = []
        seen: dict[Any, list[int]] = {}
        keep_specials = self.model.emits_special_tokens
        after_special = self.model.start_after_special
        at_start = True
        for fragment in fragments:
            if fragment.__class__ is int:
                if keep_specials:
                    ids.append(fragment)
                at_start = after_special
                continue
            found = seen.get(fragment) if memo and at_start else None
            if found is None:
                found = encode_fragment(fragment, at_start)
                if memo and at_start and len(fragment) <= _FRAGMENT_MEMO_LONGEST:
                    seen[fragment] = found
            ids += found
            at_start = False
        return ids

    def encode_reference(self, text: str, *, parse_special: bool = True) -> list[int]:
        """:meth:`encode` the plain way: no caches, no chunks, the model's reference merge loop (for tests)."""
        parse_special = check_flag(parse_special, "encode_reference(parse_special=...)")
        return self._encode_parts(self._partition(text, parse_special) if text else [], self.model.encode_fragment_reference)

    def _required_special(self, role: str) -> int:
        token_id = self.vocabulary.special_ids.get(role)
        if token_id is None:
            raise BpetokError(
                f"{self.vocabulary.path}: add_special needs a {role} token but the vocabulary has none; "
                f"pass add_special=False or set tokenizer.ggml.{role}_token_id"
            )
        return token_id

    # -- chat ----------------------------------------------------------------------------------------

    def apply_chat_template(
        self, messages, *, add_generation_prompt: bool = False, tools=None, template: str | None = None,
        tokenize: bool = False, **kwargs,
    ):
        r"""The prompt the model's chat template makes of ``messages`` (or its ids with ``tokenize``),
        as transformers renders it; see :func:`bpetok.apps.chat.apply_chat_template`.

        >>> tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)  # doctest: +SKIP
        '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
        """
        from bpetok.apps.chat import apply_chat_template

        return apply_chat_template(
            self, messages, add_generation_prompt=add_generation_prompt, tools=tools, template=template,
            tokenize=tokenize, **kwargs,
        )

    # -- pickling ------------------------------------------------------------------------------

    def __reduce__(self):
        """Pickle the recipe, not the tables: the file's absolute path (or, for a tokenizer built
        from an in-memory vocabulary, the vocabulary), the spec if one was given, the cache budget
        and the flags. Unpickling loads the file again, through the process-wide plugin manager;
        caches and the C kernel start empty. So a pickle is small and the same for the same
        tokenizer however much it has encoded (``datasets.map`` fingerprints stay stable)."""
        source: str | Vocabulary
        if self._source is not None:
            source = self._source
        else:  # a copy without the token index (rebuilt on first use), the vocabulary's own cache
            source = dataclasses.replace(self.vocabulary, attributes_adjusted=self.vocabulary.attributes_adjusted)
        flags = {
            "add_bos": self.add_bos, "add_eos": self.add_eos, "add_sep": self.add_sep, "clean_spaces": self.clean_spaces,
            "add_space_prefix": self.add_space_prefix,
        }
        return _unpickle_tokenizer, (source, self._spec_given, self.cache_bytes, flags)

    # -- offsets (bpetok.offsets) -------------------------------------------------------------------

    def encode_with_offsets(self, text: str, *, parse_special: bool = True, add_special: bool = False):
        """:meth:`encode` with each token's character and byte span: see :mod:`bpetok.offsets`."""
        from bpetok.offsets import encode_with_offsets

        return encode_with_offsets(self, text, parse_special=parse_special, add_special=add_special)

    def encode_batch_with_offsets(self, texts: Iterable[str], *, parse_special: bool = True, workers: int | None = None):
        """:meth:`encode_batch` with every text's spans: see :mod:`bpetok.offsets`."""
        from bpetok.offsets import encode_batch_with_offsets

        return encode_batch_with_offsets(self, texts, parse_special=parse_special, workers=workers)

    def __repr__(self) -> str:
        return f"<Tokenizer {self.vocabulary.path!r} model={self.vocabulary.model} pre={self.vocabulary.pre} n_tokens={self.n_tokens}>"


def _unpickle_tokenizer(source: str | Vocabulary, spec, cache_bytes: int, flags: dict[str, bool]) -> Tokenizer:
    """A :class:`Tokenizer` rebuilt from what :meth:`Tokenizer.__reduce__` kept: ``source`` a
    file's path or a vocabulary, ``flags`` the settings a caller may have changed after loading."""
    with gc_paused():
        vocab = load_vocabulary(source) if isinstance(source, str) else source
    tok = Tokenizer(vocab, spec, cache_bytes=cache_bytes)
    if isinstance(source, str):
        tok._source = source
    tok.add_bos, tok.add_eos, tok.add_sep = flags["add_bos"], flags["add_eos"], flags["add_sep"]
    tok.clean_spaces, tok.add_space_prefix = flags["clean_spaces"], flags["add_space_prefix"]
    return tok


def _beyond_unicode_error(data: bytes) -> InputError:
    """The error for bytes with a sequence past U+10FFFF, naming the first one's offset.

    Decoding the whole input finds the same sequence the fragments hit: such a sequence (a lead
    byte and three continuation bytes) can neither hold nor straddle a special token's text.
    """
    try:
        data.decode("utf-8", LLAMA_UTF8_ERRORS)
    except BeyondUnicode as e:
        return InputError(
            f"bytes {data[e.start:e.start + 4].hex(' ')} at offset {e.start} decode to U+{e.cpt:X}, past U+10FFFF; "
            "llama.cpp aborts on such input, so it has no token ids: remove or replace these bytes"
        )
    raise AssertionError("no sequence past U+10FFFF")  # unreachable: the caller's decode found one
