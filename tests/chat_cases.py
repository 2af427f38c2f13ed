"""The conversations every chat template is rendered with, and the 71 real templates (from
llama.cpp's models/templates, MIT: tests/data/chat-templates/LICENSE-llama.cpp).

Shared by tests/test_chat_templates.py and scripts/chat_template_report.py (which writes the list of
templates transformers cannot render for docs/chat.md).
"""

from __future__ import annotations

import tarfile

from helpers import DATA

TEMPLATES_ARCHIVE = DATA / "chat-templates" / "templates.tar.gz"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

SYSTEM = {"role": "system", "content": "You are a terse assistant. Answer in one line."}
USER_1 = {"role": "user", "content": "What is 2+2? Say it with <b>HTML</b> & \"quotes\"."}
ASSISTANT_1 = {"role": "assistant", "content": "2+2 = 4 — naïve arithmetic. 🙂"}
USER_2 = {"role": "user", "content": "And 3×3?\nTwo lines."}

# name -> (messages, tools); each is rendered with and without a generation prompt.
CONVERSATIONS = {
    "user": ([{"role": "user", "content": "Hello"}], None),
    "system-user-assistant-user": ([SYSTEM, USER_1, ASSISTANT_1, USER_2], None),
    "user-assistant": ([USER_1, ASSISTANT_1], None),
    "tool-call": (
        [
            SYSTEM,
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call0Paris",  # 9 alphanumerics would please Mistral's templates; this does not
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call0Paris", "name": "get_weather", "content": '{"temp": 21}'},
            {"role": "assistant", "content": "It is 21 °C in Paris."},
            {"role": "user", "content": "Thanks!"},
        ],
        [WEATHER_TOOL],
    ),
    # As the OpenAI API sends a tool call: content None (dropped before rendering, as transformers
    # does), arguments as a JSON string, a 9-character id.
    "tool-call-openai": (
        [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "abc123DEF",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "abc123DEF", "content": "-3 C, snow"},
        ],
        [WEATHER_TOOL],
    ),
    "reasoning": (
        [
            {"role": "user", "content": "Think, then answer: 1+1?"},
            {"role": "assistant", "reasoning_content": "Adding one and one.", "content": "2"},
            {"role": "user", "content": "Sure?"},
        ],
        None,
    ),
}

# (messages, continue_final_message): prefills, the last message left open for the model to continue.
CONTINUE_CASES = [
    ([USER_1, ASSISTANT_1], True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Well, "}], True),
    (CONVERSATIONS["reasoning"][0][:2], "reasoning_content"),
]

# The token variables both renderers get (transformers passes the tokenizer's special_tokens_map).
TOKENS = {"bos_token": "<|bos|>", "eos_token": "<|eos|>"}


def load_templates() -> dict[str, str]:
    """Template name (file stem) -> source."""
    found = {}
    with tarfile.open(TEMPLATES_ARCHIVE) as tar:
        for member in tar.getmembers():
            if member.name.endswith(".jinja"):
                found[member.name[: -len(".jinja")]] = tar.extractfile(member).read().decode("utf-8")
    return found


def render_with_transformers(
    source: str, messages, tools, add_generation_prompt: bool, continue_final_message: bool | str = False
) -> str:
    """transformers' own rendering, the path PreTrainedTokenizerBase.apply_chat_template(tokenize=False)
    takes (normalize the messages, then render_jinja_template with the special tokens as variables),
    without a tokenizer: nothing is downloaded."""
    from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[_normalize_chat_messages(messages)],
        tools=tools,
        chat_template=source,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        **TOKENS,
    )
    return rendered[0]
