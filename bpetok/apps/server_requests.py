"""The server's request handling: plain Python over parsed JSON, no HTTP (bpetok/apps/server.py
reads the bounded body, calls these in a worker thread and writes the answer).

Each takes a :class:`bpetok.Tokenizer` and a request's parsed body and returns the answer, or raises
:class:`RequestError` with llama-server's error ``type`` and the HTTP status.
"""

from __future__ import annotations

import json
import math

import bpetok
from bpetok.errors import BpetokError
from bpetok.apps.server_io import dumps, piece_json
from bpetok.vocab import TokenAttr

__all__ = [
    "RequestError",
    "apply_template_request",
    "detokenize_request",
    "offsets_answer",
    "parse_body",
    "props",
    "tokenize_ids",
    "tokenize_request",
]

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


