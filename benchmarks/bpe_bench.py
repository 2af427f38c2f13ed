"""Speed of the batched BPE (``BytePairModel.encode_pieces``) on a corpus's new pieces.

    python3 benchmarks/bpe_bench.py ../shared/vocab/ggml-vocab-qwen3.gguf ../shared/corpus/{en,code,multi}.txt.xz

A tokenizer's first pass over a large text (bench.py's *cold* figure) BPEs every piece it has
not seen in one ``encode_pieces`` call (``ByteLevelModel._fill_chunks``). This script rebuilds that
call's input the same way: the corpus cut at the safe spaces (``_SAFE_SPACE``), the unique chunks
in order of first appearance, joined and pre-tokenized, the unique pieces as UTF-8.

Per corpus it prints the median of ``--repeat`` runs of:

- ``tables``: the model's first-use arrays (``encode_pieces`` of a few pieces on a model whose
  caches were cleared), a cost every cold pass pays once per tokenizer;
- ``batch``: ``encode_pieces`` of all the pieces, tables already built;
- ``per-piece``: the same pieces one ``encode_piece`` call each (``--per-piece``), the path the
  batch replaces;

and checks the batch's result against ``encode_piece_reference`` (the plain heap BPE).

``--against REF`` compares with another version of the batch: ``bpetok/models/gpt2.py`` as
of git revision REF (or a path to such a file) supplies the same model's batch methods, and
the two run alternately, run for run, so that a busy machine slows both alike. It prints both
medians and their ratio (new / REF), and checks that the two give the same ids:

    python3 benchmarks/bpe_bench.py ../shared/vocab/ggml-vocab-qwen3.gguf ../shared/corpus/multi.txt.xz --against HEAD~1

The garbage collector is paused while timing, as ``ByteLevelModel._fill_chunks`` pauses it around
this call (the batch's tens of thousands of new lists would otherwise trigger full collections
of everything the tokenizer holds); ``--keep-gc`` times with it running.
"""

from __future__ import annotations

import argparse
import copy
import gc
import importlib.util
import lzma
import os
import statistics
import subprocess
import sys
import tempfile
import time

import bpetok
from bpetok.models.gpt2.model import _SAFE_SPACE


def read_text(path: str) -> str:
    try:
        with lzma.open(path, "rt", encoding="utf-8") if path.endswith(".xz") else open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise SystemExit(f"bpe_bench: cannot read corpus {path!r}: {exc}") from exc


def new_pieces(tok: bpetok.Tokenizer, text: str) -> list[bytes]:
    """The pieces a cold pass over ``text`` hands to ``encode_pieces`` (ByteLevelModel._fill_chunks)."""
    parts = _SAFE_SPACE.split(text)
    chunks = [part for part in dict.fromkeys(parts[1:]) if part and not part[-1].isspace()]
    pieces = tok.model.pretokenizer.split(" " + " ".join(chunks))
    return [p.encode("utf-8", "surrogatepass") for p in dict.fromkeys(pieces)]


PAUSE_GC = True

# What a batch is made of: copied from the other version's BytePairModel for --against.
BATCH_ATTRIBUTES = ("encode_pieces", "_merge_batch", "_batch_tables", "_pair_ranks", "_hash_slots", "_hash_keys",
                    "BATCH_LONGEST", "_BATCH_BYTES", "_BATCH_TAIL")


def load_other_model(ref: str) -> type:
    """A BytePairModel subclass whose batch methods are ``bpetok/models/gpt2.py``'s at git
    revision ``ref`` (or in the file ``ref``); everything else is this checkout's."""
    from bpetok.models.gpt2 import BytePairModel

    if os.path.isfile(ref):
        with open(ref, encoding="utf-8") as f:
            source = f.read()
    else:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            source = subprocess.run(
                ["git", "-C", root, "show", f"{ref}:bpetok/models/gpt2.py"], capture_output=True, text=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = (getattr(exc, "stderr", "") or str(exc)).strip()
            message = f"bpe_bench: --against {ref!r}: not a file, and git cannot show its gpt2.py: {detail}"
            raise SystemExit(message) from exc
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, encoding="utf-8") as f:
        f.write(source)
    try:
        spec = importlib.util.spec_from_file_location("bpe_bench_against", f.name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        os.unlink(f.name)
    other = module.BytePairModel.__dict__
    missing = [name for name in ("encode_pieces", "_merge_batch", "_batch_tables") if name not in other]
    if missing:
        raise SystemExit(f"bpe_bench: --against {ref!r}: its BytePairModel has no {', '.join(missing)}")
    return type("OtherBytePairModel", (BytePairModel,), {k: other[k] for k in BATCH_ATTRIBUTES if k in other})


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
    parser.add_argument(
        "--against", metavar="REF", help="also time gpt2.py's batch at git revision REF (or in file REF), alternately"
    )
    args = parser.parse_args(argv)
    global PAUSE_GC
    PAUSE_GC = not args.keep_gc
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    try:
        tok = bpetok.from_gguf(args.vocab)
    except (OSError, bpetok.BpetokError) as exc:
        parser.error(f"cannot load vocabulary {args.vocab!r}: {exc}")
    bpe = tok.model.bpe
    # Whatever encode_pieces caches on the model (its arrays) is not there yet: remember the
    # attributes of a model that has never encoded, to make fresh copies of it.
    pristine = set(vars(bpe))

    def fresh_model(cls=None):
        model = copy.copy(bpe)
        for name in set(vars(model)) - pristine:
            delattr(model, name)
        if cls is not None:
            model.__class__ = cls
        return model

    other = load_other_model(args.against) if args.against else None

    gc_note = "running" if args.keep_gc else "paused"
    print(f"{args.vocab}: {bpe.n_tokens} tokens, {len(bpe.ranks)} merges; median of {args.repeat}, gc {gc_note}")
    failed = False
    for path in args.corpora:
        pieces = new_pieces(tok, read_text(path))
        mean = sum(map(len, pieces)) / max(len(pieces), 1)
        longest = max(map(len, pieces), default=0)
        sample = pieces[:100]
        if other is not None:
            print(f"{path}: {len(pieces)} pieces (mean {mean:.1f} bytes, max {longest})", flush=True)
            failed |= compare(fresh_model, other, args, pieces, sample)
            continue
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


def compare(fresh_model, other: type, args, pieces: list[bytes], sample: list[bytes]) -> bool:
    """Time this checkout's batch and ``other``'s alternately (who goes first alternates too);
    print both medians and the ratio; True if their ids differ."""
    times: dict[str, dict[str, list[float]]] = {"this": {"tables": [], "batch": []}, "REF": {"tables": [], "batch": []}}
    models = {}
    results = {}
    for run in range(args.repeat):
        order = (("this", None), ("REF", other)) if run % 2 == 0 else (("REF", other), ("this", None))
        for label, cls in order:
            times[label]["tables"].append(timed(lambda: fresh_model(cls).encode_pieces(sample))[0])
            if label not in models:
                models[label] = fresh_model(cls)
                models[label].encode_pieces(sample)
            elapsed, results[label] = timed(lambda: models[label].encode_pieces(pieces))
            times[label]["batch"].append(elapsed)
    for what in ("tables", "batch"):
        this, ref = (statistics.median(times[label][what]) for label in ("this", "REF"))
        print(f"  {what}: this {this:.4f} s, {args.against} {ref:.4f} s, ratio {this / ref:.2f}")
    same = results["this"] == results["REF"]
    print("  same ids" if same else f"  DIFFERENT ids from {args.against}", flush=True)
    return not same


if __name__ == "__main__":
    sys.exit(main())
