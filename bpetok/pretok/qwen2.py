"""llama.cpp's qwen2 family (Qwen2/2.5/3, Qwen3.5, StableLM 2, Hunyuan, Grok-2, Solar Open, Ling...).

One pass of llama.cpp's custom qwen2 splitter (src/unicode.cpp), which implements this regex with
llama.cpp's own classes: case-insensitive contractions, an optional one-codepoint prefix before a
letter run, every digit on its own, punctuation runs that keep trailing newlines. The other types
here are one-pattern variations on it, run as llama.cpp runs them (the qwen35 one with llama.cpp's custom qwen35 splitter, which
implements its regex; laguna's after a first pass that cuts newline runs out).
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok import CollapsedRegexPreTokenizer, kernel_split_spec
from bpetok.pretok.chain import chain_spec

PATTERN = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    r"|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)


CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
QWEN35 = (
    CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
BAILINGMOE = (
    r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]|\s+(?!\S)|\s+"
)
SEED_CODER = (
    CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
)
EXAONE_MOE = (
    CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?"
    r"|\s*[\r\n]|\s+(?!\S)|\s+"
)
LAGUNA = [r"[^\n]+|[\n]+", PATTERN]


def make_pretokenizer() -> CollapsedRegexPreTokenizer:
    return CollapsedRegexPreTokenizer(PATTERN)


@hookimpl
def bpetok_register_pretokenizers(register):
    # llama.cpp src/llama-vocab.cpp: these pre names map to LLAMA_VOCAB_PRE_TYPE_QWEN2 with
    # clean_spaces = false; "megrez" maps there too but keeps clean_spaces = true.
    for names, clean_spaces in ((("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"), False), (("megrez",), True)):
        # The pattern lets a space only start a piece or sit in a whitespace run: text may be cut at spaces.
        register(
            kernel_split_spec(
                "qwen2", names, make_pretokenizer, "QWEN2", clean_spaces=clean_spaces,
                description="Qwen2/Qwen3: one digit per piece, case-insensitive contractions",
            )
        )
    # Other types whose list is qwen2's very pattern.
    for llama_type, names, clean_spaces in (
        ("STABLELM2", ("stablelm2",), True),
        ("HUNYUAN", ("hunyuan",), False),
        ("SOLAR_OPEN", ("solar-open",), False),
        ("GROK_2", ("grok-2",), False),
    ):
        register(chain_spec("qwen2", llama_type, names, [PATTERN], clean_spaces=clean_spaces, space_chunks=True,
                            kernel_split="qwen2", description="qwen2's pattern"))
    for llama_type, names, passes, flags, description in (
        ("QWEN35", ("qwen35",), [QWEN35], {"space_chunks": True},
         "Qwen3.5: qwen2 with combining marks kept in letter runs"),
        ("UFAKZEKA", ("ufakzeka",), [UFAKZEKA], {"space_chunks": True},
         "qwen2 without contractions (Turkish suffixes stay attached)"),
        ("BAILINGMOE", ("bailingmoe", "bailingmoe2", "llada-moe"), [BAILINGMOE], {"space_chunks": True},
         "Ling/Ring: qwen2 with one newline per whitespace piece"),
        ("SEED_CODER", ("seed-coder",), [SEED_CODER], {"space_chunks": True},
         "Seed-Coder: qwen2 with newlines never joining punctuation"),
        ("EXAONE_MOE", ("exaone-moe",), [EXAONE_MOE], {"clean_spaces": True},
         "EXAONE MoE: letter runs joined across single spaces"),
        ("LAGUNA", ("laguna",), LAGUNA, {"space_chunks": True}, "newline runs cut out, then qwen2's pattern"),
    ):
        flags = {"clean_spaces": False, **flags}
        register(chain_spec("qwen2", llama_type, names, passes, description=description, **flags))
