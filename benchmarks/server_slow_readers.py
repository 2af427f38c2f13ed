"""``bpetok serve`` under clients that ask for a large answer and never read it.

Starts ``bpetok serve MODEL`` on a free 127.0.0.1 port, then CLIENTS threads each send one
``POST /tokenize`` of MB megabytes of CJK text with ``with_pieces`` (an answer of ~20 bytes per
byte asked) and never read a byte. Meanwhile a separate process (so that the sending threads
do not delay it) polls ``/health`` every 0.1 s on a fresh connection, and the server's RSS and
open sockets are sampled from /proc. It prints, every few
seconds, RSS (now and peak), sockets open, and /health latency; then how each client's answer
began (peeked at the end: 200, 503, or closed).

    python benchmarks/server_slow_readers.py tests/data/ggml-vocab-qwen3.gguf.gz --clients 64 --mb 4

Every client sends the same text (the point is the memory unread answers pin, not encoding
speed); ``--distinct`` gives each its own. Linux only (/proc).
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health_latency(port: int) -> float | None:
    """Seconds for GET /health on a new connection, None if it failed or took over 10 s."""
    start = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/health")
        ok = conn.getresponse().status == 200
        conn.close()
    except OSError:
        return None
    return time.perf_counter() - start if ok else None


def proc_status(pid: int) -> tuple[float, float, int]:
    """(RSS MB, peak RSS MB, open sockets) of a process."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024, sockets


def cjk_text(megabytes: float, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(int(megabytes * 1_000_000 / 3)))


def probe(port: int, seconds: float) -> None:
    """The /health poller: one line per poll, the latency in seconds or "failed"."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        latency = health_latency(port)
        print("failed" if latency is None else f"{latency:.6f}", flush=True)
        time.sleep(0.1)


def main() -> int:
    if sys.argv[1:2] == ["--probe"]:
        probe(int(sys.argv[2]), float(sys.argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--mb", type=float, default=4.0, help="megabytes of UTF-8 text per request (default 4)")
    ap.add_argument("--seconds", type=float, default=40.0, help="how long to watch (default 40)")
    ap.add_argument("--distinct", action="store_true", help="a different text for each client")
    ap.add_argument("--serve-args", default="--keep-alive-timeout 2 --request-timeout 5 --write-timeout 10",
                    help="extra bpetok serve options (default: %(default)s)")
    args = ap.parse_args()

    port = free_port()
    cmd = [sys.executable, "-m", "bpetok.apps.cli", "serve", args.model, "--port", str(port), "--log-level", "warning",
           "--max-body-bytes", str(int(args.mb * 1_000_000) + 4096), "--compute-timeout", "120",
           *args.serve_args.split()]
    server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while health_latency(port) is None:
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("server_slow_readers: bpetok serve did not start")
            time.sleep(0.2)
        texts = [cjk_text(args.mb, i if args.distinct else 0) for i in range(args.clients if args.distinct else 1)]
        bodies = [json.dumps({"content": t, "with_pieces": True}, ensure_ascii=False).encode() for t in texts]
        rss0, _, _ = proc_status(server.pid)
        print(f"{' '.join(cmd[2:])}\n{args.clients} clients x {len(bodies[0]):,} bytes, never reading; "
              f"server RSS {rss0:.0f} MB at start")

        sockets: list[socket.socket] = []

        def client(i: int) -> None:
            s = socket.create_connection(("127.0.0.1", port))
            sockets.append(s)
            body = bodies[i % len(bodies)]
            head = f"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            try:
                s.sendall(head + body)
            except OSError:
                pass  # refused or closed early: seen in the peek below

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
        start = time.monotonic()
        for t in threads:
            t.start()
        prober = subprocess.Popen([sys.executable, __file__, "--probe", str(port), str(args.seconds)],
                                  stdout=subprocess.PIPE, text=True)
        latencies: list[float] = []
        failed = 0
        period: list[float] = []
        peak = 0.0
        next_report = 0.0
        print(f"{'t (s)':>6} {'RSS MB':>7} {'peak MB':>8} {'sockets':>8} {'/health max ms (last period)':>29}")
        assert prober.stdout is not None
        for line in prober.stdout:
            now = time.monotonic() - start
            if line.strip() == "failed":
                failed += 1
            else:
                latencies.append(float(line))
                period.append(float(line))
            rss, peak, open_sockets = proc_status(server.pid)
            if now >= next_report:
                worst = f"{max(period) * 1000:.1f}" if period else "-"
                print(f"{now:6.1f} {rss:7.0f} {peak:8.0f} {open_sockets:8d} {worst:>29}")
                period = []
                next_report += 5
        prober.wait()
        statuses: dict[str, int] = {}
        for s in sockets:
            s.settimeout(0.5)
            try:
                first = s.recv(12, socket.MSG_PEEK)
                key = first.decode("latin-1") if first else "closed, nothing sent"
            except (TimeoutError, socket.timeout):
                key = "open, nothing sent yet"
            except OSError as e:
                key = f"closed ({e.__class__.__name__})"
            statuses[key] = statuses.get(key, 0) + 1
            s.close()
        ordered = sorted(latencies)
        print(f"peak RSS {peak:.0f} MB; /health: {len(latencies)} answers, {failed} failed, "
              f"p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {ordered[int(len(ordered) * 0.99)] * 1000:.1f} ms, "
              f"max {ordered[-1] * 1000:.1f} ms")
        print("answers as the clients found them:", ", ".join(f"{k!r}: {v}" for k, v in sorted(statuses.items())))
        print(f"load average {os.getloadavg()[0]:.2f}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
