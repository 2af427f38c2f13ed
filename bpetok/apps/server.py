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
makes them. The request handling below (:func:`parse_body`, :func:`tokenize_request`,
:func:`detokenize_request`) is plain Python over parsed JSON; the HTTP layer in :func:`create_app`
only reads a bounded body, calls it and writes the answer.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from typing import TYPE_CHECKING, Any, Mapping

import bpetok
from bpetok.errors import BpetokError
from bpetok.hookspecs import hookimpl
from bpetok.apps.server_io import dumps, piece_json
from bpetok.vocab import TokenAttr

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
    "bpetok_register_commands",
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

log = logging.getLogger("bpetok.apps.server")


# -- errors ------------------------------------------------------------------------------------------


class RequestError(BpetokError):
    """A request the server refuses, with llama-server's error ``type`` and the HTTP status."""

    def __init__(self, message: str, status: int = 400, error_type: str = "invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.error_type = error_type

    def payload(self) -> dict:
        # llama-server's format_error_response(): {"error": {"code", "message", "type"}}
        return {"error": {"code": self.status, "message": str(self), "type": self.error_type}}


def _json_type(value) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


# -- request handling (no HTTP here) -----------------------------------------------------------------


def _reject_constant(name: str):
    raise RequestError(f"the request body is not valid JSON: {name} is not a JSON number")


def parse_body(body: bytes) -> dict:
    """The JSON object in a request body, or a :class:`RequestError` (400) saying what is wrong.

    Strict: the body must be UTF-8 (no UTF-16 guessing), ``NaN``/``Infinity`` are refused, and a
    too-deep or too-long-number document is an error, never a crash.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"the request body is not valid UTF-8 (byte {e.start}); send JSON encoded as UTF-8") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except RequestError:
        raise
    except RecursionError:
        raise RequestError("the request body is nested too deeply to parse") from None
    except json.JSONDecodeError as e:
        raise RequestError(f"the request body is not valid JSON: {e}") from None
    except ValueError as e:  # Python's int() limit, e.g. {"tokens": [1000...000]} with 5,000 digits
        raise RequestError(f"the request body is not valid JSON: a number is too long ({e.args[0].split(';')[0]})") from None
    if not isinstance(data, dict):
        raise RequestError(f"the request body must be a JSON object, got {_json_type(data)}")
    return data


def _bool_field(data: dict, name: str, default: bool) -> bool:
    # llama-server's json_value(): a missing or null field takes the default. A field of another
    # type is an error here (llama-server silently uses the default, which hides typos in clients).
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f'"{name}" must be a boolean (true or false), got {_json_type(value)}')
    return value


def _check_text(text: str, field: str) -> str:
    # A lone surrogate (the escape "\ud800") has no UTF-8 form; llama-server's JSON parser refuses it.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RequestError(
            f'"{field}" contains a lone surrogate (U+{ord(text[e.start]):04X} at character {e.start}), '
            "which is not valid Unicode text"
        ) from None
    return text


def _check_id(tok: bpetok.Tokenizer, value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f'"{field}" must be a token id (an integer), got {_json_type(value)}: {_short(value)}')
    if not 0 <= value < tok.n_tokens:
        raise RequestError(
            f'"{field}" is {_short(value)}, out of range: this vocabulary has ids 0..{tok.n_tokens - 1}'
        )
    return value


def _short(value) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def tokenize_request(tok: bpetok.Tokenizer, data: dict) -> dict:
    """``POST /tokenize``: ``{"tokens": [...]}`` for a parsed request body.

    ``content`` is a string, or (as llama-server's ``tokenize_mixed`` allows) an array of strings
    and token ids; with ``add_special`` only the first element, if it is a string, gets BOS/EOS.
    (The server writes the same answer compactly, from :func:`tokenize_ids`, with
    :class:`bpetok.apps.server_io.TokensBody`.)

    >>> tokenize_request(tok, {"content": "Hello world"})
    {'tokens': [9707, 1879]}
    """
    if _bool_field(data, "with_offsets", False):
        return json.loads(offsets_answer(tok, data))
    ids, with_pieces = tokenize_ids(tok, data)
    if with_pieces:
        return {"tokens": [{"id": i, "piece": piece_json(tok.piece(i))} for i in ids]}
    return {"tokens": ids}


def offsets_answer(tok: bpetok.Tokenizer, data: dict, fragments=None) -> bytes:
    """``/tokenize`` with ``"with_offsets": true``, serialized: each token
    ``{"id", "piece" (with_pieces), "offsets": [start, end], "byte_offsets": [start, end], "partial", "special"}``;
    ``offsets`` count characters (code points), as bpetok.offsets defines them."""
    content = data.get("content")
    if not isinstance(content, str):
        raise RequestError(f'"with_offsets" needs "content" to be a string, got {_json_type(content)}')
    add_special = _bool_field(data, "add_special", False)
    parse_special = _bool_field(data, "parse_special", True)
    with_pieces = _bool_field(data, "with_pieces", False)
    found = tok.encode_with_offsets(_check_text(content, "content"), parse_special=parse_special, add_special=add_special)
    attrs = tok.vocabulary.attrs
    special_attrs = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN
    parts = []
    for token_id, (start, end), (byte_start, byte_end), partial in zip(
        found.ids, found.offsets, found.byte_offsets, found.partial
    ):
        if with_pieces:
            head = (fragments[token_id] if fragments is not None else dumps({"id": token_id, "piece": piece_json(tok.piece(token_id))}))[:-1]
        else:
            head = b'{"id":%d' % token_id
        parts.append(
            b'%s,"offsets":[%d,%d],"byte_offsets":[%d,%d],"partial":%s,"special":%s}'
            % (head, start, end, byte_start, byte_end, b"true" if partial else b"false",
               b"true" if attrs[token_id] & special_attrs else b"false")
        )
    return b'{"tokens":[' + b",".join(parts) + b"]}"


def tokenize_ids(tok: bpetok.Tokenizer, data: dict) -> tuple[list[int], bool]:
    """The ids a ``/tokenize`` request asks for, and whether it wants their pieces."""
    if "content" not in data:
        raise RequestError('"content" is required: the text to tokenize, e.g. {"content": "Hello"}')
    content = data["content"]
    add_special = _bool_field(data, "add_special", False)
    parse_special = _bool_field(data, "parse_special", True)
    with_pieces = _bool_field(data, "with_pieces", False)
    if isinstance(content, str):
        ids = tok.encode(_check_text(content, "content"), parse_special=parse_special, add_special=add_special)
    elif isinstance(content, list):
        ids = []
        for i, item in enumerate(content):
            field = f"content[{i}]"
            if isinstance(item, str):
                # llama-server: BOS/EOS only around the first element, and only if it is a string.
                first = add_special and i == 0
                ids.extend(tok.encode(_check_text(item, field), parse_special=parse_special, add_special=first))
            elif isinstance(item, int) and not isinstance(item, bool):
                ids.append(_check_id(tok, item, field))
            else:
                raise RequestError(f'"{field}" must be a string or a token id, got {_json_type(item)}')
    else:
        raise RequestError(
            f'"content" must be a string (or an array of strings and token ids), got {_json_type(content)}'
        )
    return ids, with_pieces


def detokenize_request(tok: bpetok.Tokenizer, data: dict) -> dict:
    """``POST /detokenize``: ``{"content": text}`` for ``{"tokens": [ids]}``.

    The text is llama.cpp's detokenizer output (special tokens rendered), decoded as UTF-8 with
    U+FFFD for bytes that do not form a character.
    """
    if "tokens" not in data:
        raise RequestError('"tokens" is required: the token ids to detokenize, e.g. {"tokens": [9707, 1879]}')
    tokens = data["tokens"]
    if not isinstance(tokens, list):
        raise RequestError(f'"tokens" must be an array of token ids, got {_json_type(tokens)}')
    ids = [_check_id(tok, value, f"tokens[{i}]") for i, value in enumerate(tokens)]
    return {"content": tok.decode(ids)}


# Arguments of apply_chat_template that a request's chat_template_kwargs may not set.
_RESERVED_TEMPLATE_KWARGS = frozenset(
    {"messages", "tools", "add_generation_prompt", "template", "tokenize", "continue_final_message"}
)


def apply_template_request(tok: bpetok.Tokenizer, data: dict) -> dict:
    """``POST /apply-template``: ``{"prompt": text}``, the model's chat template rendered for
    ``messages`` (and ``tools``), as llama-server's endpoint answers it.

    As in llama-server, ``add_generation_prompt`` defaults to true, ``chat_template_kwargs``
    become template variables (``{"enable_thinking": false}``), ``continue_final_message`` leaves
    the last message open, and so does a trailing assistant message (llama-server's default
    ``prefill_assistant``). Unlike llama-server, a model without a chat template is an error rather
    than a ChatML fallback, and the template is rendered with transformers' conventions
    (llama-server uses its own Jinja engine and per-model handlers).
    """
    if "messages" not in data:
        raise RequestError('"messages" is required, e.g. {"messages": [{"role": "user", "content": "Hi"}]}')
    messages = data["messages"]
    if not isinstance(messages, list):
        raise RequestError(f'"messages" must be an array of messages, got {_json_type(messages)}')
    tools = data.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RequestError(f'"tools" must be an array of tool schemas, got {_json_type(tools)}')
    extra = data.get("chat_template_kwargs")
    if extra is None:
        extra = {}
    if not isinstance(extra, dict):
        raise RequestError(f'"chat_template_kwargs" must be an object, got {_json_type(extra)}')
    clash = sorted((_RESERVED_TEMPLATE_KWARGS | {"parse_special_in_messages", "limits"}) & set(extra))
    if clash:
        raise RequestError(f'"chat_template_kwargs" cannot set {", ".join(clash)}: use the request\'s own fields')
    add_generation_prompt = _bool_field(data, "add_generation_prompt", True)
    continue_final = _continuation(data.get("continue_final_message"))
    roles = [m.get("role") if isinstance(m, dict) else None for m in messages]
    if not continue_final and roles and roles[-1] == "assistant":
        # llama-server's prefill_assistant (on by default): a trailing assistant message is continued
        if len(roles) >= 2 and roles[-2] == "assistant":
            raise RequestError("Cannot have 2 or more assistant messages at the end of the list.")
        continue_final, add_generation_prompt = True, False
    if continue_final and add_generation_prompt:
        raise RequestError("Cannot set both add_generation_prompt and continue_final_message to true.")
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if continue_final and last.get("role") == "assistant" and last.get("tool_calls"):
        raise RequestError("Cannot continue an assistant message that contains tool calls.")
    tokenize = _bool_field(data, "tokenize", False)
    special_in_messages = _bool_field(data, "parse_special_in_messages", True)
    options = dict(
        tools=tools or None,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final,
        **extra,
    )
    prompt = tok.apply_chat_template(messages, **options)
    if not tokenize:
        return {"prompt": prompt}
    tokens = tok.apply_chat_template(messages, tokenize=True, parse_special_in_messages=special_in_messages, **options)
    return {"prompt": prompt, "tokens": tokens}


def _continuation(value) -> bool | str:
    """llama-server's common_chat_continuation_parse: true, "content" or "reasoning_content"; anything
    else means none."""
    if value is True:
        return True
    if value in ("content", "reasoning_content"):
        return value
    return False


def props(tok: bpetok.Tokenizer, model_path: str) -> dict:
    """``GET /props``: the fields of llama-server's that need no model weights (``model_path``,
    ``chat_template``, ``chat_template_tool_use``, ``bos_token``, ``eos_token``, ``modalities``,
    ``build_info``, ``is_sleeping``) plus the vocabulary's facts."""
    from bpetok.apps.chat import chat_templates

    vocab = tok.vocabulary
    templates = chat_templates(vocab)
    special = {k: v for k, v in vocab.special_ids.items() if v is not None}

    def text(role: str) -> str:
        token_id = special.get(role)
        return tok.piece(token_id).decode("utf-8", "replace") if token_id is not None else ""

    answer = {
        "model_path": model_path,
        # llama-server: the file's template, "" when it has none (llama-server then uses its ChatML
        # fallback; bpetok's /apply-template refuses instead)
        "chat_template": templates.get("default", ""),
        "modalities": {"vision": False, "video": False, "audio": False},  # text only, as without mmproj
        "bos_token": text("bos"),
        "eos_token": text("eos"),
        "build_info": f"bpetok {bpetok.__version__}",
        "is_sleeping": False,
        "model": vocab.model,
        "pre": vocab.pre,
        "pretokenizer": tok.spec.name if tok.spec is not None else None,
        "n_tokens": tok.n_tokens,
        "special_ids": special,
        "eog_ids": sorted(tok.eog_ids),
        "add_bos": tok.add_bos,
        "add_eos": tok.add_eos,
    }
    if "tool_use" in templates:  # llama-server adds it only when the file has one
        answer["chat_template_tool_use"] = templates["tool_use"]
    return answer


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


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0..65535)")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
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
