"""How fast each pre-tokenizer family splits and encodes, against qwen2's one-regex fast path.

For one pre name per registered spec (or those given), builds the tokenizer of a vocabulary with
that pre (the qwen2 test vocabulary by default; the BPE model is built once and shared, it does not
depend on the pre-tokenizer) and times, on the same text:

- **split**: ``spec.factory().split`` over the text's lines (CPU time, best of ``--repeat``);
- **cold**: a fresh tokenizer's first ``encode`` of the whole text (space-chunk caches empty);
- **warm**: the same tokenizer's second ``encode`` (whole chunks come from its caches where the
  spec promises ``space_chunks``).

Each figure is also given relative to qwen2 (``x qwen2``: how many times slower). Times are
``time.process_time`` (CPU of this process), so other load on a shared machine matters less, but
it still matters: rerun before trusting a small difference.

    python benchmarks/pretok_bench.py CORPUS.txt.xz --chars 400000
    python benchmarks/pretok_bench.py CORPUS.txt.xz --pre qwen2 deepseek-llm bloom
"""

from __future__ import annotations

import argparse
import dataclasses
import lzma
import pathlib
import sys
import time

import bpetok
import bpetok.models.gpt2
import bpetok.tokenizer
from bpetok.plugins import get_registry

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_VOCAB = ROOT / "tests/data/llama.cpp-tests/ggml-vocab-qwen2.gguf.gz"


def read_text(path: str, chars: int) -> str:
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read(chars)


def best_cpu(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", help="a text file (.xz allowed)")
    parser.add_argument("--vocab", default=str(DEFAULT_VOCAB),
                        help="a gpt2-model GGUF (default: the qwen2 test vocabulary)")
    parser.add_argument("--chars", type=int, default=300_000, help="characters of the corpus to use")
    parser.add_argument("--repeat", type=int, default=3, help="split timings: best of this many")
    parser.add_argument("--pre", nargs="*", help="pre names to time (default: one per registered spec)")
    args = parser.parse_args(argv)

    text = read_text(args.corpus, args.chars)
    lines = text.splitlines(keepends=True)
    registry = get_registry()
    # A spec built from its own vocabulary file (for_vocabulary: bpetok-hf's hf-regex reads the
    # tokenizer.json's passes) cannot be put on the shared test vocabulary, so it is left out.
    pres = args.pre or [row.pre for row in registry.rows() if row.model == "gpt2"
                        and row.pre == row.spec.pre_names[0] and row.spec.for_vocabulary is None]
    if "qwen2" not in pres:
        pres.insert(0, "qwen2")
    base = bpetok.load_vocabulary(args.vocab)
    models = {}
    real = bpetok.models.gpt2.BytePairModel

    def shared_model(tokens, merges, *, ignore_merges=False, **kwargs):
        key = ignore_merges
        if key not in models:
            models[key] = real(tokens, merges, ignore_merges=ignore_merges, **kwargs)
        return models[key]

    bpetok.models.gpt2.BytePairModel = shared_model
    rows = []
    refused = []
    for pre in pres:
        row = registry.get("gpt2", pre)
        if row is None:
            sys.exit(f"no registered pre-tokenizer {pre!r}")
        if row.spec.for_vocabulary is not None:
            sys.exit(f"pre-tokenizer {pre!r} is built from its own vocabulary file; it cannot be timed on {args.vocab}")
        split = row.spec.factory().split
        split_s = best_cpu(lambda: [split(line) for line in lines], args.repeat)
        vocab = dataclasses.replace(base, pre=pre, special_ids=dict(base.special_ids))
        tok = bpetok.Tokenizer(vocab, row.spec)
        tok.encode("warm up the shared model")
        tok = bpetok.Tokenizer(vocab, row.spec)
        start = time.process_time()
        try:
            tok.encode(text, parse_special=False)
        except bpetok.BpetokError as error:  # e.g. 'whitespace' refuses a space inside a piece, as llama.cpp does
            refused.append((pre, str(error)[-160:]))
            continue
        cold = time.process_time() - start
        start = time.process_time()
        tok.encode(text, parse_special=False)
        warm = time.process_time() - start
        rows.append((pre, row.spec.llama_type, row.spec.space_chunks, split_s, cold, warm))
    ref = next(r for r in rows if r[0] == "qwen2")
    mb = len(text.encode("utf-8")) / 1e6
    print(f"{len(text):,} characters ({mb:.2f} MB) of {args.corpus}; CPU seconds, best of {args.repeat} for split")
    print(f"{'pre':24} {'llama.cpp type':18} {'chunks':6} {'split s':>8} {'x qwen2':>7} {'cold s':>7} "
          f"{'x qwen2':>7} {'warm s':>7} {'x qwen2':>7}")
    for pre, llama_type, chunks, split_s, cold, warm in sorted(rows, key=lambda r: r[3]):
        print(f"{pre:24} {llama_type:18} {'yes' if chunks else 'no':6} {split_s:8.3f} {split_s / ref[3]:7.1f} "
              f"{cold:7.3f} {cold / ref[4]:7.1f} {warm:7.3f} {warm / ref[5]:7.1f}")
    for pre, reason in refused:
        print(f"{pre:24} refused this text: ...{reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
