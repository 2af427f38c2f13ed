"""llama.cpp's BLOOM family: runs of anything but whitespace and a few punctuation marks.

One pattern over the codepoints (no classes): `` ?[^(\\s|.,!?…。，、।۔،)]+`` — inside the
brackets ``(``, ``|`` and ``)`` are literal characters, so they split too. Viking then cuts
every number codepoint out of the pieces.
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok.chain import chain_spec

BLOOM = r" ?[^(\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"


@hookimpl
def bpetok_register_pretokenizers(register):
    register(chain_spec("bloom", "BLOOM", ("bloom",), [BLOOM], description="BLOOM: runs between spaces and .,!?"))
    register(chain_spec("bloom", "GPT3_FINNISH", ("gpt3-finnish",), [BLOOM],
                        description="GPT-3 Finnish: BLOOM's pattern"))
    register(chain_spec("bloom", "PORO", ("poro-chat",), [BLOOM], clean_spaces=False,
                        description="Poro: BLOOM's pattern"))
    register(chain_spec("bloom", "VIKING", ("viking",), [BLOOM, r"\p{N}"], clean_spaces=False,
                        description="Viking: BLOOM's pattern, then every number codepoint alone"))
