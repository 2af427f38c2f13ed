"""Encode speed of bpetok's SentencePiece-style (``llama``) model next to sentencepiece and llama.cpp.

    python3 benchmarks/spm_bench.py ../shared/corpus/en.txt.xz ../shared/corpus/code.txt.xz \\
        ../shared/corpus/multi.txt.xz [--vocab NAME=PATH ...] [--limit-mb 1] [--repeat 3]

Vocabularies (default): llama.cpp's llama-spm (Llama 2's 32k SPM) and phi-3 test files from
tests/data, and a Gemma-3-like 262k one that ``scripts/make_gemma3_like_vocab.py`` writes to a
temporary directory. For each vocabulary and corpus (its first ``--limit-mb`` MB):

- *one text*: the whole text in one ``encode(text, parse_special=False)`` call; *paragraphs*: the
  text split on blank lines, one call each. bpetok *cold* is a fresh tokenizer (its tables built
  at load, not counted), *warm* the same text again.
- sentencepiece (the peer, no cache: one figure) from a ``ModelProto`` built from the GGUF's
  tokens, scores and types: BPE with byte fallback, the identity normalizer, ``add_dummy_prefix``
  as ``add_space_prefix`` says, user-defined pieces with their spaces as ``▁``. Its ids are held
  to bpetok's (``ids`` column: paragraphs equal / all, and the one text).
- llama.cpp through llama-cpp-python when it is importable (else the column is skipped, with a note).
- for paragraphs, bpetok with ``parse_special=True`` too, and its model alone
  (``model.encode_fragment``, no special-token partition; ids not compared): the partition's
  cost, which the Gemma-3-like vocabulary's thousands of specials make large.

Then load + first encode of each engine (and of bpetok on Qwen3's 151k BPE, run beside it, for
the ratio). CPU time (``time.process_time``), the median of ``--repeat`` runs, MB/s of UTF-8. The
heap is collected before each timed call (``cpu``): the collections a call's own allocations
trigger are counted, not those the young garbage of the calls before it made due.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import lzma
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bpetok  # noqa: E402
from bpetok.vocab.gguf import read_gguf  # noqa: E402

MB = 1_000_000
DATA = ROOT / "tests" / "data"
DEFAULT_VOCABS = {
    "llama-spm": DATA / "llama.cpp-tests" / "ggml-vocab-llama-spm.gguf.gz",
    "phi-3": DATA / "llama.cpp-tests" / "ggml-vocab-phi-3.gguf.gz",
}
QWEN3 = DATA / "ggml-vocab-qwen3.gguf.gz"
SPACE = "\u2581"


def read_text(path: str, limit: int) -> str:
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rb") as f:
        return f.read(limit).decode("utf-8", "ignore")  # cut at a character boundary


def plain_copy(path: pathlib.Path, directory: str) -> str:
    """A .gguf.gz uncompressed (sentencepiece and llama.cpp read plain files)."""
    if not str(path).endswith(".gz"):
        return str(path)
    import gzip

    out = os.path.join(directory, path.name[: -len(".gz")])
    with gzip.open(path, "rb") as src, open(out, "wb") as dst:
        dst.write(src.read())
    return out


def sentencepiece_proto(path: str) -> bytes:
    """A serialized sentencepiece ``ModelProto`` with the GGUF vocabulary's pieces (see the module docstring)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    meta = read_gguf(path).metadata
    model = pb.ModelProto()
    kinds = pb.ModelProto.SentencePiece
    unk = int(meta.get("tokenizer.ggml.unknown_token_id", 0))
    columns = zip(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.scores"], meta["tokenizer.ggml.token_type"])
    for i, (text, score, kind) in enumerate(columns):
        piece = model.pieces.add()
        piece.piece = text.decode("utf-8")
        piece.score = float(score)
        piece.type = int(kind)  # GGUF's token types are sentencepiece's numbers
        if piece.type == kinds.USER_DEFINED:
            piece.piece = piece.piece.replace(" ", SPACE)
        elif i == unk:
            piece.type = kinds.UNKNOWN
        elif piece.type == kinds.UNKNOWN:  # sentencepiece has one (phi-3's [PAD] tokens): never in text either way
            piece.type = kinds.CONTROL
    spec = model.trainer_spec
    spec.model_type = pb.TrainerSpec.BPE
    spec.byte_fallback = True
    spec.vocab_size = len(model.pieces)
    spec.unk_id = unk
    taken = {unk}
    for role, key in (("bos_id", "bos"), ("eos_id", "eos"), ("pad_id", "padding")):
        token_id = int(meta.get(f"tokenizer.ggml.{key}_token_id", -1))
        setattr(spec, role, -1 if token_id in taken else token_id)  # sentencepiece wants them distinct
        taken.add(token_id)
    norm = model.normalizer_spec
    norm.name = "identity"
    norm.add_dummy_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    norm.remove_extra_whitespaces = False
    norm.escape_whitespaces = True
    return model.SerializeToString()


def cpu(fn, *args, **kwargs):
    """CPU seconds of one call, and its result. The heap is collected first: a call does not pay
    for collections that the garbage of earlier calls (another engine's young result lists) makes
    due, which landed in whichever pass came next; the collections the call's own allocations
    trigger are counted."""
    gc.collect()
    start = time.process_time()
    result = fn(*args, **kwargs)
    return time.process_time() - start, result


def median_rate(seconds: list[float], nbytes: int) -> float:
    return nbytes / statistics.median(seconds) / MB


class Engines:
    """Each engine's fresh encoder for one vocabulary."""

    def __init__(self, path: str, proto: bytes):
        self.path, self.proto = path, proto
        self.vocabulary = bpetok.load_vocabulary(path)
        self.llama_cpp = importlib.util.find_spec("llama_cpp") is not None

    def bpetok(self):
        return bpetok.Tokenizer(self.vocabulary)

    def sentencepiece(self):
        import sentencepiece

        return sentencepiece.SentencePieceProcessor(model_proto=self.proto)

    def llama(self):
        import llama_cpp

        return llama_cpp.Llama(self.path, vocab_only=True, verbose=False)


def bench_vocab(engines: Engines, text: str, repeat: int) -> dict:
    paragraphs = [p for p in text.split("\n\n") if p]
    size = len(text.encode())
    para_size = sum(len(p.encode()) for p in paragraphs)
    runs: dict[str, list[float]] = {}

    def add(name, seconds):
        runs.setdefault(name, []).append(seconds)

    ids: dict[str, object] = {}
    for _ in range(repeat):
        tok = engines.bpetok()
        seconds, ids["bpetok"] = cpu(tok.encode, text, parse_special=False)
        add("bpetok text cold", seconds)
        add("bpetok text warm", cpu(tok.encode, text, parse_special=False)[0])
        tok = engines.bpetok()
        seconds, ids["bpetok paragraphs"] = cpu(lambda: [tok.encode(p, parse_special=False) for p in paragraphs])
        add("bpetok paragraphs cold", seconds)
        add("bpetok paragraphs warm", cpu(lambda: [tok.encode(p, parse_special=False) for p in paragraphs])[0])
        tok = engines.bpetok()
        add("bpetok paragraphs cold, parse_special", cpu(lambda: [tok.encode(p) for p in paragraphs])[0])
        model = engines.bpetok().model  # no partition at all: the model's own cost
        add("bpetok paragraphs cold, model alone", cpu(lambda: [model.encode_fragment(p, True) for p in paragraphs])[0])
        sp = engines.sentencepiece()
        seconds, ids["sentencepiece"] = cpu(sp.encode, text)
        add("sentencepiece text", seconds)
        seconds, ids["sentencepiece paragraphs"] = cpu(lambda: [sp.encode(p) for p in paragraphs])
        add("sentencepiece paragraphs", seconds)
        if engines.llama_cpp:
            llm = engines.llama()
            add("llama.cpp text", cpu(llm.tokenize, text.encode(), False, False)[0])
            add("llama.cpp paragraphs", cpu(lambda: [llm.tokenize(p.encode(), False, False) for p in paragraphs])[0])
    rates = {name: median_rate(s, para_size if "paragraphs" in name else size) for name, s in runs.items()}
    same = sum(a == b for a, b in zip(ids["bpetok paragraphs"], ids["sentencepiece paragraphs"]))  # type: ignore[call-overload]
    return {
        "rates": rates,
        "paragraphs": len(paragraphs),
        "same paragraphs": same,
        "same text": ids["bpetok"] == ids["sentencepiece"],
        "tokens": len(ids["bpetok"]),  # type: ignore[arg-type]
    }


def load_times(engines: Engines, repeat: int, qwen3_path: str) -> dict[str, float]:
    """Load + first encode, CPU seconds (median); bpetok's on Qwen3's vocabulary too, each run
    beside this vocabulary's (``bpetok qwen3``), for the ratio."""
    import sentencepiece

    sample = "Hello world, this is the first encode."
    out = {}
    runs: list[tuple[float, float]] = [
        (cpu(lambda: bpetok.from_gguf(engines.path).encode(sample))[0], cpu(lambda: bpetok.from_gguf(qwen3_path).encode(sample))[0])
        for _ in range(repeat)
    ]
    out["bpetok"] = statistics.median(own for own, _ in runs)
    out["bpetok qwen3"] = statistics.median(qwen3 for _, qwen3 in runs)
    out["sentencepiece"] = statistics.median(
        cpu(lambda: sentencepiece.SentencePieceProcessor(model_proto=engines.proto).encode(sample))[0] for _ in range(repeat)
    )
    if engines.llama_cpp:
        out["llama.cpp"] = statistics.median(cpu(lambda: engines.llama().tokenize(sample.encode()))[0] for _ in range(repeat))
    return out


def report(results: dict, loads: dict, llama_cpp: bool) -> str:
    lines = []
    cols = ["bpetok cold", "bpetok warm", "sentencepiece", *(["llama.cpp"] if llama_cpp else []), "cold / sp", "warm / sp"]
    lines.append("| vocabulary | corpus | input | " + " | ".join(cols) + " | ids = sentencepiece |")
    lines.append("|" + "---|" * (len(cols) + 4))
    for (vocab, corpus), r in results.items():
        rates = r["rates"]
        for kind, key in (("one text", "text"), ("paragraphs", "paragraphs")):
            cold, warm = rates[f"bpetok {key} cold"], rates[f"bpetok {key} warm"]
            sp = rates[f"sentencepiece {key}"]
            cells = [f"{cold:.1f}", f"{warm:.1f}", f"{sp:.2f}"]
            if llama_cpp:
                cells.append(f"{rates[f'llama.cpp {key}']:.2f}")
            cells += [f"{cold / sp:.1f}x", f"{warm / sp:.1f}x"]
            same = ("yes" if r["same text"] else "NO") if key == "text" else f"{r['same paragraphs']:,} / {r['paragraphs']:,}"
            lines.append(f"| {vocab} | {corpus} | {kind} | " + " | ".join(cells) + f" | {same} |")
    lines.append("")
    for variant in ("parse_special", "model alone"):
        lines.append(f"bpetok paragraphs cold, {variant} (MB/s): " + ", ".join(
            f"{vocab} {corpus} {r['rates'][f'bpetok paragraphs cold, {variant}']:.1f}" for (vocab, corpus), r in results.items()))
        lines.append("")
    lines.append("")
    lines.append("Load + first encode (CPU s): " + "; ".join(
        f"{vocab}: " + ", ".join(f"{engine} {s:.3f}" for engine, s in times.items()) for vocab, times in loads.items()))
    lines.append("bpetok's load + first encode / bpetok's on qwen3 (151k BPE), run beside it: " + ", ".join(
        f"{vocab} {times['bpetok'] / times['bpetok qwen3']:.2f}x" for vocab, times in loads.items()))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpora", nargs="+", help="UTF-8 text files, optionally .xz-compressed")
    parser.add_argument("--vocab", action="append", default=[], metavar="NAME=PATH",
                        help="vocabularies to run (default: llama-spm, phi-3 and a generated gemma-3-like)")
    parser.add_argument("--limit-mb", type=float, default=1.0, help="MB of each corpus (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is reported")
    args = parser.parse_args(argv)
    try:
        import sentencepiece
    except ImportError:
        parser.error("sentencepiece is not installed: pip install 'bpetok[bench]' (or pip install sentencepiece protobuf)")
    with tempfile.TemporaryDirectory() as tmp:
        vocabs = dict(item.split("=", 1) for item in args.vocab)
        if not vocabs:
            vocabs = {name: plain_copy(path, tmp) for name, path in DEFAULT_VOCABS.items()}
            import make_gemma3_like_vocab

            vocabs["gemma-3-like"] = os.path.join(tmp, "gemma-3-like.gguf")
            make_gemma3_like_vocab.write(vocabs["gemma-3-like"])
        llama_cpp = importlib.util.find_spec("llama_cpp") is not None
        if not llama_cpp:
            print("note: llama-cpp-python is not importable here: no llama.cpp column")
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.1f}; python {platform.python_version()}, sentencepiece {sentencepiece.__version__}, "
              f"bpetok {bpetok.__version__} ({time.strftime('%Y-%m-%d', time.gmtime())})")
        texts = {pathlib.Path(c).name.split(".")[0]: read_text(c, int(args.limit_mb * MB)) for c in args.corpora}
        results, loads = {}, {}
        qwen3_path = plain_copy(QWEN3, tmp)
        for vocab, path in vocabs.items():
            engines = Engines(path, sentencepiece_proto(path))
            loads[vocab] = load_times(engines, args.repeat, qwen3_path)
            for corpus, text in texts.items():
                results[vocab, corpus] = r = bench_vocab(engines, text, args.repeat)
                print(f"{vocab} {corpus}: " + ", ".join(f"{k} {v:.2f}" for k, v in r["rates"].items()), flush=True)
        print()
        print(report(results, loads, llama_cpp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
