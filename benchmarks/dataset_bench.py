"""Throughput of ``bpetok encode-dataset`` (1 and 2 local workers, a 2-worker Dask LocalCluster)
against HF ``datasets.map(num_proc=2)`` with HF tokenizers and a plain tiktoken loop.

    python benchmarks/dataset_bench.py VOCAB.gguf CORPUS.txt.xz ... [--mb 200] [--work DIR] [--runs ...]

The input is built once in ``--work`` (default ``/tmp/bpetok-dataset-bench``): ``input.jsonl``,
at least ``--mb`` MB of ``{"text": ...}`` records, the corpora's paragraphs repeated with varied
words (each repetition, a seeded tenth of the words are swapped, capitalised or given a number),
so that no document repeats exactly. Every run is a fresh subprocess (``--run NAME``) and reports
its wall time from start to the last byte written (loading the vocabulary included; for Dask, the
cluster's start is reported apart), its CPU time (every process of the run, sampled with psutil:
on a busy machine wall time says little, CPU time still compares engines) and the peak RSS of its
largest process. HF tokenizers and tiktoken are built from the same GGUF as in
``benchmarks/bench.py`` (the qwen2 pattern: a Qwen vocabulary).

- ``bpetok-1``, ``bpetok-2``: ``bpetok.encode_dataset(..., workers=N)`` writing npy shards.
- ``dask-2``: the same with ``client=`` a ``LocalCluster(n_workers=2, threads_per_worker=1)``.
- ``hf-datasets-2``: ``load_dataset("json")`` then ``map(batched, num_proc=2)`` with
  ``Tokenizer.encode_batch`` (caching off; it writes Arrow files, as the datasets library does).
- ``tiktoken-loop``: one process: ``json.loads`` each line, ``encode_ordinary``, ids into one npy.
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
RUNS = ("bpetok-1", "bpetok-2", "dask-2", "hf-datasets-2", "tiktoken-loop")
MB = 1_000_000


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


def run_dask(vocab, data, work):
    import bpetok
    from dask.distributed import Client, LocalCluster

    start = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        up = time.perf_counter() - start
        t = time.perf_counter()
        bpetok.encode_dataset(vocab, [data], os.path.join(work, "out-dask-2"), client=client, progress=False)
        encode = time.perf_counter() - t
        workers_rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return {"cluster_start_s": round(up, 2), "encode_s": round(encode, 2), "worker_rss_mib": max(workers_rss.values()) // 1024}


def run_hf(vocab, data, work):
    import datasets

    tokenizer = _hf_tokenizer(vocab)
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


def _hf_tokenizer(vocab):
    """bench.py's HF tokenizer (GGUF vocabulary and merges, qwen2 pattern), as the Tokenizer object."""
    sys.path.insert(0, HERE)
    from bench import QWEN2_PATTERN

    import bpetok
    from bpetok.vocab import TokenType
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    v = bpetok.load_vocabulary(vocab)
    table = {t.decode("utf-8"): i for i, (t, kind) in enumerate(zip(v.tokens, v.token_types)) if kind == TokenType.NORMAL}
    merges = [tuple(m.decode("utf-8").split(" ", 1)) for m in v.merges]
    tok = Tokenizer(models.BPE(table, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def run_tiktoken(vocab, data, work):
    import numpy as np

    sys.path.insert(0, HERE)
    from bench import make_tiktoken

    encode = make_tiktoken(vocab)()
    parts, lengths = [], []
    with open(data, encoding="utf-8") as f:
        for line in f:
            ids = encode(json.loads(line)["text"])
            parts.append(np.asarray(ids, dtype=np.uint32))
            lengths.append(len(ids))
    np.save(os.path.join(work, "out-tiktoken.npy"), np.concatenate(parts))
    return {}


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
    elif name == "hf-datasets-2":
        extra = run_hf(vocab, data, work)
    elif name == "tiktoken-loop":
        extra = run_tiktoken(vocab, data, work)
    else:
        raise SystemExit(f"unknown run {name!r}; choose from {', '.join(RUNS)}")
    wall = time.perf_counter() - start
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "run": name, "wall_s": round(wall, 2), "cpu_s": round(cpu.total(), 1),
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
    rows = []
    for name in args.runs.split(","):
        for out in os.listdir(args.work):
            if out.startswith("out-"):
                path = os.path.join(args.work, out)
                shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
        done = subprocess.run([sys.executable, __file__, args.vocab, *args.corpora, "--work", args.work, "--run", name],
                              capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{name}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["mb_per_s"] = round(size / MB / row["wall_s"], 2)
        row["mb_per_cpu_s"] = round(size / MB / row["cpu_s"], 2)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    print(f"input: {size / MB:.0f} MB JSONL; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    print("| run | wall s | MB/s | CPU s (all processes) | MB per CPU s | peak RSS MiB | notes |")
    print("|---|---:|---:|---:|---:|---:|---|")
    main_keys = ("run", "wall_s", "mb_per_s", "cpu_s", "mb_per_cpu_s", "peak_rss_mib")
    for r in rows:
        notes = ", ".join(f"{k} {v}" for k, v in r.items() if k not in main_keys)
        print(f"| {r['run']} | {r['wall_s']} | {r['mb_per_s']} | {r['cpu_s']} | {r['mb_per_cpu_s']} | {r['peak_rss_mib']} | {notes} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
