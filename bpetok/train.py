"""Training a byte-level BPE vocabulary, and extending an existing one with pinned terms.

:func:`train` learns a vocabulary from text files the way GPT-2-style trainers do (Hugging Face
``tokenizers``' ``BpeTrainer``): pre-tokenize with a registered pre-tokenizer, count the unique
pieces, start from the 256 byte symbols and repeatedly merge the most frequent adjacent pair.
Only the pairs next to a merge change, so counts are updated incrementally (pair -> positions
index, a max-heap with lazy deletion) and never recounted, in time linear in the corpus however
long one piece is (bpetok/_train_merge.py, with the plain twins the tests compare it with; the
loop runs in C, bpetok/_train.c, when that is built).

Tie rule: the pair with the highest count wins; among equal counts, the pair with the smallest
left token id, then the smallest right token id (ids 0-255 are the bytes in byte order, later
ids are numbered in the order they were created). No dict or set order enters the result, so
the same input gives a byte-identical file.

*Pinning* makes chosen terms single tokens, bare and with a leading space ("QLoRA",
" QLoRA"), whatever their frequency. For each form, BPE with the merges so far is run to its
fixed point ``S1 .. Sk`` and a merge of one adjacent pair is appended, until the form is one
token (:func:`_add_chain`). A later merge never fires before the earlier ones are exhausted, so
BPE on the form reaches each fixed point and then the new merge; merges learned afterwards cannot
undo it (checked by encoding every pinned form with :class:`bpetok.models.gpt2.BytePairModel`).

:func:`extend` (bpetok/_extend.py) adds pinned terms to an existing GGUF vocabulary (e.g. Qwen3)
as USER_DEFINED tokens, which llama.cpp cuts out of the text before pre-tokenizing and BPE, so
every text that does not contain a pinned form is tokenized exactly as with the base file.
"""

from __future__ import annotations

import contextlib
import functools
import io
import lzma
import os
import re
import sys
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from bpetok._args import as_int, check_flag, check_not_text
from bpetok._extend import ExtendResult, _clean_pins, extend
from bpetok._train_merge import STRIDE, ChainTooLarge, _add_chain, _PairCounts, _Vocab
from bpetok.compiled import compiled_module
from bpetok.errors import BpetokError
from bpetok.vocab.gguf import GGUFValueType
from bpetok.models.gpt2 import BytePairModel
from bpetok.vocab import TokenType

if TYPE_CHECKING:
    from bpetok.tokenizer import Tokenizer

__all__ = ["train", "extend", "TrainResult", "ExtendResult"]

CHUNK_CHARS = 1 << 20  # pre-tokenize the corpus this many characters at a time
ARCHITECTURE = "llama"  # an architecture llama.cpp knows; vocab_only loading reads no hparams


# -- reading the corpus --------------------------------------------------------------------------


def _open_text(raw):
    """A text reader over the binary file ``raw``; ``.xz``, ``.gz`` and ``.bz2`` are decompressed."""
    name = raw.name
    if name.endswith(".xz"):
        return lzma.open(raw, "rt", encoding="utf-8", errors="replace")
    if name.endswith(".gz"):
        import gzip

        return gzip.open(raw, "rt", encoding="utf-8", errors="replace")
    if name.endswith(".bz2"):
        import bz2

        return bz2.open(raw, "rt", encoding="utf-8", errors="replace")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def _piece_boundary(text: str) -> int:
    """The last offset just after a newline that is followed by a non-space character, or 0.

    Every built-in pre-tokenizer ends a piece there (no pattern lets a piece run from a newline
    into a following non-space), so cutting the corpus at such offsets changes no piece.

    >>> _piece_boundary("a\\n b\\nc d")
    5
    """
    pos = text.rfind("\n")
    while pos >= 0 and (pos + 1 >= len(text) or text[pos + 1].isspace()):
        pos = text.rfind("\n", 0, pos)
    return pos + 1


def _chunks(f, on_block=lambda: None) -> Iterator[str]:
    """Read text from ``f`` in blocks, cut at the last :func:`_piece_boundary` of the text read so far.

    No pre-tokenizer piece spans two chunks. Blocks without a boundary are kept in a list and
    joined once, so a file with no boundary at all (one huge line) is read in linear time.
    """
    carry: list[str] = []  # the text since the last cut: it holds no boundary
    while True:
        block = f.read(CHUNK_CHARS)
        if not block:
            break
        on_block()
        # subtle: carry holds no boundary, so the last one is in the block or where carry's end meets it.
        edge = carry[-1][-1] if carry else ""
        found = _piece_boundary(edge + block)
        if found == 0:
            carry.append(block)
            continue
        cut = found - len(edge)
        yield "".join(carry) + block[:cut]
        carry = [block[cut:]] if cut < len(block) else []
    if carry:
        yield "".join(carry)


def _read_chunks(path: str, progress: _Progress) -> Iterator[str]:
    try:
        with open(path, "rb") as raw, _open_text(raw) as f:
            start = progress.done
            # Progress counts compressed bytes read, so the total is known from the file sizes.
            yield from _chunks(f, lambda: progress.advance(start + raw.tell() - progress.done))
    except OSError as e:  # also gzip.BadGzipFile
        reason = e.strerror or str(e)
        raise BpetokError(f"{path}: cannot read the corpus file ({reason})") from e
    except (EOFError, lzma.LZMAError, zlib.error) as e:
        raise BpetokError(f"{path}: cannot decompress the corpus file ({e}); is it truncated?") from e


def _corpus_chunks(texts: list[str], paths: list[str], progress: _Progress) -> Iterator[str]:
    """The texts', then the files', chunks (no piece spans two), advancing the progress bar."""
    for text in texts:
        yield from _chunks(io.StringIO(text))
        progress.advance(len(text))
    for path in paths:
        yield from _read_chunks(path, progress)


# -- counting pieces, here or on workers -------------------------------------------------------

TASK_CHUNKS = 4  # chunks per task sent to a worker: ~4M characters, a few MB of counts back


@functools.lru_cache(maxsize=4)
def _split_specials(special_tokens: tuple[str, ...]):
    if not special_tokens:
        return None
    return re.compile("|".join(map(re.escape, sorted(special_tokens, key=len, reverse=True))))


def new_counts():
    """An empty piece counter: ``bpetok._train.PieceCounts`` (compact arrays, bpetok/_train_pieces.h)
    when built and ``BPETOK_PURE_PYTHON`` is unset, else its readable twin, a :class:`Counter` of str.

    Both count with ``update(pieces)``, add another counter's counts with ``update(counter)``, and
    have ``pop``, ``total`` and ``items``; the C one keeps a piece in about 40 bytes (a Counter
    over 100) and pickles as one flat bytes object, so workers' counts travel and merge cheaply.
    """
    compiled = compiled_module("bpetok._train")
    return compiled.PieceCounts() if compiled is not None else Counter()


def count_pieces(pre: str, special_tokens: Iterable[str], chunks: Iterable[str]):
    """How often each piece of ``chunks`` occurs (a :func:`new_counts` counter), special tokens cut out
    first (as at encode time).

    Runs on a worker too: only the pre-tokenizer's name and the texts travel; each process builds
    the pre-tokenizer once from its registry.
    """
    split = _cached_pretokenizer(pre).split
    cut = _split_specials(tuple(special_tokens))
    counter = new_counts()
    for chunk in chunks:
        for part in cut.split(chunk) if cut else (chunk,):
            counter.update(split(part))
    return counter


def _add_counts(total, part) -> None:
    """Add counter ``part`` to ``total`` (a Dask worker may run the other engine: then via a dict)."""
    total.update(part if type(part) is type(total) else dict(part.items()))


def _count_corpus(chunks: Iterator[str], pre: str, special_tokens: list[str], workers: int, client):
    """:func:`count_pieces` over every chunk: in this process, on ``workers`` local processes, or on Dask."""
    if client is None and workers == 1:
        return count_pieces(pre, special_tokens, chunks)
    from bpetok.apps.datasets import in_order, process_pool

    tasks = _batched(chunks, TASK_CHUNKS)
    counter = new_counts()
    if client is not None:
        from bpetok.apps._dask import result_from_worker

        ahead = 2 * max(sum(client.nthreads().values()), 1)
        submit = lambda b: client.submit(count_pieces, pre, special_tokens, b, pure=False)  # noqa: E731
        for part in in_order(submit, tasks, ahead, result_from_worker(client)):
            _add_counts(counter, part)
        return counter
    with process_pool(workers) as pool:
        for part in in_order(lambda b: pool.submit(count_pieces, pre, special_tokens, b), tasks, 2 * workers):
            _add_counts(counter, part)
    return counter


def _batched(items: Iterator[str], n: int) -> Iterator[list[str]]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


# -- progress --------------------------------------------------------------------------------


class _Progress:
    """One tqdm bar per phase on stderr (the ``progress`` extra), with its total and ETA.

    Nothing is drawn when disabled or when tqdm is not installed. ``done`` counts even then: the
    corpus reader derives its steps from it.
    """

    def __init__(self, enabled: bool):
        self.enabled, self.done = enabled, 0
        self.bar: Any = None

    def start(self, label: str, total: int, unit: str) -> None:
        self.finish()
        self.done = 0
        if not self.enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            self.enabled = False
            return
        self.bar = tqdm(total=max(total, 1), desc=label, unit=unit, unit_scale=unit == "B", file=sys.stderr, dynamic_ncols=True)

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)

    def finish(self) -> None:
        """Close the bar where it is (merging may stop early: no pair frequent enough)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


# -- pins -----------------------------------------------------------------------------------------


def _installed_pres() -> str:
    from bpetok.plugins import get_registry

    return ", ".join(pre for model, pre in get_registry().keys() if model == "gpt2") or "none"


def _pretokenizer(pre: str):
    from bpetok.plugins import get_registry

    row = get_registry().get("gpt2", pre)
    if row is None:
        raise BpetokError(
            f"unknown pre-tokenizer {pre!r}; installed: {_installed_pres()} (`bpetok list-pretokenizers`); "
            "a plugin can add others"
        )
    if not row.spec.byte_encode:
        raise BpetokError(
            f"pre-tokenizer {pre!r} (llama.cpp type {row.spec.llama_type}) runs BPE over raw UTF-8; the trainer "
            "learns byte-level BPE only: choose a byte-level one (`bpetok list-pretokenizers`), e.g. qwen2"
        )
    return row.spec.factory()


# A worker counts many tasks with the same pre-tokenizer: build it once per process.
_cached_pretokenizer = functools.lru_cache(maxsize=4)(_pretokenizer)


def _pin_forms(pins: list[str], pretokenizer, pre: str) -> list[str]:
    """Each pin bare and with a leading space; refuses a pin the pre-tokenizer would split."""
    forms = []
    for term in pins:
        for form in (term, " " + term):
            pieces = pretokenizer.split(form)
            if pieces != [form]:
                raise BpetokError(
                    f"cannot pin {term!r}: the {pre!r} pre-tokenizer splits {form!r} into {pieces!r}, and BPE "
                    "never merges across pieces, so no single token can cover it; pin the pieces instead "
                    "(or use `bpetok extend`, which adds terms as user-defined tokens)"
                )
            forms.append(form)
    return forms


@contextlib.contextmanager
def _refusing_huge_chain(form: str):
    """Turn :class:`ChainTooLarge` into an error that names the pinned term."""
    try:
        yield
    except ChainTooLarge as error:
        raise BpetokError(
            f"pinned term {form[:40]!r}{'...' if len(form) > 40 else ''} ({len(form)} characters) cannot be one "
            f"token: {error} (a long pin with few repeats needs a token per prefix); shorten or split it"
        ) from None


# -- training -----------------------------------------------------------------------------------


@dataclass
class TrainResult:
    """What :func:`train` built: the token texts, types and merges, ready to write or load."""

    pre: str
    # The tables hold thousands of entries: keep them out of the repr (a REPL would print them all).
    tokens: list[bytes] = field(repr=False)
    token_types: list[int] = field(repr=False)
    merges: list[bytes] = field(repr=False)
    special_tokens: list[str]
    pinned: list[str]
    n_pieces: int  # pieces the corpus was pre-tokenized into
    n_unique: int  # unique pieces
    seconds: float
    n_pin_tokens: int = 0  # tokens the pinned terms' merge chains added

    def gguf_items(self) -> list[tuple[str, GGUFValueType, Any, GGUFValueType | None]]:
        T = GGUFValueType
        items: list[tuple[str, GGUFValueType, Any, GGUFValueType | None]] = [
            ("general.architecture", T.STRING, ARCHITECTURE, None),
            ("general.name", T.STRING, f"bpetok {self.pre} {len(self.tokens)}", None),
            ("tokenizer.ggml.model", T.STRING, "gpt2", None),
            ("tokenizer.ggml.pre", T.STRING, self.pre, None),
            ("tokenizer.ggml.tokens", T.ARRAY, self.tokens, T.STRING),
            ("tokenizer.ggml.token_type", T.ARRAY, self.token_types, T.INT32),
            ("tokenizer.ggml.merges", T.ARRAY, self.merges, T.STRING),
        ]
        if self.special_tokens:
            # GPT-2's convention: the first special token is both BOS and EOS (<|endoftext|>).
            first = len(self.tokens) - len(self.special_tokens)
            items += [
                ("tokenizer.ggml.bos_token_id", T.UINT32, first, None),
                ("tokenizer.ggml.eos_token_id", T.UINT32, first, None),
            ]
        items.append(("tokenizer.ggml.add_bos_token", T.BOOL, False, None))
        return items

    def write(self, path: str | os.PathLike) -> None:
        """Write a vocab-only GGUF that bpetok and llama.cpp load."""
        from bpetok.vocab.gguf_writer import write_gguf

        write_gguf(path, self.gguf_items())

    def tokenizer(self) -> Tokenizer:
        """A :class:`bpetok.Tokenizer` over this vocabulary (no file needed)."""
        from bpetok.tokenizer import from_vocabulary
        from bpetok.vocab import Vocabulary

        vocab = Vocabulary(
            path="<trained>", model="gpt2", pre=self.pre, tokens=list(self.tokens),
            token_types=list(self.token_types), merges=list(self.merges),
            metadata={"general.architecture": ARCHITECTURE},
        )
        if self.special_tokens:
            first = len(self.tokens) - len(self.special_tokens)
            vocab.special_id_keys = [("bos", "tokenizer.ggml.bos_token_id", first),
                                     ("eos", "tokenizer.ggml.eos_token_id", first)]
        vocab.flags["add_bos"] = False
        return from_vocabulary(vocab)  # runs the attribute overrides, as loading a file does


def train(
    corpus: Iterable[str | os.PathLike] = (),
    *,
    vocab_size: int,
    pre: str = "qwen2",
    special_tokens: Iterable[str] = (),
    pins: Iterable[str] = (),
    min_frequency: int = 2,
    texts: Iterable[str] = (),
    output: str | os.PathLike | None = None,
    progress: bool | None = None,
    workers: int = 1,
    client=None,
) -> TrainResult:
    """Learn a byte-level BPE vocabulary of ``vocab_size`` tokens from text files (and/or ``texts``).

    The vocabulary is the 256 byte tokens, the learned (and pinned) merges' tokens, then the
    special tokens (CONTROL). Learning stops early when no pair occurs ``min_frequency`` times.

    >>> result = train(texts=["low lower lowest"] * 5, vocab_size=262, min_frequency=1, progress=False)
    >>> tok = result.tokenizer()
    >>> len(result.tokens), [tok.decode([i]) for i in tok.encode(" lowest")]
    (262, [' lowe', 'st'])

    :param corpus: paths of UTF-8 text files; ``.xz``/``.gz``/``.bz2`` are decompressed.
    :param pre: a registered pre-tokenizer name (``bpetok list-pretokenizers``).
    :param pins: terms that must be single tokens, bare and after a space.
    :param output: write the vocab-only GGUF here.
    :param progress: draw a progress bar on stderr (default: when stderr is a terminal).
    :param workers: local processes that pre-tokenize and count pieces (the merge loop runs here).
    :param client: a ``dask.distributed.Client``: count on its cluster instead. The vocabulary
        is the same whatever the workers or engine.
    :raises BpetokError: empty corpus, unreadable file, unknown ``pre``, a vocabulary too small
        for the bytes, specials and pins, or a pin the pre-tokenizer splits.
    """
    started = time.perf_counter()
    if isinstance(corpus, (str, os.PathLike)):
        corpus = [corpus]
    paths = [os.fspath(p) for p in corpus]
    texts = [texts] if isinstance(texts, str) else list(texts)
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"train(texts=...) takes str texts, not {type(text).__name__}")
    check_not_text(special_tokens, "train(special_tokens=...)", "a list of token texts")
    check_not_text(pins, "train(pins=...)", "a list of terms")
    vocab_size = as_int(vocab_size, "train(vocab_size=...)")
    min_frequency = as_int(min_frequency, "train(min_frequency=...)")
    if progress is not None:
        progress = check_flag(progress, "train(progress=...)")
    special_tokens = list(dict.fromkeys(special_tokens))
    for s in special_tokens:
        if not isinstance(s, str):
            raise TypeError(f"train(special_tokens=...) takes str texts, not {type(s).__name__}")
    if any(not s for s in special_tokens):
        raise BpetokError("a special token is empty; give its text, e.g. --special '<|endoftext|>'")
    if min_frequency < 1:
        raise BpetokError(f"min_frequency must be at least 1, not {min_frequency}")
    workers = as_int(workers, "train(workers=...)")
    if workers < 1:
        raise BpetokError(f"workers must be at least 1, not {workers}")
    pretokenizer = _pretokenizer(pre)
    pins = _clean_pins(pins)
    forms = _pin_forms(pins, pretokenizer, pre)
    for path in paths:
        if not os.path.isfile(path):
            raise BpetokError(f"{path}: no such corpus file" + (" (it is a directory)" if os.path.isdir(path) else ""))

    # The cheapest the pins can be: their chains built from bytes alone (no learned merges).
    probe = _Vocab()
    for form in forms:
        with _refusing_huge_chain(form):
            _add_chain(probe, form)
    pin_cost = len(probe.tokens) - 256
    minimum = 256 + len(special_tokens) + pin_cost
    if vocab_size < minimum:
        raise BpetokError(
            f"vocab_size {vocab_size} is too small: 256 byte tokens + {len(special_tokens)} special tokens + "
            f"{pin_cost} tokens for {len(pins)} pinned terms need at least {minimum}"
        )

    bar = _Progress(sys.stderr.isatty() if progress is None else progress)
    # 1. Pre-tokenize and count unique pieces (special tokens are cut out first, as at encode time),
    # here or on workers: counts add up the same in any order, and step 2 sorts them.
    total = sum(os.path.getsize(p) for p in paths) + sum(len(t) for t in texts)
    bar.start("pre-tokenizing", total, "B")
    counter = _count_corpus(_corpus_chunks(texts, paths, bar), pre, special_tokens, workers, client)
    bar.finish()
    n_pieces = counter.total()
    if n_pieces == 0:
        where = ", ".join(paths) if paths else "the texts given"
        raise BpetokError(f"the corpus is empty: no text in {where}; give at least one non-empty UTF-8 file")
    for form in forms:  # pinned forms become one token whatever happens: keep them out of the counts
        counter.pop(form, None)

    # 2. Words as byte-id sequences (id b is byte b).
    n_unique = len(counter)
    pairs = _pair_counts(*_words(counter))
    del counter  # the merge loop holds what is needed
    vocab = _Vocab()

    # 3. Merge, leaving room for the pins' chains; then add the chains; then fill what room is left.
    target = vocab_size - len(special_tokens)
    upper = sum(len(f.encode("utf-8")) - 1 for f in forms)  # a chain never needs more than this
    bar.start("merging", target - 256, " tokens")
    _learn(vocab, pairs, max(256, target - upper) if forms else target, min_frequency, bar)
    before_pins = len(vocab.tokens)
    for form in forms:
        with _refusing_huge_chain(form):
            chain = _add_chain(vocab, form, pairs.counts)
        for left, right in chain:
            pairs.merge(left * STRIDE + right, vocab.ids[vocab.tokens[left] + vocab.tokens[right]])
    n_pin_tokens = len(vocab.tokens) - before_pins
    bar.advance(n_pin_tokens)
    if len(vocab.tokens) > target:  # cannot happen: upper bounds every chain
        raise BpetokError(f"internal error: pinned chains need {len(vocab.tokens) - target} more tokens than reserved")
    _learn(vocab, pairs, target, min_frequency, bar)
    bar.finish()

    # 4. Special tokens last, as CONTROL; then check that BPE reaches every pinned form.
    for text in special_tokens:
        data = text.encode("utf-8")
        if data in vocab.ids:
            raise BpetokError(f"special token {text!r} is also a learned token text; choose another text")
        vocab.ids[data] = len(vocab.tokens)
        vocab.tokens.append(data)
        vocab.types.append(TokenType.CONTROL)
    model = BytePairModel(vocab.tokens, vocab.merges)
    for form in forms:
        ids = model.encode_piece(form.encode("utf-8"))
        if len(ids) != 1:
            raise BpetokError(f"internal error: pinned form {form!r} encodes to {len(ids)} tokens; please report it")

    result = TrainResult(
        pre=pre, tokens=vocab.tokens, token_types=[int(t) for t in vocab.types], merges=vocab.merges,
        special_tokens=special_tokens, pinned=pins, n_pieces=n_pieces, n_unique=n_unique,
        seconds=time.perf_counter() - started, n_pin_tokens=n_pin_tokens,
    )
    if output is not None:
        result.write(output)
    return result


def _words(counter) -> tuple[Iterable[bytes], Sequence[int]]:
    """The counted pieces as UTF-8 words, and their counts, for :func:`_pair_counts`.

    A ``PieceCounts`` is given as it is (iterating it gives the words; the C loop reads it in
    place) with its counts as an int64 buffer. A Counter's pieces are sorted, so that nothing
    depends on dict order, though the merges do not depend on the words' order: a pair's count is
    a sum over words, and a word's own occurrences are merged in its text order either way.
    """
    if not isinstance(counter, Counter):
        return counter, memoryview(counter.freqs()).cast("q")
    items = sorted(counter.items())
    counter.clear()  # free the dict early; the items hold the pieces until the words are made
    return (piece.encode("utf-8", "surrogatepass") for piece, _ in items), [f for _, f in items]


def _pair_counts(words: Iterable[bytes], freqs: Sequence[int]) -> _PairCounts:
    """The merge loop over ``words``: ``bpetok._train.PairCounts`` (bpetok/_train.c) when built and
    ``BPETOK_PURE_PYTHON`` is unset, else its readable twin :class:`_PairCounts` (same merges)."""
    compiled = compiled_module("bpetok._train")
    if compiled is not None:
        return compiled.PairCounts(words, freqs)
    return _PairCounts(words, freqs)


def _learn(vocab: _Vocab, pairs: _PairCounts, target: int, min_frequency: int, bar: _Progress) -> None:
    """Merge the most frequent pair until the vocabulary has ``target`` tokens or no pair is frequent enough."""
    while len(vocab.tokens) < target:
        pair = pairs.best(min_frequency)
        if pair is None:
            break
        before = len(vocab.tokens)
        left, right = divmod(pair, STRIDE)
        pairs.merge(pair, vocab.add_merge(left, right))
        bar.advance(len(vocab.tokens) - before)
