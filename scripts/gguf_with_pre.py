"""Copy a GGUF vocabulary with ``tokenizer.ggml.pre`` (and optionally ``tokenizer.ggml.model``) changed.

llama.cpp has no test vocabulary for some pre-tokenizer types; a copy of one of its test
vocabularies with only these keys changed makes llama.cpp tokenize with that type's rules, so its
ids test bpetok's implementation of them. The raw-UTF-8 types (gemma4, granite-embed-multi-311m,
mmbert, sarvam-moe, whitespace) use llama.cpp's Gemma 4 test vocabulary, whose tokens use ``▁``
and ``<0xXX>`` bytes, as a ``gpt2`` model::

    python scripts/gguf_with_pre.py tests/data/llama.cpp-tests/ggml-vocab-gemma-4.gguf.gz \\
        /tmp/mmbert.gguf --pre mmbert --model gpt2
"""

from __future__ import annotations

import argparse


def gguf_with_pre(src: str, dst: str, pre: str, model: str | None = None) -> None:
    """Copy ``src`` (plain or .gz) to ``dst`` with tokenizer.ggml.pre = ``pre`` ("" drops the key)
    and, if given, tokenizer.ggml.model = ``model``."""
    from bpetok.vocab.gguf import GGUFValueType, read_gguf
    from bpetok.vocab.gguf_writer import items_of, write_gguf

    items = []
    for item in items_of(read_gguf(src)):
        if item[0] == "tokenizer.ggml.pre":
            continue
        if item[0] == "tokenizer.ggml.model" and model:
            item = ("tokenizer.ggml.model", GGUFValueType.STRING, model, None)
        items.append(item)
    if pre:  # "" is a file without the key (llama.cpp's default pre-tokenizer)
        at = next(i for i, item in enumerate(items) if item[0] == "tokenizer.ggml.model") + 1
        items.insert(at, ("tokenizer.ggml.pre", GGUFValueType.STRING, pre, None))
    write_gguf(dst, items)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", help="the GGUF vocabulary to copy (.gguf or .gguf.gz)")
    parser.add_argument("dst", help="where to write the copy (.gguf)")
    parser.add_argument("--pre", required=True, help='the new tokenizer.ggml.pre ("" for none)')
    parser.add_argument("--model", help="the new tokenizer.ggml.model (default: keep the file's)")
    args = parser.parse_args(argv)
    gguf_with_pre(args.src, args.dst, args.pre, args.model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
