"""Record llama.cpp's ``token_to_piece`` for every id of a GGUF vocabulary, with llama-cpp-python.

Writes ``[[id, hex(piece with special=True), hex(piece with special=False)], ...]`` as gzipped JSON
(the format of tests/data/*.dump.json.gz), and prints the end-of-generation ids and the
add_bos default llama.cpp reports, for the tests to compare with::

    python scripts/record_pieces.py /tmp/llama-bpe.gguf -o tests/data/llama-bpe.dump.json.gz
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gguf", help="the vocabulary (an uncompressed .gguf file)")
    parser.add_argument("-o", "--output", required=True, help="where to write the pieces (.json.gz)")
    args = parser.parse_args(argv)
    try:
        import llama_cpp
    except ImportError:
        parser.error("llama-cpp-python is not installed: pip install llama-cpp-python==0.3.36")
    model = llama_cpp.Llama(args.gguf, vocab_only=True, verbose=False)  # keep it: it owns the vocab
    vocab = model._model.vocab
    n_tokens = llama_cpp.llama_vocab_n_tokens(vocab)

    def piece(token_id: int, special: bool) -> bytes:
        size = 256
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(vocab, token_id, buf, size, 0, special)
            if n >= 0:
                return buf.raw[:n]
            size = -n  # too small: llama.cpp says how much it needs

    rows = [[i, piece(i, True).hex(), piece(i, False).hex()] for i in range(n_tokens)]
    with gzip.open(args.output, "wt", encoding="ascii") as f:
        json.dump(rows, f, separators=(",", ":"))
    eog = [i for i in range(n_tokens) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    print(f"{args.output}: {n_tokens} pieces; eog ids {eog}; add_bos {llama_cpp.llama_vocab_get_add_bos(vocab)}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
