"""Throughput of ``bpetok encode-dataset`` (1 and 2 local workers, a 2-worker Dask LocalCluster)
against HF ``datasets.map(num_proc=2)`` with HF tokenizers and a plain tiktoken loop.

    pip install -e '.[bench,dask]' -e ./plugins/bpetok-hf
    python benchmarks/dataset_bench.py VOCAB.gguf CORPUS.txt.xz ... [--mb 200] [--work DIR] [--runs ...]

The input is built once in ``--work`` (default ``/tmp/bpetok-dataset-bench``): ``input.jsonl``,
at least ``--mb`` MB of ``{"text": ...}`` records, the corpora's paragraphs repeated with varied
words (each repetition, a seeded tenth of the words are swapped, capitalised or given a number),
so that no document repeats exactly. Every run is a fresh subprocess (``--run NAME``) and reports
its wall time from start to the last byte written (loading the vocabulary included; for Dask, the
cluster's start is reported apart), its CPU time (every process of the run, sampled with psutil:
on a busy machine wall time says little, CPU time still compares engines), its busiest process's
CPU time and the peak RSS of its largest process. The table ends with each run's ratio to
``bpetok-1`` in wall time and in CPU time, and a "2 idle cores" estimate from the CPU figures:
``max(CPU s / 2, busiest process CPU s)``, the least wall time the run could take on 2 idle cores.

- ``bpetok-1``, ``bpetok-2``: ``bpetok.encode_dataset(..., workers=N)`` writing npy shards.
- ``dask-2``: the same with ``client=`` a ``LocalCluster(n_workers=2, threads_per_worker=1)``;
  ``dask-1x2``: one worker process with 2 threads (which share its tokenizer, as local threads do);
  ``dask-threads``: ``processes=False``, 2 workers of one thread in this process (no second process,
  no ids sent between processes: what is left over ``bpetok-2`` is Dask's own machinery).
- ``hf-datasets-2``: ``load_dataset("json")`` then ``map(batched, num_proc=2)`` with HF tokenizers'
  ``Tokenizer.encode_batch`` (caching off; it writes Arrow files, as the datasets library does). The
  tokenizer is the ``tokenizer.json`` that ``bpetok export VOCAB --format hf`` (plugins/bpetok-hf)
  writes, offline.
- ``tiktoken-loop``: one process: ``json.loads`` each line, ``encode_ordinary``, ids into one npy.
  tiktoken ships no Qwen3 encoding, and its own (``cl100k_base``, ``o200k_base``) are downloaded
  on first use; the encoding here is a ``tiktoken.Encoding`` built from the same GGUF's ranks and
  the qwen2 pattern (as ``benchmarks/bench.py`` builds it): the same vocabulary, no network.

Both peers' ids are checked against bpetok's on the input's first 1,000 documents (``agree`` in
the notes), so that the table compares the same work.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import random
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = ("bpetok-1", "bpetok-2", "dask-2", "dask-1x2", "dask-threads", "hf-datasets-2", "tiktoken-loop")
MB = 1_000_000
HF_TOKENIZER = "hf-tokenizer/tokenizer.json"


def _package_dir(name: str) -> str:
    import importlib.util

    return importlib.util.find_spec(name).submodule_search_locations[0]


def build_input(corpora: list[str], path: str, megabytes: int) -> int:
    """Write ``path`` (JSONL) from the corpora's paragraphs, repeated with varied words; its size."""
    paragraphs = []
    for corpus in corpora:
        opener = lzma.open if corpus.endswith(".xz") else open
        with opener(corpus, "rt", encoding="utf-8") as f:
            paragraphs += [p for p in f.read().split("\n\n") if p.strip()]
    rng = random.Random(17)
    size = 0
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        rep = 0
        while size < megabytes * MB:
            for text in paragraphs:
                words = text.split(" ")
                for _ in range(max(1, len(words) // 10)) if rep else ():
                    i = rng.randrange(len(words))
                    op = rng.randrange(3)
                    if op == 0 and i + 1 < len(words):
                        words[i], words[i + 1] = words[i + 1], words[i]
                    elif op == 1:
                        words[i] = words[i].capitalize()
                    else:
                        words[i] += str(rng.randrange(1000))
                line = json.dumps({"text": " ".join(words)}, ensure_ascii=False) + "\n"
                out.write(line)
                size += len(line.encode("utf-8"))
            rep += 1
    os.replace(tmp, path)
    return size


# -- the runs, each in its own process ---------------------------------------------------------------


def run_bpetok(vocab, data, work, workers):
    import bpetok

    bpetok.encode_dataset(vocab, [data], os.path.join(work, f"out-bpetok-{workers}"), workers=workers, progress=False)
    return {}


def run_dask(vocab, data, work, n_workers=2, threads_per_worker=1, processes=True):
    import bpetok
    from dask.distributed import Client, LocalCluster

    start = time.perf_counter()
    with LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=processes, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        up = time.perf_counter() - start
        t = time.perf_counter()
        bpetok.encode_dataset(vocab, [data], os.path.join(work, f"out-dask-{n_workers}x{threads_per_worker}{'' if processes else '-threads'}"), client=client, progress=False)
        encode = time.perf_counter() - t
        workers_rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return {"cluster_start_s": round(up, 2), "encode_s": round(encode, 2), "worker_rss_mib": max(workers_rss.values()) // 1024}


def run_hf(vocab, data, work):
    import datasets

    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(work, HF_TOKENIZER))
    datasets.disable_caching()
    cache = os.path.join(work, "hf-cache")
    shutil.rmtree(cache, ignore_errors=True)
    t = time.perf_counter()
    ds = datasets.load_dataset("json", data_files=data, split="train", cache_dir=cache)
    loaded = time.perf_counter() - t

    def encode(batch):
        return {"ids": [e.ids for e in tokenizer.encode_batch(batch["text"], add_special_tokens=False)]}

    t = time.perf_counter()
    ds.map(encode, batched=True, num_proc=2, remove_columns=["text"])
    return {"load_dataset_s": round(loaded, 2), "map_s": round(time.perf_counter() - t, 2), "datasets": datasets.__version__}


def export_hf(vocab, work) -> None:
    """``tokenizer.json`` as ``bpetok export --format hf`` writes it (offline), for ``hf-datasets-2``."""
    directory = os.path.join(work, os.path.dirname(HF_TOKENIZER))
    subprocess.run([sys.executable, "-m", "bpetok.apps.cli", "export", vocab, "--format", "hf", "-o", directory], check=True)


def peers_agree(vocab, data, work, runs) -> dict[str, str]:
    """How many of the input's first 1,000 documents each peer encodes to bpetok's ids (not timed)."""
    import bpetok

    sys.path.insert(0, HERE)
    encoders = {}
    if "hf-datasets-2" in runs:
        from tokenizers import Tokenizer

        hf = Tokenizer.from_file(os.path.join(work, HF_TOKENIZER))
        encoders["hf-datasets-2"] = lambda t: hf.encode(t, add_special_tokens=False).ids
    if "tiktoken-loop" in runs:
        from bench import make_tiktoken

        encoders["tiktoken-loop"] = make_tiktoken(vocab)()
    tok = bpetok.from_gguf(vocab)
    with open(data, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line, _ in zip(f, range(1000))]
    expected = [tok.encode(t, parse_special=False) for t in texts]
    return {name: f"{sum(encode(t) == ids for t, ids in zip(texts, expected))}/{len(texts)}"
            for name, encode in encoders.items()}


def run_tiktoken(vocab, data, work):
    import numpy as np

    sys.path.insert(0, HERE)
    from bench import make_tiktoken

    encode = make_tiktoken(vocab)()
    start = time.perf_counter()
    parts, lengths = [], []
    with open(data, encoding="utf-8") as f:
        for line in f:
            ids = encode(json.loads(line)["text"])
            parts.append(np.asarray(ids, dtype=np.uint32))
            lengths.append(len(ids))
    np.save(os.path.join(work, "out-tiktoken.npy"), np.concatenate(parts))
    return {"loop_s": round(time.perf_counter() - start, 2)}


class TreeCPU:
    """CPU seconds (user + system) of this process and every descendant, sampled every 0.2 s.

    ``RUSAGE_CHILDREN`` misses grandchildren (a forkserver's workers, a Dask nanny's worker), so
    the process tree is read with psutil; the last 0.2 s of a process that exits is lost.
    """

    def __init__(self):
        import threading

        import psutil

        self.me = psutil.Process()
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample_until_stopped, daemon=True)
        self.thread.start()

    def sample(self) -> None:
        import psutil

        for proc in [self.me, *self.me.children(recursive=True)]:
            try:
                t = proc.cpu_times()
            except psutil.Error:
                continue
            self.seen[proc.pid] = max(self.seen.get(proc.pid, 0.0), t.user + t.system)

    def sample_until_stopped(self) -> None:
        while not self.stop.wait(0.2):
            self.sample()

    def total(self) -> float:
        self.stop.set()
        self.thread.join()
        self.sample()
        return sum(self.seen.values())


def run_one(name, vocab, data, work) -> dict:
    cpu = TreeCPU()
    start = time.perf_counter()
    if name.startswith("bpetok-"):
        extra = run_bpetok(vocab, data, work, int(name.split("-")[1]))
    elif name == "dask-2":
        extra = run_dask(vocab, data, work)
    elif name == "dask-1x2":
        extra = run_dask(vocab, data, work, n_workers=1, threads_per_worker=2)
    elif name == "dask-threads":
        extra = run_dask(vocab, data, work, processes=False)
    elif name == "hf-datasets-2":
        extra = run_hf(vocab, data, work)
    elif name == "tiktoken-loop":
        extra = run_tiktoken(vocab, data, work)
    else:
        raise SystemExit(f"unknown run {name!r}; choose from {', '.join(RUNS)}")
    wall = time.perf_counter() - start
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = cpu.total()
    return {
        "run": name, "wall_s": round(wall, 2), "cpu_s": round(total, 1),
        # the run's own process: for bpetok, the reading, the writing and (with workers) the pickling
        "driver_cpu_s": round(cpu.seen[os.getpid()], 1),
        # On a busy machine wall time is set by the scheduler; on 2 idle cores a run takes at least
        # max(cpu_s / 2, its busiest process's CPU): the figure to compare with 1.7x.
        "busiest_process_cpu_s": round(max(cpu.seen.values()), 1),
        "peak_rss_mib": max(me.ru_maxrss, kids.ru_maxrss) // 1024, **extra,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vocab")
    parser.add_argument("corpora", nargs="+")
    parser.add_argument("--mb", type=int, default=200, help="input size in MB (default 200)")
    parser.add_argument("--work", default="/tmp/bpetok-dataset-bench")
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--run", help=argparse.SUPPRESS)  # one run, in this process
    args = parser.parse_args(argv)
    data = os.path.join(args.work, "input.jsonl")
    if args.run:
        print(json.dumps(run_one(args.run, args.vocab, data, args.work)))
        return 0
    os.makedirs(args.work, exist_ok=True)
    recipe = json.dumps({"corpora": [os.path.abspath(c) for c in args.corpora], "mb": args.mb})
    stamp = data + ".recipe"
    if not os.path.exists(stamp) or open(stamp).read() != recipe:  # built from other corpora or size
        t = time.perf_counter()
        build_input(args.corpora, data, args.mb)
        with open(stamp, "w") as f:
            f.write(recipe)
        print(f"built {data}: {os.path.getsize(data) / MB:.0f} MB in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    size = os.path.getsize(data)
    runs = args.runs.split(",")
    agree = {}
    if "hf-datasets-2" in runs:
        export_hf(args.vocab, args.work)
    if {"hf-datasets-2", "tiktoken-loop"} & set(runs):
        agree = peers_agree(args.vocab, data, args.work, runs)
    from bench import bytecode_cached_env

    env = bytecode_cached_env()  # and the package compiled once, as pip does: Dask's workers too
    subprocess.run([sys.executable, "-m", "compileall", "-q", _package_dir("bpetok")], env=env, check=True)
    rows = []
    for name in runs:
        for out in os.listdir(args.work):
            if out.startswith("out-"):
                path = os.path.join(args.work, out)
                shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
        done = subprocess.run([sys.executable, __file__, args.vocab, *args.corpora, "--work", args.work, "--run", name],
                              capture_output=True, text=True, env=env)
        if done.returncode != 0:
            print(f"{name}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        if name in agree:
            row["same ids as bpetok, first docs"] = agree[name]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    print_table(rows, size)
    return 0


def print_table(rows: list[dict], size: int) -> None:
    """The markdown table: MB/s, MB per CPU s, the 2-idle-core estimate, each as a ratio to bpetok-1."""
    for r in rows:
        r["idle_2_cores_s"] = round(max(r["cpu_s"] / 2, r["busiest_process_cpu_s"]), 1)
    base = next((r for r in rows if r["run"] == "bpetok-1"), None)

    def ratio(r, key):
        return f"{base[key] / r[key]:.2f}x" if base else "-"

    print(f"input: {size / MB:.0f} MB JSONL; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; "
          "ratios: bpetok-1's time / the run's (above 1: faster than bpetok-1)")
    print("| run | wall s | MB/s | vs bpetok-1 | CPU s, all processes | MB per CPU s | vs bpetok-1 "
          "| 2 idle cores s (est.) | vs bpetok-1 | peak RSS MiB | notes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    shown = ("run", "wall_s", "cpu_s", "idle_2_cores_s", "peak_rss_mib")
    for r in rows:
        notes = ", ".join(f"{k} {v}" for k, v in r.items() if k not in shown)
        print(f"| {r['run']} | {r['wall_s']} | {size / MB / r['wall_s']:.2f} | {ratio(r, 'wall_s')} | {r['cpu_s']} | "
              f"{size / MB / r['cpu_s']:.2f} | {ratio(r, 'cpu_s')} | {r['idle_2_cores_s']} | {ratio(r, 'idle_2_cores_s')} | "
              f"{r['peak_rss_mib']} | {notes} |")

if __name__ == "__main__":
    sys.exit(main())
