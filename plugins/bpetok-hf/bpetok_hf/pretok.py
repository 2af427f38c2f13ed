"""Pre-tokenizers a tokenizer.json describes, run with Hugging Face tokenizers' semantics.

A byte-level BPE ``pre_tokenizer`` is a list of passes, each splitting every piece the previous
pass left: ``Split`` (a regex, a delimiter behaviour, ``invert``), ``Digits`` and the regex of a
``ByteLevel`` with ``use_regex``. :func:`read_passes` turns the JSON into :class:`SplitPass`
values, refusing what cannot be reproduced; :class:`HFPreTokenizer` runs the passes with the ``regex``
package (``\\p{..}`` classes, as Oniguruma, the regex engine of HF tokenizers, has them).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bpetok import BpetokError, VocabularyError
from bpetok.errors import RegexTimeoutError

from bpetok_hf.schema import array, bad, describe, flag

# ``regex`` is imported where a tokenizer.json is read or split, not here: bpetok imports this
# module whenever it loads its plugins, and most loads never touch a tokenizer.json.
if TYPE_CHECKING:
    import regex

__all__ = ["SplitPass", "HFPreTokenizer", "read_passes", "patterns_of", "GPT2_PATTERN", "BEHAVIORS"]

# The regex of HF's ByteLevel pre-tokenizer with use_regex=true (GPT-2's).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# Split behaviours whose pieces concatenate back to the text ("Removed" drops text: refused).
BEHAVIORS = ("Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")

# Patterns as Hugging Face's hub files write them, for llama.cpp families whose registered
# pattern is llama.cpp's adapted form of the same regex (src/llama-vocab.cpp keeps the original
# in a comment). Keys: the passes' regex texts; values: a tokenizer.ggml.pre name of the family.
# (scripts/regex_time_limit.py times them; a loaded tokenizer.json always runs its own passes.)
HUB_PATTERNS = {
    (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ): "qwen2",
    (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ): "llama-bpe",
    # SmolLM2 / StarCoder: Digits(individual_digits) then ByteLevel(use_regex).
    (r"\p{N}", GPT2_PATTERN): "smollm",
    (GPT2_PATTERN,): "gpt-2",  # llama.cpp's pre name for GPT-2
}


@dataclass(frozen=True)
class SplitPass:
    """One pass: HF's ``Split(pattern, behavior, invert)`` over each piece."""

    pattern: str
    behavior: str = "Isolated"
    invert: bool = False

    def compile(self) -> regex.Pattern:
        import regex

        return regex.compile(self.pattern)


def _refuse(path: str, where: str, what: str) -> VocabularyError:
    return VocabularyError(
        f"{path}: {where} is {what}; bpetok-hf reproduces pre-tokenizers made of Split, Digits and a final "
        "ByteLevel (as Qwen, Llama 3 and SmolLM2 ship) and refuses others rather than give ids that differ "
        "from Hugging Face tokenizers': convert this model to GGUF with llama.cpp's convert_hf_to_gguf.py instead"
    )


# Hub patterns are a few hundred characters; a longer one is no pre-tokenizer anybody ships.
MAX_PATTERN_CHARS = 10_000
# The regex package unrolls counted repeats when it compiles: ``(?:a{1000}){1000}`` takes 1.3 s and
# 280 MB, ``(?:x{65535}){65535}`` all the memory there is. Hub patterns have a {1,3} or two.
MAX_REPEAT_PRODUCT = 100_000
# A counted repeat {m}, {m,}, {m,n}, {,n}; not an escape's braces (\p{L}, \x{100}, \N{...}).
_COUNTED_REPEAT = r"(?<!\\[pPxNu])(?<!\\)\{(\d*)(?:,(\d*))?\}"


def _repeat_product(text: str) -> int:
    """An upper bound on how many times compiling ``text`` copies one atom: the product of all its
    counted repeats' counts, nested or not."""
    import regex

    product = 1
    for m in regex.finditer(_COUNTED_REPEAT, text):
        low, high = m.group(1), m.group(2)
        counts = [int(c) for c in (low, high) if c]
        product *= max(counts, default=1)
        if product > MAX_REPEAT_PRODUCT:
            break
    return product


def _pattern_text(item: dict, path: str, at: str) -> str:
    import regex

    pattern = item.get("pattern")
    if not isinstance(pattern, dict):
        raise bad(path, f"{at}.pattern", pattern, "an object with 'Regex' or 'String'")
    if "Regex" in pattern:
        text = pattern["Regex"]
        key = "Regex"
    elif "String" in pattern:
        text = pattern["String"]
        key = "String"
    else:
        raise _refuse(path, f"{at}.pattern", describe(pattern))
    if not isinstance(text, str):
        raise bad(path, f"{at}.pattern.{key}", text, "a string")
    if len(text) > MAX_PATTERN_CHARS:
        raise bad(path, f"{at}.pattern.{key}", text, f"a pattern of at most {MAX_PATTERN_CHARS} characters")
    if key == "String":
        return regex.escape(text)
    return checked_regex(text, path, f"{at}.pattern.Regex")


def checked_regex(text: str, path: str, where: str) -> str:
    """A tokenizer.json regex the ``regex`` package compiles within bounds (see MAX_REPEAT_PRODUCT)."""
    import regex

    if len(text) > MAX_PATTERN_CHARS:
        raise bad(path, where, text, f"a pattern of at most {MAX_PATTERN_CHARS} characters")
    if _repeat_product(text) > MAX_REPEAT_PRODUCT:
        raise bad(path, where, text, f"a pattern whose counted repeats ({{m,n}}) multiply to at most "
                  f"{MAX_REPEAT_PRODUCT:,} (the regex package copies the repeated part that many times)")
    try:
        regex.compile(text)
    except regex.error as e:
        raise _refuse(path, where.removesuffix(".Regex"), f"a regex the regex package cannot compile ({e})") from e
    return text


def read_passes(node: dict | None, path: str, where: str = "pre_tokenizer") -> list[SplitPass]:
    """The passes of a tokenizer.json ``pre_tokenizer``; exactly one ByteLevel, which comes last."""
    if node is None:
        raise _refuse(path, where, "null (no ByteLevel pre-tokenizer: not a byte-level BPE file)")
    sequence = node.get("type") == "Sequence"
    items = array(node, "pretokenizers", path, f"{where}.", required=True) if sequence else [node]
    passes: list[SplitPass] = []
    byte_level = 0
    for i, item in enumerate(items):
        at = f"{where}.pretokenizers[{i}]" if sequence else where
        if not isinstance(item, dict):
            raise bad(path, at, item, "an object (a pre-tokenizer)")
        kind = item.get("type")
        if byte_level:
            raise _refuse(path, at, f"a {describe(kind)} after the ByteLevel pre-tokenizer")
        if kind == "ByteLevel":
            byte_level += 1
            if flag(item, "add_prefix_space", path, f"{at}."):
                raise _refuse(path, f"{at}.add_prefix_space", "true (a space added before the text)")
            if flag(item, "use_regex", path, f"{at}.", default=True):
                passes.append(SplitPass(GPT2_PATTERN))
        elif kind == "Split":
            text = _pattern_text(item, path, at)
            behavior = item.get("behavior", "Isolated")
            if behavior not in BEHAVIORS:
                raise _refuse(path, f"{at}.behavior", f"{describe(behavior)} (it drops text or is unknown)")
            passes.append(SplitPass(text, behavior, flag(item, "invert", path, f"{at}.")))
        elif kind == "Digits":
            # HF's Digits: each number codepoint alone, or runs of them (char::is_numeric is \p{N}).
            if flag(item, "individual_digits", path, f"{at}."):
                passes.append(SplitPass(r"\p{N}"))
            else:
                passes.append(SplitPass(r"\p{N}+", "Contiguous"))
        else:
            raise _refuse(path, at, f"pre-tokenizer type {describe(kind)}")
    if not byte_level:
        raise _refuse(path, where, "without a ByteLevel pre-tokenizer (not a byte-level BPE file)")
    return passes


def patterns_of(pretokenizer) -> tuple[str, ...] | None:
    """The regex passes a registered pre-tokenizer runs, when it exposes them: one ``pattern``
    (``bpetok.pretok.CollapsedRegexPreTokenizer``) or ``passes`` that each have one (a regex
    chain); None for a hand-written splitter."""
    pattern = getattr(pretokenizer, "pattern", None)
    if isinstance(pattern, str):
        return (pattern,)
    passes = getattr(pretokenizer, "passes", None)
    if passes:
        patterns = [getattr(p, "pattern", None) for p in passes]
        texts = [p for p in patterns if isinstance(p, str)]
        if len(texts) == len(patterns):
            return tuple(texts)
    return None


def _split_once(compiled: regex.Pattern, behavior: str, invert: bool, text: str, timeout: float | None = None) -> list[str]:
    # HF's find_matches: every match, and the text between matches, as (start, end, is_match).
    spans: list[tuple[int, int, bool]] = []
    prev = 0
    for m in compiled.finditer(text, timeout=timeout):
        start, end = m.span()
        if start == end == prev and spans and spans[-1][2]:
            continue  # Oniguruma's iterator allows no empty match right after a match; Python's does
        if prev != start:
            spans.append((prev, start, False))
        spans.append((start, end, True))
        prev = end
    if prev != len(text):
        spans.append((prev, len(text), False))
    if invert:
        spans = [(a, b, not is_match) for a, b, is_match in spans]
    if behavior == "Isolated":
        out = [(a, b) for a, b, _ in spans]
    elif behavior == "MergedWithPrevious":
        out, previous_match = [], False
        for a, b, is_match in spans:
            if is_match and not previous_match and out:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
            previous_match = is_match
    elif behavior == "MergedWithNext":
        out, previous_match = [], False
        for a, b, is_match in reversed(spans):
            if is_match and not previous_match and out:
                out[-1] = (a, out[-1][1])
            else:
                out.append((a, b))
            previous_match = is_match
        out.reverse()
    else:  # Contiguous: neighbouring spans of one kind merge (gaps too, after invert)
        out, previous_match = [], False
        for a, b, is_match in spans:
            if is_match == previous_match and out:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
            previous_match = is_match
    return [text[a:b] for a, b in out if a != b]


TIMEOUT_ENV = "BPETOK_REGEX_TIMEOUT"
# CPU seconds a text may take to split, plus as many per CHARS_PER_TIMEOUT characters: real
# patterns split that many in about 0.2 s (scripts/regex_time_limit.py), a backtracking one
# (``(a|aa)+$``) passes 2 s on 35 characters.
DEFAULT_TIMEOUT = 2.0
CHARS_PER_TIMEOUT = 500_000


def timeout_from_env() -> float | None:
    """The time limit :data:`TIMEOUT_ENV` sets (seconds; 0 for none), else :data:`DEFAULT_TIMEOUT`."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise BpetokError(f"{TIMEOUT_ENV}={text!r}: expected a number of seconds (0 for no limit)")
    return value or None


class HFPreTokenizer:
    """Split text as HF tokenizers' pre-tokenizer of a tokenizer.json does (its passes in order).

    ``normalizer``: a callable run on the text first (the file's normalizer), or None.
    ``timeout``: CPU seconds one text may take to split, plus as many per :data:`CHARS_PER_TIMEOUT`
    characters, past which :class:`bpetok.errors.RegexTimeoutError` is raised; 0 for no limit,
    None for :func:`timeout_from_env`. The ``timeout`` attribute (None: no limit) can be changed.
    """

    def __init__(self, passes: list[SplitPass], timeout: float | None = None, normalizer=None):
        self.passes = list(passes)
        # The file's normalizer (bpetok_hf.normalize.Normalizer), run on each fragment before the
        # passes: the Tokenizer hands over the text between added tokens, HF's unit of normalization.
        self.normalizer = normalizer
        self.timeout = timeout_from_env() if timeout is None else (timeout or None)
        self._compiled = [(p.compile(), p.behavior, p.invert) for p in self.passes]

    def split(self, text: str) -> list[str]:
        if self.normalizer is not None:
            text = self.normalizer(text)
        pieces = [text] if text else []
        # Seconds of the process's CPU time, the clock the regex package's timeout counts.
        budget = None if self.timeout is None else self.timeout * (1 + len(text) / CHARS_PER_TIMEOUT)
        deadline = None if budget is None else time.process_time() + budget
        for compiled, behavior, invert in self._compiled:
            done: list[str] = []
            for piece in pieces:
                left = None if deadline is None else max(deadline - time.process_time(), 1e-6)
                try:
                    done += _split_once(compiled, behavior, invert, piece, left)
                except TimeoutError:
                    raise self._timed_out(compiled.pattern, piece, text, budget) from None
            pieces = done
        return pieces

    def _timed_out(self, pattern: str, piece: str, text: str, budget: float | None) -> RegexTimeoutError:
        return RegexTimeoutError(
            f"the pre-tokenizer regex {pattern[:100]!r} ran past the time limit for splitting a {len(text)}-character "
            f"text ({budget or 0:.3g} s), at a piece of {len(piece)} characters: the pattern backtracks "
            f"catastrophically; fix the tokenizer.json's pattern, or raise the limit ({self.timeout or 0:g} s per "
            f"text plus as much per {CHARS_PER_TIMEOUT:,} characters) with {TIMEOUT_ENV}=SECONDS (0: no limit) or "
            "the pre-tokenizer's timeout attribute"
        )
