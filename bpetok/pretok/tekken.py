"""llama.cpp's tekken pre-tokenizer (Mistral Nemo, Mistral Small 3.x, Pixtral 12B, Devstral...).

GPT-4o's case-splitting word pattern without contractions, every number codepoint on its own, and
``/`` kept after punctuation runs. ``ignore_merges`` and a default ``add_bos`` as llama.cpp sets.
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok.chain import chain_spec
from bpetok.pretok.gpt4o import LOWER, UPPER

TEKKEN = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@hookimpl
def bpetok_register_pretokenizers(register):
    register(chain_spec("tekken", "TEKKEN", ("tekken",), [TEKKEN], clean_spaces=False, ignore_merges=True,
                        space_chunks=True,
                        add_bos=True, description="Mistral tekken: case-split words, one digit per piece"))
