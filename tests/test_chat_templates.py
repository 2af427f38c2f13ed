"""Chat templates against the real thing: transformers' own rendering and tokenizer.

Every one of the 71 templates llama.cpp tests with is rendered for each conversation in
tests/chat_cases.py, with and without a generation prompt, by bpetok and by transformers'
render_jinja_template (the function its apply_chat_template calls; nothing is downloaded). The
strings must be equal; where transformers raises (docs/chat.md lists those cases and why), bpetok
must raise a ChatTemplateError too.
"""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # transformers must never reach the network here
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import bpetok
from bpetok.apps.chat import render_template
from bpetok.errors import ChatTemplateError
from chat_cases import CONTINUE_CASES, CONVERSATIONS, TOKENS, load_templates, render_with_transformers
from helpers import LLAMA_TESTS, QWEN3

TEMPLATES = load_templates()
LLAMA_BPE = LLAMA_TESTS / "ggml-vocab-llama-bpe.gguf.gz"


def test_all_71_templates_are_here():
    assert len(TEMPLATES) == 71


def _outcome(render):
    """("ok", text) or ("error", message)."""
    try:
        return "ok", render()
    except ChatTemplateError as e:
        return "error", str(e)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_renders_as_transformers_does(name):
    source = TEMPLATES[name]
    rendered = 0
    for conversation, (messages, tools) in CONVERSATIONS.items():
        for generation_prompt in (False, True):
            case = f"{name} / {conversation} / add_generation_prompt={generation_prompt}"
            try:
                expected = render_with_transformers(source, messages, tools, generation_prompt)
            except Exception as reference_error:  # transformers cannot render it: neither may we
                with pytest.raises(ChatTemplateError) as ours:
                    render_template(source, messages, tools=tools, add_generation_prompt=generation_prompt, **TOKENS)
                assert type(reference_error).__name__ in str(ours.value), case
                continue
            got = render_template(source, messages, tools=tools, add_generation_prompt=generation_prompt, **TOKENS)
            assert got == expected, case
            rendered += 1
    # every template renders some of the conversations, but two that need inputs of their own (tested below)
    assert (rendered > 0) != (name in NEEDS_OWN_INPUTS), name


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_continue_final_message_as_transformers_does(name):
    """A prefill: the last message left open, cut where transformers cuts it (or refused where
    transformers refuses: templates that drop or rewrite the last message)."""
    source = TEMPLATES[name]
    for messages, field in CONTINUE_CASES:
        try:
            expected = render_with_transformers(source, messages, None, False, continue_final_message=field)
        except Exception as reference_error:
            with pytest.raises(ChatTemplateError):
                render_template(source, messages, continue_final_message=field, **TOKENS)
            assert type(reference_error).__name__ in ("ValueError", "TemplateError", "UndefinedError", "TypeError")
            continue
        assert render_template(source, messages, continue_final_message=field, **TOKENS) == expected, (name, field)


def test_continue_final_message_refuses_a_generation_prompt(qwen3):
    with pytest.raises(ChatTemplateError, match="cannot both be set"):
        render_template(TEMPLATES["Qwen-Qwen3-0.6B"], CONVERSATIONS["user-assistant"][0],
                        continue_final_message=True, add_generation_prompt=True)


NEEDS_OWN_INPUTS = {
    "fireworks-ai-llama-3-firefunction-v2": "reads `functions` and `datetime` variables of its own",
    "CohereForAI-c4ai-command-r-plus-tool_use": "needs tools, in Cohere's format (name, description, parameter_definitions)",
}


COHERE_TOOL = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameter_definitions": {"city": {"description": "The city", "type": "str", "required": True}},
}


def test_cohere_tools_in_their_own_format():
    source = TEMPLATES["CohereForAI-c4ai-command-r-plus-tool_use"]
    tools = [COHERE_TOOL]
    messages, _ = CONVERSATIONS["system-user-assistant-user"]
    expected = render_with_transformers(source, messages, tools, True)
    assert render_template(source, messages, tools=tools, add_generation_prompt=True, **TOKENS) == expected
    assert "def get_weather(city: str)" in expected


def test_extra_keyword_arguments_reach_the_template():
    source = TEMPLATES["fireworks-ai-llama-3-firefunction-v2"]
    messages, _ = CONVERSATIONS["system-user-assistant-user"]
    functions = '[{"name": "get_weather"}]'
    from transformers.utils.chat_template_utils import render_jinja_template

    extra = {"functions": functions, "datetime": "Mon, 30 Nov 2026"}
    expected = render_jinja_template([messages], chat_template=source, **extra, **TOKENS)[0][0]
    assert render_template(source, messages, **extra, **TOKENS) == expected
    assert functions in expected


def test_enable_thinking_passes_through():
    source = TEMPLATES["Qwen-Qwen3-0.6B"]
    messages = [{"role": "user", "content": "Hi"}]
    off = render_template(source, messages, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert render_template(source, messages, add_generation_prompt=True).endswith("<|im_start|>assistant\n")


# -- the template of a file, named templates, errors -----------------------------------------------


def test_gguf_default_and_named_templates():
    tok = bpetok.from_gguf(LLAMA_TESTS / "ggml-vocab-command-r.gguf.gz")
    messages = [{"role": "user", "content": "Hi"}]
    default = tok.apply_chat_template(messages, add_generation_prompt=True)
    assert default == (
        "<BOS_TOKEN><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|>"
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    )
    meta = tok.vocabulary.metadata
    # tools pick tokenizer.chat_template.tool_use, as transformers' get_chat_template does
    from transformers.utils.chat_template_utils import render_jinja_template

    with_tools = tok.apply_chat_template(messages, tools=[COHERE_TOOL], add_generation_prompt=True)
    expected = render_jinja_template(
        [messages], tools=[COHERE_TOOL], chat_template=meta["tokenizer.chat_template.tool_use"],
        add_generation_prompt=True, bos_token="<BOS_TOKEN>", eos_token="<|END_OF_TURN_TOKEN|>",
    )[0][0]
    assert with_tools == expected and "get_weather" in with_tools
    documents = [{"title": "Tides", "text": "Twice a day."}]
    rag = tok.apply_chat_template(messages, template="rag", documents=documents)
    assert "Twice a day." in rag
    with pytest.raises(ChatTemplateError, match=r"no chat template named 'nope'.*this file has: default, rag, tool_use"):
        tok.apply_chat_template(messages, template="nope")


def test_file_without_template_says_so(qwen3):
    with pytest.raises(ChatTemplateError, match=r"ggml-vocab-qwen3.gguf.gz: the file has no chat template \(GGUF key 'tokenizer.chat_template'"):
        qwen3.apply_chat_template([{"role": "user", "content": "Hi"}])


def test_syntax_error_names_template_and_line(qwen3):
    broken = "{% for m in messages %}\n{{ m.content }}\n{% if %}\n{% endfor %}"
    with pytest.raises(ChatTemplateError, match=r"the template passed in, line 3: the chat template does not parse"):
        qwen3.apply_chat_template([{"role": "user", "content": "Hi"}], template=broken)


def test_raise_exception_names_the_line(qwen3):
    source = TEMPLATES["google-gemma-2-2b-it"]
    messages, _ = CONVERSATIONS["system-user-assistant-user"]
    with pytest.raises(ChatTemplateError, match=r"line 1: the chat template raised: TemplateError: System role not supported"):
        qwen3.apply_chat_template(messages, template=source)
    failing = "line one\n{{ raise_exception('no way') }}"
    with pytest.raises(ChatTemplateError, match=r"the template passed in, line 2: .*no way"):
        qwen3.apply_chat_template(messages, template=failing)


def test_runtime_failure_names_the_line(qwen3):
    with pytest.raises(ChatTemplateError, match=r"line 2: the chat template failed: UndefinedError"):
        qwen3.apply_chat_template([{"role": "user", "content": "x"}], template="ok\n{{ messages[0].nope.deeper }}")


def test_the_sandbox_holds(qwen3):
    escape = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(ChatTemplateError, match="SecurityError|UndefinedError"):
        qwen3.apply_chat_template([{"role": "user", "content": "x"}], template=escape + "{{ ''.__class__.__base__.__subclasses__() }}")


@pytest.mark.parametrize("bad", ["hello", [1, 2], {"role": "user"}, []])
def test_bad_messages_are_refused_clearly(qwen3, bad):
    with pytest.raises(ChatTemplateError, match="message"):
        qwen3.apply_chat_template(bad, template=TEMPLATES["Qwen-Qwen3-0.6B"])


def test_dataclass_and_numpy_values_as_transformers_reads_them():
    """Message objects (dataclasses, pydantic models such as the OpenAI SDK's) are read as dicts of
    their fields, None fields dropped; numpy scalars as numbers (transformers' full path)."""
    import dataclasses

    import numpy as np
    from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

    @dataclasses.dataclass
    class Message:
        role: str
        content: str | None = None
        reasoning_content: str | None = None

    source = "{% for m in messages %}{{ m.role }}:{{ m.content }}|{{ m.thinking }}|{{ m.keys() | list | sort }}\n{% endfor %}{{ flag }} {{ n + 1 }}"
    messages = [Message("user", "Hi"), Message("assistant", "Yo", reasoning_content="hmm"), {"role": "user", "content": "k"}]
    extra = {"flag": np.bool_(False), "n": np.int64(41)}
    expected = render_jinja_template([_normalize_chat_messages(messages)], chat_template=source, **extra)[0][0]
    assert render_template(source, messages, **extra) == expected
    assert "False 42" in expected and "['content', 'role']" in expected


def test_callers_messages_are_not_changed(qwen3):
    messages = [{"role": "user", "content": "Hi", "extra": None}]
    qwen3.apply_chat_template(messages, template=TEMPLATES["Qwen-Qwen3-0.6B"])
    assert messages == [{"role": "user", "content": "Hi", "extra": None}]


# -- tokenize=True: the ids transformers' tokenizer gives ------------------------------------------

# The pre-tokenizer regexes of Qwen2/3's and Llama 3's tokenizer.json (HF's own files).
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _transformers_tokenizer(tok: bpetok.Tokenizer, regex: str, bos: str | None, eos: str):
    """transformers' fast tokenizer for the same vocabulary, built offline as its tokenizer.json
    would be: byte-level BPE over the GGUF's tokens and merges, the model's split regex, and the
    GGUF's control and user-defined tokens as added tokens.

    Built rather than compared via our own encode of the rendered string, so that the ids come
    from HF tokenizers end to end (added-token matching included), not from bpetok."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = tok.vocabulary
    names = [t.decode("utf-8") for t in vocab.tokens]
    merges = [tuple(m.decode("utf-8").split(" ")) for m in vocab.merges]
    model = models.BPE(vocab=dict(zip(names, range(len(names)))), merges=merges, ignore_merges=tok.spec.ignore_merges)
    hf = Tokenizer(model)
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(regex), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    hf.decoder = decoders.ByteLevel()
    added = []
    for i, name in enumerate(names):
        if tok.token_type(i) in (bpetok.TokenType.CONTROL, bpetok.TokenType.USER_DEFINED):
            added.append(AddedToken(name, special=tok.token_type(i) == bpetok.TokenType.CONTROL, normalized=False))
    hf.add_tokens(added)
    return PreTrainedTokenizerFast(tokenizer_object=hf, bos_token=bos, eos_token=eos)


def _with_template(path, template: str, out) -> str:
    """A copy of the GGUF at ``path`` carrying ``template`` as tokenizer.chat_template (the test
    vocabularies have none), written with bpetok's GGUF writer."""
    from bpetok.vocab.gguf import GGUFValueType, read_gguf
    from bpetok.vocab.gguf_writer import items_of, write_gguf

    items = [item for item in items_of(read_gguf(path)) if not item[0].startswith("tokenizer.chat_template")]
    items.append(("tokenizer.chat_template", GGUFValueType.STRING, template, None))
    write_gguf(out, items)
    return str(out)


@pytest.mark.parametrize(
    "vocab, template, regex",
    [
        (QWEN3, "Qwen-Qwen3-0.6B", QWEN2_REGEX),
        (LLAMA_BPE, "meta-llama-Llama-3.1-8B-Instruct", LLAMA3_REGEX),
        (LLAMA_BPE, "meta-llama-Llama-3.3-70B-Instruct", LLAMA3_REGEX),
    ],
    ids=["qwen3", "llama3.1", "llama3.3"],
)
def test_tokenize_gives_transformers_ids(tmp_path, vocab, template, regex):
    """from_gguf(path).apply_chat_template(..., add_generation_prompt=True, tokenize=True) on a GGUF
    carrying the model's template: the ids transformers' tokenizer gives for the same vocabulary."""
    source = TEMPLATES[template]
    tok = bpetok.from_gguf(_with_template(vocab, source, tmp_path / "with-template.gguf"))
    bos = tok.vocabulary.tokens[tok.special_ids["bos"]].decode() if tok.special_ids.get("bos") is not None else None
    eos = tok.vocabulary.tokens[tok.special_ids["eos"]].decode()
    hf = _transformers_tokenizer(tok, regex, bos, eos)
    for conversation in ("system-user-assistant-user", "tool-call", "reasoning"):
        messages, tools = CONVERSATIONS[conversation]
        expected = hf.apply_chat_template(
            messages, tools=tools, chat_template=source, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        got = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
        assert got == expected, (template, conversation)
        # and the prompt is what transformers renders with this tokenizer's special tokens
        assert tok.decode(got) == hf.apply_chat_template(
            messages, tools=tools, chat_template=source, add_generation_prompt=True, tokenize=False
        )


# -- bpetok chat ------------------------------------------------------------------------------------

QWEN2 = LLAMA_TESTS / "ggml-vocab-qwen2.gguf.gz"  # carries tokenizer.chat_template


def _chat_cli(monkeypatch, capsys, *args, stdin: str = ""):
    import io

    from bpetok.apps.cli import main

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    code = main(["chat", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_renders_stdin(monkeypatch, capsys):
    messages = [{"role": "user", "content": "Hi"}]
    code, out, _ = _chat_cli(monkeypatch, capsys, QWEN2, "--generation-prompt", stdin=json.dumps(messages))
    assert code == 0
    assert out == bpetok.from_gguf(QWEN2).apply_chat_template(messages, add_generation_prompt=True)


def test_cli_tokens_from_a_file_with_tools_and_variables(monkeypatch, capsys, tmp_path):
    messages, tools = CONVERSATIONS["tool-call"]
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"messages": messages, "tools": tools}), encoding="utf-8")
    template = tmp_path / "qwen3.jinja"
    template.write_text(TEMPLATES["Qwen-Qwen3-0.6B"], encoding="utf-8")
    code, out, _ = _chat_cli(
        monkeypatch, capsys, QWEN3, "--messages", request, "--template", template, "--generation-prompt",
        "--tokens", "--var", "enable_thinking=false",
    )
    assert code == 0
    answer = json.loads(out)
    tok = bpetok.from_gguf(QWEN3)
    prompt = render_template(
        TEMPLATES["Qwen-Qwen3-0.6B"], messages, tools=tools, add_generation_prompt=True, enable_thinking=False
    )
    assert answer == {"tokens": tok.encode(prompt), "n_tokens": len(tok.encode(prompt))}
    assert prompt.endswith("<think>\n\n</think>\n\n") and "get_weather" in prompt


@pytest.mark.parametrize(
    "args, stdin, words",
    [
        ((QWEN3,), '[{"role": "user", "content": "x"}]', "has no chat template"),
        ((QWEN2,), '[{"role": "user"', "stdin: not valid JSON"),
        ((QWEN2,), '{"prompt": "x"}', "expected a JSON list of messages"),
        ((QWEN2, "--messages", "/nonexistent/m.json"), "", "/nonexistent/m.json: cannot read"),
        ((QWEN2, "--var", "novalue"), "[]", "expected KEY=JSON"),
        ((QWEN2, "--template", "{% if %}"), '[{"role": "user", "content": "x"}]', "line 1: the chat template does not parse"),
    ],
)
def test_cli_errors_are_one_line(monkeypatch, capsys, args, stdin, words):
    code, out, err = _chat_cli(monkeypatch, capsys, *args, stdin=stdin)
    assert code == 1 and out == ""
    assert err.startswith("bpetok: error: ") and err.count("\n") == 1 and words in err, err
