"""llama.cpp's superbpe pre-tokenizer: number runs, each cut into groups of three from the right.

The second pass matches only empty strings (a lookahead), and an empty match still cuts its piece:
``1234567`` -> ``1``, ``234``, ``567``. Everything else stays in the pieces the first pass left.
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok.chain import chain_spec

SUPERBPE = [r"\p{N}+", r"(?=(\d{3})+(?!\d))"]


@hookimpl
def bpetok_register_pretokenizers(register):
    register(chain_spec("superbpe", "SUPERBPE", ("superbpe",), SUPERBPE, clean_spaces=False,
                        description="SuperBPE: only number runs are cut (in threes from the right)"))
