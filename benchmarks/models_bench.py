"""Encode speed of bpetok's non-gpt2 models (``llama`` SentencePiece-style BPE, ``gemma4``) next to llama.cpp.

    python3 benchmarks/models_bench.py VOCAB.gguf CORPUS.txt[.xz] ... [--repeat 3] [--limit-mb 1]

For each corpus (cut to ``--limit-mb`` MB of whole paragraphs): bpetok's
``encode(text, parse_special=False)`` on every paragraph, *cold* (a fresh tokenizer) and *warm*
(the same tokenizer again), and llama-cpp-python's ``Llama(path, vocab_only=True).tokenize(...,
add_bos=False, special=False)`` on the same paragraphs; CPU time (``time.process_time``, so that
other processes on a shared machine count less), the median of ``--repeat`` runs, MB/s of UTF-8.
Then whether both gave the same ids for every paragraph.
"""

from __future__ import annotations

import argparse
import lzma
import statistics
import time

import bpetok

MB = 1_000_000


def read_paragraphs(path: str, limit: int) -> list[str]:
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    out, size = [], 0
    for paragraph in text.split("\n\n"):
        if size >= limit:
            break
        out.append(paragraph + "\n\n")
        size += len(out[-1].encode())
    return out


def timed(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("vocab")
    parser.add_argument("corpora", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--limit-mb", type=float, default=1.0)
    args = parser.parse_args()

    try:
        from llama_cpp import Llama

        llama = Llama(args.vocab, vocab_only=True, verbose=False)
    except ImportError:
        llama = None
    load = timed(lambda: bpetok.from_gguf(args.vocab))
    tok = bpetok.from_gguf(args.vocab)
    print(f"{args.vocab}: model={tok.vocabulary.model}, {tok.n_tokens:,} tokens, bpetok load {load:.2f} s CPU")
    for corpus in args.corpora:
        paragraphs = read_paragraphs(corpus, int(args.limit_mb * MB))
        size = sum(len(p.encode()) for p in paragraphs) / MB
        cold, warm, ref = [], [], []
        for _ in range(args.repeat):
            fresh = bpetok.Tokenizer(tok.vocabulary)
            cold.append(timed(lambda: [fresh.encode(p, parse_special=False) for p in paragraphs]))
            warm.append(timed(lambda: [fresh.encode(p, parse_special=False) for p in paragraphs]))
            if llama is not None:
                ref.append(timed(lambda: [llama.tokenize(p.encode(), add_bos=False, special=False) for p in paragraphs]))
        line = (
            f"{corpus}: {size:.2f} MB, bpetok cold {size / statistics.median(cold):.2f} MB/s, "
            f"warm {size / statistics.median(warm):.2f} MB/s"
        )
        if llama is not None:
            same = sum(
                tok.encode(p, parse_special=False) == llama.tokenize(p.encode(), add_bos=False, special=False)
                for p in paragraphs
            )
            line += f", llama.cpp {size / statistics.median(ref):.2f} MB/s; same ids {same}/{len(paragraphs)}"
        print(line)


if __name__ == "__main__":
    main()
