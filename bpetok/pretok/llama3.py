"""llama.cpp's llama3 family (Llama 3, Falcon 3, Pixtral, LFM2, DBRX, GLM-4, MiniCPM5...).

llama.cpp runs one pass of its custom llama3 splitter (src/unicode.cpp), which implements the
regex below with llama.cpp's own Unicode 15.1 classes. It is qwen2's pattern except that numbers
come in runs of one to three codepoints, cut from the left (``1234567`` -> ``123``, ``456``,
``7``). Running the regex over llama.cpp's "collapsed" text (every non-ASCII codepoint replaced
by a placeholder for its class) gives the same pieces whatever Unicode version Python carries.

>>> make_pretokenizer().split("Hello, y'ALL! 1234567  \\n\\n x")
['Hello', ',', ' y', "'ALL", '!', ' ', '123', '456', '7', '  \\n\\n', ' x']
"""

from __future__ import annotations

from bpetok.hookspecs import hookimpl
from bpetok.pretok import CollapsedRegexPreTokenizer, kernel_split_spec
from bpetok.pretok.chain import chain_spec

__all__ = ["PATTERN", "PRE_NAMES", "make_pretokenizer", "bpetok_register_pretokenizers"]

# llama.cpp src/llama-vocab.cpp, llm_tokenizer_bpe, LLAMA_VOCAB_PRE_TYPE_LLAMA3: the "adapted"
# form of tokenizer.json's regex, with (?i:'s|...) spelt out as character pairs.
PATTERN = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"  # contractions, any case
    r"|[^\r\n\p{L}\p{N}]?\p{L}+"  # a letter run with one optional non-letter prefix
    r"|\p{N}{1,3}"  # numbers in runs of up to three, from the left
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*"  # punctuation/symbol runs keep their trailing newlines
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)

# Every tokenizer.ggml.pre name llama.cpp maps to LLAMA_VOCAB_PRE_TYPE_LLAMA3 (src/llama-vocab.cpp,
# llama_vocab::impl::load). All of them set ignore_merges and add_bos and keep clean_spaces.
PRE_NAMES = (
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
)

# Jais 2: llama3's pattern, with whitespace runs cut into powers of two (512, 256, ... 4, 1-2, 1).
JAIS2 = PATTERN.replace(
    r"|\s+(?!\S)|\s+",
    "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4)) + r"|\s{1,2}(?!\S)|\s{1}",
)
# MiniCPM5: number runs of up to three cut out first, then llama3's pattern with \p{N}+.
MINICPM5 = [r"\p{N}{1,3}", PATTERN.replace(r"\p{N}{1,3}", r"\p{N}+")]


def make_pretokenizer() -> CollapsedRegexPreTokenizer:
    """A fresh llama3 pre-tokenizer (bpetok calls this once per loaded vocabulary)."""
    return CollapsedRegexPreTokenizer(PATTERN)


@hookimpl
def bpetok_register_pretokenizers(register):
    # llama.cpp: clean_spaces stays at its BPE default (true) for LLAMA3. ignore_merges: a piece
    # that is already a token is emitted whole, without running the merges (Llama 3's vocabulary
    # has tokens BPE would not reach from their bytes). add_bos: used when the file has no
    # tokenizer.ggml.add_bos_token key. The pattern lets a space after a non-space only start a
    # piece (the optional prefix of a letter or punctuation run, or a whitespace run) and nothing
    # looks behind, so bpetok may cut text there and cache whole chunks such as " word,".
    register(
        kernel_split_spec(
            "llama3", PRE_NAMES, make_pretokenizer, "LLAMA3", clean_spaces=True, ignore_merges=True, add_bos=True,
            description="Llama 3: numbers in runs of 1-3, case-insensitive contractions, ignore_merges",
        )
    )
    for llama_type, names, passes, flags in (
        ("DBRX", ("dbrx",), [PATTERN], {}),
        ("SMAUG", ("smaug-bpe",), [PATTERN], {}),
        # GLM-4: no default BOS id (llama.cpp sets special_bos_id to null for these).
        ("CHATGLM4", ("chatglm-bpe",), [PATTERN], {"bos_default": False}),
        ("CHATGLM4", ("glm4", "glm5"), [PATTERN], {"bos_default": False, "ignore_merges": True}),
        ("JAIS2", ("jais-2",), [JAIS2], {}),
        ("MINICPM5", ("minicpm5",), MINICPM5, {"ignore_merges": True}),
    ):
        same = passes == [PATTERN]
        register(chain_spec("llama3", llama_type, names, passes, space_chunks=True,
                            kernel_split="llama3" if same else "",
                            description="llama3's pattern" if same else "a llama3 variant",
                            **flags))
