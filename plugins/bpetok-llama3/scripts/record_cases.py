"""Record llama.cpp's token ids (and detokenized text) for a GGUF vocabulary, as test cases.

Uses llama-cpp-python (``pip install llama-cpp-python==0.3.36``), which loads the vocabulary the
way llama.cpp does (``vocab_only=True``). For each input text and each ``parse_special`` mode it
writes one JSON line::

    {"text": str, "special": bool, "add_special": bool, "ids": [int], "detok": hex}

``ids`` is ``llama_tokenize(vocab, text, add_special, parse_special)`` and ``detok`` is
``llama_detokenize(vocab, ids, remove_special=False, unparse_special=True)`` as hex: the bytes
bpetok's ``Tokenizer.decode_bytes`` must give, clean_spaces included.

Inputs are texts separated by llama.cpp's ``\\n__ggml_vocab_test__\\n`` line (the ``.inp`` format of
llama.cpp's own tokenizer tests); pass several files to concatenate them. Example, from this
plugin's directory::

    python scripts/record_cases.py ggml-vocab-llama-bpe.gguf tests/data/ggml-vocab-llama-bpe.gguf.inp \\
        tests/data/extra-cases.inp --add-special -o tests/data/llama-bpe-add-special.jsonl.gz
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import sys

SEPARATOR = "\n__ggml_vocab_test__\n"


def read_inputs(paths: list[str]) -> list[str]:
    texts: list[str] = []
    for path in paths:
        with open(path, encoding="utf-8", newline="") as f:
            data = f.read()
        if SEPARATOR not in data:
            sys.exit(f"{path}: no {SEPARATOR.strip()!r} separator line; each text must be followed by one")
        texts.extend(data.split(SEPARATOR)[:-1])  # every text, the last included, ends with it
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gguf", help="the vocabulary (an uncompressed .gguf file)")
    parser.add_argument("inputs", nargs="+", help="text files in llama.cpp's .inp format")
    parser.add_argument("-o", "--output", required=True, help="where to write the cases (.jsonl.gz)")
    parser.add_argument("--add-special", action="store_true", help="tokenize with add_special=True (BOS/EOS)")
    args = parser.parse_args(argv)

    try:
        import llama_cpp
    except ImportError:
        parser.error("llama-cpp-python is not installed: pip install llama-cpp-python==0.3.36")
    model = llama_cpp.Llama(args.gguf, vocab_only=True, verbose=False)
    vocab = model._model.vocab

    def detokenize(ids: list[int]) -> bytes:
        size = 64 + 64 * len(ids)
        buf = ctypes.create_string_buffer(size)
        arr = (llama_cpp.llama_token * len(ids))(*ids)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, size, False, True)
        if n < 0:
            raise RuntimeError(f"detokenize needs {-n} bytes, had {size}")
        return buf.raw[:n]

    count = 0
    with gzip.open(args.output, "wt", encoding="utf-8") as out:
        for text in read_inputs(args.inputs):
            for special in (False, True):
                # Llama.tokenize calls llama_tokenize(vocab, text, add_special=add_bos, parse_special=special).
                ids = model.tokenize(text.encode("utf-8"), add_bos=args.add_special, special=special)
                case = {"text": text, "special": special, "add_special": args.add_special, "ids": ids,
                        "detok": detokenize(ids).hex()}
                out.write(json.dumps(case, ensure_ascii=False) + "\n")
                count += 1
    print(f"{args.output}: {count} cases", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
