"""llama.cpp's chameleon pre-tokenizer: six passes, the last GPT-2's pattern.

Sentinel and image-token strings first, then tab/newline and two- or four-space runs, single
number codepoints, single punctuation marks, and GPT-2's pattern inside what is left.
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok.chain import chain_spec
from bpetok.pretok.gpt2 import GPT2

CHAMELEON = [
    r"<sentinel:[0-9]+>",
    r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    r"([\t\n]|    |  )",
    r"\p{N}",
    r"[\p{P}!-/:-@\[-`{-~]",
    GPT2,
]


@hookimpl
def bpetok_register_pretokenizers(register):
    register(chain_spec("chameleon", "CHAMELEON", ("chameleon",), CHAMELEON, clean_spaces=False, add_bos=True,
                        space_chunks=True,
                        description="Chameleon: image/sentinel tokens, isolated digits and punctuation, GPT-2"))
