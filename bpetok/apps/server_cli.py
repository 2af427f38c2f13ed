"""``bpetok serve``: the command that loads the vocabularies and runs :func:`bpetok.apps.server.create_app`
under uvicorn, in one process or ``--workers N`` (each started from ``bpetok.apps.server:app_from_env``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, TypeVar

import bpetok
from bpetok.errors import BpetokError
from bpetok.hookspecs import hookimpl
from bpetok.apps.server import (
    DEFAULT_COMPUTE_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_HOST,
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    DEFAULT_LIMIT_CONCURRENCY,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_PORT,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SHUTDOWN_TIMEOUT,
    DEFAULT_THREADS,
    DEFAULT_WRITE_TIMEOUT,
    ENV_LIMITS,
    ENV_MODEL,
    ENV_MODELS,
    LINGER_BYTES,
    LINGER_IDLE,
    LINGER_SECONDS,
    _INSTALL_HINT,
    _require_server_extra,
    create_app,
    model_name,
)

__all__ = ["bpetok_register_commands"]

T = TypeVar("T", int, float)


def _served_paths(args) -> list[tuple[str, str]]:
    """(name, absolute path) of every vocabulary to serve: the positional files (named after
    their file) then each ``--model NAME=PATH``."""
    pairs = [(model_name(path), os.path.abspath(path)) for path in args.model]
    for item in args.named_model or ():
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise BpetokError(f"--model {item!r}: expected NAME=PATH, e.g. --model qwen=qwen3.gguf")
        pairs.append((name, os.path.abspath(path)))
    if not pairs:
        raise BpetokError("bpetok serve needs a vocabulary: bpetok serve MODEL.gguf (or --model NAME=PATH)")
    names = [name for name, _ in pairs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise BpetokError(f"two vocabularies are named {', '.join(twice)}: name them apart with --model NAME=PATH")
    return pairs


# -- the command ------------------------------------------------------------------------------------------


def _number(text: str, convert: Callable[[str], T], what: str) -> T:
    """``convert(text)``, or the argparse error that says ``text`` is not ``what``."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def _port(text: str) -> int:
    value = _number(text, int, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0..65535)")
    return value


def _seconds(text: str) -> float:
    value = _number(text, float, "a number of seconds")
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 and at most 86400 seconds")
    return value


def _cmd_serve(args) -> int:
    uvicorn = _require_server_extra()
    _check_fd_limit(args.limit_concurrency)
    _fix_malloc_threshold()
    pairs = _served_paths(args)
    models = {}
    for name, path in pairs:  # fail here, with bpetok's message, before any worker starts
        tok = models[name] = bpetok.from_file(path)
        print(
            f"bpetok: loaded {name} from {path} ({tok.vocabulary.model}/{tok.vocabulary.pre}, {tok.n_tokens:,} tokens)",
            file=sys.stderr,
            flush=True,
        )
    url = f"http://{args.host}:{args.port}"
    print(f"bpetok: starting {args.workers} worker(s) on {url} (the playground is at {url}/)", file=sys.stderr, flush=True)
    options = dict(
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        http=_protocol(args.request_timeout, args.header_timeout, args.write_timeout),
        timeout_keep_alive=args.keep_alive_timeout,
        limit_concurrency=args.limit_concurrency,
        timeout_graceful_shutdown=args.shutdown_timeout,
    )
    limits = dict(
        max_body_bytes=args.max_body_bytes,
        body_timeout=args.request_timeout,
        threads=args.threads,
        compute_timeout=args.compute_timeout,
        max_buffered_bytes=args.max_buffered_bytes,
    )
    try:
        if args.workers == 1:
            from bpetok.apps.server_http import run_server

            served = create_app(models, **limits) if len(pairs) > 1 else create_app(tok, model_path=pairs[0][1], **limits)
            run_server(uvicorn.Config(served, **options))
        else:
            # Workers are separate processes started from an import string; each loads the model itself.
            os.environ[ENV_MODEL] = pairs[0][1]
            if len(pairs) > 1:
                os.environ[ENV_MODELS] = json.dumps(pairs)
            for name, (variable, _) in ENV_LIMITS.items():
                os.environ[variable] = str(limits[name])
            _run_workers(uvicorn, args.workers, options)
    except SystemExit as e:  # uvicorn logs why it could not start (e.g. the port is taken), then exits
        if e.code not in (0, None):
            raise BpetokError(
                f"the server could not start on {url} (uvicorn's message is above); if the port is in use, "
                "pass another --port"
            ) from None
        raise
    return 0


def _protocol(request_timeout: float, header_timeout: float, write_timeout: float):
    """uvicorn's h11 protocol with head and write timeouts and a lingering close (bpetok.apps.server_http)."""
    import functools

    from bpetok.apps.server_http import BoundedH11Protocol

    return functools.partial(
        BoundedH11Protocol,
        header_timeout=min(header_timeout, request_timeout),
        write_timeout=write_timeout,
        linger_seconds=LINGER_SECONDS,
        linger_idle=LINGER_IDLE,
        linger_bytes=LINGER_BYTES,
    )


# glibc's malloc raises its mmap threshold (up to 32 MB) each time a large block is freed, after
# which multi-megabyte bodies and answers come from its heaps and freeing them returns nothing to
# the system: 64 unread 4 MB answers took the server to 1.27 GB of RSS, against 0.72 GB with the
# threshold fixed (benchmarks/server_slow_readers.py). Fixed here for the server's processes.
_MMAP_THRESHOLD = 256 * 1024
_MMAP_THRESHOLD_ENV = "MALLOC_MMAP_THRESHOLD_"  # read by glibc when a worker process starts


def _fix_malloc_threshold() -> None:
    """Serve blocks of 256 KiB and more from mmap, so that freeing them returns them (glibc only)."""
    import ctypes
    import ctypes.util

    os.environ.setdefault(_MMAP_THRESHOLD_ENV, str(_MMAP_THRESHOLD))
    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return
    m_mmap_threshold = -3  # glibc's M_MMAP_THRESHOLD
    mallopt(m_mmap_threshold, _MMAP_THRESHOLD)


def _check_fd_limit(limit_concurrency: int) -> None:
    """Make room for ``limit_concurrency`` connections in the open-file limit, or say what to do.

    Past the limit, accept() fails and nobody, /health included, is answered; uvicorn's 503 for
    connections over --limit-concurrency needs a descriptor for each of them too.
    """
    try:
        import resource
    except ImportError:  # not on this platform
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = limit_concurrency + 64  # the model file, the listening socket, logs, a margin
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard == resource.RLIM_INFINITY or hard >= needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        return
    raise BpetokError(
        f"--limit-concurrency {limit_concurrency} needs about {needed} open files but this process may open "
        f"at most {hard} (ulimit -n); pass a smaller --limit-concurrency"
    )


def _run_workers(uvicorn, workers: int, options: dict) -> None:
    """``uvicorn.run(..., workers=N)``, with TCP_NODELAY on the shared listening socket.

    subtle: for N > 1 uvicorn binds a socket made with ``socket.socket(family)``, whose ``proto`` is 0,
    so asyncio does not set TCP_NODELAY on the connections it accepts; uvicorn writes the head and the
    body of a response separately, and Nagle's algorithm then holds each body back until the client's
    delayed ACK: about 40 ms a request (177 requests/s instead of over 2,000 in server_bench.py).
    Linux gives accepted sockets the listening socket's TCP_NODELAY, so it is set there.
    """
    import inspect
    import socket

    try:
        from uvicorn.supervisors import Multiprocess
    except ImportError:  # an uvicorn laid out differently: correct, only slower
        uvicorn.run("bpetok.apps.server:app_from_env", factory=True, workers=workers, **options)
        return
    config = uvicorn.Config("bpetok.apps.server:app_from_env", factory=True, workers=workers, **options)
    sock = config.bind_socket()
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if "target" in inspect.signature(Multiprocess).parameters:  # uvicorn < 0.30
        Multiprocess(config, target=uvicorn.Server(config=config).run, sockets=[sock]).run()  # type: ignore[call-arg]
    else:
        Multiprocess(config, sockets=[sock]).run()


@hookimpl
def bpetok_register_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``bpetok serve`` to the CLI (a built-in plugin of the CLI hook)."""
    from bpetok.apps.cli import positive_int

    p = subparsers.add_parser(
        "serve",
        help="serve llama-server's /tokenize, /detokenize and /apply-template over HTTP",
        description="Serve llama-server's /tokenize, /detokenize, /apply-template, /health and /props for one "
        "vocabulary or several, and a token playground page at /. "
        f"Needs the server extra: {_INSTALL_HINT}.",
    )
    p.add_argument("model", metavar="MODEL.gguf", nargs="*", help="vocabularies to serve, each named after its file")
    p.add_argument(
        "--model",
        dest="named_model",
        action="append",
        metavar="NAME=PATH",
        help="a vocabulary to serve under NAME (repeatable); requests pick one with \"model\": NAME, "
        "the first being the default",
    )
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}, loopback only)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    p.add_argument("--workers", type=positive_int, default=1, help="worker processes (default 1)")
    p.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"largest request body accepted; larger ones get 413 (default {DEFAULT_MAX_BODY_BYTES:,})",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn's log level (default info)",
    )
    p.add_argument("--access-log", action="store_true", help="log every request (off by default: it costs time)")
    p.add_argument(
        "--request-timeout",
        type=_seconds,
        default=DEFAULT_REQUEST_TIMEOUT,
        help="seconds for a request's body to arrive after its head; a late body gets 408 and the connection "
        f"is closed (default {DEFAULT_REQUEST_TIMEOUT:g})",
    )
    p.add_argument(
        "--header-timeout",
        type=_seconds,
        default=DEFAULT_HEADER_TIMEOUT,
        help="seconds for a request's head (request line and headers) to arrive, from the connection's opening "
        "or the end of the keep-alive wait; slower connections are closed "
        f"(default {DEFAULT_HEADER_TIMEOUT:g}, at most --request-timeout)",
    )
    p.add_argument(
        "--write-timeout",
        type=_seconds,
        default=DEFAULT_WRITE_TIMEOUT,
        help="seconds a client may leave an answer unread (the server's send buffer full) before its "
        f"connection is closed (default {DEFAULT_WRITE_TIMEOUT:g})",
    )
    p.add_argument(
        "--compute-timeout",
        type=_seconds,
        default=DEFAULT_COMPUTE_TIMEOUT,
        help="seconds a request may take to be computed, waiting for a thread included; longer ones get 503 "
        f"(default {DEFAULT_COMPUTE_TIMEOUT:g})",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=DEFAULT_THREADS,
        help=f"worker threads computing requests (per worker process) (default {DEFAULT_THREADS})",
    )
    p.add_argument(
        "--max-buffered-bytes",
        type=positive_int,
        default=DEFAULT_MAX_BUFFERED_BYTES,
        help="bytes that request bodies and unsent answers may hold across connections (per worker); "
        f"past it requests get 503 (default {DEFAULT_MAX_BUFFERED_BYTES:,})",
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=_seconds,
        default=DEFAULT_KEEP_ALIVE_TIMEOUT,
        help=f"seconds an idle keep-alive connection stays open (default {DEFAULT_KEEP_ALIVE_TIMEOUT:g})",
    )
    p.add_argument(
        "--limit-concurrency",
        type=positive_int,
        default=DEFAULT_LIMIT_CONCURRENCY,
        help=f"connections served at once (per worker); requests beyond get 503 (default {DEFAULT_LIMIT_CONCURRENCY})",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=_seconds,
        default=DEFAULT_SHUTDOWN_TIMEOUT,
        help="on SIGTERM or Ctrl-C, seconds to let running requests finish before they are cancelled "
        f"(default {DEFAULT_SHUTDOWN_TIMEOUT:g})",
    )
    p.set_defaults(func=_cmd_serve)

