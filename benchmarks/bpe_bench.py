"""Speed of the batched BPE (``BytePairModel.encode_pieces``) on a corpus's new pieces.

    python3 benchmarks/bpe_bench.py ../shared/vocab/ggml-vocab-qwen3.gguf ../shared/corpus/{en,code,multi}.txt.xz

A tokenizer's first pass over a large text (bench.py's *cold* figure) BPEs every piece it has
not seen in one ``encode_pieces`` call (``Tokenizer._fill_chunks``). This script rebuilds that
call's input the same way: the corpus cut at the safe spaces (``_SAFE_SPACE``), the unique chunks
in order of first appearance, joined and pre-tokenized, the unique pieces as UTF-8.

Per corpus it prints the median of ``--repeat`` runs of:

- ``tables``: the model's first-use arrays (``encode_pieces`` of a few pieces on a model whose
  caches were cleared), a cost every cold pass pays once per tokenizer;
- ``batch``: ``encode_pieces`` of all the pieces, tables already built;
- ``per-piece``: the same pieces one ``encode_piece`` call each (``--per-piece``), the path the
  batch replaces;

and checks the batch's result against ``encode_piece_reference`` (the plain heap BPE).

The garbage collector is paused while timing, as ``Tokenizer._fill_chunks`` pauses it around
this call (the batch's tens of thousands of new lists would otherwise trigger full collections
of everything the tokenizer holds); ``--keep-gc`` times with it running.
"""

from __future__ import annotations

import argparse
import copy
import gc
import lzma
import statistics
import sys
import time

import bpetok
from bpetok.tokenizer import _SAFE_SPACE


def read_text(path: str) -> str:
    try:
        with lzma.open(path, "rt", encoding="utf-8") if path.endswith(".xz") else open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise SystemExit(f"bpe_bench: cannot read corpus {path!r}: {exc}") from exc


def new_pieces(tok: bpetok.Tokenizer, text: str) -> list[bytes]:
    """The pieces a cold pass over ``text`` hands to ``encode_pieces`` (Tokenizer._fill_chunks)."""
    parts = _SAFE_SPACE.split(text)
    chunks = [part for part in dict.fromkeys(parts[1:]) if part and not part[-1].isspace()]
    pieces = tok.pretokenizer.split(" " + " ".join(chunks))
    return [p.encode("utf-8", "surrogatepass") for p in dict.fromkeys(pieces)]


PAUSE_GC = True


def timed(fn) -> tuple[float, object]:
    paused = PAUSE_GC and gc.isenabled()
    if paused:
        gc.disable()
    try:
        start = time.perf_counter()
        result = fn()
        return time.perf_counter() - start, result
    finally:
        if paused:
            gc.enable()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vocab", help="a GGUF vocabulary (ggml-vocab-*.gguf)")
    parser.add_argument("corpora", nargs="+", help="UTF-8 text files, optionally .xz-compressed")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure; the median is printed (default 5)")
    parser.add_argument("--per-piece", action="store_true", help="also time one encode_piece call per piece")
    parser.add_argument("--no-check", action="store_true", help="skip the comparison with encode_piece_reference")
    parser.add_argument("--keep-gc", action="store_true", help="time with the garbage collector running")
    args = parser.parse_args(argv)
    global PAUSE_GC
    PAUSE_GC = not args.keep_gc
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    try:
        tok = bpetok.from_gguf(args.vocab)
    except (OSError, bpetok.BpetokError) as exc:
        parser.error(f"cannot load vocabulary {args.vocab!r}: {exc}")
    bpe = tok.bpe
    # Whatever encode_pieces caches on the model (its arrays) is not there yet: remember the
    # attributes of a model that has never encoded, to make fresh copies of it.
    pristine = set(vars(bpe))

    def fresh_model():
        model = copy.copy(bpe)
        for name in set(vars(model)) - pristine:
            delattr(model, name)
        return model

    gc_note = "running" if args.keep_gc else "paused"
    print(f"{args.vocab}: {bpe.n_tokens} tokens, {len(bpe.ranks)} merges; median of {args.repeat}, gc {gc_note}")
    failed = False
    for path in args.corpora:
        pieces = new_pieces(tok, read_text(path))
        mean = sum(map(len, pieces)) / max(len(pieces), 1)
        longest = max(map(len, pieces), default=0)
        sample = pieces[:100]
        tables = statistics.median(timed(lambda: fresh_model().encode_pieces(sample))[0] for _ in range(args.repeat))
        model = fresh_model()
        model.encode_pieces(sample)
        runs = [timed(lambda: model.encode_pieces(pieces)) for _ in range(args.repeat)]
        batch = statistics.median(t for t, _ in runs)
        line = (
            f"{path}: {len(pieces)} pieces (mean {mean:.1f} bytes, max {longest}): tables {tables:.3f} s, "
            f"batch {batch:.3f} s = {batch / len(pieces) * 1e6:.2f} us/piece"
        )
        if args.per_piece:
            one = statistics.median(timed(lambda: list(map(model.encode_piece, pieces)))[0] for _ in range(args.repeat))
            line += f", per-piece {one:.3f} s = {one / len(pieces) * 1e6:.2f} us/piece"
        if not args.no_check:
            expected = list(map(model.encode_piece_reference, pieces))
            bad = sum(result != expected for _, result in runs)
            line += ", exact" if not bad else f", DIFFERS from encode_piece_reference in {bad} runs"
            failed |= bool(bad)
        print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
