"""How far Hugging Face's closest expression of a llama.cpp ``bert`` vocabulary is from llama.cpp's
ids: why ``bpetok export BERT.gguf --format hf`` is refused.

    python plugins/bpetok-hf/scripts/bert_export_gap.py [--corpus EN.txt.xz ...]

Builds ``BertTokenizerFast`` (BertNormalizer, BertPreTokenizer, WordPiece with ``##``) from the
vocabulary of tests/data/llama.cpp-tests/ggml-vocab-bert-bge.gguf.gz, as llama.cpp's converter
read it, and counts llama.cpp's recorded cases (tests/data/bert-bge.jsonl.gz, parse_special=True)
and corpus paragraphs (against bpetok's GGUF ids, which are llama.cpp's) that transformers gives
other ids for.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import pathlib
import re
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from make_wp_ugm_references import BERT_GGUF, _gguf_tokenizer, bert_folder  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", action="append", default=[])
    args = parser.parse_args()
    from transformers import AutoTokenizer

    gguf = _gguf_tokenizer(BERT_GGUF)
    with tempfile.TemporaryDirectory() as tmp:
        hf = AutoTokenizer.from_pretrained(str(bert_folder(pathlib.Path(tmp) / "bert")))
    with gzip.open(ROOT / "tests" / "data" / "bert-bge.jsonl.gz", "rt", encoding="utf-8") as f:
        cases = [c for c in map(json.loads, f) if c["special"]]
    differ = [c["text"] for c in cases if hf(c["text"], add_special_tokens=False)["input_ids"] != c["ids"]]
    equal = len(cases) - len(differ)
    print(f"llama.cpp's cases: {equal} of {len(cases)} equal ({100 * equal / len(cases):.2f}%); first differing: "
          f"{differ[0][:60]!r}" if differ else f"llama.cpp's cases: all {len(cases)} equal")
    for corpus in args.corpus:
        with lzma.open(corpus, "rt", encoding="utf-8") as f:
            paragraphs = [p for p in re.split(r"\n\s*\n", f.read()) if p.strip()]
        bad = sum(hf(p, add_special_tokens=False)["input_ids"] != gguf.encode(p) for p in paragraphs)
        print(f"{pathlib.Path(corpus).name}: {len(paragraphs)} paragraphs, {bad} differ")


if __name__ == "__main__":
    main()
