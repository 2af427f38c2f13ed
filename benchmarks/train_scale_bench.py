"""Training at corpus scale: ``bpetok train`` (1 and 2 workers) against HF tokenizers' BpeTrainer.

All learn a byte-level BPE vocabulary of the same size (default 32,000) from the same plain-text
files with Qwen2's regex and min_frequency 2, on the machine's cores: HF's BpeTrainer with its
default thread pool (all cores), bpetok as the ``bpetok train`` command with ``--workers 1`` and
``--workers 2``. Each run is a fresh process, one after the other (nothing else of ours runs
beside it); reported: wall time, CPU time (of the process, and of its workers as sampled), peak RSS of the
largest process (exact, from the kernel) and of the whole process tree (sampled every 0.1 s with
psutil: main process and workers together), and the corpus's pieces and unique pieces (bpetok's
count; HF counts the same pieces, but its text comes one line at a time, see docs/training.md).
The load average is printed before each run: the machine may be shared.

Build the corpora first (scripts/build_training_corpora.py), then, e.g.::

    python benchmarks/train_scale_bench.py /work/corpora/{en,code,multi}.txt
    nice python benchmarks/train_scale_bench.py /work/corpora/synth-1g.txt --tools bpetok-w2 hf
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TOOLS = ("hf", "bpetok", "bpetok-w2")

# The HF run, as a program of its own (its RSS and time are then the trainer's alone).
HF_PROGRAM = """
import sys, json
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
size, out, files = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(REGEX), behavior="isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
])
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=size, min_frequency=2, show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train(files, trainer)
tok.save(out)
print(json.dumps({"n_tokens": tok.get_vocab_size()}))
"""


def sample_tree(pid: int, peak: list[int], cpu: dict[int, float], stop: threading.Event) -> None:
    """Keep in ``peak[0]`` the largest sum of RSS seen over process ``pid`` and its descendants, and
    in ``cpu`` the last CPU time seen of each descendant (its last 0.1 s may be missed)."""
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return
    while not stop.wait(0.1):
        try:
            children = root.children(recursive=True)
        except psutil.Error:
            return
        total = 0
        for proc in (root, *children):
            try:
                total += proc.memory_info().rss
                if proc is not root:
                    times = proc.cpu_times()
                    cpu[proc.pid] = times.user + times.system
            except psutil.Error:
                pass
        peak[0] = max(peak[0], total)


def run(command: list[str]) -> dict:
    """Run ``command``; its wall time, CPU time (with children), largest process's and whole tree's peak RSS."""
    peak, worker_cpu = [0], {}
    stop = threading.Event()
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
        sampler = threading.Thread(target=sample_tree, args=(proc.pid, peak, worker_cpu, stop), daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        stop.set()
        sampler.join()
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{text}")
    # The kernel's figures are the main process's; its workers' are sampled.
    cpu = usage.ru_utime + usage.ru_stime + sum(worker_cpu.values())
    return {"seconds": seconds, "cpu": cpu, "peak_mb": usage.ru_maxrss / 1024, "tree_mb": peak[0] / 2**20,
            "output": text}


def run_tool(tool: str, files: list[str], size: int, tmp: str) -> dict:
    if tool == "hf":
        out = os.path.join(tmp, "hf.json")
        row = run([sys.executable, "-c", HF_PROGRAM.replace("REGEX", repr(QWEN2_REGEX)), str(size), out, *files])
        row["n_tokens"] = json.loads(row["output"].strip().splitlines()[-1])["n_tokens"]
        return row
    workers = 2 if tool == "bpetok-w2" else 1
    out = os.path.join(tmp, f"{tool}.gguf")
    bpetok = shutil.which("bpetok")
    command = [bpetok] if bpetok else [sys.executable, "-m", "bpetok.cli"]
    row = run([*command, "train", *files, "--vocab-size", str(size), "--pre", "qwen2", "--min-frequency", "2",
               "--workers", str(workers), "-q", "-o", out])
    found = re.search(r"([\d,]+) tokens.* from ([\d,]+) pieces \(([\d,]+) unique\)", row["output"])
    if found is None:
        raise SystemExit(f"unexpected output of bpetok train:\n{row['output']}")
    row["n_tokens"], row["n_pieces"], row["n_unique"] = (int(g.replace(",", "")) for g in found.groups())
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="+", help="plain UTF-8 text files")
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    args = parser.parse_args()
    mb = sum(os.path.getsize(f) for f in args.corpus) / 1e6
    print(f"corpus: {', '.join(os.path.basename(f) for f in args.corpus)} ({mb:,.1f} MB), vocab {args.vocab_size:,}, "
          f"{os.cpu_count()} cores")
    print(f"{'trainer':<18} {'wall s':>8} {'cpu s':>8} {'peak MiB':>9} {'tree MiB':>9} {'tokens':>7} "
          f"{'pieces':>13} {'unique':>11}  load before")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tool in args.tools:
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            row = rows[tool] = run_tool(tool, args.corpus, args.vocab_size, tmp)
            label = {"hf": "HF BpeTrainer", "bpetok": "bpetok --workers 1", "bpetok-w2": "bpetok --workers 2"}[tool]
            pieces = f"{row['n_pieces']:>13,} {row['n_unique']:>11,}" if "n_pieces" in row else f"{'':>13} {'':>11}"
            print(f"{label:<18} {row['seconds']:>8.1f} {row['cpu']:>8.1f} {row['peak_mb']:>9,.0f} {row['tree_mb']:>9,.0f} "
                  f"{row['n_tokens']:>7,} {pieces}  {load}", flush=True)
    if "hf" in rows:
        for tool in ("bpetok", "bpetok-w2"):
            if tool in rows:
                r, h = rows[tool], rows["hf"]
                print(f"{tool} / hf: wall {r['seconds'] / h['seconds']:.2f}x, peak tree RSS "
                      f"{r['tree_mb'] / h['tree_mb']:.2f}x")
    print(f"load after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; self rss "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
