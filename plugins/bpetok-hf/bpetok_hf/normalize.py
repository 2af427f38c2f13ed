"""A tokenizer.json ``normalizer``, applied as Hugging Face tokenizers applies it.

HF normalizes each piece of text between the added tokens it cuts out (those with
``normalized: false`` are cut from the raw text first), then splits the normalized piece. bpetok
cuts every added token from the raw text, so the two agree exactly when no added token is matched
in normalized text (``normalized: true``) under a normalizer that changes text: the reader refuses
that combination (:func:`check_added_tokens`).

Supported: ``NFC``, ``NFD``, ``NFKC``, ``NFKD``, ``Lowercase``, ``Strip``, ``Replace`` (a string or a
regex), ``Prepend``, ``Precompiled`` (:mod:`bpetok_hf.precompiled`) and a ``Sequence`` of them.
Others (``StripAccents``, ``NMT``...) are refused with their name; ``BertNormalizer`` is read with
a WordPiece model only (:mod:`bpetok_hf.wordpiece`).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from bpetok import VocabularyError

from bpetok_hf.schema import array, bad, describe, flag, text_of

__all__ = ["Normalizer", "read_normalizer", "check_added_tokens", "FORMS", "WHITE_SPACE"]

FORMS = ("NFC", "NFD", "NFKC", "NFKD")
# Rust's char::is_whitespace (the White_Space property), what HF's Strip strips; Python's
# str.strip() also strips U+001C..U+001F, which are not White_Space.
WHITE_SPACE = _WHITE_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
# Codepoints that Unicode gives a combining class, decomposition or composition and HF
# tokenizers' normalization tables (older than Python's) do not know: HF treats each as a plain
# starter, so the text is normalized between them (scripts/normalization_table.py made this).
# 356 codepoints; unicodedata 14.0.0, regex 2026.5.9
HF_UNKNOWN = r"[\U000007FD\U00000897-\U0000089F\U000008CA-\U000008D3\U000009FE\U00000C3C\U00000D3B-\U00000D3C\U00000EBA\U00001715\U00001ABF-\U00001ADD\U00001AE0-\U00001AEB\U00001DF6-\U00001DFA\U000032FF\U0000A7F1-\U0000A7F4\U0000A82C\U0000AB69\U000105C9\U000105E4\U00010781-\U00010785\U00010787-\U000107B0\U000107B2-\U000107BA\U00010D24-\U00010D27\U00010D69-\U00010D6D\U00010EAB-\U00010EAC\U00010EFA-\U00010EFB\U00010EFD-\U00010EFF\U00010F46-\U00010F50\U00010F82-\U00010F85\U00011070\U0001133B\U00011383\U00011385\U0001138E\U00011391\U000113B8\U000113BB\U000113C2\U000113C5\U000113C7-\U000113C9\U000113CE-\U000113D0\U0001145E\U00011839-\U0001183A\U00011930\U00011938\U0001193D-\U0001193E\U00011943\U000119E0\U00011A34\U00011A47\U00011A99\U00011D42\U00011D44-\U00011D45\U00011D97\U00011F41-\U00011F42\U0001611E-\U00016129\U0001612F\U00016D67-\U00016D6A\U00016FF0-\U00016FF1\U0001CCD6-\U0001CCF9\U0001E030-\U0001E06D\U0001E08F\U0001E130-\U0001E136\U0001E2AE\U0001E2EC-\U0001E2EF\U0001E4EC-\U0001E4EF\U0001E5EE-\U0001E5EF\U0001E6E3\U0001E6E6\U0001E6EE-\U0001E6EF\U0001E6F5\U0001F16C\U0001FBF0-\U0001FBF9]"
# A Sequence inside a Sequence inside ... is no normalizer anybody ships.
_MAX_DEPTH = 4


def _refuse(path: str, where: str, what: str) -> VocabularyError:
    return VocabularyError(
        f"{path}: {where} is {what}; bpetok-hf reproduces the normalizers NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
        "Replace, Prepend, Precompiled and Sequences of them, and refuses others rather than give ids that differ from Hugging "
        "Face tokenizers': convert this model to GGUF with llama.cpp's convert_hf_to_gguf.py instead"
    )


@dataclass(frozen=True)
class Step:
    """One normalizer: ``kind`` and its arguments (``a``, ``b``: the Replace pattern and content,
    the Prepend text, or the Strip flags)."""

    kind: str
    a: object = None
    b: object = None


class Normalizer:
    """The normalizer of a tokenizer.json as a callable: ``normalizer(text)`` is HF's normalized text."""

    def __init__(self, steps: list[Step]):
        self.steps = list(steps)
        self._run = [self._compile(step) for step in self.steps]

    @staticmethod
    def _compile(step: Step):
        kind = step.kind
        if kind in FORMS:
            import regex

            unknown = regex.compile(f"({HF_UNKNOWN})")

            def normalize(text: str) -> str:
                if unknown.search(text) is None:
                    return unicodedata.normalize(kind, text)
                parts = unknown.split(text)  # the separators stay, at odd indices, as they are
                return "".join(p if i % 2 else unicodedata.normalize(kind, p) for i, p in enumerate(parts))

            return normalize
        if kind == "Lowercase":
            # Per character, as HF's NormalizedString::lowercase (no final-sigma rule, which str.lower has).
            return lambda text: "".join(c.lower() for c in text) if not text.isascii() else text.lower()
        if kind == "Strip":
            left, right = step.a, step.b

            def strip(text: str) -> str:
                if left:
                    text = text.lstrip(_WHITE_SPACE)
                return text.rstrip(_WHITE_SPACE) if right else text

            return strip
        if kind == "Replace":
            import regex

            compiled = regex.compile(step.a)
            content = str(step.b)
            return lambda text: compiled.sub(lambda _m: content, text)
        if kind == "Precompiled":
            return step.a
        if kind == "Prepend":
            prefix = str(step.a)
            return lambda text: prefix + text if text else text
        raise AssertionError(kind)

    def __call__(self, text: str) -> str:
        for run in self._run:
            text = run(text)
        return text

    def __repr__(self) -> str:
        return f"Normalizer({[s.kind for s in self.steps]})"


def _steps(node: dict, path: str, where: str, depth: int) -> list[Step]:
    import regex

    kind = node.get("type")
    if kind == "Sequence":
        if depth >= _MAX_DEPTH:
            raise bad(path, where, node, f"a Sequence at most {_MAX_DEPTH} deep")
        steps: list[Step] = []
        for i, item in enumerate(array(node, "normalizers", path, f"{where}.", required=True)):
            at = f"{where}.normalizers[{i}]"
            if not isinstance(item, dict):
                raise bad(path, at, item, "an object (a normalizer)")
            steps += _steps(item, path, at, depth + 1)
        return steps
    if kind in FORMS or kind == "Lowercase":
        return [Step(kind)]
    if kind == "Strip":
        sides = []
        for key in ("strip_left", "strip_right"):
            if not isinstance(node.get(key), bool):
                raise bad(path, f"{where}.{key}", node.get(key), "true or false")
            sides.append(flag(node, key, path, f"{where}."))
        return [Step(kind, *sides)]
    if kind == "Precompiled":
        from bpetok_hf.precompiled import read_precompiled

        return [Step(kind, read_precompiled(node, path, where))]
    if kind == "Prepend":
        prefix = text_of(node, "prepend", path, f"{where}.")
        if prefix is None:
            raise bad(path, f"{where}.prepend", prefix, "a string")
        return [Step(kind, prefix)]
    if kind == "Replace":
        pattern = node.get("pattern")
        content = text_of(node, "content", path, f"{where}.")
        if content is None:
            raise bad(path, f"{where}.content", content, "a string")
        if isinstance(pattern, dict) and isinstance(pattern.get("String"), str):
            text = regex.escape(pattern["String"])
        elif isinstance(pattern, dict) and isinstance(pattern.get("Regex"), str):
            from bpetok_hf.pretok import checked_regex

            text = checked_regex(pattern["Regex"], path, f"{where}.pattern.Regex")
        else:
            raise bad(path, f"{where}.pattern", pattern, "an object with a 'String' or 'Regex' string")
        if not text:
            raise _refuse(path, f"{where}.pattern", "empty")
        return [Step(kind, text, content)]
    raise _refuse(path, where, f"normalizer type {describe(kind)}")


def read_normalizer(node: dict | None, path: str) -> Normalizer | None:
    """The normalizer a tokenizer.json's ``normalizer`` describes; None when there is none (or an
    empty Sequence)."""
    if node is None:
        return None
    steps = _steps(node, path, "normalizer", 0)
    return Normalizer(steps) if steps else None


def check_added_tokens(normalizer, normalized: dict[int, str], path: str, kind: str = "BPE") -> None:
    """Refuse added tokens HF matches in normalized text (``normalized: true``) when there is a
    normalizer: bpetok cuts added tokens from the raw text, and the two differ where the
    normalizer changes the text around or into a token (``normalized``: id -> content)."""
    if normalizer is None or not normalized:
        return
    token_id, content = next(iter(normalized.items()))
    raise VocabularyError(
        f"{path}: added token {token_id} ({content[:40]!r}) has normalized: true under normalizer "
        f"{' + '.join(s.kind for s in normalizer.steps) if isinstance(normalizer, Normalizer) else kind + ' normalizer'}: Hugging Face matches it in the normalized text, bpetok in "
        "the raw text, and the ids would differ where the normalizer changes the text around it; set its "
        "\"normalized\" to false (as transformers does for special tokens) or convert the model to GGUF with "
        "llama.cpp's convert_hf_to_gguf.py"
    )
