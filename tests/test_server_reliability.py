"""``bpetok serve`` under hostile load: work off the event loop with a time limit, answers that a
client does not read, the memory budget, slow request heads, deep bodies, prompt shutdown.

Real ``bpetok serve`` subprocesses on 127.0.0.1 (test_server.py's harness); every wait is bounded.
"""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import bpetok
from bpetok.apps.server_requests import props, tokenize_request
from bpetok.apps.server_io import PieceFragments, TokensBody, dumps
from helpers import LLAMA_TESTS, QWEN3
import test_server
from test_server import HOST, Server, assert_error, request

QWEN2 = LLAMA_TESTS / "ggml-vocab-qwen2.gguf.gz"  # carries tokenizer.chat_template
start_server = test_server.start_server  # the fixture: servers started in a test, stopped at its end


def cjk(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(n))


def health_seconds(port: int) -> float:
    start = time.monotonic()
    status, _, body = request(port, "GET", "/health", timeout=20)
    assert (status, body) == (200, {"status": "ok"})
    return time.monotonic() - start


# -- the compact answer is the readable one ----------------------------------------------------------------


@pytest.mark.parametrize("with_pieces", [False, True])
def test_streamed_tokens_answer_is_byte_for_byte_the_readable_one(qwen3, with_pieces):
    # pieces that are not UTF-8 (byte tokens of a split CJK character), specials, several chunks
    text = "Hello <|im_end|> " + cjk(6000) + " 𰻞 end"
    data = {"content": text, "with_pieces": with_pieces}
    ids = qwen3.encode(text)
    assert len(ids) > 2 * TokensBody.IDS_PER_CHUNK
    body = TokensBody(ids, PieceFragments(qwen3) if with_pieces else None)
    streamed = b"".join(body.chunks())
    assert streamed == dumps(tokenize_request(qwen3, data))
    assert body.to_bytes().data == streamed
    assert json.loads(TokensBody([], None).to_bytes().data) == {"tokens": []}


def test_props_carry_the_files_chat_templates(qwen3):
    qwen2 = bpetok.from_gguf(QWEN2)
    info = props(qwen2, str(QWEN2))
    assert info["chat_template"] == qwen2.vocabulary.metadata["tokenizer.chat_template"]
    assert "chat_template_tool_use" not in info  # the file has no tokenizer.chat_template.tool_use
    assert info["modalities"] == {"vision": False, "video": False, "audio": False}
    assert info["is_sleeping"] is False
    assert props(qwen3, "x")["chat_template"] == ""  # no template in the file


# -- the event loop stays free; the time limit -----------------------------------------------------------

SLOW_SERVER = """
import sys, time
import bpetok
from bpetok.apps.cli import main

real_encode = bpetok.Tokenizer.encode

def slow_encode(self, text, **kwargs):  # "slow" stands for a pattern that backtracks for seconds
    if text.startswith("slow"):
        time.sleep(float(text.split()[1]))
    return real_encode(self, text, **kwargs)

bpetok.Tokenizer.encode = slow_encode
sys.exit(main(sys.argv[1:]))
"""


def start_slow_server(tmp_path, *args: str) -> Server:
    srv = Server(tmp_path / "slow.log", "--help")  # a port and a log; the process itself is replaced
    srv.proc.wait(timeout=30)
    cmd = [sys.executable, "-c", SLOW_SERVER, "serve", str(QWEN3), "--host", HOST, "--port", str(srv.port), *args]
    srv.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=srv.log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    srv.wait_healthy()
    return srv


def test_slow_short_requests_do_not_stall_health_and_time_out(tmp_path):
    srv = start_slow_server(tmp_path, "--compute-timeout", "2", "--threads", "2")
    try:
        answers: list = []

        def send(text: str) -> None:
            start = time.monotonic()
            answers.append((request(srv.port, "POST", "/tokenize", {"content": text}, timeout=60), time.monotonic() - start))

        # a short request that computes for 30 s (once on the event loop: /health waited for it)
        clients = [threading.Thread(target=send, args=("slow 30",)) for _ in range(2)]
        for c in clients:
            c.start()
        time.sleep(0.5)
        assert max(health_seconds(srv.port) for _ in range(5)) < 5  # generous: catches a stall, not a timing
        for c in clients:
            c.join(timeout=30)
        for answer, took in answers:
            error = assert_error(answer, 503, "2 seconds", "--compute-timeout")
            assert error["type"] == "unavailable_error"
            assert took < 15
        # both threads still sleep: a request queued behind them times out too, without running
        send("Hello")
        assert_error(answers[-1][0], 503, "--compute-timeout")
        assert srv.proc.poll() is None
        assert "Traceback" not in srv.output()
    finally:
        srv.stop()


def test_deeply_nested_messages_are_400_not_500(start_server):
    port = start_server(model=QWEN2).port
    for depth in (600, 900):
        inner: object = "x"
        for _ in range(depth):
            inner = {"a": inner}
        body = {"messages": [{"role": "user", "content": "hi", "x": inner}], "tools": [inner]}
        assert len(json.dumps(body)) < 16_000
        status, _, answer = request(port, "POST", "/apply-template", body)
        assert 400 <= status < 500, answer
        assert answer["error"]["type"] == "invalid_request_error"
    assert health_seconds(port) < 10


# -- answers nobody reads; the memory budget ----------------------------------------------------------------


def send_without_reading(port: int, body: dict) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # small, so the server's buffer fills soon
    s.connect((HOST, port))
    data = json.dumps(body, ensure_ascii=False).encode()
    s.sendall(f"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def read_to_end(s: socket.socket, limit: float) -> tuple[int, bool]:
    """(bytes read, whether the server ended the connection) within ``limit`` seconds."""
    s.settimeout(limit)
    got = 0
    try:
        while chunk := s.recv(1 << 20):
            got += len(chunk)
    except (ConnectionResetError, BrokenPipeError):
        return got, True
    except TimeoutError:
        return got, False
    return got, True


def test_a_client_that_does_not_read_is_disconnected_after_the_write_timeout(start_server, qwen3):
    srv = start_server("--write-timeout", "1", "--keep-alive-timeout", "1")
    text = cjk(300_000)
    full = len(dumps(tokenize_request(qwen3, {"content": text, "with_pieces": True})))
    assert full > 8_000_000  # more than loopback's socket buffers hold
    clients = [send_without_reading(srv.port, {"content": text, "with_pieces": True}) for _ in range(3)]
    try:
        assert health_seconds(srv.port) < 10
        for s in clients:  # wait (without reading) for each answer to start
            s.settimeout(120)
            assert s.recv(1, socket.MSG_PEEK)
        assert health_seconds(srv.port) < 10
        time.sleep(4.0)  # the write timeout, and a margin
        for s in clients:
            got, ended = read_to_end(s, 20)
            assert ended and got < full, (got, full)  # cut off, not waited for
        assert health_seconds(srv.port) < 10
        small = request(srv.port, "POST", "/tokenize", {"content": "Hello world"})
        assert small[0] == 200 and small[2] == {"tokens": qwen3.encode("Hello world")}
    finally:
        for s in clients:
            s.close()


def test_past_the_buffered_bytes_limit_is_503(start_server, qwen3):
    srv = start_server("--max-buffered-bytes", "1000000", "--max-body-bytes", "4000000")
    # an answer of 4 bytes an id + one chunk, over the limit
    big = {"content": cjk(200_000)}
    error = assert_error(request(srv.port, "POST", "/tokenize", big), 503, "--max-buffered-bytes 1,000,000")
    assert error["type"] == "unavailable_error"
    # a body over the limit while it arrives (1.2 MB > 1,000,000)
    assert_error(request(srv.port, "POST", "/tokenize", {"content": "a " * 600_000}), 503, "--max-buffered-bytes")
    # everything was given back: small requests go on
    for _ in range(3):
        status, _, body = request(srv.port, "POST", "/tokenize", {"content": "Hello"})
        assert (status, body) == (200, {"tokens": qwen3.encode("Hello")})


# -- slow heads; shutdown ------------------------------------------------------------------------------------


def test_a_slow_request_head_is_cut_at_the_header_timeout(start_server):
    srv = start_server("--header-timeout", "1", "--request-timeout", "60")
    idle = socket.create_connection((HOST, srv.port))
    half = socket.create_connection((HOST, srv.port))
    half.sendall(b"GET /hea")
    try:
        start = time.monotonic()
        for s in (idle, half):
            got, ended = read_to_end(s, 20)
            assert ended and got == 0  # closed, nothing to answer
        assert time.monotonic() - start < 15  # the header timeout, far below --request-timeout 60
    finally:
        idle.close()
        half.close()


def test_sigterm_stops_accepting_at_once_and_exits_at_the_timeout(tmp_path):
    srv = start_slow_server(tmp_path, "--shutdown-timeout", "2")
    try:
        answers: list = []
        running = threading.Thread(
            target=lambda: answers.append(request(srv.port, "POST", "/tokenize", {"content": "slow 60"}, timeout=60))
        )
        running.start()
        unread = send_without_reading(srv.port, {"content": cjk(300_000), "with_pieces": True})
        time.sleep(3.0)  # the slow request sleeps in its thread; the big answer fills the buffers
        start = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert srv.proc.poll() is None  # still within the grace period
        try:
            late = socket.create_connection((HOST, srv.port), timeout=5)
        except ConnectionRefusedError:
            pass  # not listening any more
        else:
            late.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            got, ended = read_to_end(late, 10)
            assert ended and got == 0, "a request made after SIGTERM was answered"
            late.close()
        srv.proc.wait(timeout=20)
        took = time.monotonic() - start
        running.join(timeout=30)
        unread.close()
        assert took < 2 + 5, srv.output()  # the grace period, plus a margin for a busy machine
        assert_error(answers[0], 503, "shutting down")
    finally:
        srv.stop()
