"""CPU seconds encode-dataset's tasks take in their own thread: in one process, with glibc's
``MALLOC_TRIM_THRESHOLD_`` set as Dask's nannies set it (with and without the worker lifting
the mmap threshold it freezes), and on a 2-worker Dask ``LocalCluster`` (both ways).

Thread CPU time, summed over the tasks, is what the run's cores spend on the work itself; it
moves little with other load, unlike wall time. Each case runs in a fresh process.

    python benchmarks/dataset_task_cpu.py ../shared/vocab/ggml-vocab-qwen3.gguf INPUT.jsonl

(INPUT.jsonl: e.g. the first 60 MB of the file ``dataset_bench.py`` builds.) ``local-N``:
``workers=N``; ``-trim``: with the variable set; ``-unlifted``: the threshold left frozen.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import bpetok.apps.datasets as ds
from bpetok.apps import dataset_tasks

CASES = ("local-1", "local-2", "local-2-trim-unlifted", "local-2-trim", "dask-unlifted", "dask")
RUN_TASK = ds.run_task  # the real one: workers (forkserver, Dask) import this module afresh


def timed_run_task(*args, **kwargs):
    start = time.thread_time()
    result = RUN_TASK(*args, **kwargs)
    result.empty["_thread_cpu_ms"] += round((time.thread_time() - start) * 1000)
    return result


def leave_threshold_frozen() -> None:
    dataset_tasks._MMAP_THRESHOLD_SET = True  # as if done: the worker keeps glibc's frozen threshold


if os.environ.get("BPETOK_BENCH_UNLIFTED"):  # here and in the forkserver workers, which import this file
    leave_threshold_frozen()


def run_case(case: str, vocab: str, data: str) -> dict:
    ds.run_task = dataset_tasks.run_task = timed_run_task  # the driver's calls and run_task_to_file's
    out = tempfile.mkdtemp(prefix="bpetok-task-cpu-")
    kwargs: dict = {"workers": 2 if case.startswith("local-2") else 1}
    client = cluster = None
    if case.startswith("dask"):
        from dask.distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
        client = Client(cluster)
        if case.endswith("-unlifted"):
            client.run(leave_threshold_frozen)
        kwargs["client"] = client
    start = time.perf_counter()
    result = ds.encode_dataset(vocab, [data], out, progress=False, **kwargs)
    wall = time.perf_counter() - start
    if client is not None:
        client.close()
        cluster.close()
    shutil.rmtree(out)
    return {"case": case, "task_thread_cpu_s": result.manifest["empty"].get("_thread_cpu_ms", 0) / 1000,
            "wall_s": round(wall, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vocab")
    parser.add_argument("data")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(args.case, args.vocab, args.data)))
        return 0
    for case in args.cases.split(","):
        env = dict(os.environ)
        if "-trim" in case:
            env["MALLOC_TRIM_THRESHOLD_"] = "65536"
        if case.endswith("-unlifted"):  # the workers keep glibc's frozen threshold (as before the fix)
            env["BPETOK_BENCH_UNLIFTED"] = "1"
        done = subprocess.run([sys.executable, __file__, args.vocab, args.data, "--case", case],
                              capture_output=True, text=True, env=env)
        if done.returncode != 0:
            print(f"{case}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        print(done.stdout.strip().splitlines()[-1])
    print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
