"""What a Dask LocalCluster costs on this machine besides the work it runs: the CPU its processes
use while idle, and what each task costs them in CPU, for tasks that do nothing.

    pip install -e '.[dask]'
    python benchmarks/dask_overhead.py [--idle 4] [--tasks 500] [--repeat 2]

A 2-worker ``LocalCluster`` (one thread each, worker processes, as ``benchmarks/dataset_bench.py``'s
``dask-2``) is started, left alone for a second, then measured with ``time.process_time`` in this
process (the client, the scheduler and the two nannies) and, through ``client.run``, in each worker:

- ``idle``: ``--idle`` seconds with nothing submitted (heartbeats, the nannies' memory monitors,
  the workers' statistical profiler, each process's system monitor);
- ``tasks``: ``--tasks`` tasks of ``int(i)`` submitted and fetched the way ``bpetok.encode_dataset``
  does (:func:`bpetok.apps.datasets.in_order`, 2 unfinished per worker thread, each result fetched from
  its worker), less the idle CPU of the same span.

On 2 cores these processes share the cores with the workers' encoding: what they use while a run
encodes is time the workers do not get.
"""

from __future__ import annotations

import argparse
import time


def cpu_now(client) -> dict[str, float]:
    """CPU seconds so far of this process (``client``) and of each worker."""
    return {"client": time.process_time(), **client.run(time.process_time)}


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


def measure(idle_s: float, tasks: int) -> dict:
    from dask.distributed import Client, LocalCluster

    from bpetok.apps._dask import result_from_worker
    from bpetok.apps.datasets import AHEAD_PER_WORKER, in_order

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        time.sleep(1)  # past the workers' start
        t0, c0 = time.perf_counter(), cpu_now(client)
        time.sleep(idle_s)
        idle = spent(c0, cpu_now(client))
        idle_rate = {k: v / (time.perf_counter() - t0) for k, v in idle.items()}
        t0, c0 = time.perf_counter(), cpu_now(client)
        done = sum(in_order(lambda i: client.submit(int, i, pure=False), range(tasks), AHEAD_PER_WORKER * 2,
                            result_from_worker(client)))
        assert done == tasks * (tasks - 1) // 2
        wall = time.perf_counter() - t0
        busy = spent(c0, cpu_now(client))
        per_task = {k: (busy[k] - idle_rate[k] * wall) / tasks for k in busy}
    return {"idle_cpu_per_s": idle_rate, "task_cpu_ms": {k: v * 1000 for k, v in per_task.items()},
            "tasks_per_s": tasks / wall}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=4.0, help="seconds to measure the idle cluster (default 4)")
    parser.add_argument("--tasks", type=int, default=500, help="trivial tasks to run (default 500)")
    parser.add_argument("--repeat", type=int, default=2, help="clusters to measure, one after the other (default 2)")
    args = parser.parse_args(argv)
    for _ in range(args.repeat):
        r = measure(args.idle, args.tasks)
        print("; ".join(
            f"{'client+scheduler+nannies' if n == 'client' else 'worker ' + n.rsplit(':', 1)[-1]}: "
            f"idle {r['idle_cpu_per_s'][n]:.3f} CPU s/s, {r['task_cpu_ms'][n]:.2f} CPU ms/task"
            for n in r["idle_cpu_per_s"]
        ) + f"; all: {sum(r['task_cpu_ms'].values()):.2f} CPU ms/task, {r['tasks_per_s']:.0f} tasks/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
