"""Export GGUF vocabularies to tokenizer.json and count the paragraphs on which bpetok's GGUF ids,
HF tokenizers' ids for the export, and bpetok-hf's ids for the export (the file's own passes) are
not all equal.

    python plugins/bpetok-hf/scripts/compare_corpora.py tests/data/ggml-vocab-qwen3.gguf.gz \\
        --corpus ../shared/corpus/en.txt.xz --corpus ../shared/corpus/code.txt.xz ...

Paragraphs are the corpus split at blank lines. Prints one line per vocabulary and corpus.
"""

from __future__ import annotations

import argparse
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
            loaded = bpetok.from_file(path)
            for name, paras in corpora.items():
                differ = 0
                for p in paras:
                    expected = tok.encode(p)
                    if hf.encode(p, add_special_tokens=False).ids != expected or loaded.encode(p) != expected:
                        differ += 1
                print(f"{Path(gguf).name}  pre={loaded.vocabulary.pre}  {name}: {len(paras)} paragraphs, {differ} differ",
                      flush=True)


if __name__ == "__main__":
    main()
