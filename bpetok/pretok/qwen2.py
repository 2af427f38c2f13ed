"""llama.cpp's qwen2 pre-tokenizer (Qwen2, Qwen2.5, Qwen3 and DeepSeek-R1 distills).

One pass of llama.cpp's custom qwen2 splitter (src/unicode.cpp), which implements this regex with
llama.cpp's own classes: case-insensitive contractions, an optional one-codepoint prefix before a
letter run, every digit on its own, punctuation runs that keep trailing newlines.
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok import CollapsedRegexPreTokenizer, PreTokenizerSpec

PATTERN = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    r"|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)


def make_pretokenizer() -> CollapsedRegexPreTokenizer:
    # A space can only start a piece or sit in a whitespace run: text may be cut at spaces.
    return CollapsedRegexPreTokenizer(PATTERN, space_chunks=True)


@hookimpl
def bpetok_register_pretokenizers(register):
    # llama.cpp src/llama-vocab.cpp maps these pre names to LLAMA_VOCAB_PRE_TYPE_QWEN2 with
    # clean_spaces = false; "megrez" maps there too but keeps clean_spaces = true.
    register(
        PreTokenizerSpec(
            name="qwen2",
            pre_names=("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"),
            factory=make_pretokenizer,
            clean_spaces=False,
            description="Qwen2/Qwen3: one digit per piece, case-insensitive contractions",
        )
    )
    register(
        PreTokenizerSpec(
            name="qwen2",
            pre_names=("megrez",),
            factory=make_pretokenizer,
            clean_spaces=True,
            description="qwen2 splitting with the detokenizer's space cleanup",
        )
    )
