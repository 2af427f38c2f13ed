"""``bpetok serve``: the real server in a subprocess on a free 127.0.0.1 port, spoken to over HTTP.

Every test talks to 127.0.0.1 only. Each server process is terminated (then killed if it lingers)
by its fixture's finalizer, whatever the test did.
"""

from __future__ import annotations

import copy
import gzip
import http.client
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

import bpetok
from helpers import QWEN3, load_cases

HOST = "127.0.0.1"
LIMIT = 65536  # --max-body-bytes of the shared test server, small so that 413 bodies are cheap
STARTUP_TIMEOUT = 90  # seconds; the machine may be busy


# -- running a server ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    """A ``bpetok serve`` subprocess; :meth:`stop` ends it and its workers."""

    def __init__(self, log_path, *args: str, model=QWEN3):
        self.port = free_port()
        self.log_path = log_path
        self.log = open(log_path, "wb")
        cmd = [sys.executable, "-m", "bpetok.apps.cli", "serve", str(model), "--host", HOST, "--port", str(self.port), *args]
        # its own process group, so that a server that ignores SIGTERM is killed with its workers
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"bpetok serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                status, _, body = request(self.port, "GET", "/health", timeout=2)
                if status == 200 and body == {"status": "ok"}:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"bpetok serve did not answer /health within {STARTUP_TIMEOUT}s:\n{self.output()}")

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=20)
        if not self.log.closed:
            self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("serve") / "server.log", "--max-body-bytes", str(LIMIT))
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def start_server(tmp_path):
    """Start more servers in a test: ``start_server(*serve_args, model=...)``; all stopped at the end."""
    started: list[Server] = []

    def start(*args: str, model=QWEN3) -> Server:
        srv = Server(tmp_path / f"server-{len(started)}.log", *args, model=model)
        started.append(srv)
        srv.wait_healthy()
        return srv

    try:
        yield start
    finally:
        for srv in started:
            srv.stop()


@pytest.fixture
def port(server) -> int:
    yield server.port
    # whatever a test sent, the process must still be up and healthy afterwards
    assert server.proc.poll() is None, server.output()
    assert request(server.port, "GET", "/health")[0] == 200


def request(port: int, method: str, path: str, body=None, headers=None, timeout: float = 30, conn=None):
    """One request: (status, headers, parsed JSON body). ``body`` may be a dict (sent as JSON) or bytes."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    own = conn is None
    conn = conn or http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return response.status, dict(response.getheaders()), json.loads(data) if data else None
    finally:
        if own:
            conn.close()


def assert_error(answer, status: int, *words: str) -> dict:
    """llama-server's error shape, the right code, and a message containing each of ``words``."""
    got_status, headers, body = answer
    assert got_status == status, body
    assert headers["content-type"].startswith("application/json")
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "type"}, body
    assert body["error"]["code"] == status
    for word in words:
        assert word in body["error"]["message"], body
    return body["error"]


# -- answers ------------------------------------------------------------------------------------------------


def test_health_and_props(port, qwen3):
    assert request(port, "GET", "/health")[::2] == (200, {"status": "ok"})
    assert request(port, "GET", "/v1/health")[::2] == (200, {"status": "ok"})
    status, _, props = request(port, "GET", "/props")
    assert status == 200
    assert props["model"] == "gpt2" and props["pre"] == "qwen2"
    assert props["n_tokens"] == qwen3.n_tokens == 151936
    assert props["eog_ids"] == sorted(qwen3.eog_ids)
    assert props["bos_token"] == "<|endoftext|>" and props["eos_token"] == "<|im_end|>"
    assert props["model_path"].endswith("ggml-vocab-qwen3.gguf.gz")


def test_tokenize_matches_llama_cpp_on_reference_cases(port, qwen3):
    cases = load_cases("qwen3")[::10]  # 580 of the 5,800, every kind of case
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        for case in cases:
            body = {"content": case["text"], "parse_special": case["special"]}
            status, _, answer = request(port, "POST", "/tokenize", body, conn=conn)
            assert status == 200, (case, answer)
            assert answer["tokens"] == case["ids"] == qwen3.encode(case["text"], parse_special=case["special"]), case
    finally:
        conn.close()


def test_tokenize_options(port, qwen3):
    text = "Hi <|im_end|> <think>"
    assert request(port, "POST", "/tokenize", {"content": text})[2]["tokens"] == qwen3.encode(text)
    off = request(port, "POST", "/tokenize", {"content": text, "parse_special": False})[2]["tokens"]
    assert off == qwen3.encode(text, parse_special=False) and 151645 not in off
    on = request(port, "POST", "/tokenize", {"content": text, "add_special": True})[2]["tokens"]
    assert on == qwen3.encode(text, add_special=True)
    # null means "the default", as in llama-server
    nulls = {"content": text, "add_special": None, "parse_special": None, "with_pieces": None}
    assert request(port, "POST", "/tokenize", nulls)[2]["tokens"] == qwen3.encode(text)
    assert request(port, "POST", "/tokenize", {"content": ""})[::2] == (200, {"tokens": []})


def test_tokenize_with_pieces(port, qwen3):
    # A rare CJK character and an emoji are split into byte tokens that are not UTF-8 on their own.
    text = "Hello 𰻞 🫠 <|im_end|>"
    status, _, answer = request(port, "POST", "/tokenize", {"content": text, "with_pieces": True})
    assert status == 200
    ids = qwen3.encode(text)
    assert [t["id"] for t in answer["tokens"]] == ids
    for t in answer["tokens"]:
        piece = qwen3.piece(t["id"])
        try:
            assert t["piece"] == piece.decode("utf-8")
        except UnicodeDecodeError:
            assert t["piece"] == list(piece)
    assert any(isinstance(t["piece"], list) for t in answer["tokens"])  # the byte-list form is exercised
    assert {"id": 151645, "piece": "<|im_end|>"} in answer["tokens"]


def test_tokenize_mixed_content_array(port, qwen3):
    # llama-server's tokenize_mixed: strings are tokenized, numbers are ids taken as they are.
    status, _, answer = request(port, "POST", "/tokenize", {"content": ["Hello", 151645, " world", 0]})
    assert status == 200
    assert answer["tokens"] == qwen3.encode("Hello") + [151645] + qwen3.encode(" world") + [0]


def test_detokenize(port, qwen3):
    text = "Hello, world! <|im_end|> ¿Qué tal? 日本語 🫠"
    ids = qwen3.encode(text)
    assert request(port, "POST", "/detokenize", {"tokens": ids})[::2] == (200, {"content": qwen3.decode(ids)})
    assert request(port, "POST", "/detokenize", {"tokens": []})[::2] == (200, {"content": ""})
    # half a character: the detokenizer's bytes, decoded with U+FFFD
    half = [t for t in ids if not isinstance(_piece(qwen3, t), str)][:1]
    assert half and request(port, "POST", "/detokenize", {"tokens": half})[2]["content"] == qwen3.decode(half)


def _piece(tok, token_id):
    try:
        return tok.piece(token_id).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _piece_json(tok, token_id):
    piece = _piece(tok, token_id)
    return piece if piece is not None else list(tok.piece(token_id))


# -- errors ------------------------------------------------------------------------------------------------

BAD_REQUESTS = [
    # (path, body, words the message must contain)
    ("/tokenize", b"{", ["not valid JSON"]),
    ("/tokenize", b"", ["not valid JSON"]),
    ("/tokenize", b"[1, 2]", ["JSON object", "array"]),
    ("/tokenize", b'"text"', ["JSON object", "string"]),
    ("/tokenize", b'{"content": "\xff\xfe"}', ["not valid UTF-8"]),
    ("/tokenize", "{}".encode("utf-16"), ["not valid UTF-8"]),
    ("/tokenize", b"[" * 20_000 + b"]" * 20_000, ["nested too deeply"]),
    ("/tokenize", b'{"content": ' + b"[" * 5000 + b"]" * 5000 + b"}", ["nested too deeply"]),
    ("/tokenize", b'{"content": NaN}', ["NaN"]),
    ("/tokenize", b'{"content": "a", "add_special": Infinity}', ["Infinity"]),
    ("/tokenize", b"{}", ['"content" is required']),
    ("/tokenize", b'{"text": "hello"}', ['"content" is required']),
    ("/tokenize", b'{"content": 5}', ['"content" must be a string', "number"]),
    ("/tokenize", b'{"content": null}', ['"content" must be a string', "null"]),
    ("/tokenize", b'{"content": {"a": 1}}', ['"content" must be a string', "object"]),
    ("/tokenize", b'{"content": true}', ['"content" must be a string', "boolean"]),
    ("/tokenize", b'{"content": ["a", true]}', ['"content[1]"', "boolean"]),
    ("/tokenize", b'{"content": ["a", 1.5]}', ['"content[1]"', "number"]),
    ("/tokenize", b'{"content": ["a", [1]]}', ['"content[1]"', "array"]),
    ("/tokenize", b'{"content": [151936]}', ['"content[0]"', "out of range", "0..151935"]),
    ("/tokenize", b'{"content": ["a", -1]}', ['"content[1]"', "out of range"]),
    ("/tokenize", b'{"content": "a", "add_special": "yes"}', ['"add_special" must be a boolean', "string"]),
    ("/tokenize", b'{"content": "a", "parse_special": 1}', ['"parse_special" must be a boolean', "number"]),
    ("/tokenize", b'{"content": "a", "with_pieces": "true"}', ['"with_pieces" must be a boolean']),
    ("/tokenize", b'{"content": "a\\ud800b"}', ['"content"', "lone surrogate", "U+D800"]),
    ("/tokenize", b'{"content": ["ok", "\\udfff"]}', ['"content[1]"', "lone surrogate"]),
    ("/detokenize", b"{}", ['"tokens" is required']),
    ("/detokenize", b'{"tokens": "1 2 3"}', ['"tokens" must be an array', "string"]),
    ("/detokenize", b'{"tokens": 7}', ['"tokens" must be an array', "number"]),
    ("/detokenize", b'{"tokens": [1, 2.0]}', ['"tokens[1]"', "integer", "number"]),
    ("/detokenize", b'{"tokens": [1.5]}', ['"tokens[0]"', "integer"]),
    ("/detokenize", b'{"tokens": [true]}', ['"tokens[0]"', "boolean"]),
    ("/detokenize", b'{"tokens": [null]}', ['"tokens[0]"', "null"]),
    ("/detokenize", b'{"tokens": ["9707"]}', ['"tokens[0]"', "string"]),
    ("/detokenize", b'{"tokens": [9707, -1]}', ['"tokens[1]"', "-1", "out of range"]),
    ("/detokenize", b'{"tokens": [151936]}', ['"tokens[0]"', "151936", "out of range", "0..151935"]),
    ("/detokenize", b'{"tokens": [100000000000000000000000000000000]}', ['"tokens[0]"', "out of range"]),
    ("/detokenize", b'{"tokens": [' + b"9" * 5000 + b"]}", ["number is too long"]),
    ("/detokenize", b'{"tokens": [1e400]}', ['"tokens[0]"', "inf"]),
]


@pytest.mark.parametrize(("path", "body", "words"), BAD_REQUESTS, ids=range(len(BAD_REQUESTS)))
def test_bad_request_is_400(port, path, body, words):
    error = assert_error(request(port, "POST", path, body), 400, *words)
    assert error["type"] == "invalid_request_error"


def test_unknown_path_is_404(port):
    for method, path in [("GET", "/nope"), ("POST", "/v1/tokenize"), ("GET", "/tokenize/x")]:
        error = assert_error(request(port, method, path, b"{}" if method == "POST" else None), 404)
        assert error == {"code": 404, "message": "File Not Found", "type": "not_found_error"}  # llama-server's


def test_wrong_method_is_405(port):
    for method, path in [("GET", "/tokenize"), ("PUT", "/detokenize"), ("POST", "/health"), ("DELETE", "/props")]:
        answer = request(port, method, path, b"{}" if method != "GET" else None)
        assert_error(answer, 405, method, path)
        assert answer[1]["allow"]


def test_body_limit_is_413_and_the_connection_stays_usable(port, qwen3):
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        # with a Content-Length over the limit: refused before the body is read
        too_big = json.dumps({"content": "x" * LIMIT}).encode()
        assert_error(request(port, "POST", "/tokenize", too_big, conn=conn), 413, f"{LIMIT:,} bytes", "--max-body-bytes")
        assert request(port, "GET", "/health", conn=conn)[0] == 200

        # chunked, no Content-Length: cut off while reading
        def chunks():
            for _ in range(64):
                yield b" " * 4096

        headers = {"Transfer-Encoding": "chunked"}
        conn.request("POST", "/detokenize", body=chunks(), headers=headers, encode_chunked=True)
        response = conn.getresponse()
        body = json.loads(response.read())
        assert response.status == 413 and body["error"]["code"] == 413
        assert request(port, "GET", "/health", conn=conn)[0] == 200

        # a far larger declared body, of which only one byte is ever sent: answered without waiting for it
        big = 50 * 1024 * 1024
        with socket.create_connection((HOST, port), timeout=30) as s:
            s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{" % big)
            head = s.recv(65536)
        assert head.startswith(b"HTTP/1.1 413"), head

        # exactly at the limit: accepted
        at_limit = b'{"content": "hello"}'
        at_limit += b" " * (LIMIT - len(at_limit))
        assert request(port, "POST", "/tokenize", at_limit, conn=conn)[::2] == (200, {"tokens": qwen3.encode("hello")})
    finally:
        conn.close()


# -- load ------------------------------------------------------------------------------------------------


def _load_mix(qwen3) -> list[tuple[str, str, bytes, int, object]]:
    """(method, path, body, expected status, expected JSON or None for "any error body") requests."""
    rng = random.Random(7)
    texts = [c["text"] for c in rng.sample(load_cases("qwen3"), 60) if len(c["text"]) < 2000]
    mix = []
    for text in texts:
        ids = qwen3.encode(text)
        mix.append(("POST", "/tokenize", json.dumps({"content": text}).encode(), 200, {"tokens": ids}))
        mix.append(("POST", "/detokenize", json.dumps({"tokens": ids}).encode(), 200, {"content": qwen3.decode(ids)}))
    pieces = {"tokens": [{"id": i, "piece": _piece_json(qwen3, i)} for i in qwen3.encode("Hé 𰻞!")]}
    mix.append(("POST", "/tokenize", b'{"content": "H\\u00e9 \\ud883\\udede!", "with_pieces": true}', 200, pieces))
    mix.append(("GET", "/health", b"", 200, {"status": "ok"}))
    for path, body, _ in BAD_REQUESTS[::3]:
        mix.append(("POST", path, body, 400, None))
    mix.append(("POST", "/tokenize", b"{" + b" " * LIMIT + b"}", 413, None))
    mix.append(("GET", "/missing", b"", 404, None))
    mix.append(("GET", "/tokenize", b"", 405, None))
    return mix


def test_concurrent_load_mixing_valid_and_invalid_requests(port, qwen3):
    clients, per_client = 32, 200
    mix = _load_mix(qwen3)
    wrong: list[str] = []
    dropped: list[str] = []
    done = [0] * clients

    def client(n: int) -> None:
        rng = random.Random(n)
        conn = http.client.HTTPConnection(HOST, port, timeout=60)
        try:
            for _ in range(per_client):
                method, path, body, status, expected = rng.choice(mix)
                try:
                    got_status, _, got = request(port, method, path, body or None, conn=conn)
                except (OSError, http.client.HTTPException, ValueError) as e:
                    dropped.append(f"client {n}: {method} {path}: {e!r}")
                    conn.close()
                    conn = http.client.HTTPConnection(HOST, port, timeout=60)
                    continue
                if got_status != status or (expected is not None and got != expected):
                    wrong.append(f"client {n}: {method} {path} {body[:60]!r}: {got_status} {str(got)[:200]}")
                elif expected is None and (got or {}).get("error", {}).get("code") != status:
                    wrong.append(f"client {n}: {method} {path}: error body {got!r}")
                done[n] += 1
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 600
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "the load did not finish within 600 s"
    assert wrong == []
    assert dropped == []
    assert sum(done) == clients * per_client
    assert request(port, "GET", "/health")[::2] == (200, {"status": "ok"})


# -- processes, workers, the command line ------------------------------------------------------------------


def test_workers(start_server, qwen3):
    srv = start_server("--workers", "2")
    for text in ["Hello world", "<|im_start|>user\nhi<|im_end|>", "日本語のテキスト"]:
        assert request(srv.port, "POST", "/tokenize", {"content": text})[::2] == (200, {"tokens": qwen3.encode(text)})
    assert_error(request(srv.port, "POST", "/detokenize", {"tokens": [-5]}), 400, '"tokens[0]"')
    srv.stop()  # SIGTERM reaches the workers through uvicorn's supervisor
    assert srv.proc.returncode == 0, srv.output()


def with_bos_and_eos(path, out):
    """Qwen3's vocabulary with tokenizer.ggml.add_bos_token and add_eos_token set to true.

    The shipped files have neither key; a vocab-only GGUF has no tensors, so two key/value pairs
    can be put right after the 24-byte header (magic, version, tensor count, key/value count).
    """
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data)
    assert magic == b"GGUF" and n_tensors == 0
    extra = b""
    for key in (b"tokenizer.ggml.add_bos_token", b"tokenizer.ggml.add_eos_token"):
        extra += struct.pack("<Q", len(key)) + key + struct.pack("<IB", 7, 1)  # 7: BOOL
    out.write_bytes(struct.pack("<4sIQQ", magic, version, n_tensors, n_kv + 2) + extra + data[24:])
    return out


def test_add_special_follows_the_vocabulary(start_server, tmp_path):
    model = with_bos_and_eos(QWEN3, tmp_path / "qwen3-bos-eos.gguf")
    tok = bpetok.from_gguf(model)
    bos, eos = 151643, 151645
    assert (tok.add_bos, tok.add_eos) == (True, True)
    port = start_server(model=model).port
    props = request(port, "GET", "/props")[2]
    assert (props["add_bos"], props["add_eos"]) == (True, True)
    hello = tok.encode("Hello")
    assert request(port, "POST", "/tokenize", {"content": "Hello"})[2]["tokens"] == hello
    with_special = request(port, "POST", "/tokenize", {"content": "Hello", "add_special": True})[2]["tokens"]
    assert with_special == [bos] + hello + [eos] == tok.encode("Hello", add_special=True)
    # llama-server's tokenize_mixed: only the first element, and only if it is a string
    mixed = {"content": ["Hello", 9, "Hello"], "add_special": True}
    assert request(port, "POST", "/tokenize", mixed)[2]["tokens"] == [bos] + hello + [eos, 9] + hello
    mixed = {"content": [9, "Hello"], "add_special": True}
    assert request(port, "POST", "/tokenize", mixed)[2]["tokens"] == [9] + hello


def _run_cli(*args: str, blocked: tuple[str, ...] = (), report_modules: bool = False) -> subprocess.CompletedProcess:
    """``bpetok ARGS`` in a fresh interpreter, with the modules in ``blocked`` made unimportable.

    ``report_modules``: end stderr with the line "server modules loaded: [...]".
    """
    code = (
        "import sys\n"
        f"BLOCKED = {blocked!r}\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from bpetok.apps.cli import main\n"
        f"code = main({list(args)!r})\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'starlette', 'uvicorn'})\n"
        f"if {report_modules!r}:\n"
        "    print('server modules loaded:', loaded, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_serve_without_the_server_extra_says_how_to_install_it():
    done = _run_cli("serve", str(QWEN3), "--port", "0", blocked=("starlette", "uvicorn"))
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("bpetok: error: ") and "pip install 'bpetok[server]'" in lines[0]


def test_core_cli_works_without_the_server_extra():
    done = _run_cli("info", str(QWEN3), "--json", blocked=("starlette", "uvicorn"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n_tokens"] == 151936
    done = _run_cli("serve", "--help", blocked=("starlette", "uvicorn"))
    assert "--max-body-bytes" in done.stdout and "127.0.0.1" in done.stdout


def test_server_stack_is_imported_only_to_serve():
    done = _run_cli("info", str(QWEN3), report_modules=True)  # nothing blocked: the extra is installed but not needed
    assert done.returncode == 0
    assert "server modules loaded: []" in done.stderr


def test_serve_argument_errors(tmp_path):
    done = _run_cli("serve", str(QWEN3), "--workers", "0")
    assert done.returncode == 2 and "--workers" in done.stderr and "at least 1" in done.stderr
    done = _run_cli("serve", str(QWEN3), "--port", "70000")
    assert done.returncode == 2 and "--port" in done.stderr
    missing = tmp_path / "absent.gguf"
    done = _run_cli("serve", str(missing), "--port", str(free_port()))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"bpetok: error: {missing}: no such file; pass the path of a GGUF model or vocabulary file"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_port_in_use_is_a_one_line_error(workers):
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = _run_cli("serve", str(QWEN3), "--port", str(busy), "--workers", workers)
    assert done.returncode == 1, done.stderr
    assert "address already in use" in done.stderr.lower()
    assert done.stderr.strip().splitlines()[-1].startswith(f"bpetok: error: the server could not start on http://{HOST}:{busy}")


def test_default_body_limit_is_documented():
    from bpetok.apps import server

    assert server.DEFAULT_MAX_BODY_BYTES == 4 * 1024 * 1024
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "server.md"), encoding="utf-8") as f:
        assert "4,194,304" in f.read()


def test_malformed_http_and_dropped_clients_do_not_hurt(port, qwen3):
    raw = [
        b"GARBAGE\r\n\r\n",
        b"\x00\xff\xfe\r\n\r\n",
        b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
        b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"content\": ",  # then hang up
        b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Long: " + b"a" * 200_000 + b"\r\n\r\n",
    ]
    for data in raw:
        with socket.create_connection((HOST, port), timeout=30) as s:
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
            except OSError:
                pass  # the server may reset a connection it refuses; what matters is that it lives on
    assert request(port, "POST", "/tokenize", {"content": "still here"})[::2] == (200, {"tokens": qwen3.encode("still here")})


def test_a_bug_is_a_500_in_the_error_shape_and_the_app_goes_on(qwen3):
    # In-process (no subprocess can be made to fail on purpose): a tokenizer whose encode raises.
    import asyncio

    from bpetok.apps.server import create_app

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    broken = copy.copy(qwen3)
    broken.encode = boom
    app = create_app(broken)

    async def call(path: str, body: bytes):
        sent = []
        received = []

        async def receive():  # the body once, then (as a server does) nothing until the client leaves
            if received:
                await asyncio.Event().wait()
            received.append(body)
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"content-length", str(len(body)).encode())], "client": (HOST, 1), "server": (HOST, 2),
        }
        await app(scope, receive, send)
        return sent[0]["status"], json.loads(b"".join(m.get("body", b"") for m in sent[1:]))

    status, body = asyncio.run(call("/tokenize", b'{"content": "x"}'))
    assert status == 500
    assert body == {"error": {"code": 500, "message": "internal error: RuntimeError", "type": "server_error"}}
    assert asyncio.run(call("/detokenize", b'{"tokens": [9707]}')) == (200, {"content": "Hello"})


# -- /apply-template (bpetok.apps.chat) ---------------------------------------------------------------------------


def test_apply_template(start_server):
    """llama-server's /apply-template: messages -> {"prompt"}, the generation prompt on by default.
    (The rendering itself is compared with transformers in test_chat_templates.py.)"""
    from helpers import LLAMA_TESTS

    model = LLAMA_TESTS / "ggml-vocab-qwen2.gguf.gz"  # carries tokenizer.chat_template
    port = start_server(model=model).port
    tok = bpetok.from_gguf(model)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    status, _, body = request(port, "POST", "/apply-template", {"messages": messages})
    assert status == 200
    assert body == {"prompt": tok.apply_chat_template(messages, add_generation_prompt=True)}
    assert body["prompt"].endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    status, _, body = request(port, "POST", "/apply-template", {"messages": messages, "add_generation_prompt": False})
    assert body["prompt"].endswith("<|im_end|>\n")
    assert_error(request(port, "POST", "/apply-template", {}), 400, '"messages" is required')
    assert_error(request(port, "POST", "/apply-template", {"messages": "Hi"}), 400, '"messages" must be an array')
    bad = {"messages": messages, "chat_template_kwargs": {"tools": []}}
    assert_error(request(port, "POST", "/apply-template", bad), 400, "cannot set tools")
    # llama-server's prefill_assistant: a trailing assistant message is continued, not closed
    prefill = messages + [{"role": "assistant", "content": "Sure, "}]
    status, _, body = request(port, "POST", "/apply-template", {"messages": prefill})
    assert body == {"prompt": tok.apply_chat_template(prefill, continue_final_message=True)}
    assert body["prompt"].endswith("<|im_start|>assistant\nSure, ")
    both = {"messages": messages, "continue_final_message": True}
    assert_error(request(port, "POST", "/apply-template", both), 400, "Cannot set both")
    twice = {"messages": prefill + [{"role": "assistant", "content": "x"}]}
    assert_error(request(port, "POST", "/apply-template", twice), 400, "2 or more assistant messages")


def test_apply_template_without_a_template_is_400(port):
    # the shared server's qwen3 vocabulary has no tokenizer.chat_template
    error = assert_error(request(port, "POST", "/apply-template", {"messages": [{"role": "user", "content": "x"}]}), 400)
    assert "has no chat template" in error["message"]


def test_apply_template_failure_names_the_line():
    # a conversation the template refuses: the template's own message, with its line
    from bpetok.apps.server_requests import apply_template_request

    qwen2 = bpetok.from_gguf(os.path.join(os.path.dirname(__file__), "data", "llama.cpp-tests", "ggml-vocab-qwen2.gguf.gz"))
    messages = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": [{"function": "oops"}]},
        {"role": "user", "content": "y"},
    ]
    with pytest.raises(bpetok.BpetokError, match=r"tokenizer.chat_template, line \d+"):
        apply_template_request(qwen2, {"messages": messages})


# -- slow, stuck and over-limit clients (real TCP; every wait below is bounded) ------------------------


def test_413_reaches_a_client_that_sends_connection_close(port):
    # Python's urllib sends "Connection: close" and writes the whole body before reading: a
    # server that closes at once resets the connection under it, and it never sees the 413.
    import urllib.error
    import urllib.request

    body = json.dumps({"content": "x" * 16_000_000}).encode()  # far more than the socket buffers hold
    req = urllib.request.Request(f"http://{HOST}:{port}/tokenize", data=body)
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=30)
    assert caught.value.code == 413
    error = json.loads(caught.value.read())["error"]
    assert error["code"] == 413 and "--max-body-bytes" in error["message"]


def _wait_closed(sock: socket.socket, limit: float) -> tuple[float, bytes]:
    """Read until the server closes ``sock``: (seconds it took, what was received)."""
    sock.settimeout(limit)
    start, got = time.monotonic(), b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return time.monotonic() - start, got


def test_incomplete_requests_and_idle_connections_time_out(start_server):
    srv = start_server("--request-timeout", "1", "--keep-alive-timeout", "1")
    openings = {
        "nothing": b"",
        "half a head": b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Le",
        "half a body": b'POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"content": ',
        "a request, then idle": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        "a request, then half a head": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /hea",
    }
    socks = {}
    for name, data in openings.items():
        socks[name] = socket.create_connection((HOST, srv.port), timeout=30)
        socks[name].sendall(data)
    try:
        for name, sock in socks.items():
            took, got = _wait_closed(sock, 20)
            assert took < 10, f"{name}: still open after {took:.1f}s"
            if name == "half a body":
                head, _, body = got.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 408"), got
                assert json.loads(body)["error"]["code"] == 408
            elif name.startswith("a request"):
                assert got.startswith(b"HTTP/1.1 200") and got.count(b"HTTP/1.1") == 1, got
            else:
                assert got == b"", got
    finally:
        for sock in socks.values():
            sock.close()
    assert request(srv.port, "GET", "/health")[::2] == (200, {"status": "ok"})


def test_sigterm_finishes_with_a_client_stuck_mid_request(start_server):
    srv = start_server()  # default timeouts: only the shutdown can end these connections in time
    stuck = socket.create_connection((HOST, srv.port), timeout=30)
    stuck.sendall(b'POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"content": "')
    half = socket.create_connection((HOST, srv.port), timeout=30)
    half.sendall(b"GET /heal")
    time.sleep(0.5)  # let the server read both
    try:
        start = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        try:
            srv.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running 20 s after SIGTERM:\n{srv.output()}") from None
        # uvicorn re-raises the signal once it has shut down: "killed by SIGTERM", after a clean stop
        assert srv.proc.returncode in (0, -signal.SIGTERM), srv.output()
        assert time.monotonic() - start < 15 and "Finished server process" in srv.output()
    finally:
        stuck.close()
        half.close()


SLOW_SERVER = """
import sys, time
import bpetok
from bpetok.apps.cli import main

def slow_encode(self, text, **kwargs):  # a request that runs far longer than the grace period
    time.sleep(120)

bpetok.Tokenizer.encode = slow_encode
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_cuts_a_running_request_at_the_shutdown_timeout(tmp_path):
    srv = Server(tmp_path / "slow.log", "--shutdown-timeout", "1")
    srv.proc.kill()  # started the plain way only to get a port and a log: restart with the slow encoder
    srv.proc.wait(timeout=20)
    cmd = [sys.executable, "-c", SLOW_SERVER, "serve", str(QWEN3), "--host", HOST, "--port", str(srv.port),
           "--shutdown-timeout", "1"]
    srv.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=srv.log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        srv.wait_healthy()
        answers = []

        def send():  # long enough to run in a worker thread
            answers.append(request(srv.port, "POST", "/tokenize", {"content": "x" * 20_000}, timeout=60))

        client = threading.Thread(target=send)
        client.start()
        time.sleep(1.0)  # the request is now sleeping in its thread
        start = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        try:
            srv.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running 20 s after SIGTERM:\n{srv.output()}") from None
        took = time.monotonic() - start
        client.join(timeout=30)
        assert took < 15 and srv.proc.returncode in (0, -signal.SIGTERM), srv.output()
        assert_error(answers[0], 503, "shutting down")
        assert "Traceback" not in srv.output()
    finally:
        srv.stop()


def test_connections_over_the_limit_get_503(start_server):
    srv = start_server("--limit-concurrency", "2")
    held = [socket.create_connection((HOST, srv.port), timeout=30) for _ in range(2)]
    try:
        for sock in held:
            sock.sendall(b"GET /heal")  # connected, request not complete yet
        time.sleep(0.3)
        status, _, _ = _raw_status(srv.port)
        assert status == 503
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert request(srv.port, "GET", "/health")[0] == 200


def _raw_status(port: int) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        conn.request("GET", "/health")
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


@pytest.mark.parametrize(
    "option, value", [("--request-timeout", "0"), ("--keep-alive-timeout", "soon"), ("--shutdown-timeout", "-1"),
                      ("--limit-concurrency", "0")]
)
def test_limit_options_are_checked(option, value):
    done = _run_cli("serve", str(QWEN3), option, value)
    assert done.returncode == 2 and option in done.stderr


def test_limit_concurrency_must_fit_the_open_file_limit():
    import resource

    def low_fd_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    cmd = [sys.executable, "-m", "bpetok.apps.cli", "serve", str(QWEN3), "--port", str(free_port()), "--limit-concurrency", "1000"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, preexec_fn=low_fd_limit)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "bpetok: error: --limit-concurrency 1000 needs about 1064 open files but this process may open at most 128 "
        "(ulimit -n); pass a smaller --limit-concurrency"
    ]
