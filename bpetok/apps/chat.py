"""Chat templates: render a conversation as the model's prompt, the way transformers renders it.

A model's chat template is a Jinja template, stored in a GGUF under ``tokenizer.chat_template``
(and ``tokenizer.chat_template.NAME`` for named variants such as ``tool_use``). It is rendered with
transformers' conventions (``transformers/utils/chat_template_utils.py``), so the same template and
messages give the same string as ``AutoTokenizer.apply_chat_template``:

- an ``ImmutableSandboxedEnvironment`` (templates are untrusted code) with ``trim_blocks`` and
  ``lstrip_blocks``, the ``loopcontrols`` extension and the ``{% generation %}`` tag;
- ``raise_exception(msg)``, ``strftime_now(fmt)``, a ``tojson`` that does not escape HTML, and
  ``dict`` / ``namespace`` restricted as transformers restricts them;
- the variables ``messages``, ``tools``, ``documents``, ``add_generation_prompt``, ``bos_token``,
  ``eos_token``, and every extra keyword argument (which overrides the token variables);
- messages as transformers prepares them: keys whose value is None dropped, a message's
  reasoning copied under ``reasoning_content`` and ``thinking``.

jinja2 comes from the ``chat`` extra and is imported on first use.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Iterator, Mapping
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from bpetok.apps import chat_limits
from bpetok.apps.chat_limits import DEFAULT_LIMITS, ChatLimits, LimitExceeded, check_nesting
from bpetok.errors import BpetokError, ChatTemplateError
from bpetok.hookspecs import hookimpl
from bpetok.vocab import CHAT_TEMPLATE_KEY

if TYPE_CHECKING:
    from bpetok.tokenizer import Tokenizer
    from bpetok.vocab import Vocabulary

__all__ = ["ChatLimits", "apply_chat_template", "chat_templates", "render_template", "bpetok_register_commands"]

TEMPLATE_KEY = CHAT_TEMPLATE_KEY
_INSTALL_HINT = "pip install 'bpetok[chat]'"
# The names of a message's reasoning, the first being the one templates read (transformers'
# _REASONING_FIELDS); gpt-oss templates read "thinking".
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_TEMPLATE_NAME = re.compile(r"[\w.-]+")
_JINJA_FILENAME = "<template>"  # what jinja2 calls a template made from a string in tracebacks


# -- finding the template --------------------------------------------------------------------------


def chat_templates(vocabulary: Vocabulary) -> dict[str, str]:
    """The templates a vocabulary file carries: ``"default"`` for ``tokenizer.chat_template``,
    and ``NAME`` for each ``tokenizer.chat_template.NAME``."""
    found = {}
    for key, value in vocabulary.metadata.items():
        if key == TEMPLATE_KEY:
            found["default"] = value
        elif key.startswith(TEMPLATE_KEY + "."):
            found[key[len(TEMPLATE_KEY) + 1 :]] = value
    return found


def _template_key(name: str) -> str:
    return TEMPLATE_KEY if name == "default" else f"{TEMPLATE_KEY}.{name}"


def select_template(vocabulary: Vocabulary, template: str | None, tools) -> tuple[str, str]:
    """(source, display name) of the template to render, chosen as transformers' get_chat_template
    chooses: a name the file has, else ``template`` itself as the source; without ``template``,
    ``tool_use`` when tools are given and the file has one, else the default."""
    path = vocabulary.path
    available = chat_templates(vocabulary)
    if template is not None:
        if template in available:
            return available[template], f"{path}: {_template_key(template)}"
        if _TEMPLATE_NAME.fullmatch(template):  # a name, not a template: no Jinja in it
            names = ", ".join(sorted(available)) or "none"
            raise ChatTemplateError(
                f"{path}: no chat template named {template!r} (key {_template_key(template)!r}); this file has: "
                f"{names}. Pass a template's name, or the template's text itself"
            )
        return template, "the template passed in"
    if tools and "tool_use" in available:
        return available["tool_use"], f"{path}: {_template_key('tool_use')}"
    if "default" in available:
        return available["default"], f"{path}: {TEMPLATE_KEY}"
    raise ChatTemplateError(
        f"{path}: the file has no chat template (GGUF key {TEMPLATE_KEY!r} is missing); pass one "
        "(template=... in Python, --template FILE on the command line): the text of a Jinja chat template, "
        "e.g. the model's chat_template.jinja or the chat_template of its tokenizer_config.json"
    )


# -- the Jinja environment, as transformers builds it ---------------------------------------------


def _jinja():
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError as e:
        raise BpetokError(f"chat templates need jinja2, which is not installed: {_INSTALL_HINT}") from e
    return jinja2


@lru_cache(maxsize=1)
def _environment():
    jinja2 = _jinja()
    from jinja2 import nodes
    from jinja2.ext import Extension

    class GenerationTag(Extension):
        """``{% generation %}...{% endgeneration %}`` marks the assistant's text for transformers'
        assistant mask; for rendering it is just its body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(format):
        return datetime.now().strftime(format)

    class TemplateDict:
        # dict() and dict.fromkeys() only: no attribute access to break out through
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        # a namespace refuses underscore names, which lead to CPython internals
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}"
                )

    # the sandbox, with every loop, big-value operation and transformers' tojson bounded (chat_limits)
    environment_class = chat_limits.limited_environment_class(jinja2.sandbox.ImmutableSandboxedEnvironment)
    env = environment_class(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


@lru_cache(maxsize=32)
def _compile(source: str):
    return _environment().from_string(source)


def _compile_template(source: str, name: str):
    jinja2 = _jinja()
    try:
        return _compile(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"{name}, line {e.lineno}: the chat template does not parse: {e.message}") from e
    except RecursionError as e:  # 500 nested {% if %}, 5,000 nested parentheses
        raise ChatTemplateError(f"{name}: {chat_limits.recursion_message()}") from e
    except (SyntaxError, MemoryError) as e:  # Python refusing the compiled template ("too many nested blocks")
        raise ChatTemplateError(f"{name}: the chat template is too complex to compile ({type(e).__name__}: {e})") from e


def _template_line(tb) -> int | None:
    """The template line a failure happened on: jinja2 rewrites tracebacks so that frames of the
    template carry its file name and line."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _JINJA_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


# -- the data the template sees --------------------------------------------------------------------


def _is_record(value: Any) -> bool:
    """A dataclass instance or a pydantic model (the OpenAI SDK's messages): transformers reads
    both as dicts of their fields."""
    return (dataclasses.is_dataclass(value) and not isinstance(value, type)) or callable(
        getattr(value, "model_dump", None)
    )


def _plain(value: Any) -> Any:
    """A fresh copy made of plain JSON-like types, so the template never sees (or changes) the
    caller's objects (transformers' _plain_template_data): records become dicts, numpy scalars
    Python numbers, and anything else an inert ``"<TypeName>"``."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):  # subclasses (enums...) can carry methods: back to the base type
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if type(value).__module__ == "numpy" and callable(getattr(value, "item", None)) and getattr(value, "ndim", 1) == 0:
        return _plain(value.item())  # np.bool_(False) must not become a truthy placeholder
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"


def prepare_messages(messages) -> list[dict]:
    """Messages as transformers hands them to the template: None values dropped, reasoning aliased."""
    if isinstance(messages, (str, bytes, Mapping)) or not hasattr(messages, "__iter__"):
        raise ChatTemplateError(
            f"messages must be a list of {{'role': ..., 'content': ...}} objects, got {type(messages).__name__}"
        )
    prepared = []
    for index, message in enumerate(messages):
        if _is_record(message):
            message = _plain(message)
        if not isinstance(message, Mapping):
            raise ChatTemplateError(
                f"message {index} must be an object like {{'role': 'user', 'content': '...'}}, "
                f"got {type(message).__name__}: {message!r:.80}"
            )
        message = _plain({key: value for key, value in message.items() if value is not None})
        reasoning = next((message[key] for key in _REASONING_FIELDS if message.get(key) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        prepared.append(message)
    if not prepared:
        raise ChatTemplateError("messages is empty: a conversation needs at least one message")
    return prepared


# -- rendering -------------------------------------------------------------------------------------


def render_template(
    source: str,
    messages,
    *,
    name: str = "the template passed in",
    add_generation_prompt: bool = False,
    tools=None,
    continue_final_message: bool | str = False,
    limits: ChatLimits | None = None,
    **variables,
) -> str:
    """Render a chat template's ``source`` for ``messages`` (transformers' conventions, see the
    module docstring). ``name`` says which template it is in error messages.

    ``continue_final_message`` leaves the last message open for the model to continue (a prefill),
    cut where transformers cuts it; a string names the field to continue (e.g. ``reasoning_content``).
    ``limits`` bounds the rendering's time, output, loops and the input's nesting
    (:class:`~bpetok.apps.chat_limits.ChatLimits`; default ``ChatLimits()``).

    :raises ChatTemplateError: the template does not parse, fails while rendering (its own
        ``raise_exception``, an undefined variable...) or exceeds a limit; the message names the
        template and the line.
    """
    jinja2 = _jinja()
    limits = limits or DEFAULT_LIMITS
    if not isinstance(limits, ChatLimits):
        raise ChatTemplateError(f"limits must be a bpetok.apps.chat.ChatLimits, got {type(limits).__name__}")
    check_nesting(messages, limits, "the messages")
    check_nesting(tools, limits, "the tools")
    check_nesting(variables, limits, "the template variables")
    try:
        prepared = prepare_messages(messages)
        if tools is not None:
            if not isinstance(tools, (list, tuple)) or not all(isinstance(t, Mapping) for t in tools):
                raise ChatTemplateError("tools must be a list of JSON schemas (objects), as the OpenAI API takes them")
            tools = _plain(list(tools))
        variables = _plain(variables)
    except RecursionError:  # only with ChatLimits(nesting=...) raised past Python's recursion limit
        raise ChatTemplateError(
            f"the messages, tools or variables nest too deeply for Python (over {sys.getrecursionlimit()} levels); "
            "pass flatter data"
        ) from None
    documents = variables.pop("documents", None)
    if continue_final_message:
        if add_generation_prompt:
            raise ChatTemplateError(
                "continue_final_message and add_generation_prompt cannot both be set: continue the last "
                "message, or open a new assistant turn"
            )
        final_text = _tag_final_message(prepared, source, continue_final_message)
    compiled = _compile_template(source, name)
    account, token = chat_limits.start(limits)
    try:
        chunks = []
        for chunk in compiled.generate(
            messages=prepared,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **variables,
        ):
            account.add_output(len(chunk))
            chunks.append(chunk)
        rendered = "".join(chunks)
    except Exception as e:  # anything the template raises is the template's failure
        line = _template_line(sys.exc_info()[2])
        where = f"{name}, line {line}" if line is not None else name
        if isinstance(e, LimitExceeded):
            raise ChatTemplateError(f"{where}: {e.describe()}") from None
        if isinstance(e, RecursionError):
            raise ChatTemplateError(f"{where}: {chat_limits.recursion_message()}") from None
        what = "raised" if type(e) is jinja2.TemplateError else "failed"  # raise_exception() raises exactly this
        raise ChatTemplateError(f"{where}: the chat template {what}: {type(e).__name__}: {e}") from e
    finally:
        chat_limits.finish(token)
        chunks = []
    if continue_final_message:
        rendered = _cut_at_tag(rendered, final_text, name)
    return rendered


# transformers' marker: appended to the message to continue, then the rendering is cut there.
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def _tag_final_message(messages: list[dict], source: str, field: bool | str) -> str:
    """Append the marker to the last message's field to continue (transformers' render_jinja_template);
    return that field's text before the marker."""
    field = field if isinstance(field, str) else "content"
    last = messages[-1]
    final = last.get(field)
    if final is None:
        raise ChatTemplateError(f"continue_final_message is set but the last message has no {field!r} to continue")
    fields = [field]
    if field in _REASONING_FIELDS:  # reasoning sits under several names: tag every copy
        fields = [f for f in _REASONING_FIELDS if last.get(f) == final]
    if not any(f in source for f in fields):
        raise ChatTemplateError(f"continue_final_message is {field!r}, but the chat template never reads that field")
    if isinstance(final, (list, tuple)):  # content blocks: continue the last text block
        for block in reversed(final):
            if isinstance(block, dict) and "text" in block:
                text = block["text"]
                block["text"] = text + _CONTINUE_TAG
                return text
        raise ChatTemplateError("continue_final_message is set but the last message has no text block to continue")
    for f in fields:
        last[f] = last[f] + _CONTINUE_TAG
    return final


def _cut_at_tag(rendered: str, final_text: str, name: str) -> str:
    if final_text.strip() not in rendered or _CONTINUE_TAG.strip() not in rendered:
        raise ChatTemplateError(
            f"{name}: continue_final_message is set but the last message does not appear in the rendered "
            "chat (the template drops or rewrites it), so it cannot be left open"
        )
    at = rendered.rindex(_CONTINUE_TAG.strip())
    if rendered[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return rendered[:at]
    return rendered[:at].rstrip()  # the template trimmed the message's trailing space: trim ours too


def _token_variables(tokenizer: Tokenizer) -> dict[str, str]:
    """``bos_token`` and ``eos_token`` as texts; like transformers' special_tokens_map, a role the
    vocabulary lacks is left undefined rather than empty."""
    found = {}
    for role in ("bos", "eos"):
        token_id = tokenizer.vocabulary.special_ids.get(role)
        if token_id is not None:
            found[f"{role}_token"] = tokenizer.vocabulary.tokens[token_id].decode("utf-8", "replace")
    return found


def apply_chat_template(
    tokenizer: Tokenizer,
    messages,
    *,
    add_generation_prompt: bool = False,
    tools=None,
    template: str | None = None,
    tokenize: bool = False,
    continue_final_message: bool | str = False,
    parse_special_in_messages: bool = True,
    limits: ChatLimits | None = None,
    **kwargs,
):
    """``Tokenizer.apply_chat_template``: the prompt for ``messages``, or its ids with ``tokenize``.

    ``template`` is the name of one of the file's templates, or a template's text; by default the
    file's ``tool_use`` template when ``tools`` are given and it has one, else its default template.
    ``bos_token`` and ``eos_token`` are the vocabulary's; other keyword arguments reach the template
    as variables (``enable_thinking=False``, ``documents=[...]``...) and override those two.
    ``limits`` bounds the rendering (:class:`~bpetok.apps.chat_limits.ChatLimits`).

    The ids are ``encode(prompt, parse_special=True)``: the template writes the BOS itself. With
    ``parse_special_in_messages=False``, special-token text that came from the messages, tools or
    documents (a user typing ``<|im_end|>``) is encoded as plain text; the template's own markers
    stay special tokens, and the ids are unchanged for messages without special-token text.
    """
    source, name = select_template(tokenizer.vocabulary, template, tools)
    variables = {**_token_variables(tokenizer), **kwargs}
    if tokenize and not parse_special_in_messages and isinstance(messages, Iterator):
        messages = list(messages)  # rendered twice

    def render(messages, tools, variables) -> str:
        return render_template(
            source,
            messages,
            name=name,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            continue_final_message=continue_final_message,
            limits=limits,
            **variables,
        )

    prompt = render(messages, tools, variables)
    if not tokenize:
        return prompt
    if parse_special_in_messages:
        return tokenizer.encode(prompt, parse_special=True)
    from bpetok.apps.chat_spans import message_spans

    plain_variables = {**variables, "documents": _plain(variables["documents"])} if "documents" in variables else variables
    spans = message_spans(tokenizer, prompt, name, render, _plain(messages), _plain(tools), plain_variables)
    return tokenizer._encode_partitioned(tokenizer._partition(prompt, True, protected=spans))


# -- the command line ------------------------------------------------------------------------------


def parse_conversation(data, source: str) -> tuple[list, list | None, dict]:
    """(messages, tools, extra template variables) from a parsed JSON document: a list of messages,
    or an object as the OpenAI chat API and llama-server take it (``messages``, ``tools``,
    ``chat_template_kwargs``)."""
    if isinstance(data, list):
        return data, None, {}
    if isinstance(data, dict) and "messages" in data:
        tools = data.get("tools")
        extra = data.get("chat_template_kwargs") or {}
        if not isinstance(extra, dict):
            raise ChatTemplateError(f"{source}: 'chat_template_kwargs' must be an object, got {type(extra).__name__}")
        return data["messages"], tools, extra
    raise ChatTemplateError(
        f"{source}: expected a JSON list of messages, or an object with 'messages' (and optionally 'tools'), "
        f"got {type(data).__name__}"
    )


def _read_conversation(path: str):
    source = "stdin" if path == "-" else path
    try:
        if path == "-":
            text = sys.stdin.buffer.read().decode("utf-8")
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except OSError as e:
        raise BpetokError(f"{path}: cannot read the messages file ({e.strerror})") from e
    except UnicodeDecodeError as e:
        raise ChatTemplateError(f"{source}: the messages are not UTF-8 ({e})") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ChatTemplateError(f"{source}: not valid JSON: {e}") from e
    return parse_conversation(data, source)


def _template_argument(value: str | None) -> str | None:
    """--template: a file holding a template, else a name of the model's templates (or the text)."""
    import os

    if value is not None and os.path.isfile(value):
        with open(value, encoding="utf-8") as f:
            return f.read()
    return value


def _cmd_chat(args) -> int:
    import bpetok

    tok = bpetok.from_gguf(args.model)
    messages, tools, extra = _read_conversation(args.messages)
    for item in args.var:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ChatTemplateError(f"--var {item!r}: expected KEY=JSON, e.g. enable_thinking=false")
        try:
            extra[key] = json.loads(value)
        except json.JSONDecodeError:
            extra[key] = value  # a bare word is a string
    result = tok.apply_chat_template(
        messages,
        tools=tools,
        add_generation_prompt=args.generation_prompt,
        template=_template_argument(args.template),
        tokenize=args.tokens,
        parse_special_in_messages=not args.no_special_in_messages,
        limits=ChatLimits.from_options(args.limit),
        **extra,
    )
    if args.tokens:
        print(json.dumps({"tokens": result, "n_tokens": len(result)}))
    else:
        sys.stdout.write(result)
        sys.stdout.flush()
    return 0


@hookimpl
def bpetok_register_commands(subparsers) -> None:
    """Add ``bpetok chat`` to the CLI (a built-in plugin of the CLI hook)."""
    p = subparsers.add_parser(
        "chat",
        help="render messages with the model's chat template (or count their tokens)",
        description="Render a conversation with the GGUF's chat template (tokenizer.chat_template), as "
        "transformers' apply_chat_template does, and print the prompt, or with --tokens its ids and count. "
        f"Needs jinja2: {_INSTALL_HINT}.",
    )
    p.add_argument("model", metavar="MODEL.gguf")
    p.add_argument(
        "--messages",
        default="-",
        metavar="FILE|-",
        help="JSON: a list of messages, or {'messages': [...], 'tools': [...]} as the OpenAI API takes it "
        "(default: stdin)",
    )
    p.add_argument("--generation-prompt", action="store_true", help="end with the assistant's turn header")
    p.add_argument("--tokens", action="store_true", help="print the prompt's ids and their count as JSON")
    p.add_argument(
        "--template", metavar="NAME|FILE", help="a named template of the file (e.g. tool_use), or a template file"
    )
    p.add_argument(
        "--no-special-in-messages",
        action="store_true",
        help="with --tokens: special-token text in the messages (a user typing <|im_end|>) is plain text; "
        "the template's own markers stay special tokens",
    )
    p.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="NAME=NUMBER",
        help="raise a rendering limit: seconds (10), output_chars (10000000), loop_iterations (1000000), "
        "nesting (64) (repeatable)",
    )
    p.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="a template variable, e.g. enable_thinking=false (repeatable)",
    )
    p.set_defaults(func=_cmd_chat)
