"""Count the texts holding Unicode 15.0, 15.1 and 16.0 characters on which bpetok's tokenizer.json route
and Hugging Face tokenizers give different ids (llama.cpp's tables stop at 15.1 and know none of 16.0).

    python plugins/bpetok-hf/scripts/new_unicode_texts.py [--texts 3522] [--seed 16]

The texts (seeded) mix runs of the codepoints those versions added (the ``regex`` package's
``\\p{Age=...}``) with ASCII words, digits, punctuation, spaces and newlines. Each file: the
tokenizer.json bpetok-hf exports for qwen3, smollm2 and llama-bpe, a Qwen2 folder transformers
saved (NFC normalizer), and the BERT, XLM-R and T5 folders of scripts/make_wp_ugm_references.py.
Prints per file the texts that differ (bpetok-hf on the file against HF tokenizers on it) and, for
the exports, how many of them bpetok's GGUF route (llama.cpp's tables) splits otherwise than HF.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from make_hf_references import ROOT, qwen2_folder  # noqa: E402
from make_wp_ugm_references import bert_folder, t5_folder, xlmr_folder  # noqa: E402

GGUFS = {
    "qwen3": ROOT / "tests/data/ggml-vocab-qwen3.gguf.gz",
    "smollm2": ROOT / "tests/data/ggml-vocab-smollm2.gguf.gz",
    "llama-bpe": ROOT / "tests/data/llama.cpp-tests/ggml-vocab-llama-bpe.gguf.gz",
}


def new_codepoints() -> list[str]:
    """Codepoints Oniguruma's tables (HF tokenizers': Unicode 16.0) assign and Python's unicodedata
    (14.0) does not: the 15.0, 15.1 and 16.0 additions."""
    import unicodedata

    from tokenizers import Regex, pre_tokenizers

    assert unicodedata.unidata_version == "14.0.0", unicodedata.unidata_version
    unassigned = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) == "Cn"]
    # Split(..., "removed") keeps the runs that do not match, with their offsets: the rest matched.
    split = pre_tokenizers.Split(Regex(r"\P{Cn}"), "removed")
    out = []
    for i in range(0, len(unassigned), 4096):
        chunk = "".join(map(chr, unassigned[i : i + 4096]))
        kept = [False] * len(chunk)
        for _, (start, end) in split.pre_tokenize_str(chunk):
            kept[start:end] = [True] * (end - start)
        out += [c for c, k in zip(chunk, kept) if not k]
    return out


def make_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    new = new_codepoints()
    words = ["the", "Hello", "tokenizer", "x", "don't", "42", "3.14", "naïve", "日本語", "Привет"]
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(2, 8)):
            kind = rng.random()
            if kind < 0.45:
                parts.append("".join(rng.choice(new) for _ in range(rng.randint(1, 4))))
            elif kind < 0.8:
                parts.append(rng.choice(words))
            else:
                parts.append(rng.choice([".", ",", "!?", "123", "  ", "\n", "'s", "-", "(", ")"]))
            parts.append(rng.choice([" ", "", " ", "\n", ""]))
        texts.append("".join(parts))
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=3522)
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "plugins" / "bpetok-hf")]
    import bpetok
    from tokenizers import Tokenizer

    from bpetok_hf.writer import export_hf

    texts = make_texts(args.texts, args.seed)
    print(f"{len(texts)} texts, seed {args.seed}, {len(new_codepoints())} codepoints of Unicode 15.0-16.0")
    with tempfile.TemporaryDirectory() as tmp:
        folders = {}
        for name, gguf in GGUFS.items():
            folders[name] = pathlib.Path(tmp) / name
            export_hf(bpetok.from_file(gguf), folders[name])
        folders["qwen2-folder"] = qwen2_folder(pathlib.Path(tmp) / "qwen2")
        folders["bert-folder"] = bert_folder(pathlib.Path(tmp) / "bert")
        folders["xlmr-folder"] = xlmr_folder(pathlib.Path(tmp) / "xlmr")
        folders["t5-folder"] = t5_folder(pathlib.Path(tmp) / "t5")
        for name, folder in folders.items():
            hf = Tokenizer.from_file(str(folder / "tokenizer.json"))
            loaded = bpetok.from_file(folder)
            expected = [hf.encode(t, add_special_tokens=False).ids for t in texts]
            differ = sum(loaded.encode(t) != ids for t, ids in zip(texts, expected))
            line = f"{name:13} tokenizer.json route: {differ} of {len(texts)} differ from HF tokenizers"
            if name in GGUFS:
                gguf = bpetok.from_file(GGUFS[name])
                line += f"; GGUF route (llama.cpp's tables): {sum(gguf.encode(t) != ids for t, ids in zip(texts, expected))} differ"
            print(line, flush=True)


if __name__ == "__main__":
    main()
