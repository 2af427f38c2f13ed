"""transformers' load time and encode speed for exported folders, measured side by side in one
process (the folders' runs interleaved, the best of each kept).

    python plugins/bpetok-hf/scripts/transformers_time.py DIR_A DIR_B ... --corpus EN.txt.xz [--mb 1] [--repeat 3]

Prints, per folder, ``AutoTokenizer.from_pretrained`` seconds and encode MB/s over the first
``--mb`` MB of the corpus's paragraphs (one call per paragraph, no special tokens).
"""

from __future__ import annotations

import argparse
import lzma
import re
import time


def paragraphs(path: str, mb: float) -> list[str]:
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    out, size = [], 0
    for p in re.split(r"\n\s*\n", text):
        if p.strip() and size < mb * 1e6:
            out.append(p)
            size += len(p.encode())
    return out


def main() -> None:
    from transformers import AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--corpus", action="append", required=True)
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    texts = [p for c in args.corpus for p in paragraphs(c, args.mb)]
    size = sum(len(t.encode()) for t in texts) / 1e6
    load = {f: float("inf") for f in args.folders}
    encode = {f: float("inf") for f in args.folders}
    tok = None
    for _ in range(args.repeat):
        for folder in args.folders:
            tok = None  # free the last one outside the clock
            start = time.perf_counter()
            tok = AutoTokenizer.from_pretrained(folder)
            load[folder] = min(load[folder], time.perf_counter() - start)
            start = time.perf_counter()
            for t in texts:
                tok(t, add_special_tokens=False)
            encode[folder] = min(encode[folder], time.perf_counter() - start)
    for folder in args.folders:
        print(f"{folder}: load {load[folder]:.2f} s, encode {size / encode[folder]:.2f} MB/s over {size:.2f} MB")


if __name__ == "__main__":
    main()
