"""Encode speed of the rwkv, plamo2, whitespace and hybriddna models, rwkv next to the ``rwkv``
package's own trie tokenizer.

    python3 benchmarks/more_models_bench.py CORPUS.txt.xz ... --vocab NAME=VOCAB.gguf ... \\
        [--rwkv-tokenizer rwkv/rwkv_tokenizer.py --rwkv-vocab rwkv/rwkv_vocab_v20230424.txt] [--limit-mb 1]

One process. For each vocabulary and corpus (cut to ``--limit-mb`` MB of whole paragraphs): a
fresh tokenizer (its load time printed apart), then ``encode(paragraph, parse_special=False)`` on
every paragraph, *cold* (the first pass) and *warm* (the same tokenizer again); CPU time
(``time.process_time``), MB/s of UTF-8. With ``--rwkv-tokenizer`` (the file
``rwkv/rwkv_tokenizer.py`` of the rwkv sdist, loaded by path: the package itself needs torch),
its ``TRIE_TOKENIZER.encode`` on the same paragraphs, the ratio, and whether its ids are bpetok's.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import lzma
import os
import time

import bpetok

MB = 1_000_000


def read_paragraphs(path: str, limit: int) -> list[str]:
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read(limit * 2)
    out, size = [], 0
    for paragraph in text.split("\n\n"):
        if size >= limit:
            break
        out.append(paragraph + "\n\n")
        size += len(out[-1].encode())
    return out


def timed(encode, paragraphs) -> tuple[float, list]:
    start = time.process_time()
    ids = [encode(p) for p in paragraphs]
    return time.process_time() - start, ids


def rwkv_trie(tokenizer_py: str, vocab_txt: str):
    spec = importlib.util.spec_from_file_location("rwkv_tokenizer", tokenizer_py)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.TRIE_TOKENIZER(vocab_txt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpora", nargs="+")
    parser.add_argument("--vocab", action="append", required=True, help="NAME=PATH (rwkv for the rwkv comparison)")
    parser.add_argument("--rwkv-tokenizer")
    parser.add_argument("--rwkv-vocab")
    parser.add_argument("--limit-mb", type=float, default=1.0)
    args = parser.parse_args()
    limit = int(args.limit_mb * MB)
    texts = {os.path.basename(c).split(".")[0]: read_paragraphs(c, limit) for c in args.corpora}
    trie = None
    if args.rwkv_tokenizer:
        start = time.process_time()
        trie = rwkv_trie(args.rwkv_tokenizer, args.rwkv_vocab)
        gc.collect()
        gc.freeze()
        print(f"rwkv TRIE_TOKENIZER load {time.process_time() - start:.2f} s")
    for name, path in (v.split("=", 1) for v in args.vocab):
        for corpus, paragraphs in texts.items():
            size = sum(len(p.encode()) for p in paragraphs) / MB
            start = time.process_time()
            tok = bpetok.from_gguf(path)
            load = time.process_time() - start
            gc.collect()
            gc.freeze()  # what is loaded lives on: no collection rescans it (nor the rwkv trie's objects)
            encode = lambda text: tok.encode(text, parse_special=False)  # noqa: E731
            cold, ids = timed(encode, paragraphs)
            warm, _ = timed(encode, paragraphs)
            line = (f"{name:12} {corpus:6} {size:.2f} MB  load {load:5.2f} s  cold {size / cold:6.2f} MB/s  "
                    f"warm {size / warm:6.2f} MB/s  [{tok.engine}]")
            if trie is not None and tok.vocabulary.model == "rwkv":
                theirs, their_ids = timed(trie.encode, paragraphs)
                same = sum(a == b for a, b in zip(ids, their_ids))
                line += f"  rwkv TRIE_TOKENIZER {size / theirs:5.2f} MB/s  ratio {theirs / cold:4.1f}x  same ids {same}/{len(ids)}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
