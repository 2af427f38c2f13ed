"""Count the codepoints whose regex class differs between llama.cpp's Unicode table (what bpetok's
family splitters use), Oniguruma's (what HF tokenizers run a Split with) and the ``regex``
package's (what bpetok-hf's hf-regex pre-tokenizer runs).

    python plugins/bpetok-hf/scripts/unicode_classes.py

For each of \\p{L}, \\p{N}, \\p{P}, \\p{M}, \\p{S} and \\s, prints how many codepoints (surrogates
excluded) are in the class for one table and not the other, with a few examples.
"""

from __future__ import annotations

import re
import unicodedata

import regex
from tokenizers import Regex, pre_tokenizers

from bpetok.pretok import CLASS_BODIES, collapse

CLASSES = {"L": r"\p{L}", "N": r"\p{N}", "P": r"\p{P}", "M": r"\p{M}", "S": r"\p{S}", "s": r"\s"}
CODEPOINTS = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
CHUNK = 4096


def llama_cpp(key: str) -> set[int]:
    body = re.compile(f"[{CLASS_BODIES[key]}]")
    text = collapse("".join(map(chr, CODEPOINTS)))
    return {cp for cp, c in zip(CODEPOINTS, text) if body.match(c)}


def oniguruma(pattern: str) -> set[int]:
    # Split(..., "removed") keeps the runs that do not match, with their offsets: the rest matched.
    split = pre_tokenizers.Split(Regex(pattern), "removed")
    members = set()
    for i in range(0, len(CODEPOINTS), CHUNK):
        chunk = CODEPOINTS[i : i + CHUNK]
        kept = [False] * len(chunk)
        for _, (start, end) in split.pre_tokenize_str("".join(map(chr, chunk))):
            kept[start:end] = [True] * (end - start)
        members.update(cp for cp, k in zip(chunk, kept) if not k)
    return members


def regex_package(pattern: str) -> set[int]:
    compiled = regex.compile(pattern)
    return {cp for cp in CODEPOINTS if compiled.match(chr(cp))}


def show(cps: set[int]) -> str:
    return ", ".join(f"U+{cp:04X} {unicodedata.name(chr(cp), '?')}" for cp in sorted(cps)[:3])


def main() -> None:
    print(f"unicodedata {unicodedata.unidata_version}, regex {regex.__version__}")
    for key, pattern in CLASSES.items():
        ours, onig, rx = llama_cpp(key), oniguruma(pattern), regex_package(pattern)
        for label, a, b in (("llama.cpp", ours, onig), ("regex", rx, onig)):
            only_a, only_b = a - b, b - a
            print(f"{pattern:6} {label:9} vs Oniguruma: {len(only_a):6} only in {label} ({show(only_a)}); "
                  f"{len(only_b):6} only in Oniguruma ({show(only_b)})")


if __name__ == "__main__":
    main()
