"""How far real pre-tokenizer patterns stay from the Split regex time limit, and what the limit costs.

For each corpus (split whole, as one text) and each hub pattern bpetok-hf knows, prints the CPU
seconds the passes take without a limit and with the default one, and the budget the limit gives
that text; then the seconds a backtracking pattern takes to be stopped.

    python plugins/bpetok-hf/scripts/regex_time_limit.py ../shared/corpus/en.txt.xz ../shared/corpus/code.txt.xz ...
"""

from __future__ import annotations

import argparse
import lzma
import time

from bpetok.errors import RegexTimeoutError
from bpetok_hf.pretok import CHARS_PER_TIMEOUT, DEFAULT_TIMEOUT, HUB_PATTERNS, HFPreTokenizer, SplitPass


def cpu_seconds(pretokenizer: HFPreTokenizer, text: str) -> float:
    start = time.process_time()
    pretokenizer.split(text)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpora", nargs="+", help=".txt or .txt.xz files")
    args = parser.parse_args()
    for path in args.corpora:
        with (lzma.open if path.endswith(".xz") else open)(path, "rt", encoding="utf-8") as f:
            text = f.read()
        budget = DEFAULT_TIMEOUT * (1 + len(text) / CHARS_PER_TIMEOUT)
        for patterns, family in HUB_PATTERNS.items():
            passes = [SplitPass(p) for p in patterns]
            free = cpu_seconds(HFPreTokenizer(passes, timeout=0), text)
            limited = cpu_seconds(HFPreTokenizer(passes, timeout=DEFAULT_TIMEOUT), text)
            print(
                f"{path}: {len(text)} chars, {family} pattern: {free:.2f} s without a limit, {limited:.2f} s with it, "
                f"budget {budget:.1f} s ({budget / limited:.0f}x)"
            )
    backtracking = HFPreTokenizer([SplitPass(r"(a|aa)+$")], timeout=DEFAULT_TIMEOUT)
    start, wall = time.process_time(), time.monotonic()
    try:
        backtracking.split("a" * 45 + "b")
    except RegexTimeoutError:
        pass
    print(f"(a|aa)+$ on 46 chars: stopped after {time.process_time() - start:.2f} CPU s, {time.monotonic() - wall:.2f} s wall")


if __name__ == "__main__":
    main()
