"""How long ``bpetok serve --shutdown-timeout 2`` takes to exit on SIGTERM, and whether it answers
anything after the signal.

Starts the server on PORT, sends CLIENTS requests of 4 MB of CJK with ``with_pieces`` that are
never read (some answers fill the buffers, some are still computing), waits 4 s, sends SIGTERM,
then asks ``/health`` every 10 ms until the process is gone and prints the exit time and the
statuses of any answers given after the signal (there should be none).

    python benchmarks/server_shutdown.py tests/data/ggml-vocab-qwen3.gguf.gz
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--shutdown-timeout", default="2")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "bpetok.apps.cli", "serve", args.model, "--port", str(port),
                               "--shutdown-timeout", args.shutdown_timeout, "--log-level", "warning",
                               "--max-body-bytes", "5000000"])
    deadline = time.monotonic() + 120
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            conn.getresponse()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("server_shutdown: bpetok serve did not start")
            time.sleep(0.2)
    rng = random.Random(0)
    text = "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(1_333_333))
    body = json.dumps({"content": text, "with_pieces": True}, ensure_ascii=False).encode()
    clients = []
    for _ in range(args.clients):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.sendall(f"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        clients.append(s)
    time.sleep(4)
    start = time.monotonic()
    server.send_signal(signal.SIGTERM)
    late: list[int] = []

    def poke() -> None:
        while server.poll() is None:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                conn.request("GET", "/health")
                late.append(conn.getresponse().status)
            except OSError:
                pass
            time.sleep(0.01)

    poker = threading.Thread(target=poke)
    poker.start()
    server.wait()
    took = time.monotonic() - start
    poker.join()
    for s in clients:
        s.close()
    print(f"exited {took:.2f} s after SIGTERM (--shutdown-timeout {args.shutdown_timeout}); "
          f"answers given after the signal: {late or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
