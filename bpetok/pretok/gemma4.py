"""llama.cpp's pre-tokenizer types that run BPE over raw UTF-8 with ``▁`` for spaces, for a ``gpt2``
vocabulary: GEMMA4 (``gemma4``, ``granite-embed-multi-311m``), SARVAM_MOE and MMBERT.

All three split only into runs of non-newlines and runs of newlines, ``[^\\n]+|[\\n]+``, after the
spaces became ``▁`` (U+2581); then (:mod:`bpetok.models.raw_utf8`) GEMMA4 and MMBERT take a newline
run that is a token whole, and MMBERT cuts every line into metaspace words (``▁`` in front, a new
word at each ``▁``). llama.cpp forces BOS on for GEMMA4 (bpetok.vocab.overrides) and marks ``<mask>``
LSTRIP for mmbert; sarvam-moe keeps its spaces when decoding (no clean_spaces).
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok.chain import chain_spec

NEWLINE_RUNS = [r"[^\n]+|[\n]+"]
RAW_UTF8 = {"byte_encode": False, "escape_whitespaces": True}


@hookimpl
def bpetok_register_pretokenizers(register):
    register(chain_spec("gemma4", "GEMMA4", ("gemma4", "granite-embed-multi-311m"), NEWLINE_RUNS,
                        newline_runs_whole=True, **RAW_UTF8,
                        description="Gemma 4: raw UTF-8 BPE by line, ▁ for spaces, newline runs whole"))
    register(chain_spec("gemma4", "SARVAM_MOE", ("sarvam-moe",), NEWLINE_RUNS, clean_spaces=False, **RAW_UTF8,
                        description="Sarvam MoE: raw UTF-8 BPE by line, ▁ for spaces"))
    register(chain_spec("gemma4", "MMBERT", ("mmbert",), NEWLINE_RUNS, newline_runs_whole=True, metaspace_words=True,
                        **RAW_UTF8, description="mmBERT: raw UTF-8 BPE over ▁-led words, newline runs whole"))
