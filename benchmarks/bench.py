"""Side-by-side encode speed of bpetok, tiktoken, HF tokenizers and llama.cpp on one GGUF vocabulary.

    python3 benchmarks/bench.py VOCAB.gguf CORPUS.txt[.xz] ... [--repeat 3] [--json OUT] [--plot OUT.png]

Every engine is built in this process from the same GGUF file (read with bpetok's reader):

- ``tiktoken``: ``tiktoken.Encoding`` with mergeable ranks from the NORMAL tokens' raw bytes
  (GPT-2 characters decoded back to bytes; rank = token id, which for Qwen's vocabulary is merge
  order), the qwen2 pattern, CONTROL/USER_DEFINED tokens as special tokens; ``encode_ordinary``.
- ``hf``: HF ``tokenizers`` with a BPE model (the GGUF's vocabulary and merges),
  ``Split(qwen2 pattern, isolated)`` + ``ByteLevel(use_regex=False)``, a ByteLevel decoder.
- ``quicktok``: quicktok-v1 (``pip install quicktok-v1``, C++), its own bundled Qwen3 encoding
  (``quicktok.Tokenizer("qwen3", "")``), ``encode_ordinary``; only for a qwen2-family GGUF, and
  skipped when not installed (the id check below says whether it gave bpetok's ids).
- ``llama.cpp``: llama-cpp-python's ``Llama(path, vocab_only=True).tokenize(..., special=False)``
  (skipped when not installed).
- ``bpetok``: ``bpetok.from_gguf(path).encode(text, parse_special=False)``.

For each engine and corpus: MB/s (UTF-8 bytes) and tokens/s, *cold* (a fresh tokenizer, first
pass over the corpus), *warm* (the same tokenizer, second pass) and *steady* (a fresh tokenizer
that has encoded the first half of the corpus, timed on the second half: text it has not seen).
Each figure is the median of ``--repeat`` runs. Then whether every engine gave bpetok's ids;
bpetok's ``encode_batch`` on the corpora's paragraphs against one worker; the whole-process time
and peak RSS of loading the vocabulary plus one encode, for bpetok and for llama-cpp-python's
vocab-only load; and the time of each 1 MB pathological input per engine (a subprocess each).
"""

from __future__ import annotations

import argparse
import atexit
import json
import lzma
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import bpetok
from bpetok.models.gpt2 import CHAR_TO_BYTE
from bpetok.vocab import TokenType

# The qwen2 pre-tokenizer's pattern as Qwen's tokenizer.json writes it (tiktoken and HF run it
# with \p{..} classes; bpetok's qwen2 plugin runs the same pattern over collapsed text).
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
MB = 1_000_000


# -- engines -------------------------------------------------------------------------------------
# Each maker returns encode(text) -> list[int]; calling the maker again gives a fresh tokenizer.


def make_bpetok(path, pure_python=False):
    vocab = bpetok.load_vocabulary(path)
    spec = bpetok.from_gguf(path).spec

    def fresh():
        # The engine is picked when a Tokenizer is made: BPETOK_PURE_PYTHON=1 for the reference.
        saved = os.environ.get("BPETOK_PURE_PYTHON")
        os.environ["BPETOK_PURE_PYTHON"] = "1" if pure_python else "0"
        try:
            tok = bpetok.Tokenizer(vocab, spec)
        finally:
            if saved is None:
                del os.environ["BPETOK_PURE_PYTHON"]
            else:
                os.environ["BPETOK_PURE_PYTHON"] = saved
        assert tok.engine == ("pure Python" if pure_python else "C kernel"), tok.engine
        return lambda text: tok.encode(text, parse_special=False)

    return fresh


def make_bpetok_python(path):
    return make_bpetok(path, pure_python=True)


def make_tiktoken(path):
    import tiktoken

    vocab = bpetok.load_vocabulary(path)
    ranks, specials = {}, {}
    for i, (text, kind) in enumerate(zip(vocab.tokens, vocab.token_types)):
        if kind == TokenType.NORMAL:
            ranks[bytes(CHAR_TO_BYTE[c] for c in text.decode("utf-8"))] = i
        elif kind in (TokenType.CONTROL, TokenType.USER_DEFINED):
            specials[text.decode("utf-8")] = i

    def fresh():
        enc = tiktoken.Encoding("gguf", pat_str=QWEN2_PATTERN, mergeable_ranks=ranks, special_tokens=specials)
        return enc.encode_ordinary

    return fresh


def make_quicktok(path):
    import quicktok

    pre = bpetok.load_vocabulary(path).pre
    if pre != "qwen2":
        raise SystemExit(f"bench: quicktok ships Qwen3's encoding only; {path} is pre={pre!r} (drop it from --engines)")

    def fresh():
        return quicktok.Tokenizer("qwen3", "").encode_ordinary  # not get_encoding: that one is cached

    return fresh


def make_hf(path):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = bpetok.load_vocabulary(path)
    table = {t.decode("utf-8"): i for i, (t, kind) in enumerate(zip(vocab.tokens, vocab.token_types)) if kind == TokenType.NORMAL}
    merges = [tuple(m.decode("utf-8").split(" ", 1)) for m in vocab.merges]

    def fresh():
        tok = Tokenizer(models.BPE(table, merges))
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tok.decoder = decoders.ByteLevel()
        return lambda text: tok.encode(text, add_special_tokens=False).ids

    return fresh


def make_llama(path):
    from llama_cpp import Llama

    from llama_cpp_ratio import plain_gguf  # llama.cpp reads plain GGUF files only

    scratch = tempfile.mkdtemp(prefix="bench-gguf-")
    atexit.register(shutil.rmtree, scratch, True)
    path = plain_gguf(path, scratch)

    def fresh():
        llm = Llama(path, vocab_only=True, verbose=False)
        return lambda text: llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    return fresh


ENGINES = {
    "bpetok": make_bpetok,
    "bpetok-py": make_bpetok_python,
    "tiktoken": make_tiktoken,
    "quicktok": make_quicktok,
    "hf": make_hf,
    "llama.cpp": make_llama,
}


# -- measurements --------------------------------------------------------------------------------


def read_corpus(path: str) -> str:
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rb") as f:
        return f.read().decode("utf-8")


def timed(fn, *args):
    """CPU seconds of this process (the machine may be shared: wall time would count others' work)."""
    start = time.process_time()
    result = fn(*args)
    return time.process_time() - start, result


def timed_wall(fn, *args):
    """Wall seconds: what a pool's speedup is about (its workers' CPU is not this process's)."""
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def bench_corpus(makers: dict, text: str, repeat: int) -> dict:
    """cold/warm/steady for every engine, the engines alternating within each repeat (so a busy
    spell on a shared machine is spread over all of them)."""
    size = len(text.encode("utf-8"))
    half = len(text) // 2
    runs = {engine: {"cold": [], "warm": [], "steady": [], "ids": None} for engine in makers}
    for _ in range(repeat):
        for engine, fresh in makers.items():
            run = runs[engine]
            encode = fresh()
            seconds, run["ids"] = timed(encode, text)
            run["cold"].append(seconds)
            run["warm"].append(timed(encode, text)[0])
            encode = fresh()
            encode(text[:half])
            run["steady"].append(timed(encode, text[half:])[0])
    second_half = len(text[half:].encode("utf-8"))
    results = {}
    for engine, run in runs.items():
        n_ids = len(run["ids"])
        out = {"bytes": size, "tokens": n_ids}
        for name, nbytes in (("cold", size), ("warm", size), ("steady", second_half)):
            median = statistics.median(run[name])
            out[name] = {"seconds": median, "MB/s": nbytes / median / MB, "tokens/s": n_ids * nbytes / size / median}
        results[engine] = (out, run["ids"])
    return results


def count_differences(reference, encode, text: str) -> int:
    """How many paragraphs (text split at blank lines) an engine encodes differently."""
    paragraphs = text.split("\n\n")
    return sum(reference(p) != encode(p) for p in paragraphs)


# Each child prints its own peak RSS: ru_maxrss from wait4 would include the forked parent's
# pages before exec, so the figure is the kernel's VmHWM of the child's own address space.
PEAK = "; print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')))"
CHILD = {
    "bpetok": "import bpetok, sys; tok = bpetok.from_gguf(sys.argv[1]); tok.encode('Hello world')" + PEAK,
    "llama.cpp": (
        "import sys; from llama_cpp import Llama; "
        "Llama(sys.argv[1], vocab_only=True, verbose=False).tokenize(b'Hello world', add_bos=False, special=False)"
    ) + PEAK,
    "python": "pass" + PEAK,
}


def _child_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bytecode_cached_env() -> dict:
    """This environment for a child that runs as an installed package does: with bytecode caching
    (pip compiles .pyc files at install; with ``PYTHONDONTWRITEBYTECODE`` set, each child would
    compile bpetok's sources again)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def load_process(path: str, repeat: int) -> dict:
    """Whole-process wall time, CPU time (user + system, the child's own: steadier than wall
    time on a shared machine) and peak RSS of loading + one encode, medians of ``repeat`` runs,
    the processes alternating.

    The children run with bytecode caching on, after one untimed run each, as an installed
    package runs (pip compiles its .pyc files at install): with ``PYTHONDONTWRITEBYTECODE`` set,
    every run would compile bpetok's sources again (~0.1 s) while llama_cpp's are compiled."""
    names = [name for name in CHILD if name != "llama.cpp" or _installed("llama_cpp")]
    runs: dict[str, dict[str, list]] = {name: {"walls": [], "cpus": [], "rss": []} for name in names}
    env = bytecode_cached_env()
    for name in names:
        subprocess.run([sys.executable, "-c", CHILD[name], path], capture_output=True, env=env)
    for _ in range(repeat):
        for name in names:
            start, cpu = time.perf_counter(), _child_cpu()
            done = subprocess.run([sys.executable, "-c", CHILD[name], path], capture_output=True, text=True, env=env)
            runs[name]["walls"].append(time.perf_counter() - start)
            runs[name]["cpus"].append(_child_cpu() - cpu)
            if done.returncode != 0:
                raise SystemExit(f"bench: the {name} load subprocess failed (exit {done.returncode}): {done.stderr[-500:]}")
            runs[name]["rss"].append(int(done.stdout.split()[-1]) / 1024)  # VmHWM is in kB
    return {
        name: {
            "seconds": statistics.median(run["walls"]),
            "cpu_seconds": statistics.median(run["cpus"]),
            "peak_MiB": statistics.median(run["rss"]),
        }
        for name, run in runs.items()
    }


def _burn(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def parallel_ceiling(workers: int, n: int = 10_000_000) -> float:
    """The speedup ``workers`` processes get on pure-Python CPU work right now (other load eats it)."""
    import multiprocessing

    start = time.perf_counter()
    for _ in range(workers):
        _burn(n)
    serial = time.perf_counter() - start
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        start = time.perf_counter()
        pool.map(_burn, [n] * workers)
        parallel = time.perf_counter() - start
    return serial / parallel


def batch(fresh_tok, texts: list[str], repeat: int) -> dict:
    """bpetok's encode_batch (all CPUs: threads sharing the tokenizer) against one worker on the
    same texts, MB/s of wall time (only a quiet machine gives a meaningful figure).

    *fresh*: a new tokenizer for each run (the threads fill its caches together); *warm*: a
    tokenizer that has seen the texts.
    The speedup is the median over runs of each run's one-process time over its batch time,
    timed back to back (steadier under other load than a ratio of two medians).
    """
    size = sum(len(t.encode("utf-8")) for t in texts)
    workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out = {"texts": len(texts), "bytes": size, "workers": workers, "ceiling": []}
    for kind in ("fresh", "warm"):
        single, multi = [], []
        for _ in range(repeat):
            out["ceiling"].append(parallel_ceiling(workers))
            tok = fresh_tok()
            if kind == "warm":
                tok.encode_batch(texts, parse_special=False, workers=1)
            single.append(timed_wall(lambda: tok.encode_batch(texts, parse_special=False, workers=1))[0])
            if kind == "fresh":
                tok = fresh_tok()
            multi.append(timed_wall(lambda: tok.encode_batch(texts, parse_special=False))[0])
        one, many = statistics.median(single), statistics.median(multi)
        ratio = statistics.median(a / b for a, b in zip(single, multi))
        out[kind] = {"single_MB/s": size / one / MB, "batch_MB/s": size / many / MB, "speedup": ratio}
    out["ceiling"] = statistics.median(out["ceiling"])
    return out


def pathological_inputs() -> dict[str, str]:
    rng = random.Random(0)
    return {
        "one letter": "a" * MB,
        "spaces": " " * MB,
        "digits": "7" * MB,
        "CJK, no spaces": "".join(chr(rng.randrange(0x4E00, 0x9FA6)) for _ in range(MB // 3)),
        "one emoji": "\U0001f600" * (MB // 4),
    }


PATHOLOGICAL_CHILD = """
import sys, time, json
sys.path.insert(0, {here!r})
import bench
fresh = bench.ENGINES[{engine!r}]({path!r})
text = bench.pathological_inputs()[{name!r}]
encode = fresh()
start = time.process_time()
encode(text)
print(json.dumps(time.process_time() - start))
"""


def pathological(path: str, engines: list[str], timeout: float) -> dict:
    """Seconds per 1 MB pathological input and engine, each in a subprocess.

    None: timed out; a string: the engine failed (its last line of error output).
    """
    here = os.path.dirname(os.path.abspath(__file__))
    out = {}
    for name in pathological_inputs():
        out[name] = {}
        for engine in engines:
            code = PATHOLOGICAL_CHILD.format(here=here, engine=engine, path=path, name=name)
            try:
                done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                out[name][engine] = None
                continue
            if done.returncode != 0:  # e.g. tiktoken's regex overflows its stack on 1 MB of spaces
                last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
                out[name][engine] = f"failed: {last[:120]}"
                continue
            out[name][engine] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def machine() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    versions = {"python": platform.python_version(), "bpetok": bpetok.__version__}
    for module, dist in (("tiktoken", "tiktoken"), ("tokenizers", "tokenizers"), ("llama_cpp", "llama_cpp_python"), ("regex", "regex")):
        try:
            from importlib.metadata import version

            versions[module] = version(dist.replace("_", "-"))
        except Exception:
            versions[module] = None
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "load_average_start": os.getloadavg(),
        "platform": platform.platform(),
        "versions": versions,
    }


# -- report --------------------------------------------------------------------------------------


def report(results: dict) -> str:
    lines = []
    engines = results["engines"]
    corpora = list(results["corpora"])
    for phase in ("cold", "warm", "steady") if corpora else ():
        lines += [f"\n{phase} — MB/s (tokens/s); ratio = bpetok / engine\n"]
        lines += ["| engine | " + " | ".join(corpora) + " |", "|---|" + "---|" * len(corpora)]
        for engine in engines:
            cells = []
            for corpus in corpora:
                r = results["corpora"][corpus]["engines"].get(engine)
                cells.append("—" if r is None else f"{r[phase]['MB/s']:.2f} ({r[phase]['tokens/s'] / 1e3:.0f}k)")
            lines.append(f"| {engine} | " + " | ".join(cells) + " |")
        for engine in engines:
            if engine == "bpetok":
                continue
            ratios = []
            for corpus in corpora:
                rs = results["corpora"][corpus]["engines"]
                ratios.append(rs["bpetok"][phase]["MB/s"] / rs[engine][phase]["MB/s"] if engine in rs else None)
            shown = [f"**{r:.2f}×**" if r is not None else "—" for r in ratios]
            present = [r for r in ratios if r is not None]
            least = f" (min {min(present):.2f}×)" if present else ""
            lines.append(f"| bpetok / {engine}{least} | " + " | ".join(shown) + " |")
    lines += ["\nSame ids as bpetok (paragraphs that differ when not):\n"] if corpora else []
    for corpus, data in results["corpora"].items():
        same = ", ".join(f"{e}: {'yes' if d == 0 else f'NO ({d} paragraphs differ)'}" for e, d in data["differences"].items())
        lines.append(f"- {corpus} ({data['tokens']} tokens): {same}")
    if "batch" in results:
        b = results["batch"]
        lines += [
            f"\nencode_batch on {b['texts']} paragraphs of the corpora ({b['bytes'] / MB:.1f} MB), {b['workers']} workers "
            f"(pure-Python CPU work got {b['ceiling']:.2f}× from {b['workers']} processes during this run)\n",
            "| tokenizer | one worker MB/s | encode_batch MB/s | speedup |",
            "|---|---|---|---|",
        ]
        for kind in ("fresh", "warm"):
            r = b[kind]
            lines.append(f"| {kind} | {r['single_MB/s']:.2f} | {r['batch_MB/s']:.2f} | **{r['speedup']:.2f}×** |")
    if "load" in results:
        lines += [
            "\nWhole process: load the vocabulary + encode 'Hello world' (median)\n",
            "| | wall seconds | CPU seconds | peak RSS MiB |",
            "|---|---|---|---|",
        ]
        for name, r in results["load"].items():
            lines.append(f"| {name} | {r['seconds']:.3f} | {r['cpu_seconds']:.3f} | {r['peak_MiB']:.0f} |")
    if "pathological" in results:
        names = list(next(iter(results["pathological"].values())))
        lines += ["\nPathological inputs, 1 MB each: seconds (fresh tokenizer)\n", "| input | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for case, row in results["pathological"].items():
            cells = [
                f"> {results['pathological_timeout']:.0f}" if row[n] is None else row[n] if isinstance(row[n], str) else f"{row[n]:.2f}"
                for n in names
            ]
            lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    corpora = list(results["corpora"])
    engines = results["engines"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
    for ax, phase in zip(axes, ("cold", "warm", "steady")):
        width = 0.8 / len(engines)
        for k, engine in enumerate(engines):
            values = [results["corpora"][c]["engines"].get(engine, {}).get(phase, {}).get("MB/s", 0) for c in corpora]
            ax.bar([i + k * width for i in range(len(corpora))], values, width, label=engine)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(corpora))], corpora)
        ax.set_title(phase)
    axes[0].set_ylabel("MB/s")
    axes[0].legend()
    fig.suptitle(f"encode throughput, {os.path.basename(results['vocab'])}, {results['machine']['nproc']} CPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("vocab", help="the GGUF vocabulary (e.g. ggml-vocab-qwen3.gguf)")
    parser.add_argument("corpora", nargs="*", help="UTF-8 text files, optionally .xz-compressed")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated subset of %(default)s")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is reported")
    parser.add_argument("--no-load", action="store_true", help="skip the whole-process load measurement")
    parser.add_argument("--load-only", action="store_true", help="only the whole-process load measurement (no corpora)")
    parser.add_argument("--no-batch", action="store_true", help="skip the encode_batch measurement")
    parser.add_argument("--no-pathological", action="store_true", help="skip the pathological inputs")
    parser.add_argument("--pathological-engines", default="bpetok,tiktoken,quicktok,hf,llama.cpp")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds before a pathological run is given up")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--plot", help="also draw a PNG here (needs matplotlib)")
    args = parser.parse_args(argv)
    if args.load_only:
        args.corpora, args.no_load, args.no_batch, args.no_pathological = [], False, True, True
    elif not args.corpora:
        parser.error("give at least one corpus (or --load-only)")
    for path in [args.vocab, *args.corpora]:
        if not os.path.isfile(path):
            parser.error(f"{path}: no such file")
    engines = [e for e in args.engines.split(",") if e]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        parser.error(f"unknown engine(s) {unknown}; choose from {list(ENGINES)}")
    for engine, module in (("llama.cpp", "llama_cpp"), ("quicktok", "quicktok")):
        if engine in engines and not _installed(module):
            print(f"bench: {module} is not installed; skipping {engine}", file=sys.stderr)
            engines.remove(engine)
    if "bpetok" not in engines:
        parser.error("--engines must include bpetok (ratios and id checks are against it)")
    engines.sort(key=list(ENGINES).index)

    results = {"vocab": os.path.abspath(args.vocab), "machine": machine(), "engines": engines, "repeat": args.repeat, "corpora": {}}
    makers = {e: ENGINES[e](args.vocab) for e in engines} if args.corpora else {}
    for corpus_path in args.corpora:
        name = os.path.basename(corpus_path).split(".")[0]
        text = read_corpus(corpus_path)
        entry = {"path": os.path.abspath(corpus_path), "engines": {}, "differences": {}}
        print(f"bench: {name} / {', '.join(engines)} ...", file=sys.stderr, flush=True)
        measured = bench_corpus(makers, text, args.repeat)
        reference = measured["bpetok"][1]
        entry["tokens"] = len(reference)
        for engine in engines:
            figures, ids = measured[engine]
            entry["engines"][engine] = figures
            if engine != "bpetok":
                entry["differences"][engine] = 0 if ids == reference else count_differences(makers["bpetok"](), makers[engine](), text)
        results["corpora"][name] = entry
    if not args.no_batch:
        print("bench: encode_batch ...", file=sys.stderr, flush=True)
        vocab = bpetok.load_vocabulary(args.vocab)
        spec = bpetok.from_gguf(args.vocab).spec
        # The corpora as documents: paragraphs, so the batch is many texts of ordinary length.
        docs = [p for path in args.corpora for p in read_corpus(path).split("\n\n") if p]
        results["batch"] = batch(lambda: bpetok.Tokenizer(vocab, spec), docs, args.repeat)
    if not args.no_load:
        print("bench: whole-process load ...", file=sys.stderr, flush=True)
        results["load"] = load_process(args.vocab, max(args.repeat, 5))
    if not args.no_pathological:
        print("bench: pathological inputs ...", file=sys.stderr, flush=True)
        chosen = [e for e in args.pathological_engines.split(",") if e in engines]
        results["pathological"] = pathological(args.vocab, chosen, args.timeout)
        results["pathological_timeout"] = args.timeout
    results["machine"]["load_average_end"] = os.getloadavg()
    print(f"machine: {results['machine']}")
    print(report(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        try:
            plot(results, args.plot)
        except ImportError:
            print("bench: matplotlib is not installed; no plot", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
