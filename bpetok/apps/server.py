"""``bpetok serve``: llama-server's tokenization endpoints over HTTP, without a model's weights.

An ASGI app (Starlette) served by uvicorn, both from the optional ``server`` extra, imported only
when a server is built, so ``import bpetok`` and the rest of the CLI never need them.

Endpoints, with llama-server's request, response and error shapes (``tools/server/README.md``):

- ``POST /tokenize``   ``{"content", "add_special", "parse_special", "with_pieces", "with_offsets"}`` -> ``{"tokens"}``
  (``with_offsets``, bpetok's own: each token's character and byte span, see bpetok.offsets)
- ``POST /detokenize`` ``{"tokens"}`` -> ``{"content"}``
- ``POST /apply-template`` ``{"messages", "tools", "add_generation_prompt", "chat_template_kwargs"}``
  -> ``{"prompt"}``: the model's chat template, rendered as transformers does (bpetok.apps.chat)
- ``GET /health`` (and ``/v1/health``) -> ``{"status": "ok"}``
- ``GET /props`` -> the vocabulary's facts (model, pre, n_tokens, eog ids, bos/eos, ...)
- ``GET /models`` (and ``/v1/models``) -> the vocabularies served, by name
- ``GET /`` -> the token playground (bpetok/playground: one page, no build step, nothing fetched)

Several vocabularies can be served at once (``bpetok serve A.gguf B.gguf``); every request may name
one with a ``"model"`` field in its body (``/props?model=NAME``), the first being the default.

Errors are ``{"error": {"code", "message", "type"}}`` as llama-server's ``format_error_response``
makes them. The request handling (bpetok/apps/server_requests.py: :func:`parse_body`,
:func:`tokenize_request`, :func:`detokenize_request`...) is plain Python over parsed JSON; the HTTP
layer here (:func:`create_app`) only reads a bounded body, calls it and writes the answer. The
``serve`` command, which runs it under uvicorn, is in bpetok/apps/server_cli.py; the connection
layer (timeouts, lingering close) in bpetok/apps/server_http.py.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any, Mapping

import bpetok
from bpetok.errors import BpetokError
from bpetok.apps.server_io import dumps
from bpetok.apps.server_requests import (
    RequestError,
    _bool_field,
    _json_type,
    _short,
    apply_template_request,
    detokenize_request,
    offsets_answer,
    parse_body,
    props,
    tokenize_ids,
    tokenize_request,
)

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_KEEP_ALIVE_TIMEOUT",
    "DEFAULT_LIMIT_CONCURRENCY",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_PORT",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "RequestError",
    "app_from_env",
    "apply_template_request",
    "create_app",
    "detokenize_request",
    "parse_body",
    "props",
    "tokenize_request",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080  # llama-server's default port
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
# Slow and stuck clients (docs/server.md, "Limits"): seconds for a request's head to arrive (after
# the connection opens or the previous response) and, separately, for its body; seconds an idle
# keep-alive connection stays open; connections served at once (more get 503); seconds SIGTERM
# waits for running requests before cancelling them.
DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_KEEP_ALIVE_TIMEOUT = 5.0
DEFAULT_LIMIT_CONCURRENCY = 256
DEFAULT_SHUTDOWN_TIMEOUT = 10.0
# After refusing a body it did not read (413), how much more the server reads and discards so that
# the client can finish sending and read the answer: bytes, seconds in all, seconds without data.
LINGER_BYTES = 64 * 1024 * 1024
LINGER_SECONDS = 10.0
LINGER_IDLE = 2.0

# How `--workers N` hands the model to worker processes: uvicorn starts each worker from an import
# string, so the app is built by app_from_env() from these variables.
ENV_MODEL = "BPETOK_SERVE_MODEL"
ENV_MODELS = "BPETOK_SERVE_MODELS"  # several: a JSON array of [name, path] pairs
ENV_MAX_BODY_BYTES = "BPETOK_SERVE_MAX_BODY_BYTES"
ENV_REQUEST_TIMEOUT = "BPETOK_SERVE_REQUEST_TIMEOUT"
# create_app's keyword -> (environment variable, type)
ENV_LIMITS: dict[str, tuple[str, type]] = {
    "max_body_bytes": (ENV_MAX_BODY_BYTES, int),
    "body_timeout": (ENV_REQUEST_TIMEOUT, float),
    "threads": ("BPETOK_SERVE_THREADS", int),
    "compute_timeout": ("BPETOK_SERVE_COMPUTE_TIMEOUT", float),
    "max_buffered_bytes": ("BPETOK_SERVE_MAX_BUFFERED_BYTES", int),
}

# Every request's work (parse, tokenize, render, detokenize) runs in one of DEFAULT_THREADS worker
# threads, so the event loop only moves bytes and /health always answers; past
# DEFAULT_COMPUTE_TIMEOUT seconds (queueing included) a request is answered 503 (its thread cannot
# be stopped and finishes on its own). Request bodies being held and answers not yet written share
# DEFAULT_MAX_BUFFERED_BYTES across connections (more gets 503); the protocol closes a connection
# whose client reads nothing for DEFAULT_WRITE_TIMEOUT seconds, and one whose request head takes
# over DEFAULT_HEADER_TIMEOUT seconds.
DEFAULT_THREADS = 2
DEFAULT_COMPUTE_TIMEOUT = 30.0
DEFAULT_MAX_BUFFERED_BYTES = 512 * 1024 * 1024
DEFAULT_WRITE_TIMEOUT = 10.0
DEFAULT_HEADER_TIMEOUT = 5.0
# /tokenize answers of at most this many ids are serialized whole (one write, a Content-Length);
# larger ones are produced chunk by chunk as the client reads.
SMALL_ANSWER_IDS = 8192

_INSTALL_HINT = "pip install 'bpetok[server]'"

log = logging.getLogger("bpetok.server")  # the name it had before bpetok/apps/; logging configs use it


# -- the HTTP layer ---------------------------------------------------------------------------------------


def _require_server_extra():
    """Import starlette and uvicorn, or say how to install them."""
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as e:
        raise BpetokError(f"bpetok serve needs the server extra ({e.name} is not installed): {_INSTALL_HINT}") from None
    return uvicorn


def model_name(path: str) -> str:
    """The name a vocabulary is served under when none is given: its file name without .gguf(.gz)."""
    name = os.path.basename(path)
    for suffix in (".gz", ".gguf", ".json"):
        name = name.removesuffix(suffix)
    return name or path


def _served(tok) -> dict[str, bpetok.Tokenizer]:
    if isinstance(tok, Mapping):
        models = dict(tok)
        if not models:
            raise BpetokError("create_app needs at least one tokenizer to serve")
        return models
    return {model_name(tok.vocabulary.path): tok}


def create_app(
    tok: bpetok.Tokenizer | Mapping[str, bpetok.Tokenizer],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    model_path: str | None = None,
    body_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    threads: int = DEFAULT_THREADS,
    compute_timeout: float = DEFAULT_COMPUTE_TIMEOUT,
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
) -> Starlette:
    """The ASGI app serving ``tok`` (or several: a mapping of names to tokenizers, the first the
    default; a request picks one with a ``"model"`` field); bodies over ``max_body_bytes`` get 413 before they are read in
    full, bodies that take longer than ``body_timeout`` seconds to arrive get 408.

    Every request's work runs in one of ``threads`` worker threads, never on the event loop, and is
    answered 503 past ``compute_timeout`` seconds; request bodies and unsent answers together hold
    at most ``max_buffered_bytes`` (more gets 503); answers are written as the client reads them.
    """
    _require_server_extra()
    import asyncio

    import anyio
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    from bpetok.apps.playground import playground_routes
    from bpetok.apps.server_io import CHUNK_BYTES, BytesBody, OutputBudget, PieceFragments, TokensBody, WorkPool, WorkTimeout

    if max_body_bytes < 1:
        raise BpetokError(f"max_body_bytes must be at least 1, got {max_body_bytes}")
    if threads < 1:
        raise BpetokError(f"threads must be at least 1, got {threads}")
    models = _served(tok)
    default = next(iter(models))
    infos = {
        name: props(t, model_path if model_path is not None and len(models) == 1 else t.vocabulary.path)
        for name, t in models.items()
    }
    pool = WorkPool(threads, compute_timeout)
    budget = OutputBudget(max_buffered_bytes)
    fragments = {name: PieceFragments(t) for name, t in models.items()}

    def pick(name) -> str:
        """The served model a request names (its "model" field, or /props?model=)."""
        if name is None or (len(models) == 1 and isinstance(name, str)):
            return default  # one model: any name is it, as llama-server ignores "model"
        if not isinstance(name, str):
            raise RequestError(f'"model" must be the name of a served model (a string), got {_json_type(name)}')
        if name not in models:
            raise RequestError(f'"model" is {_short(name)}, which this server does not serve; it serves {", ".join(models)} (GET /models)')
        return name

    def respond(payload, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
        return Response(dumps(payload), status_code=status, headers=headers, media_type="application/json")

    class AnswerResponse(StreamingResponse):
        """An answer written chunk by chunk as the client reads it (uvicorn waits for the
        transport to drain between writes), its bytes given back to the budget when done."""

        def __init__(self, answer):
            self.answer = answer
            headers = {"content-length": str(answer.length)} if answer.length is not None else None
            super().__init__(self._chunks(), headers=headers, media_type="application/json")

        async def _chunks(self):
            for chunk in self.answer.chunks():
                yield chunk
                await asyncio.sleep(0)  # producing chunks is work too: let /health in between

        async def __call__(self, scope, receive, send) -> None:
            try:
                await super().__call__(scope, receive, send)
            except OSError:  # the client went away mid-answer: nobody to tell
                pass
            finally:
                budget.give_back(self.answer.size)
                self.answer = None

    def over_budget() -> RequestError:
        return RequestError(
            f"the server is holding {budget.used:,} bytes of requests and unsent answers, its limit "
            f"(--max-buffered-bytes {budget.limit:,}); send the request again shortly",
            503,
            "unavailable_error",
        )

    async def read_body(request: Request) -> bytes:
        """The body, its bytes taken from the budget (the caller gives them back)."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > max_body_bytes:
            raise too_large(int(declared))
        # Count while reading: a chunked body (no Content-Length) is cut off at the limit too.
        chunks, size = [], 0
        try:
            with anyio.move_on_after(body_timeout) as deadline:
                async for chunk in request.stream():
                    if size + len(chunk) > max_body_bytes:
                        raise too_large(None)
                    if not budget.take(len(chunk)):
                        raise over_budget()
                    size += len(chunk)
                    chunks.append(chunk)
            if deadline.cancelled_caught:
                raise RequestError(
                    f"the request body did not arrive within {body_timeout:g} seconds ({size:,} bytes came); "
                    "send it at once (or start the server with a larger --request-timeout)",
                    status=408,
                )
        except BaseException:
            budget.give_back(size)
            raise
        return b"".join(chunks)

    def too_large(declared: int | None) -> RequestError:
        got = f"{declared:,} bytes" if declared is not None else f"more than {max_body_bytes:,} bytes"
        return RequestError(
            f"the request body is too large ({got}); this server accepts at most {max_body_bytes:,} bytes "
            "(start it with a larger --max-body-bytes)",
            status=413,
        )

    # The work of each endpoint, run in a worker thread: request body -> answer.
    def tokenize_work(body: bytes):
        data = parse_body(body)
        name = pick(data.get("model"))
        if _bool_field(data, "with_offsets", False):
            return BytesBody(offsets_answer(models[name], data, fragments[name]))
        ids, with_pieces = tokenize_ids(models[name], data)
        answer = TokensBody(ids, fragments[name] if with_pieces else None)
        return answer.to_bytes() if len(answer.ids) <= SMALL_ANSWER_IDS else answer

    def detokenize_work(body: bytes):
        data = parse_body(body)
        return BytesBody(dumps(detokenize_request(models[pick(data.get("model"))], data)))

    def apply_template_work(body: bytes):
        data = parse_body(body)
        return BytesBody(dumps(apply_template_request(models[pick(data.get("model"))], data)))

    def endpoint(work):
        async def run(request: Request) -> Response:
            try:
                body = await read_body(request)
                try:
                    answer = await pool.run(work, body)
                finally:
                    budget.give_back(len(body))
                    del body
                if isinstance(answer, BytesBody) and answer.size <= CHUNK_BYTES:
                    # one write: the transport holds it (its buffer is bounded by the write timeout)
                    return Response(answer.data, media_type="application/json")
                if not budget.take(answer.size):
                    raise over_budget()
                return AnswerResponse(answer)
            except RequestError as e:
                # subtle: after a 413 or 408 the rest of the body is never read by the app. On a
                # keep-alive connection uvicorn discards it as it arrives; when the connection is
                # to close, BoundedH11Protocol lingers (reads and drops it, bounded) so that a
                # client still sending its body reads the answer instead of a reset. A 408 closes:
                # the client is too slow to be waited for again.
                headers = {"connection": "close"} if e.status == 408 else None
                return respond(e.payload(), e.status, headers)
            except WorkTimeout:
                error = RequestError(
                    f"the request did not finish within {compute_timeout:g} seconds (the server's "
                    "--compute-timeout); send a smaller request, or ask the operator for a larger limit",
                    503,
                    "unavailable_error",
                )
                return respond(error.payload(), 503)
            except ClientDisconnect:
                return Response(status_code=400)  # nobody is listening any more
            except asyncio.CancelledError:
                # SIGTERM's grace period (--shutdown-timeout) is over and uvicorn cancels what
                # still runs: the request ends here, so answer it (once) instead of a bare 500.
                error = RequestError("the server is shutting down; send the request again", 503, "unavailable_error")
                return respond(error.payload(), 503, {"connection": "close"})
            except BpetokError as e:
                # the input cannot be done (no BOS token, a template that refuses the conversation
                # or passes its render limits, a pattern past its time limit): the client's to fix
                return respond(RequestError(str(e)).payload(), 400)
            except RecursionError:  # a deeply nested body that parses but is too deep to process
                return respond(RequestError("the request is nested too deeply to process").payload(), 400)
            except Exception as e:  # a bug: answer, log it once, keep serving
                return server_error(request, e)

        return run

    async def health(request: Request) -> Response:
        return respond({"status": "ok"})

    async def get_props(request: Request) -> Response:
        try:
            return respond(infos[pick(request.query_params.get("model"))])
        except RequestError as e:
            return respond(e.payload(), e.status)

    listing = {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "owned_by": "bpetok",
             "meta": {k: infos[name][k] for k in ("model_path", "model", "pre", "n_tokens", "add_bos", "add_eos")}
             | {"chat_template": bool(infos[name]["chat_template"])}}
            for name in models
        ],
    }

    async def get_models(request: Request) -> Response:
        return respond(listing)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 404:
            # llama-server's 404 body, word for word
            payload = {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
        else:
            message = f"{request.method} is not allowed on {request.url.path}" if exc.status_code == 405 else exc.detail
            payload = RequestError(message, exc.status_code).payload()
        return respond(payload, exc.status_code, exc.headers)

    def server_error(request: Request, exc: Exception) -> Response:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        payload = {"error": {"code": 500, "message": f"internal error: {type(exc).__name__}", "type": "server_error"}}
        return respond(payload, 500)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),
        Route("/props", get_props, methods=["GET"]),
        Route("/models", get_models, methods=["GET"]),
        Route("/v1/models", get_models, methods=["GET"]),
        *playground_routes(),
        Route("/tokenize", endpoint(tokenize_work), methods=["POST"]),
        Route("/detokenize", endpoint(detokenize_work), methods=["POST"]),
        Route("/apply-template", endpoint(apply_template_work), methods=["POST"]),
    ]
    async def unhandled(request: Request, exc: Exception) -> Response:  # Starlette's backstop
        return server_error(request, exc)

    handlers: dict[Any, Any] = {HTTPException: http_error, Exception: unhandled}  # Starlette's handler union
    return Starlette(routes=routes, exception_handlers=handlers)


def app_from_env() -> Starlette:
    """App factory for uvicorn workers: the model path and limits come from the environment.

    ``bpetok serve --workers N`` sets ``BPETOK_SERVE_MODEL`` and the ``BPETOK_SERVE_*`` limits of
    :data:`ENV_LIMITS` and starts uvicorn with ``bpetok.apps.server:app_from_env`` (``factory=True``); it
    can be used directly: ``BPETOK_SERVE_MODEL=model.gguf uvicorn --factory bpetok.apps.server:app_from_env``.
    """
    several = os.environ.get(ENV_MODELS)
    path = os.environ.get(ENV_MODEL)
    if not path and not several:
        raise BpetokError(f"set {ENV_MODEL} to the path of a GGUF file to serve")
    limits = {}
    for name, (variable, kind) in ENV_LIMITS.items():
        text = os.environ.get(variable)
        if text is None:
            continue
        try:
            limits[name] = kind(text)
        except ValueError:
            raise BpetokError(f"{variable}={text!r} is not {'a number' if kind is int else 'a number of seconds'}") from None
    if several:
        try:
            pairs = [(str(name), str(where)) for name, where in json.loads(several)]
        except (ValueError, TypeError):
            raise BpetokError(f"{ENV_MODELS} must be a JSON array of [name, path] pairs") from None
        return create_app({name: bpetok.from_file(where) for name, where in pairs}, **limits)
    assert path is not None  # checked above
    return create_app(bpetok.from_file(path), model_path=path, **limits)


