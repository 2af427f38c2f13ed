"""llama.cpp's GPT-4o family: GPT-4o/o200k (Llama 4, GPT-OSS, Kanana 2, MiniMax-M2), Granite
multilingual embeddings, Tiny Aya and Youtu.

GPT-4o's tokenizer.json pattern separates upper- from lowercase letters (``\\p{Lu}``/``\\p{Ll}``:
``CamelCase`` -> ``Camel``, ``Case``); llama.cpp's adaptation writes "a letter that is not a-z"
as ``(?=[\\p{L}])([^a-z])``, and because its collapsed text has one placeholder for every non-ASCII
letter, a non-ASCII letter counts as both cases. Where llama.cpp keeps ``\\p{Lu}``... (Tiny Aya,
Youtu) they collapse to ``\\p{L}``, so those patterns do not separate case at all.
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok.afmoe import GROUP_DIGITS
from bpetok.pretok.chain import chain_spec

CONTRACTION = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
UPPER = r"((?=[\p{L}])([^a-z]))"
LOWER = r"((?=[\p{L}])([^A-Z]))"
REST = r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
GPT4O = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+{CONTRACTION}?"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*{CONTRACTION}?" + REST
)
# Granite multilingual: the same with combining marks counted with letters.
GRANITE_EMB_MULTI = GPT4O.replace(r"(?=[\p{L}])", r"(?=[\p{L}\p{M}])")
CASED_WORDS = (
    rf"[^\r\n\p{{L}}\p{{N}}]?[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}\p{{M}}]*[\p{{Ll}}\p{{Lm}}\p{{Lo}}\p{{M}}]+{CONTRACTION}?"
    rf"|[^\r\n\p{{L}}\p{{N}}]?[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}\p{{M}}]+"
    rf"[\p{{Ll}}\p{{Lm}}\p{{Lo}}\p{{M}}]*{CONTRACTION}?"
)
TINY_AYA = [GROUP_DIGITS, CASED_WORDS + REST]
YOUTU = [
    r"[\uac00-\ud7a3\u3131-\u318e]+"
    r"|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f\ufe30-\ufe4f]+"
    r"|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    CASED_WORDS + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]


@hookimpl
def bpetok_register_pretokenizers(register):
    for llama_type, names, passes, flags, description in (
        ("GPT4O", ("gpt-4o", "llama4", "kanana2", "talkie"), [GPT4O], {},
         "GPT-4o/o200k: case-split words, numbers in threes"),
        ("MINIMAX_M2", ("minimax-m2",), [GPT4O], {}, "GPT-4o's pattern"),
        ("GRANITE_EMB_MULTI", ("granite-embed-multi-97m",), [GRANITE_EMB_MULTI], {"ignore_merges": True},
         "GPT-4o's pattern with marks as letters"),
        ("TINY_AYA", ("tiny_aya", "cohere2moe"), TINY_AYA, {}, "digit groups of three from the right, then words"),
        ("YOUTU", ("youtu",), YOUTU, {"ignore_merges": True}, "Hangul/CJK/punctuation runs, then words"),
    ):
        # A space after a non-space only ever starts a piece in every pass: text may be cut there.
        register(chain_spec("gpt4o", llama_type, names, passes, clean_spaces=False, space_chunks=True,
                            description=description, **flags))
