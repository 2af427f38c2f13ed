"""The tokenizer: llama.cpp's ``llama_tokenize`` and ``token_to_piece`` over a loaded vocabulary.

Data flows one way: a vocabulary is loaded and its attributes adjusted (plugins), then for each
call special tokens are cut out of the text (longest first) and each remaining fragment goes to
the tokenizer model registered for ``tokenizer.ggml.model`` (a plugin): split first by the
pre-tokenizer registered for ``tokenizer.ggml.pre`` when the model asks for it (byte-level BPE),
whole otherwise (SentencePiece-style). Nothing here knows about a particular model.
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import operator
import os
import re
import stat
from collections.abc import Iterable, Iterator
from typing import Any, SupportsIndex
from itertools import chain, compress, islice, repeat

import pluggy

from bpetok._args import as_int, check_flag, check_not_text
from bpetok.cache import IdCache, as_ids, cache_budget
from bpetok.errors import BpetokError, InputError, UnsupportedVocabularyError, VocabularyError
from bpetok.models import ModelSpec
from bpetok.pretok import PreTokenizerSpec
from bpetok.specials import SpecialTable
from bpetok.vocab import TokenAttr, TokenType, Vocabulary

__all__ = ["Tokenizer", "load_vocabulary", "from_file", "from_gguf", "from_vocabulary"]

_SPECIAL = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN
_HIDDEN_WITHOUT_SPECIAL = TokenAttr.CONTROL | TokenAttr.UNKNOWN
# Caches: pieces (text -> ids), space chunks (" word," -> ids) and text heads, each with a share
# of the tokenizer's byte budget (bpetok.cache); past it a cache stops growing. A piece longer
# than _PIECE_CACHE_LONGEST is never cached.
_PIECE_CACHE_LONGEST = 1024
_CACHE_SHARES = {"pieces": 0.25, "chunks": 0.5, "heads": 0.25}
# After a chunk cache miss, this many parts are looked up one at a time before trying C again.
_MISS_RUN = 63
# A text of more chunks than this, many of them new, has its new chunks encoded in one batch.
_BATCH_FILL_PARTS = 2048
# The spaces a ``space_chunks`` pre-tokenizer lets us cut at: those after a non-whitespace
# character. The literal space comes first so the engine can scan for it (2x faster than "(?<=\S) ").
_SAFE_SPACE = re.compile(r" (?<=\S )")
# Fragments between special tokens up to this long are encoded once per encode()/count() call.
_FRAGMENT_MEMO_LONGEST = 256


@contextlib.contextmanager
def _gc_paused():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_vocabulary(path: str | os.PathLike, *, plugin_manager: pluggy.PluginManager | None = None) -> Vocabulary:
    """Load a vocabulary file through the loader plugins and apply the attribute overrides."""
    from bpetok.plugins import get_plugin_manager

    pm = plugin_manager or get_plugin_manager()
    path = os.fspath(path)
    is_dir = os.path.isdir(path)  # a loader plugin may read a folder (bpetok-hf: a Hugging Face model's)
    if not is_dir:
        _check_regular_file(path)
    vocab = pm.hook.bpetok_load_vocabulary(path=path)
    if vocab is None and is_dir:
        _check_regular_file(path)  # no loader reads this folder: refused as a directory
    if vocab is None:
        raise BpetokError(
            f"{path}: no installed vocabulary loader recognises this file; bpetok reads GGUF files "
            "(a loader plugin can add other formats)"
        )
    _prepare(vocab, pm)
    return vocab


def _check_regular_file(path: str) -> None:
    """Refuse a path that is not a regular file, saying what it is (a FIFO would block the reader)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file; pass the path of a GGUF model or vocabulary file") from None
    if stat.S_ISREG(mode):
        return
    kind = (
        "a directory" if stat.S_ISDIR(mode)
        else "a named pipe (FIFO)" if stat.S_ISFIFO(mode)
        else "a character device" if stat.S_ISCHR(mode)
        else "a block device" if stat.S_ISBLK(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "not a regular file"
    )
    why = "" if stat.S_ISDIR(mode) else " (a vocabulary is read with random access: it cannot be streamed in)"
    raise BpetokError(f"{path}: is {kind}, not a file; pass the path of a GGUF model or vocabulary file{why}")


def _prepare(vocab: Vocabulary, pm: pluggy.PluginManager) -> ModelSpec:
    """The model spec for ``vocab``; the first time, also the model's defaults and the
    attribute-override hook, applied to the vocabulary in place.

    The one place the hook runs, once per vocabulary, whether it came from a file or was built
    in memory (the trainer's): llama.cpp's special ids start from the model's defaults, so the
    model is found first, and an unknown one is refused here, at load.
    """
    from bpetok.plugins import get_model_registry

    registry = get_model_registry(pm)
    row = registry.get(vocab.model)
    if row is None:
        raise UnsupportedVocabularyError(
            f"{vocab.path}: no installed tokenizer model handles tokenizer.ggml.model={vocab.model!r}. "
            f"Installed: {registry.describe()}. A plugin can provide it: install a package that registers "
            f"model {vocab.model!r} through the bpetok_register_models hook in the 'bpetok' entry-point "
            "group (see docs/hooks.md)"
        )
    spec = row.spec
    if not vocab.attributes_adjusted:
        if spec.pre is not None:
            vocab.pre = spec.pre  # llama.cpp's rule for this model, whatever the file says
        vocab.special_ids = dict(spec.special_ids)
        pm.hook.bpetok_adjust_token_attributes(vocabulary=vocab)
        vocab.attributes_adjusted = True
    return spec


def from_file(path: str | os.PathLike, *, plugin_manager: pluggy.PluginManager | None = None) -> Tokenizer:
    """Load a tokenizer from any vocabulary file a loader plugin reads (GGUF built in; e.g. a
    Hugging Face ``tokenizer.json`` with bpetok-hf); the pre-tokenizer is picked by its (model, pre).

    >>> tok = from_file("tests/data/ggml-vocab-qwen3.gguf.gz")
    >>> tok.encode("Hello world")
    [9707, 1879]
    """
    with _gc_paused():  # hundreds of thousands of objects that all live on: nothing to collect
        vocab = load_vocabulary(path, plugin_manager=plugin_manager)
    return from_vocabulary(vocab, plugin_manager=plugin_manager)


def from_gguf(path: str | os.PathLike, *, plugin_manager: pluggy.PluginManager | None = None) -> Tokenizer:
    """:func:`from_file` under its first name: any file a loader plugin reads, GGUF or not."""
    return from_file(path, plugin_manager=plugin_manager)


def from_vocabulary(vocab: Vocabulary, *, plugin_manager: pluggy.PluginManager | None = None) -> Tokenizer:
    """A tokenizer for a vocabulary, with the model registered for its ``model`` and (when the
    model splits text first) the pre-tokenizer registered for its (model, pre)."""
    return Tokenizer(vocab, plugin_manager=plugin_manager)


def _find_pretokenizer(vocab: Vocabulary, pm: pluggy.PluginManager) -> PreTokenizerSpec:
    from bpetok.plugins import get_registry

    registry = get_registry(pm)
    row = registry.get(vocab.model, vocab.pre)
    if row is None:
        installed = ", ".join(f"{pre} ({model})" for model, pre in registry.keys()) or "none"
        raise UnsupportedVocabularyError(
            f"{vocab.path}: no installed pre-tokenizer handles tokenizer.ggml.model={vocab.model!r}, "
            f"tokenizer.ggml.pre={vocab.pre!r}. Installed: {installed}. A plugin can provide it: install a "
            f"package that registers pre-tokenizer {vocab.pre!r} for model {vocab.model!r} through the "
            "'bpetok' entry-point group (see docs/plugins.md)"
        )
    return row.spec


class Tokenizer:
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
        """``spec``: the pre-tokenizer (default: the one registered for the vocabulary's
        (model, pre), when its model splits text first). The model is the one registered for
        ``vocabulary.model``; the attribute overrides run here if they have not yet.
        ``cache_bytes``: the byte budget of all caches together (default ``$BPETOK_CACHE_BYTES``,
        else :data:`bpetok.cache.DEFAULT_CACHE_BYTES`, 64 MiB; 0 turns caching off)."""
        self.cache_bytes = budget = cache_budget(cache_bytes)
        from bpetok.plugins import get_plugin_manager

        pm = plugin_manager or get_plugin_manager()
        self.model_spec = model_spec = _prepare(vocabulary, pm)
        if spec is None and model_spec.pretokenized:
            spec = _find_pretokenizer(vocabulary, pm)
        self.vocabulary = vocabulary
        self.spec = spec
        # Any: None for a model that takes whole fragments, and then never called.
        self.pretokenizer: Any
        if spec is None:
            self.pretokenizer = None
        else:
            self.pretokenizer = spec.for_vocabulary(vocabulary) if spec.for_vocabulary else spec.factory()
        # The tables are a few hundred thousand small objects that all live on: collecting
        # while building them is wasted time.
        with _gc_paused():
            self.model: Any = model_spec.factory(vocabulary, spec)
        # The pretokenized path below (caches, chunks, batches) calls the model as ``bpe``.
        self.bpe: Any = self.model
        # A model may take whole fragments though its spec splits first (gpt2 over raw UTF-8
        # escapes spaces before splitting): it says so with its own ``pretokenized``.
        self._pretokenized = (
            getattr(self.model, "pretokenized", model_spec.pretokenized) and self.pretokenizer is not None
        )
        if spec is not None and not spec.bos_default and not any(
            role == "bos" and value < vocabulary.n_tokens for role, _, value in vocabulary.special_id_keys
        ):
            # llama.cpp has no default BOS id for this pre-tokenizer type (GLM-4), and the file
            # names none. The overrides ran before the type was known: drop their default here
            # (a new dict, so a vocabulary shared with another tokenizer keeps its own).
            vocabulary.special_ids = {**vocabulary.special_ids, "bos": None}

        # A whole-fragment model that runs a pre-tokenizer itself (whitespace, hybriddna) names it.
        flags_spec = spec if spec is not None else getattr(self.model, "pretokenizer", None)

        def default(flag: str) -> bool:  # the model's default, else the pre-tokenizer's
            value = getattr(model_spec, flag)
            return bool(value if value is not None else getattr(flags_spec, flag, False))

        # A model may never add BOS or EOS whatever the file says (llama.cpp's rwkv adds neither).
        self.add_bos = vocabulary.flags.get("add_bos", default("add_bos")) and getattr(self.model, "may_add_bos", True)
        self.add_eos = vocabulary.flags.get("add_eos", model_spec.add_eos) and getattr(self.model, "may_add_eos", True)
        self.add_sep = False
        if model_spec.adds_bos_sep:
            self.add_bos, self.add_eos, self.add_sep = True, False, True
        self.clean_spaces = default("clean_spaces")
        self.add_space_prefix = vocabulary.flags.get("add_space_prefix", model_spec.add_space_prefix)
        self._build_special_table()
        self._check_byte_tokens()
        self._pieces: dict[int, bytes] = {}  # id -> rendered bytes: bounded by the vocabulary
        self._cache = IdCache(int(budget * _CACHE_SHARES["pieces"]))
        # The spec's fast-path promise (see bpetok.pretok.PreTokenizerSpec.space_chunks).
        self._space_chunks = spec is not None and spec.space_chunks
        self._chunks = IdCache(int(budget * _CACHE_SHARES["chunks"]))
        self._heads = IdCache(int(budget * _CACHE_SHARES["heads"]))
        # The compiled kernel (None: the pure-Python engine), with the pieces' share of the budget.
        # A whole-fragment model (SPM, gemma4) has none: it runs its own merge loop (``compiled``).
        make_kernel = getattr(self.bpe, "make_kernel", None) if self._pretokenized else None
        split = spec.kernel_split if spec is not None else ""
        self._kernel = make_kernel(self._cache.budget, self._chunks.budget, split=split) if make_kernel else None
        # The kernel, when it splits text itself (it has the splitter the spec declares: kernel_split).
        self._text_kernel: Any = self._kernel if self._kernel is not None and self._kernel.split else None
        if self._text_kernel is not None:  # it caches a text's head as pieces: no heads cache
            self._heads = IdCache(0)
        # A whole-fragment model that caches (gemma4's lines) gets the pieces' cache and its budget.
        use_cache = None if self._pretokenized else getattr(self.model, "use_cache", None)
        if use_cache is not None:
            use_cache(self._cache)

    @property
    def engine(self) -> str:
        """``"C kernel"`` or ``"pure Python"``: which BPE engine this tokenizer runs."""
        compiled = self._kernel is not None or getattr(self.model, "compiled", False)
        return "C kernel" if compiled else "pure Python"

    @property
    def encodes_without_gil(self) -> bool:
        """Whether :meth:`encode_batch` runs without the GIL (the C kernel with its own splitter):
        then threads sharing this tokenizer scale with cores; else only processes do."""
        return self._text_kernel is not None

    def cache_info(self) -> dict[str, dict[str, int]]:
        """Each cache's entries, bytes used (as :class:`bpetok.cache.IdCache` counts them) and budget."""
        info = {
            name: {"entries": len(cache), "bytes": cache.used, "budget": cache.budget}
            for name, cache in (("pieces", self._cache), ("chunks", self._chunks), ("heads", self._heads))
        }
        if self._kernel is not None:  # the kernel keeps the piece and chunk caches
            info.update(self._kernel.cache_info())
        return info

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
        self._specials = table.specials
        self._special_finder = table.finders
        self._special_texts = table.texts  # what the kernel checks a batch of texts for (encode_texts(specials=...))

    def _check_byte_tokens(self) -> None:
        """Refuse a BYTE token too short to name its byte, at load time as llama.cpp does.

        llama.cpp renders every token's piece while loading; ``token_to_byte`` on such a token
        throws there, so the file never loads. The test mirrors :meth:`_render`'s order: special
        and NORMAL attributes win over BYTE.
        """

        def rendered_as_byte(attr) -> bool:
            return bool(attr & TokenAttr.BYTE) and not attr & (_SPECIAL | TokenAttr.NORMAL)

        tokens = self.vocabulary.tokens
        for token_id in _ids_whose_attr(self.vocabulary.attrs, rendered_as_byte):
            if _token_to_byte(tokens[token_id]) is None:
                raise VocabularyError(
                    f"{self.vocabulary.path}: token {token_id} {tokens[token_id]!r} has type BYTE but is too short "
                    "to name a byte (<0xXX>); llama.cpp refuses to load it too: fix its type in "
                    "'tokenizer.ggml.token_type'"
                )

    def _partition(self, text: str, parse_special: bool, protected: list[tuple[int, int]] | None = None) -> list[str | int]:
        """Cut special tokens out of ``text`` as llama.cpp does: str fragments to pre-tokenize, ints
        already ids (:meth:`bpetok.specials.SpecialTable.partition`). ``protected``: spans of
        ``text`` no special token may overlap (a chat's message text, see bpetok.chat)."""
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
        parse_special = check_flag(parse_special, "encode(parse_special=...)")
        add_special = check_flag(add_special, "encode(add_special=...)")
        ids: list[int] = []
        if add_special and self.add_bos:
            ids.append(self._required_special("bos"))
        if text:
            ids += self._encode_partitioned(self._partition(text, parse_special))
        if add_special and self.add_eos:
            ids.append(self._required_special("eos"))
        if add_special and self.add_sep:
            ids.append(self._required_special("sep"))
        return ids

    def _encode_partitioned(self, fragments: list[str | int]) -> list[int]:
        """Ids of text cut by :meth:`_partition`."""
        if not self._pretokenized:
            return self._encode_fragments(fragments)
        first = fragments[0]
        if len(fragments) == 1 and isinstance(first, str):
            return self._encode_ordinary(first)
        # Text between specials repeats (a chat's "\n", "user\n"): encode each distinct
        # short fragment once per call.
        ids: list[int] = []
        seen: dict[str, list[int]] = {}
        for fragment in fragments:
            if isinstance(fragment, int):
                ids.append(fragment)
                continue
            found = seen.get(fragment)
            if found is None:
                found = self._encode_ordinary(fragment)
                if len(fragment) <= _FRAGMENT_MEMO_LONGEST:
                    seen[fragment] = found
            ids += found
        return ids

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
        if not self._pretokenized and hasattr(self.model, "encode_fragment_bytes"):
            # The model reads the fragments' raw bytes itself (llama.cpp's SentencePiece session does).
            raw = [f if isinstance(f, int) else f.encode("utf-8", "surrogateescape") for f in fragments]
            ids += self._encode_fragments(raw, self.model.encode_fragment_bytes)
            fragments = []
        elif not self._pretokenized:
            decoded = []
            for fragment in fragments:
                if not isinstance(fragment, int):
                    try:
                        fragment = fragment.encode("utf-8", "surrogateescape").decode("utf-8", _LLAMA_UTF8_ERRORS)
                    except _BeyondUnicode:
                        raise _beyond_unicode_error(data) from None
                decoded.append(fragment)
            ids += self._encode_fragments(decoded)
            fragments = []
        for fragment in fragments:
            if isinstance(fragment, int):
                ids.append(fragment)
                continue
            try:
                text = fragment.encode("utf-8", "surrogateescape").decode("utf-8", _LLAMA_UTF8_ERRORS)
            except _BeyondUnicode:
                raise _beyond_unicode_error(data) from None
            ids += self._encode_ordinary(text)
        if add_special and self.add_eos:
            ids.append(self._required_special("eos"))
        if add_special and self.add_sep:
            ids.append(self._required_special("sep"))
        return ids

    def count(self, text: str, *, parse_special: bool = True) -> int:
        """``len(self.encode(text, parse_special=parse_special))``, without building the list when
        the text's space chunks are all cached (the second time a text or its words are seen).

        >>> tok.count("Hello world") == len(tok.encode("Hello world"))
        True
        """
        if not isinstance(text, str):
            raise TypeError(f"count() takes a str, not {type(text).__name__}")
        parse_special = check_flag(parse_special, "count(parse_special=...)")
        if not self._pretokenized:
            return len(self.encode(text, parse_special=parse_special))
        total = 0
        seen: dict[str, int] = {}  # as in encode: each distinct short fragment counted once per call
        for fragment in self._partition(text, parse_special) if text else ():
            if isinstance(fragment, int):
                total += 1
                continue
            n = seen.get(fragment)
            if n is None:
                if self._space_chunks:
                    parts = _SAFE_SPACE.split(fragment)
                    try:
                        tail = sum(map(len, map(self._chunks.__getitem__, parts[1:])))
                    except KeyError:
                        pass
                    else:
                        n = tail + (len(self._encode_head(parts[0])) if parts[0] else 0)
                if n is None:
                    n = len(self._encode_ordinary(fragment))
                if len(fragment) <= _FRAGMENT_MEMO_LONGEST:
                    seen[fragment] = n
            total += n
        return total

    def encode_batch(
        self, texts: Iterable[str], *, parse_special: bool = True, workers: SupportsIndex | None = None
    ) -> list[list[int]]:
        """``[self.encode(t, parse_special=parse_special) for t in texts]``, in order, on several cores.

        ``workers``: threads to use (default: the CPUs this process may run on). With the C
        kernel's splitter (the qwen2, llama3 and smollm pre-tokenizers) they are the kernel's own,
        sharing this tokenizer's caches: the whole batch, special tokens looked for included,
        runs without the GIL, in parts of about 256k code points that the threads take in turn. Every other engine
        (pure Python, a pre-tokenizer without a compiled form, SentencePiece-style models) holds
        the GIL for most of its work, so threads would not help: the texts are encoded here, one
        after the other, whatever ``workers`` says (``bpetok encode-dataset --workers`` spreads a
        dataset over processes). A small batch (one part) runs in this thread alone.
        With the kernel's splitter the lists are not tracked by Python's cycle collector (a
        list of ints cannot be in a reference cycle; scanning a batch's millions of ids was a
        third of its time): one you make part of a cycle yourself is not collected.

        >>> tok.encode_batch(["Hello", "world"]) == [tok.encode("Hello"), tok.encode("world")]
        True
        """
        texts, parse_special, workers = self._batch_arguments("encode_batch", texts, parse_special, workers)
        # The result lists all live on: a collection while they are built would only rescan them.
        with _gc_paused():
            return self._encode_many(texts, parse_special, workers)

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

        texts, parse_special, workers = self._batch_arguments("encode_batch_to_numpy", texts, parse_special, workers)
        ids, counts = self._encode_many_to_numpy(texts, parse_special, workers)
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return ids, offsets

    def _batch_arguments(self, name: str, texts, parse_special, workers) -> tuple[list[str], bool, int]:
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

    def _encode_many_to_numpy(self, texts: list[str], parse_special: bool, workers: int = 1) -> tuple[Any, Any]:
        """The ids of ``texts`` one after the other (``uint32``) and each text's count (``int64``):
        from the kernel as machine words, the texts that hold a special token spliced in from
        :meth:`_encode_holding_specials`; without the kernel's splitter, :meth:`_encode_many`'s
        lists converted (its readable twin)."""
        import numpy as np

        if self._text_kernel is None:
            docs = self._encode_many(texts, parse_special)
            counts = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
            return np.fromiter(chain.from_iterable(docs), dtype=np.uint32, count=int(counts.sum())), counts
        flat, flat_counts, held = self._text_kernel.encode_texts_flat(texts, self._special_texts[parse_special], workers)
        ids, counts = np.frombuffer(flat, np.uint32), np.frombuffer(flat_counts, np.uint64).astype(np.int64)
        if not held:
            return ids, counts
        ends = np.cumsum(counts)  # a held text has no ids yet: its end is where its ids go
        parts, start = [], 0
        for i, text_ids in zip(held, self._encode_holding_specials([texts[i] for i in held], parse_special, workers)):
            parts += [ids[start : ends[i]], np.array(text_ids, dtype=np.uint32)]
            start = ends[i]
            counts[i] = len(text_ids)
        parts.append(ids[start:])
        return np.concatenate(parts), counts

    def _encode_many(self, texts: list[str], parse_special: bool, workers: int = 1) -> list[list[int]]:
        """``[self.encode(t, parse_special=parse_special) for t in texts]``. With the kernel's
        splitter, all of them go to C in one call, which looks for special tokens and encodes on
        ``workers`` threads without the GIL; those that hold one come back to
        :meth:`_encode_holding_specials`. Else the new chunks of all of them are encoded first,
        in one batch."""
        if self._text_kernel is not None:
            lists, held = self._text_kernel.encode_texts(texts, self._special_texts[parse_special], workers)
            for i, ids in zip(held, self._encode_holding_specials([texts[i] for i in held], parse_special, workers)):
                lists[i] = ids
            return lists
        if self._space_chunks and len(texts) > 1 and self._kernel is None:
            split = _SAFE_SPACE.split
            missing = self._missing_chunks(chain.from_iterable(split(t)[1:-1] for t in texts))
            if len(missing) > _BATCH_FILL_PARTS // 8:
                with _gc_paused():
                    self._fill_chunks(missing)
        return [self.encode(t, parse_special=parse_special) for t in texts]

    def _encode_holding_specials(self, texts: list[str], parse_special: bool, workers: int) -> list[list[int]]:
        """The ids of texts that hold special tokens: each cut at them (:meth:`_partition`), the
        text between them all encoded by the kernel in one call."""
        parts = [self._partition(t, parse_special) for t in texts]
        between = [f for p in parts for f in p if f.__class__ is str]
        encoded = iter(self._text_kernel.encode_texts(between, None, workers)[0])
        next_encoded = lambda _fragment, _at_start: next(encoded)  # noqa: E731 - in the order they were sent
        return [self._encode_fragments(p, next_encoded) for p in parts]

    def _encode_fragments(self, fragments: list, encode_fragment=None) -> list[int]:
        """Ids of partitioned text for a model that takes whole fragments: each fragment is told
        whether it starts the text or follows a special token (where SentencePiece-style models
        add their space prefix). ``encode_fragment``: the model's method to call (default
        ``encode_fragment``; :meth:`encode_bytes` passes raw bytes to ``encode_fragment_bytes``)."""
        ids: list[int] = []
        encode_fragment = encode_fragment or self.model.encode_fragment
        # llama.cpp's plamo2 drops the special tokens it finds in the text.
        keep_specials = getattr(self.model, "emits_special_tokens", True)
        # A model may count only the text's start as a start (HF's Metaspace "first", bpetok-hf).
        after_special = getattr(self.model, "start_after_special", True)
        at_start = True
        for fragment in fragments:
            if isinstance(fragment, int):
                if keep_specials:
                    ids.append(fragment)
                at_start = after_special
            else:
                ids += encode_fragment(fragment, at_start)
                at_start = False
        return ids

    def _encode_ordinary(self, text: str) -> list[int]:
        """Ids of text without special tokens: space chunks when the pre-tokenizer allows them."""
        if self._text_kernel is not None:  # all of it in C: chunks, cache lookups, splitting, BPE
            return self._text_kernel.encode_text(text)
        if self._space_chunks:
            return self._encode_chunked(text)
        return self._encode_pieces(text)

    def _encode_chunked(self, text: str) -> list[int]:
        r"""Encode ``text`` one space chunk at a time, each chunk's ids cached by its text.

        A pre-tokenizer with ``space_chunks`` promises that a space preceded by a character that
        is not whitespace always starts a new piece, and that pieces after it do not depend on
        text before it. Cut at those spaces, the text is a head and chunks such as ``" word,"``
        or ``" x\n    return"`` whose ids never depend on their neighbours: most of a text is
        then dictionary lookups, done in C until one misses.

        >>> _SAFE_SPACE.split("Hi there,  you\n  all")
        ['Hi', 'there,', ' you\n  all']
        """
        parts = _SAFE_SPACE.split(text)
        out = self._encode_head(parts[0]) if parts[0] else []
        if self._kernel is not None:  # the same, in C: lookups, then the new chunks together
            out += self._kernel.encode_chunks(parts, 1, self.pretokenizer.split)
            return out
        chunks = self._chunks
        lookup = chunks.__getitem__
        rest = iter(parts)
        next(rest)
        filled = False
        while True:
            try:  # every chunk cached (a warm pass): the lookups all run in C
                out.extend(chain.from_iterable(map(lookup, rest)))
                return out
            except KeyError as miss:
                # subtle: extend() keeps what it added before the miss, and `rest` has moved
                # past the missing part, which the error carries.
                part = miss.args[0]
            left = operator.length_hint(rest)
            if not filled and left >= _BATCH_FILL_PARTS:
                filled = True  # once: the fill takes every new chunk it has room for
                missing = self._missing_chunks(parts[len(parts) - left - 1 : -1])
                if len(missing) > _BATCH_FILL_PARTS // 8:
                    with _gc_paused():  # many new lists that all live on
                        self._fill_chunks(missing)
            # The missing part and the next few one at a time: new chunks come in runs (and all
            # of them do once the cache is full), one KeyError per part would cost more.
            for part in chain((part,), islice(rest, _MISS_RUN)):
                found = chunks.get(part)
                if found is None:
                    found = self._encode_pieces(" " + part)
                    if not chunks.full:
                        chunks.put(part, as_ids(found))
                out += found

    def _missing_chunks(self, parts) -> list[str]:
        """The distinct ``parts`` the chunk cache lacks, in order of first appearance (the cache's
        objects are then laid out in text order, which a warm pass reads faster)."""
        unique = list(dict.fromkeys(parts))
        return list(compress(unique, map(operator.not_, map(self._chunks.__contains__, unique))))

    def _fill_chunks(self, missing: list[str]) -> None:
        """Encode many chunks the cache lacks together: one pre-tokenizer call over all of them,
        their new pieces through one batched BPE (:meth:`BytePairModel.encode_pieces`), then
        each chunk's ids cached.

        The first pass over a large text spends most of its time here, on words seen once.
        ``missing`` are inner parts of a :data:`_SAFE_SPACE` split (not a text's last part), so
        each ends in a character that is not whitespace: joined back to back, they are
        pre-tokenized as they would be in their texts.
        """
        import numpy as np  # here, not at import: a short text never needs it (load time counts)

        split, cache, chunks, kernel = self.pretokenizer.split, self._cache, self._chunks, self._kernel
        # Room for about this many chunks (at least 100 bytes each) before the budget is spent.
        room = (chunks.budget - chunks.used) // 100
        missing = missing[: max(room, 0)]
        if not missing:
            return
        pieces = split(" " + " ".join(missing))
        if kernel is not None:
            stops = np.searchsorted(
                np.cumsum(np.fromiter(map(len, pieces), np.int64, len(pieces))),
                np.cumsum(np.fromiter(map(len, missing), np.int64, len(missing)) + 1),
                "right",
            ).tolist()
            chunks.put_many(missing, kernel.encode_groups(pieces, stops))
            return
        unique = list(dict.fromkeys(pieces))
        known = list(map(cache.get, unique))
        new = list(compress(unique, map(operator.is_, known, repeat(None))))  # not cached ([] is: all bytes dropped)
        encoded = dict(zip(new, self.bpe.encode_pieces([p.encode("utf-8", "surrogatepass") for p in new])))
        ids_of: dict[str, list[int]] = dict(zip(unique, known))  # type: ignore[arg-type]  # None: in encoded
        ids_of.update(encoded)
        # Cut the pieces back into chunks (a piece never crosses a chunk boundary: that is the
        # space_chunks promise): chunk k ends at character offset sum(len(" " + part)) of the
        # parts up to it, which is the end of a piece; searchsorted finds which. No Python loop.
        piece_ends = np.cumsum(np.fromiter(map(len, pieces), np.int64, len(pieces)))
        chunk_ends = np.cumsum(np.fromiter(map(len, missing), np.int64, len(missing)) + 1)
        stops = np.searchsorted(piece_ends, chunk_ends, "right").tolist()
        starts = [0]
        starts += stops[:-1]
        piece_ids = list(map(ids_of.__getitem__, pieces))
        chunks.put_many(missing, map(as_ids, map(chain.from_iterable, map(piece_ids.__getitem__, map(slice, starts, stops)))))
        cache.put_many(
            (piece for piece in encoded if len(piece) <= _PIECE_CACHE_LONGEST),
            (as_ids(found) for piece, found in encoded.items() if len(piece) <= _PIECE_CACHE_LONGEST),
        )

    def _encode_head(self, head: str) -> list[int]:
        """The ids of a text's first chunk (no leading space), cached like the others."""
        found = self._heads.get(head)
        if found is None:
            found = self._encode_pieces(head)
            if not self._heads.full:
                self._heads.put(head, as_ids(found))
            return found
        return found.tolist()

    def _encode_pieces(self, text: str) -> list[int]:
        """Pre-tokenize ``text`` and BPE each piece, with a cache keyed by piece text."""
        if self._kernel is not None:
            return self._kernel.encode(self.pretokenizer.split(text))
        ids: list[int] = []
        cache, encode_piece = self._cache, self.bpe.encode_piece
        for piece in self.pretokenizer.split(text):
            found = cache.get(piece)
            if found is None:
                found = encode_piece(piece.encode("utf-8", "surrogatepass"))
                if len(piece) <= _PIECE_CACHE_LONGEST and not cache.full:
                    cache.put(piece, as_ids(found))
            ids += found
        return ids

    def encode_reference(self, text: str, *, parse_special: bool = True) -> list[int]:
        """:meth:`encode` the plain way: no caches, no chunks, the reference BPE (for tests)."""
        parse_special = check_flag(parse_special, "encode_reference(parse_special=...)")
        if not self._pretokenized:  # the model's plain twin, where it has one
            encode = getattr(self.model, "encode_fragment_reference", self.model.encode_fragment)
            return self._encode_fragments(self._partition(text, parse_special) if text else [], encode)
        ids: list[int] = []
        for fragment in self._partition(text, parse_special) if text else ():
            if isinstance(fragment, int):
                ids.append(fragment)
            else:
                for piece in self.pretokenizer.split(fragment):
                    ids += self.bpe.encode_piece_reference(piece.encode("utf-8", "surrogatepass"))
        return ids

    def _required_special(self, role: str) -> int:
        token_id = self.vocabulary.special_ids.get(role)
        if token_id is None:
            raise BpetokError(
                f"{self.vocabulary.path}: add_special needs a {role} token but the vocabulary has none; "
                f"pass add_special=False or set tokenizer.ggml.{role}_token_id"
            )
        return token_id

    # -- decoding ----------------------------------------------------------------------------------

    def _check_id(self, token_id: SupportsIndex) -> int:
        """``token_id`` as an int in range; TypeError for a non-integer (or bool), BpetokError out of range."""
        token_id = as_int(token_id, "a token id")
        if not 0 <= token_id < self.n_tokens:
            raise BpetokError(f"token id {token_id!r} is out of range: this vocabulary has ids 0..{self.n_tokens - 1}")
        return token_id

    def piece(self, token_id: SupportsIndex) -> bytes:
        """llama.cpp's ``token_to_piece(id, special=True)``: control tokens render as their text.

        ``token_id`` is anything :func:`operator.index` accepts (``int``, ``numpy.int64``), not a bool.
        """
        key = token_id if token_id.__class__ is int else as_int(token_id, "a token id")
        piece = self._pieces.get(key)
        if piece is None:
            key = self._check_id(key)
            piece = self._pieces[key] = self._render(key)
        return piece

    def token_bytes(self, token_id: SupportsIndex) -> bytes:
        """llama.cpp's ``token_to_piece(id, special=False)``: control and unknown tokens give ``b""``."""
        token_id = self._check_id(token_id)
        if self.vocabulary.attrs[token_id] & _HIDDEN_WITHOUT_SPECIAL:
            return b""
        return self.piece(token_id)

    def _render(self, token_id: int) -> bytes:
        attr = self.vocabulary.attrs[token_id]
        text = self.vocabulary.tokens[token_id]
        render_piece = getattr(self.model, "render_piece", None)
        if render_piece is not None:  # a model whose pieces follow rules of their own (rwkv, plamo2)
            return render_piece(token_id, text, attr)
        if attr & _SPECIAL:
            return text  # raw text, no byte decoding
        if attr & TokenAttr.NORMAL:
            return self.model.normal_piece(text)
        if attr & TokenAttr.BYTE:
            return bytes((_token_to_byte(text) or 0,))  # never None: length checked at load (_check_byte_tokens)
        return b""

    def decode_bytes(self, ids: Iterable[SupportsIndex], *, skip_special: bool = False) -> bytes:
        """The bytes of ``ids`` as llama.cpp's detokenizer gives them: specials rendered, or with
        ``skip_special`` control and unknown tokens left out (``token_to_piece(special=False)``).

        ``ids``: an iterable of token ids (ints, numpy integers, a numpy array); a str or bytes is
        refused rather than read as character codes.
        """
        check_not_text(ids, "decode()", "a sequence of token ids")
        try:
            ids = iter(ids)
        except TypeError:
            raise TypeError(f"decode() takes a sequence of token ids, not {type(ids).__name__}") from None
        skip_special = check_flag(skip_special, "decode(skip_special=...)")
        piece = self.token_bytes if skip_special else self.piece
        pieces = [piece(i) for i in ids]
        data = b"".join(pieces)
        # llama.cpp drops one leading space of the first piece where the model adds a space
        # prefix (even after a BOS, which it keeps: its remove_special is false here).
        if self.add_space_prefix and pieces and pieces[0][:1] == b" ":
            data = data[1:]
        if self.clean_spaces:
            data = _clean_spaces(data)
        return data

    def decode(self, ids: Iterable[SupportsIndex], *, skip_special: bool = False) -> str:
        """The text of ``ids``: :meth:`decode_bytes`, decoded as UTF-8 with replacement characters."""
        return self.decode_bytes(ids, skip_special=skip_special).decode("utf-8", "replace")

    def decode_stream(self, *, skip_special: bool = False):
        """A :class:`~bpetok.decode_stream.DecodeStream`: ids in one at a time, complete text out."""
        from bpetok.decode_stream import DecodeStream

        return DecodeStream(self, skip_special=skip_special)

    # -- chat ----------------------------------------------------------------------------------------

    def apply_chat_template(
        self, messages, *, add_generation_prompt: bool = False, tools=None, template: str | None = None,
        tokenize: bool = False, **kwargs,
    ):
        r"""The prompt the model's chat template makes of ``messages`` (or its ids with ``tokenize``),
        as transformers renders it; see :func:`bpetok.chat.apply_chat_template`.

        >>> tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)  # doctest: +SKIP
        '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
        """
        from bpetok.chat import apply_chat_template

        return apply_chat_template(
            self, messages, add_generation_prompt=add_generation_prompt, tools=tools, template=template,
            tokenize=tokenize, **kwargs,
        )

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


def _ids_whose_attr(attrs: list[int], wanted) -> Iterator[int]:
    """The token ids whose attribute passes ``wanted(attr)``, in id order.

    Only the few distinct attribute values are tested; tokens are then picked by set
    membership in C: ``attr & flag`` on 151k TokenAttr members goes through enum.Flag.__and__ (~0.1 s).
    """
    values = {a for a in set(attrs) if wanted(a)}
    return compress(range(len(attrs)), map(values.__contains__, attrs))


_STRTOL16 = re.compile(rb"[ \t\n\v\f\r]*([+-]?)([0-9A-Fa-f]*)")


def _token_to_byte(text: bytes) -> int | None:
    """llama.cpp's token_to_byte: ``(char) strtol(text.substr(3, 2), NULL, 16)``; None where substr throws.

    >>> _token_to_byte(b"<0x41>"), _token_to_byte(b"<mask>"), _token_to_byte(b"<0x"), _token_to_byte(b"ab")
    (65, 0, 0, None)
    """
    if len(text) < 3:
        return None
    sign, digits = _STRTOL16.match(text[3:5]).groups()  # type: ignore[union-attr]  # the pattern matches ""
    value = int(digits or b"0", 16)
    return (-value if sign == b"-" else value) & 0xFF


def _llama_cpt_at(data: bytes, i: int) -> tuple[int, int]:
    """llama.cpp's ``unicode_cpt_from_utf8`` at ``data[i]``: (code point, bytes used).

    A lead byte followed by its continuation bytes is decoded, overlong, surrogate or past
    U+10FFFF alike; anything else is (U+FFFD, 1): the next byte is tried on its own.

    >>> _llama_cpt_at(b"\\xc0\\xbc", 0), _llama_cpt_at(b"\\xe4\\xb8a", 0), _llama_cpt_at(b"\\xf4\\x90\\x80\\x80", 0)
    ((60, 2), (65533, 1), (1114112, 4))
    """
    b = data[i]
    length = 1 if b < 0x80 else 2 if 0xC0 <= b < 0xE0 else 3 if 0xE0 <= b < 0xF0 else 4 if 0xF0 <= b < 0xF8 else 0
    if length == 1:
        return b, 1
    tail = data[i + 1 : i + length]
    if not length or len(tail) != length - 1 or not all(0x80 <= c < 0xC0 for c in tail):
        return 0xFFFD, 1
    cpt = b & (0x7F >> length)
    for c in tail:
        cpt = (cpt << 6) | (c & 0x3F)
    return cpt, length


class _BeyondUnicode(Exception):
    """A sequence decodes past U+10FFFF (llama.cpp's unicode_cpt_to_utf8 throws, and the process aborts)."""

    def __init__(self, start: int, cpt: int):
        super().__init__(start, cpt)
        self.start, self.cpt = start, cpt


def _beyond_unicode_error(data: bytes) -> InputError:
    """The error for bytes with a sequence past U+10FFFF, naming the first one's offset.

    Decoding the whole input finds the same sequence the fragments hit: such a sequence (a lead
    byte and three continuation bytes) can neither hold nor straddle a special token's text.
    """
    try:
        data.decode("utf-8", _LLAMA_UTF8_ERRORS)
    except _BeyondUnicode as e:
        return InputError(
            f"bytes {data[e.start:e.start + 4].hex(' ')} at offset {e.start} decode to U+{e.cpt:X}, past U+10FFFF; "
            "llama.cpp aborts on such input, so it has no token ids: remove or replace these bytes"
        )
    raise AssertionError("no sequence past U+10FFFF")  # unreachable: the caller's decode found one


def _llama_utf8_errors(error: UnicodeError) -> tuple[str, int]:
    """Codec error handler: where Python's strict decoder stops, llama.cpp's next step."""
    if not isinstance(error, UnicodeDecodeError):  # registered for decoding only
        raise error
    cpt, length = _llama_cpt_at(error.object, error.start)
    if cpt > 0x10FFFF:
        raise _BeyondUnicode(error.start, cpt)
    return chr(cpt), error.start + length


# Python's decoder and llama.cpp's agree on well-formed UTF-8 and resynchronise at the same byte,
# so only the spans Python rejects need llama.cpp's rule; the rest is decoded in C.
_LLAMA_UTF8_ERRORS = "bpetok-llama-utf8"
codecs.register_error(_LLAMA_UTF8_ERRORS, _llama_utf8_errors)


_CLEAN_1 = re.compile(rb" ([?!.,])")
_CLEAN_2 = re.compile(rb" ' ")
_CLEAN_3 = re.compile(rb" '(?=[sm]|re|ve)")


def _clean_spaces(data: bytes) -> bytes:
    """llama.cpp's detokenizer cleanup (clean_spaces), three passes in its order."""
    data = _CLEAN_1.sub(rb"\1", data)
    data = _CLEAN_2.sub(b"'", data)
    return _CLEAN_3.sub(b"'", data)
