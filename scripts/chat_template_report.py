"""Which of the 71 chat templates transformers itself cannot render, for which conversation, and why.

Renders every template in tests/data/chat-templates for each conversation of tests/chat_cases.py
(with and without a generation prompt) with transformers' render_jinja_template and with bpetok,
and prints a Markdown table of the cases transformers refuses (bpetok must refuse them too; any
disagreement is printed first and makes the exit status 1). Offline: nothing is downloaded.

    python scripts/chat_template_report.py
"""

from __future__ import annotations

import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

from chat_cases import CONTINUE_CASES, CONVERSATIONS, TOKENS, load_templates, render_with_transformers  # noqa: E402

from bpetok.apps.chat import render_template  # noqa: E402
from bpetok.errors import ChatTemplateError  # noqa: E402


def main() -> int:
    templates = load_templates()
    refused: dict[tuple[str, str], str] = {}
    same = disagree = 0
    for name, source in sorted(templates.items()):
        for conversation, (messages, tools) in CONVERSATIONS.items():
            for generation_prompt in (False, True):
                try:
                    expected, reference_error = render_with_transformers(source, messages, tools, generation_prompt), None
                except Exception as e:
                    expected, reference_error = None, f"{type(e).__name__}: {e}"
                try:
                    got = render_template(source, messages, tools=tools, add_generation_prompt=generation_prompt, **TOKENS)
                except ChatTemplateError:
                    got = None
                if reference_error is not None:
                    refused[(name, conversation)] = reference_error
                    if got is not None:
                        disagree += 1
                        print(f"DISAGREE {name} / {conversation}: transformers raised, bpetok rendered")
                elif got != expected:
                    disagree += 1
                    print(f"DISAGREE {name} / {conversation} / add_generation_prompt={generation_prompt}")
                else:
                    same += 1
    cases = len(templates) * len(CONVERSATIONS) * 2
    print(f"{len(templates)} templates x {len(CONVERSATIONS)} conversations x 2: {cases} renderings; "
          f"{same} identical strings, {cases - same - disagree} refused by both, {disagree} disagreements")
    prefills = prefill_same = prefill_disagree = 0
    for name, source in sorted(templates.items()):
        for messages, field in CONTINUE_CASES:
            prefills += 1
            try:
                expected = render_with_transformers(source, messages, None, False, continue_final_message=field)
            except Exception:
                expected = None
            try:
                got = render_template(source, messages, continue_final_message=field, **TOKENS)
            except ChatTemplateError:
                got = None
            if got == expected:
                prefill_same += expected is not None
            else:
                prefill_disagree += 1
                print(f"DISAGREE {name} / continue_final_message={field!r}")
    disagree += prefill_disagree
    print(f"continue_final_message: {prefills} renderings; {prefill_same} identical strings, "
          f"{prefills - prefill_same - prefill_disagree} refused by both, {prefill_disagree} disagreements\n")
    print("| template | conversation | transformers' error |")
    print("|---|---|---|")
    for (name, conversation), error in sorted(refused.items()):
        error = error.replace("|", "\\|").replace("\n", " ")
        print(f"| {name} | {conversation} | {error[:140]} |")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
