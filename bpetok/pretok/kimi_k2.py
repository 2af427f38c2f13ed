"""llama.cpp's kimi-k2 pre-tokenizer (Kimi K2): its hand-written splitter, as one regex.

llama.cpp implements Kimi's tokenizer.json pattern by hand (``unicode_regex_split_custom_kimi_k2``).
What it does differs from the pattern: upper/lowercase are not told apart, combining marks are not
letters, and a run of Han characters (its ``unicode_cpt_is_han`` ranges, assigned or not) is a
piece of its own, never part of a letter run. Over a view of the collapsed text in which Han
characters have placeholders of their own (a Han letter ``\\xd7``, an unassigned one ``\\xd8``,
which, like llama.cpp, is no letter), one regex says exactly that.
"""

from __future__ import annotations

import re

from bpetok.hookspecs import hookimpl
from bpetok.pretok import LETTER, collapse
from bpetok.pretok.chain import RegexPass, chain_spec, register_view

HAN_LETTER, HAN_OTHER = "\xd7", "\xd8"
# llama.cpp src/unicode.cpp, unicode_cpt_is_han.
_HAN = re.compile(
    "[\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f"
    "\U0002b820-\U0002ceaf\U0002ceb0-\U0002ebef\uf900-\ufaff\U0002f800-\U0002fa1f]"
)


def han_view(text: str) -> str:
    """:func:`~bpetok.pretok.collapse`, with Han characters as ``\\xd7`` (letters) or ``\\xd8``."""
    collapsed = collapse(text)
    if text.isascii():
        return collapsed
    chars = None
    for m in _HAN.finditer(text):
        if chars is None:
            chars = list(collapsed)
        i = m.start()
        chars[i] = HAN_LETTER if chars[i] == LETTER else HAN_OTHER
    return collapsed if chars is None else "".join(chars)


register_view("kimi-han", han_view)

_CLASSES = {"Han": HAN_LETTER + HAN_OTHER, "HanL": HAN_LETTER}
KIMI_K2 = (
    r"\p{Han}+"
    # a letter run (no Han) with one optional leading character that is no letter or number
    r"|[^\r\n\p{L}\p{HanL}\p{N}]?\p{L}+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
    r"|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{HanL}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@hookimpl
def bpetok_register_pretokenizers(register):
    # llama.cpp reads kimi-k2 files without merges too (bpetok's loader does the same).
    register(chain_spec("kimi_k2", "KIMI_K2", ("kimi-k2",),
                        [RegexPass(KIMI_K2, view="kimi-han", extra_classes=_CLASSES)], clean_spaces=False,
                        space_chunks=True, description="Kimi K2: Han runs alone, words, numbers in threes"))
