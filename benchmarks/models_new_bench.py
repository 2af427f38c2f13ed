"""Encode speed of bpetok's ``bert`` (WordPiece) and ``t5`` (Unigram) models next to HF tokenizers.

    python3 benchmarks/models_new_bench.py --bert BERT.gguf --t5 T5.gguf CORPUS.txt[.xz] ... [--limit-mb 1]

In one process, for each model and corpus (cut to ``--limit-mb`` MB of whole paragraphs): a fresh
bpetok tokenizer encodes the corpus as one text, another fresh one encodes its paragraphs one by
one (``parse_special=False``); an HF ``tokenizers.Tokenizer`` built from the same vocabulary
(:func:`hf_wordpiece`, :func:`hf_unigram`), fresh too, does the same (one thread). CPU time
(``time.process_time``), MB/s of UTF-8, the ratio bpetok / HF, and whether the ids are equal
(HF is a peer built by hand, not the reference: llama.cpp's ids are in tests/). Load time is
printed apart.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # HF on one thread, like bpetok's encode()
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import bpetok  # noqa: E402
from bpetok.vocab import CHARSMAP_KEY, TokenAttr  # noqa: E402
from models_bench import read_paragraphs  # noqa: E402  (benchmarks/ is on the path: scripts run from it)

MB = 1_000_000
SPACE = "\u2581"


def hf_wordpiece(vocabulary):
    """WordPiece with BertNormalizer and BertPreTokenizer; llama.cpp's ``▁x`` is HF's ``x`` and its
    ``x`` HF's ``##x`` (the converter's renaming undone). No word-length limit (llama.cpp has none)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = {}
    for i, text in enumerate(vocabulary.tokens):
        piece = text.decode("utf-8", "replace")
        if vocabulary.attrs[i] & TokenAttr.NORMAL:
            piece = piece[1:] if piece.startswith(SPACE) else "##" + piece
        vocab.setdefault(piece, i)
    unk = vocabulary.tokens[vocabulary.special_ids["unk"]].decode()
    tok = Tokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=1 << 30))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def hf_unigram(vocabulary):
    """Unigram with the same scores, SentencePiece's precompiled normalizer, extra spaces merged
    and the ends stripped, and ``▁`` in front of each word (transformers' XLM-R converter, plus
    the strip SentencePiece does)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    pieces = [(text.decode("utf-8", "replace"), score) for text, score in zip(vocabulary.tokens, vocabulary.scores)]
    tok = Tokenizer(models.Unigram(pieces, unk_id=vocabulary.special_ids["unk"], byte_fallback=False))
    steps = [normalizers.Precompiled(vocabulary.metadata[CHARSMAP_KEY])] if CHARSMAP_KEY in vocabulary.metadata else []
    if vocabulary.flags.get("remove_extra_whitespaces"):  # SentencePiece's: runs collapsed, ends stripped
        steps += [normalizers.Replace(Regex(" {2,}"), " "), normalizers.Strip()]
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always")
    return tok


def timed(fn):
    start = time.process_time()
    result = fn()
    return result, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpora", nargs="+")
    parser.add_argument("--bert", help="a tokenizer.ggml.model = bert GGUF")
    parser.add_argument("--t5", help="a tokenizer.ggml.model = t5 GGUF")
    parser.add_argument("--limit-mb", type=float, default=1.0)
    args = parser.parse_args()
    builders = [(path, build) for path, build in ((args.bert, hf_wordpiece), (args.t5, hf_unigram)) if path]
    for path, build in builders:
        vocabulary, load = timed(lambda: bpetok.load_vocabulary(path))
        hf, hf_load = timed(lambda: build(vocabulary))
        _, tok_load = timed(lambda: bpetok.Tokenizer(vocabulary))
        print(f"{path}: model {vocabulary.model}, vocabulary read in {load:.2f} s, tokenizer built in {tok_load:.2f} s, HF built in {hf_load:.2f} s")
        for corpus in args.corpora:
            paragraphs = read_paragraphs(corpus, int(args.limit_mb * MB))
            text = "".join(paragraphs)
            size = len(text.encode()) / MB
            for unit, items in (("one text", [text]), ("paragraphs", paragraphs)):
                tok = bpetok.Tokenizer(vocabulary)
                ours, ours_time = timed(lambda: [tok.encode(t, parse_special=False) for t in items])
                hf = build(vocabulary)
                theirs, hf_time = timed(lambda: [hf.encode(t, add_special_tokens=False).ids for t in items])
                same = sum(a == b for a, b in zip(ours, theirs))
                print(
                    f"  {os.path.basename(corpus):14} {unit:10} {size:.2f} MB: bpetok {size / ours_time:6.2f} MB/s, "
                    f"HF {size / hf_time:6.2f} MB/s, ratio {hf_time / ours_time:5.2f}x; ids equal in {same}/{len(items)}"
                )


if __name__ == "__main__":
    main()
