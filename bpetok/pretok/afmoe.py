"""llama.cpp's afmoe pre-tokenizer, and its digit-grouping splitter (which Tiny Aya also uses).

llama.cpp's first pass here is hand-written (``unicode_regex_split_custom_afmoe``): each number
run is cut into groups of three from the right (``1234567`` -> ``1``, ``234``, ``567``). It never
cuts *before* a number run, so the text before one joins its first group (``ab 1234`` -> ``ab 1``,
``234``); the later passes run inside those pieces, so that matters (``a  1`` keeps its two
spaces apart). :class:`GroupDigits` does exactly that.
"""

from __future__ import annotations

import re

from bpetok.hookspecs import hookimpl
from bpetok.pretok import CLASS_BODIES
from bpetok.pretok.chain import Splitter, chain_spec

_NUMBER_RUN = re.compile(f"[{CLASS_BODIES['N']}]+")


class GroupDigits(Splitter):
    """Number runs in groups of three from the right, the text before a run joined to its first group.

    >>> ends = []; GroupDigits().cut("ab 1234 c", 0, 9, ends); ends
    [4, 7, 9]
    """

    view = "collapsed"

    def cut(self, view: str, start: int, end: int, ends: list[int]) -> None:
        done = start
        for m in _NUMBER_RUN.finditer(view, start, end):
            a, b = m.span()
            first = a + (b - a) % 3
            if first > a:
                ends.append(first)
            ends.extend(range(first + 3, b + 1, 3))
            done = b
        if done < end:
            ends.append(end)


# llama.cpp dispatches "\p{AFMoE_digits}" and tiny_aya's "\d{1,3}(?=(?:\d{3})*\b)" to it.
GROUP_DIGITS = GroupDigits()

AFMOE = [
    GROUP_DIGITS,
    # U+8C48 (not U+F900) is what llama.cpp's source has: its range runs from there to U+FAFF.
    r"[\u4e00-\u9fff\u3400-\u4dbf\u8c48-\ufaff\u3040-\u309f\u30a0-\u30ff\uff65-\uff9f\u2f00-\u2fdf\u0e40-\u0e7f"
    r"\u0e80-\u0eff\u1780-\u17ff\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff\uac00-\ud7af\u1100-\u11ff]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+",
]


@hookimpl
def bpetok_register_pretokenizers(register):
    register(chain_spec("afmoe", "AFMOE", ("afmoe",), AFMOE, clean_spaces=False, space_chunks=True,
                        description="AFMoE: digit groups of three from the right, CJK/SE Asian runs, words"))
