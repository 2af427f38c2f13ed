"""Byte-level BPE, llama.cpp's ``gpt2`` model: the merge tables and their merge loop
(:mod:`~bpetok.models.gpt2.bpe`), and the model the Tokenizer calls, with its pre-tokenizer,
caches and C kernel (:mod:`~bpetok.models.gpt2.model`). This module registers it (``bpetok_register_models``).
"""

from __future__ import annotations

from bpetok.hookspecs import hookimpl
from bpetok.models import ModelSpec
from bpetok.models.gpt2.bpe import (
    BYTE_TO_CHAR,
    CHAR_TO_BYTE,
    BytePairModel,
    byte_encode,
    decode_token_text,
    engine,
    kernel_module,
    merge_symbols,
)
from bpetok.models.gpt2.model import ByteLevelModel

__all__ = [
    "BYTE_TO_CHAR", "CHAR_TO_BYTE", "byte_encode", "decode_token_text", "BytePairModel", "ByteLevelModel",
    "kernel_module", "engine", "merge_symbols",
]


def _build_model(vocabulary, pretokenizer):
    """The byte-level model, or its raw-UTF-8 variant where the pre-tokenizer spec says
    ``byte_encode=False`` (llama.cpp's gemma4, mmbert, sarvam-moe, whitespace types)."""
    if not pretokenizer.byte_encode:
        from bpetok.models.raw_utf8 import RawUtf8Model  # imports this module

        return RawUtf8Model(vocabulary, pretokenizer)
    bpe = BytePairModel(
        vocabulary.tokens,
        vocabulary.merges,
        ignore_merges=pretokenizer.ignore_merges,
        path=vocabulary.path,
        token_to_id=vocabulary.token_index(),
    )
    return ByteLevelModel(bpe, pretokenizer, vocabulary)


@hookimpl
def bpetok_register_models(register) -> None:
    register(
        ModelSpec(
            name="gpt2",
            factory=_build_model,
            # llama.cpp's BPE default: BOS and EOS are id 11 unless the file says otherwise.
            special_ids={"bos": 11, "eos": 11},
            description="byte-level BPE over GPT-2's byte alphabet, split by the pre-tokenizer of tokenizer.ggml.pre",
        )
    )
