"""llama.cpp's DeepSeek family: DeepSeek LLM and Coder (V1), DeepSeek V3/R1 (with Hunyuan dense,
JoyAI, HY v4) and Spark 2.5.

All are chains. The V1 ones cut newlines out first, then letter runs of a fixed list of scripts,
punctuation runs, trailing whitespace, CJK runs and numbers, each pass inside the pieces the one
before left. V3 cuts number runs of up to three first, then CJK/kana runs, then runs a word pattern
in which an ASCII punctuation mark may lead a run of ASCII letters (``.append``).
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok.chain import chain_spec

# Written with escapes: several of these characters are not NFC, and an editor that normalises
# would change the ranges.
CJK_HANGUL = r"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
DEEPSEEK_LLM = [
    "[\r\n]",
    (
        r"\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
        r"\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
        r"\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
        r"\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
        r"\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
        r"\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102"
        r"\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
        r"\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
        r"\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
        r"\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
        r"\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
        r"\U0001e900-\U0001e943]+"
    ),
    r"\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    r"\s+$",
    CJK_HANGUL,
    r"\p{N}+",
]
DEEPSEEK_CODER = ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK_HANGUL, r"\p{N}"]

# V3's word pattern: an ASCII punctuation mark leading ASCII letters, letters-and-marks runs with
# one optional leading character that is no letter, punctuation or symbol, punctuation/symbol runs.
ASCII_PUNCT_THEN_LETTERS = r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+"
DEEPSEEK_V3_WORDS = (
    ASCII_PUNCT_THEN_LETTERS + r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CJK_KANA = r"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
DEEPSEEK_V3 = [r"\p{N}{1,3}", CJK_KANA, DEEPSEEK_V3_WORDS]
SPARK2_5 = [
    r"\p{N}{1,3}",
    CJK_KANA,
    ASCII_PUNCT_THEN_LETTERS + r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+",
    r"\p{N}",
]


@hookimpl
def bpetok_register_pretokenizers(register):
    # V1's passes leave text no pass matches (symbols, "…") as pieces, spaces included: those
    # chains make no space_chunks promise. V3's word pass matches everything.
    for llama_type, names, passes, space_chunks, description in (
        ("DEEPSEEK_LLM", ("deepseek-llm",), DEEPSEEK_LLM, False,
         "DeepSeek LLM: script letter runs, punctuation, CJK, numbers"),
        ("DEEPSEEK_CODER", ("deepseek-coder",), DEEPSEEK_CODER, False,
         "DeepSeek Coder: letters, punctuation, CJK, digits"),
        ("DEEPSEEK3_LLM", ("deepseek-v3",), DEEPSEEK_V3, True, "DeepSeek V3/R1: numbers in threes, CJK/kana, words"),
        ("HUNYUAN_DENSE", ("hunyuan-dense",), DEEPSEEK_V3, True, "DeepSeek V3's passes"),
        ("JOYAI_LLM", ("joyai-llm",), DEEPSEEK_V3, True, "DeepSeek V3's passes"),
        ("HY_V4", ("hy_v4",), DEEPSEEK_V3, True, "DeepSeek V3's passes"),
        ("SPARK2_5", ("spark2_5",), SPARK2_5, True, "DeepSeek V3's passes, one newline per piece, digits alone"),
    ):
        register(chain_spec("deepseek", llama_type, names, passes, clean_spaces=False, space_chunks=space_chunks,
                            description=description))
