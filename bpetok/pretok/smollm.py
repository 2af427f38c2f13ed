"""llama.cpp's smollm pre-tokenizer (SmolLM/SmolLM2, StarCoder, Refact, Command-R).

llama.cpp runs two passes (src/llama-vocab.cpp, the STARCODER/SMOLLM branch): first ``\\p{N}`` cuts
every number codepoint out on its own, then GPT-2's pattern runs inside each remaining piece. The
piece ends are hard: a space before a digit stays alone, and a whitespace run that ends at a digit
is kept whole. One regex over collapsed text gives the same pieces.
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok import CollapsedRegexPreTokenizer, PreTokenizerSpec

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
    # A space can only start a piece or sit in a whitespace run: text may be cut at spaces.
    return CollapsedRegexPreTokenizer(PATTERN, space_chunks=True)


@hookimpl
def bpetok_register_pretokenizers(register):
    # Pre names llama.cpp maps to this two-pass splitter, with their clean_spaces flag.
    register(
        PreTokenizerSpec(
            name="smollm",
            pre_names=("smollm", "command-r"),
            factory=make_pretokenizer,
            clean_spaces=False,
            description="SmolLM2: digits cut out first, then GPT-2's pattern",
        )
    )
    register(
        PreTokenizerSpec(
            name="smollm",
            pre_names=("starcoder", "refact"),
            factory=make_pretokenizer,
            clean_spaces=True,
            description="smollm splitting with the detokenizer's space cleanup",
        )
    )
