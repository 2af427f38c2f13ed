"""llama.cpp's llama3 pre-tokenizer for bpetok (Llama 3, Falcon 3, Pixtral, LFM2 and others).

A third-party bpetok plugin: it uses only bpetok's public API (``bpetok.hookimpl``,
``bpetok.PreTokenizerSpec``, ``bpetok.pretok.CollapsedRegexPreTokenizer``) and is found through
its entry point in the ``bpetok`` group::

    [project.entry-points.bpetok]
    llama3 = "bpetok_llama3"

llama.cpp runs one pass of its custom llama3 splitter (src/unicode.cpp), which implements the
regex below with llama.cpp's own Unicode 15.1 classes. It is qwen2's pattern except that numbers
come in runs of one to three codepoints, cut from the left (``1234567`` -> ``123``, ``456``,
``7``). Running the regex over llama.cpp's "collapsed" text (every non-ASCII codepoint replaced
by a placeholder for its class) gives the same pieces whatever Unicode version Python carries.

>>> make_pretokenizer().split("Hello, y'ALL! 1234567  \\n\\n x")
['Hello', ',', ' y', "'ALL", '!', ' ', '123', '456', '7', '  \\n\\n', ' x']
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from bpetok import PreTokenizerSpec, hookimpl
from bpetok.pretok import CollapsedRegexPreTokenizer

try:
    __version__ = version("bpetok-llama3")
except PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

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


def make_pretokenizer() -> CollapsedRegexPreTokenizer:
    """A fresh llama3 pre-tokenizer (bpetok calls this once per loaded vocabulary)."""
    # space_chunks: a space after a non-space can only start a piece (the optional prefix of a
    # letter or punctuation run, or a whitespace run), and nothing looks behind, so bpetok may cut
    # text there and cache the ids of whole chunks such as " word,".
    return CollapsedRegexPreTokenizer(PATTERN, space_chunks=True)


@hookimpl
def bpetok_register_pretokenizers(register):
    register(
        PreTokenizerSpec(
            name="llama3",
            pre_names=PRE_NAMES,
            factory=make_pretokenizer,
            # llama.cpp: clean_spaces stays at its BPE default (true) for LLAMA3.
            clean_spaces=True,
            # A piece that is already a token is emitted whole, without running the merges:
            # Llama 3's vocabulary has tokens BPE would not reach from their bytes.
            ignore_merges=True,
            # Used when the file has no tokenizer.ggml.add_bos_token key.
            add_bos=True,
            description="Llama 3: numbers in runs of 1-3, case-insensitive contractions, ignore_merges",
        )
    )
