"""Export GGUF vocabularies to tokenizer.json and count the paragraphs on which bpetok's GGUF ids,
HF tokenizers' ids for the export, and bpetok-hf's ids for the export (family splitter, and the
file's own regex) are not all equal.

    python plugins/bpetok-hf/scripts/compare_corpora.py tests/data/ggml-vocab-qwen3.gguf.gz \\
        --corpus ../shared/corpus/en.txt.xz --corpus ../shared/corpus/code.txt.xz ...

Paragraphs are the corpus split at blank lines. Prints one line per vocabulary, route and corpus.
"""

from __future__ import annotations

import argparse
import json
import lzma
import re
import tempfile
from pathlib import Path

from tokenizers import Tokenizer

import bpetok
from bpetok_hf.writer import export_hf


def paragraphs(path: str) -> list[str]:
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [p for p in re.split(r"\n\s*\n", f.read()) if p.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gguf", nargs="+")
    parser.add_argument("--corpus", action="append", required=True)
    args = parser.parse_args()
    corpora = {Path(c).name: paragraphs(c) for c in args.corpus}
    for gguf in args.gguf:
        tok = bpetok.from_file(gguf)
        with tempfile.TemporaryDirectory() as tmp:
            export_hf(tok, tmp)
            path = Path(tmp) / "tokenizer.json"
            hf = Tokenizer.from_file(str(path))
            family = bpetok.from_file(path)
            # The same file with its regex wrapped in (?:...): no family matches, its own passes run.
            data = json.loads(path.read_text(encoding="utf-8"))
            for item in data["pre_tokenizer"]["pretokenizers"]:
                if item["type"] == "Split":
                    item["pattern"]["Regex"] = "(?:" + item["pattern"]["Regex"] + ")"
            own_path = Path(tmp) / "own" / "tokenizer.json"
            own_path.parent.mkdir()
            own_path.write_text(json.dumps(data), encoding="utf-8")
            own = bpetok.from_file(own_path)
            for route in (family, own):
                for name, paras in corpora.items():
                    differ = 0
                    for p in paras:
                        expected = tok.encode(p)
                        if hf.encode(p, add_special_tokens=False).ids != expected or route.encode(p) != expected:
                            differ += 1
                    print(f"{Path(gguf).name}  pre={route.vocabulary.pre}  {name}: {len(paras)} paragraphs, {differ} differ",
                          flush=True)


if __name__ == "__main__":
    main()
