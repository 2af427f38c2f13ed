"""Peak memory of ``bpetok encode-dataset`` against the input's size: bounded by the shard, not the corpus.

    python benchmarks/dataset_memory.py VOCAB.gguf CORPUS.txt.xz ... --mb 100,500 [--workers 1]
        [--shard-tokens N] [--work DIR]

For each size in ``--mb`` an input is built in ``--work`` as ``benchmarks/dataset_bench.py`` builds
it (the corpora's paragraphs repeated with varied words, so no document repeats), then the
command ``bpetok encode-dataset VOCAB input.jsonl -o OUT -q --workers N`` runs as a child process and
the script prints, per size, the input's size, the run's time and the peak RSS of each of its
processes: the command's own process (``os.wait4``'s rusage of that child: exact; with
``--workers 1`` it does all the work) and, with ``--workers 2``
and more, each worker's peak as sampled with psutil every 0.1 s (a sample can miss a short peak).

If memory grew with the corpus, the peak would grow with ``--mb``; it is set by the shard size
(``--shard-tokens``, default 2**26 ids) and the block size instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MB = 1_000_000


def sample_children_rss(proc: subprocess.Popen, peaks: dict[int, int], stop: threading.Event) -> None:
    """Record the largest RSS seen of every process below ``proc`` (its workers)."""
    import psutil

    try:
        root = psutil.Process(proc.pid)
    except psutil.Error:
        return
    while not stop.wait(0.1):
        try:
            children = root.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            try:
                rss = child.memory_info().rss
            except psutil.Error:
                continue
            peaks[child.pid] = max(peaks.get(child.pid, 0), rss)


def measure(vocab: str, data: str, out: str, workers: int, shard_tokens: int | None) -> dict:
    command = [sys.executable, "-m", "bpetok.apps.cli", "encode-dataset", vocab, data, "-o", out, "-q",
               "--workers", str(workers)]
    if shard_tokens:
        command += ["--shard-tokens", str(shard_tokens)]
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True)
        peaks: dict[int, int] = {}
        stop = threading.Event()
        sampler = threading.Thread(target=sample_children_rss, args=(proc, peaks, stop), daemon=True)
        if workers > 1:
            sampler.start()
        # wait4: this child's own rusage (its peak RSS, its CPU and its waited-for children's), not
        # the largest of every child this script ever ran as RUSAGE_CHILDREN would give.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        stop.set()
        if sampler.is_alive():
            sampler.join()
        stdout.seek(0)
        stderr.seek(0)
        out_text, err_text = stdout.read(), stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"encode-dataset failed ({proc.returncode}):\n{err_text[-2000:]}")
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    return {
        "input_mb": round(os.path.getsize(data) / MB),
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "command_peak_rss_mib": usage.ru_maxrss // 1024,
        "worker_peak_rss_mib": sorted((v // (1 << 20) for v in peaks.values()), reverse=True)[:workers] or None,
        "shards": len(manifest["shards"]),
        "tokens": manifest["tokens"],
        "output": out_text.strip(),
    }


def main(argv=None) -> int:
    sys.path.insert(0, HERE)
    from dataset_bench import build_input

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vocab")
    parser.add_argument("corpora", nargs="+")
    parser.add_argument("--mb", default="100,500", help="input sizes in MB, comma-separated (default 100,500)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--shard-tokens", type=int, default=None, help="encode-dataset's --shard-tokens (default its own)")
    parser.add_argument("--work", default="/tmp/bpetok-dataset-memory")
    parser.add_argument("--keep", action="store_true", help="keep the inputs and shards (they are as large as the input)")
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    rows = []
    for mb in (int(x) for x in args.mb.split(",")):
        data = os.path.join(args.work, f"input-{mb}mb.jsonl")
        out = os.path.join(args.work, f"out-{mb}mb")
        if not os.path.exists(data):
            t = time.perf_counter()
            build_input(args.corpora, data, mb)
            print(f"built {data} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        subprocess.run(["rm", "-rf", out], check=True)
        row = measure(args.vocab, data, out, args.workers, args.shard_tokens)
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
        if not args.keep:
            subprocess.run(["rm", "-rf", out, data], check=True)
    print(f"encode-dataset --workers {args.workers}"
          f"{f' --shard-tokens {args.shard_tokens}' if args.shard_tokens else ''}; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| input MB | shards | tokens | wall s | CPU s | peak RSS MiB, the command | peak RSS MiB, workers (sampled) |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        workers = ", ".join(map(str, r["worker_peak_rss_mib"])) if r["worker_peak_rss_mib"] else "(none: --workers 1)"
        print(f"| {r['input_mb']} | {r['shards']} | {r['tokens']:,} | {r['wall_s']} | {r['cpu_s']} | "
              f"{r['command_peak_rss_mib']} | {workers} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
