"""The tokenizer.json of llama.cpp's ``whitespace`` model, and why ``hybriddna`` has none.

With ``tokenizer.ggml.pre = whitespace`` llama.cpp drops its whitespace code points and byte-pair
encodes each run between on its own, over raw UTF-8 (bpetok/models/whitespace_bpe.py): a run's
first symbols are its characters, the merges join them by rank, and a character that is no token
stays a symbol no merge takes and gives no id (its bytes are no tokens either). In HF that is:

- a ``Split`` of llama.cpp's whitespace code points (an explicit class from bpetok's copy of its
  table, so no engine's Unicode tables matter), behavior ``Removed``;
- a ``Split`` isolating each character that is no one-character token (``Isolated``): HF's BPE
  drops a character it lacks and would merge its neighbours, where in llama.cpp it stands between;
- the ``BPE`` model over the token texts as they are (no ``ByteLevel`` pre-tokenizer: llama.cpp
  does not map the text's bytes here, so 'é' is the token 'é'), with no unknown token;
- the ``ByteLevel`` decoder: llama.cpp renders a gpt2-type vocabulary's pieces byte-level whatever
  its pre (the token 'é' is the byte 0xE9), as HF's decoder does for tokens of the byte alphabet.

The export refuses a vocabulary whose merges make a text that is no token (llama.cpp falls back to
its bytes, HF will not load it) or name a character that is no token (HF isolates it).
"""

from __future__ import annotations

from bpetok import Tokenizer
from bpetok.pretok.unicode_data import WHITESPACE

__all__ = ["HYBRIDDNA_REFUSAL", "whitespace_pre_tokenizer", "whitespace_refusal"]

HYBRIDDNA_REFUSAL = (
    "llama.cpp encodes the text between the CONTROL tokens <dna> and </dna> (seen with "
    "parse_special=False) as upper-cased 6-byte k-mers padded with 'A', each the token of its text + "
    "U+E000 or <oov> (for example 'x<dna>acgtacg</dna>' gives the tokens 'ACGTAC\\ue000' and "
    "'GAAAAA\\ue000' between the tags' pieces); a tokenizer.json has one model for all text and no "
    "pre-tokenizer or model that switches to k-mers between two tags"
)


def _char(cp: int) -> str:
    c = chr(cp)
    return "\\" + c if cp < 0x80 and not c.isalnum() and c.isprintable() and c != " " else c


def _char_class(code_points, negate: bool = False) -> str:
    """A regex class of ``code_points`` as ranges of the characters themselves (ASCII punctuation
    escaped), which Oniguruma (HF's Split) and the regex package read alike."""
    cps = sorted(code_points)
    ranges: list[str] = []
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        ranges.append(_char(cps[i]) + ("-" + _char(cps[j]) if j > i else ""))
        i = j + 1
    return "[" + ("^" if negate else "") + "".join(ranges) + "]"


def whitespace_pre_tokenizer(texts: list[str]) -> dict:
    """The whitespace cut and the isolation of characters that are no token (module docstring)."""
    known = {ord(t) for t in texts if len(t) == 1}
    return {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": _char_class(WHITESPACE) + "+"}, "behavior": "Removed", "invert": False},
            {"type": "Split", "pattern": {"Regex": _char_class(known, negate=True)}, "behavior": "Isolated",
             "invert": False},
        ],
    }


def whitespace_refusal(tok: Tokenizer, texts: list[str], merges: list[list[str]]) -> str | None:
    """Why this whitespace vocabulary cannot be a tokenizer.json with llama.cpp's ids, or None."""
    from bpetok.models.raw_utf8 import RawUtf8Model

    runs = getattr(tok.model, "runs", None)
    model = getattr(runs, "model", None)
    if (
        runs is None or not isinstance(model, RawUtf8Model) or runs.spec.name != "whitespace"
        or model.escape_whitespaces or model.metaspace or model.newline_runs_whole
    ):
        return (f"its tokenizer.ggml.pre {tok.vocabulary.pre!r} gives the runs between whitespace to another "
                "pre-tokenizer; bpetok-hf writes the whitespace model with pre 'whitespace' (\\S+ over raw UTF-8) only")
    known = set(texts)
    for left, right in merges:
        if left + right not in known:
            return (f"its merge {left!r} {right!r} makes {left + right!r:.60}, which is no token (llama.cpp falls "
                    "back to its bytes; HF refuses such a merge)")
        missing = [c for c in left + right if c not in known]
        if missing:
            return (f"its merge {left!r} {right!r} names the character {missing[0]!r}, which is no token (HF would "
                    "keep it apart, llama.cpp merges it)")
    return None
