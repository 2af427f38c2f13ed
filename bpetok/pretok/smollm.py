"""llama.cpp's smollm pre-tokenizer (SmolLM/SmolLM2, StarCoder, Refact, Command-R, CodeShell, EXAONE...).

llama.cpp runs two passes (src/llama-vocab.cpp, the STARCODER/SMOLLM branch): first ``\\p{N}`` cuts
every number codepoint out on its own, then GPT-2's pattern runs inside each remaining piece. The
piece ends are hard: a space before a digit stays alone, and a whitespace run that ends at a digit
is kept whole. One regex over collapsed text gives the same pieces (the two-pass chain is
:data:`PASSES`; tests/test_pretok_chain.py holds the two to each other).
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok import CollapsedRegexPreTokenizer, kernel_split_spec
from bpetok.pretok.gpt2 import GPT2

# llama.cpp's passes, as src/llama-vocab.cpp lists them.
PASSES = [r"\p{N}", GPT2]

PATTERN = (
    r"\p{N}"  # pass 1: each number codepoint is a piece of its own
    r"|'s|'t|'re|'ve|'m|'ll|'d"  # pass 2, GPT-2: lowercase contractions only
    r"| ?\p{L}+"
    r"| ?[^\s\p{L}\p{N}]+"
    r"|\s+(?=\p{N})"  # subtle: a digit ends the pass-1 piece, so the run is not shortened
    r"|\s+(?!\S)"
    r"|\s+"
)


def make_pretokenizer() -> CollapsedRegexPreTokenizer:
    return CollapsedRegexPreTokenizer(PATTERN)


# (llama.cpp type, pre names, clean_spaces) for every type llama.cpp runs these two passes for.
TYPES = [
    ("SMOLLM", ("smollm",), False),
    ("COMMAND_R", ("command-r",), False),
    ("STARCODER", ("starcoder",), True),
    ("REFACT", ("refact",), True),
    ("CODESHELL", ("codeshell",), True),
    ("EXAONE", ("exaone",), True),
    ("MINERVA", ("minerva-7b",), True),
    ("MELLUM2", ("mellum2",), True),
]


@hookimpl
def bpetok_register_pretokenizers(register):
    for llama_type, names, clean_spaces in TYPES:
        # The pattern lets a space only start a piece or sit in a whitespace run: text may be cut at spaces.
        register(
            kernel_split_spec(
                "smollm", names, make_pretokenizer, llama_type, clean_spaces=clean_spaces,
                description="SmolLM2: digits cut out first, then GPT-2's pattern",
            )
        )
