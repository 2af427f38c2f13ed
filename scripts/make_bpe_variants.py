"""Vocab-only GGUFs for llama.cpp's two byte-level BPE model variants that have no test vocabulary,
from llama.cpp's llama-bpe test vocabulary (tests/data/llama.cpp-tests), as
../shared/vocab/more-models/make_bpe_variants.py builds them with the ``gguf`` package:

- ``whitespace`` (tokenizer.ggml.model and pre both "whitespace"): llama-bpe's tokens and merges;
- ``hybriddna``: the same plus ``<dna>``, ``</dna>``, ``<oov>`` (CONTROL) and the 4,096 DNA
  6-mers, each with the reserved U+E000 suffix llama.cpp's converter adds.

tests/test_more_models.py and bpetok-hf's tests build theirs with :func:`bpe_variant`::

    python scripts/make_bpe_variants.py OUTDIR   # ggml-vocab-whitespace.gguf, ggml-vocab-hybriddna.gguf
"""

from __future__ import annotations

import argparse
import itertools
import pathlib

from bpetok.vocab.gguf import GGUFValueType, read_gguf
from bpetok.vocab.gguf_writer import items_of, write_gguf

LLAMA_BPE = pathlib.Path(__file__).resolve().parent.parent / "tests/data/llama.cpp-tests/ggml-vocab-llama-bpe.gguf.gz"
STRING, UINT32, INT32, ARRAY = GGUFValueType.STRING, GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.ARRAY
CONTROL, NORMAL = 3, 1


def bpe_variant(dst, model: str, pre: str, with_dna: bool = False, merges_extra: tuple = ()):
    """Write to ``dst`` llama-bpe's tokens and merges under ``model`` and ``pre``: with hybriddna's
    added tokens if ``with_dna``, and ``merges_extra`` (merge strings) before llama-bpe's. Returns ``dst``."""
    src = {k: v for k, _, v, _ in items_of(read_gguf(LLAMA_BPE))}
    tokens, types = list(src["tokenizer.ggml.tokens"]), list(src["tokenizer.ggml.token_type"])
    if with_dna:
        tokens += [b"<dna>", b"</dna>", b"<oov>"]
        types += [CONTROL] * 3
        tokens += ["".join(k).encode() + "\ue000".encode() for k in itertools.product("ACGT", repeat=6)]
        types += [NORMAL] * 4096
    write_gguf(dst, [
        ("general.architecture", STRING, "llama", None),
        ("tokenizer.ggml.model", STRING, model, None),
        ("tokenizer.ggml.pre", STRING, pre, None),
        ("tokenizer.ggml.tokens", ARRAY, tokens, STRING),
        ("tokenizer.ggml.token_type", ARRAY, types, INT32),
        ("tokenizer.ggml.merges", ARRAY, list(merges_extra) + list(src["tokenizer.ggml.merges"]), STRING),
        ("tokenizer.ggml.bos_token_id", UINT32, 128000, None),
        ("tokenizer.ggml.eos_token_id", UINT32, 128001, None),
    ])
    return dst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=pathlib.Path)
    out = parser.parse_args().outdir
    print(bpe_variant(out / "ggml-vocab-whitespace.gguf", "whitespace", "whitespace"))
    print(bpe_variant(out / "ggml-vocab-hybriddna.gguf", "hybriddna", "llama-bpe", with_dna=True))


if __name__ == "__main__":
    main()
