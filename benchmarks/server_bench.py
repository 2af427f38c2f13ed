"""Requests per second of ``bpetok serve`` on short texts.

Starts ``bpetok serve MODEL`` on a free 127.0.0.1 port (or uses ``--url`` of a running server),
then CLIENTS threads, each on its own keep-alive connection, POST /tokenize with short texts
(10-80 characters) for a fixed number of requests. Every answer is checked against
``Tokenizer.encode``; the figures are printed with the machine's load average, since the
clients share the CPU with the server.

    python benchmarks/server_bench.py tests/data/ggml-vocab-qwen3.gguf.gz --clients 8 --requests 20000
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

import bpetok

SHORT_TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "How many tokens is this sentence?",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>",
    "def add(a, b):\n    return a + b",
    "Les élèves ont révisé leurs leçons.",
    "東京は日本の首都です。",
    "Привет, как дела?",
    "I'm sure they'll've finished by 10:30 PM.",
    "🙂 emoji and numbers 1234567890",
    "SELECT id, name FROM users WHERE age > 21;",
    "Der Kühlschrank ist leer.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(host: str, port: int, proc: subprocess.Popen | None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            sys.exit(f"server_bench: bpetok serve exited with status {proc.returncode}")
        try:
            conn = http.client.HTTPConnection(host, port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                conn.close()
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"server_bench: no answer from http://{host}:{port}/health within {timeout:.0f}s")


def run_clients(host: str, port: int, bodies: list[tuple[bytes, dict]], clients: int, requests: int):
    latencies: list[list[float]] = [[] for _ in range(clients)]
    failures: list[str] = []
    per_client = requests // clients

    def client(n: int) -> None:
        rng = random.Random(n)
        conn = http.client.HTTPConnection(host, port, timeout=60)
        own = latencies[n]
        for _ in range(per_client):
            body, expected = rng.choice(bodies)
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/tokenize", body=body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as e:
                failures.append(repr(e))
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=60)
                continue
            own.append(time.perf_counter() - t0)
            if response.status != 200 or json.loads(data) != expected:
                failures.append(f"{response.status}: {data[:100]!r}")
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    return elapsed, [x for own in latencies for x in own], failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="GGUF file (the answers are checked against it)")
    parser.add_argument("--url", help="benchmark this running server instead of starting one")
    parser.add_argument("--workers", type=int, default=1, help="--workers of the server started (default 1)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads (default 8)")
    parser.add_argument("--requests", type=int, default=20000, help="requests in all (default 20,000)")
    parser.add_argument("--warmup", type=int, default=500, help="requests sent first and not counted (default 500)")
    args = parser.parse_args(argv)

    tok = bpetok.from_gguf(args.model)
    bodies = [(json.dumps({"content": t}).encode(), {"tokens": tok.encode(t)}) for t in SHORT_TEXTS]

    proc = None
    if args.url:
        url = urllib.parse.urlsplit(args.url)
        host, port = url.hostname, url.port or 80
    else:
        host, port = "127.0.0.1", free_port()
        cmd = [sys.executable, "-m", "bpetok.apps.cli", "serve", args.model, "--port", str(port), "--workers", str(args.workers)]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(host, port, proc)
        run_clients(host, port, bodies, min(args.clients, args.warmup) or 1, args.warmup)
        load_before = os.getloadavg()
        elapsed, latencies, failures = run_clients(host, port, bodies, args.clients, args.requests)
        load_after = os.getloadavg()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    done = len(latencies)
    latencies.sort()
    print(f"server:      {'bpetok serve ' + args.model + f' --workers {args.workers}' if proc else args.url}")
    print(f"clients:     {args.clients} threads, keep-alive, POST /tokenize, {len(SHORT_TEXTS)} short texts (10-80 chars)")
    print(f"requests:    {done:,} in {elapsed:.2f} s, {len(failures)} failed or wrong")
    print(f"throughput:  {done / elapsed:,.0f} requests/s")
    if latencies:
        p50 = statistics.median(latencies)
        p99 = latencies[min(done - 1, int(done * 0.99))]
        print(f"latency:     p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms")
    print(f"machine:     {os.cpu_count()} CPUs, load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
          "(1 min; clients and server share these CPUs)")
    for failure in failures[:5]:
        print("failure:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
