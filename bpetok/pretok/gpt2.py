"""llama.cpp's GPT-2 family: one pass of GPT-2's pattern (GPT-2, Phi-2, MPT, OLMo, EXAONE 4...).

llama.cpp runs GPT-2's regex with its custom gpt2 splitter (src/unicode.cpp): lowercase
contractions, letter/number/other runs that may take one leading space, and whitespace runs that
leave their last character to the next piece. The pattern has no catch-all: a lone whitespace
character before a non-space matches nothing and stays a piece of its own. Appending ``|\\s+``
makes the pattern match that same character, so one regex covers the text (the fast path).
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok.chain import chain_spec

# llama.cpp's GPT-2 pattern, as every chain that contains it writes it.
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
# The same pieces in one covering pattern: what \s+(?!\S) leaves is one whitespace character
# before a non-space, which \s+ then takes alone.
GPT2_COVERING = GPT2 + r"|\s+"

# (llama.cpp type, pre names, flags) for every type that runs GPT-2's pattern alone.
TYPES = [
    ("GPT2", ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
              "mellum", "modern-bert", "exaone4"), {}),
    ("GPT2", ("jina-v1-en", "jina-v2-code", "roberta-bpe"), {"add_sep": True}),
    ("MPT", ("mpt",), {}),
    ("OLMO", ("olmo",), {}),
    ("JAIS", ("jais",), {}),
    ("TRILLION", ("trillion",), {"clean_spaces": False}),
    ("GRANITE_DOCLING", ("granite-docling",), {"clean_spaces": False}),
]


@hookimpl
def bpetok_register_pretokenizers(register):
    for llama_type, names, flags in TYPES:
        # A space after a non-space only ever starts a piece: text may be cut there.
        register(chain_spec("gpt2", llama_type, names, [GPT2_COVERING], space_chunks=True,
                            description="GPT-2: lowercase contractions, letter/number/other runs", **flags))
