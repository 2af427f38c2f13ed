"""Encode speed of bpetok's non-gpt2 models (``llama`` SentencePiece-style BPE, ``gemma4``) next to
llama.cpp and HF tokenizers.

    python3 benchmarks/models_bench.py VOCAB.gguf CORPUS.txt[.xz] ... [--repeat 3] [--limit-mb 1]

For each corpus (cut to ``--limit-mb`` MB of whole paragraphs): bpetok's
``encode(text, parse_special=False)`` on every paragraph, *cold* (a fresh tokenizer, its merge
tables already built: their one-time cost is printed apart) and *warm* (the same tokenizer
again); llama-cpp-python's ``Llama(path, vocab_only=True).tokenize(..., add_bos=False,
special=False)``; and an HF ``tokenizers.Tokenizer`` built from the GGUF's vocabulary (see
:func:`hf_tokenizer`; first pass and second pass). CPU time (``time.process_time``, so that other
processes on a shared machine count less), the median of ``--repeat`` runs, the engines taking
turns within each run, MB/s of UTF-8. Then how many paragraphs each gives llama.cpp's ids for
(bpetok must give all of them; HF is a peer built by hand, not a reference) and where HF first
differs.
"""

from __future__ import annotations

import argparse
import lzma
import statistics
import time

import bpetok

MB = 1_000_000


def read_paragraphs(path: str, limit: int) -> list[str]:
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    out, size = [], 0
    for paragraph in text.split("\n\n"):
        if size >= limit:
            break
        out.append(paragraph + "\n\n")
        size += len(out[-1].encode())
    return out


def hf_tokenizer(vocabulary):
    """An HF ``tokenizers.Tokenizer`` built offline from a GGUF vocabulary, as close to llama.cpp
    as its building blocks allow.

    - ``llama`` (SPM): a BPE with byte fallback whose merges are every split of a token into two
      tokens, ranked by the merged token's score, highest first (what transformers' converters do
      for SentencePiece); ``▁`` for spaces and one in front (add_space_prefix), no pre-tokenizer.
      It differs from llama.cpp where a character that is no token would have merged, and where
      scores tie (HF ranks the tied merges, llama.cpp merges leftmost first).
    - ``gemma4``: a BPE with byte fallback over the file's merges, ``▁`` for spaces, text split
      into runs of newlines and runs without (llama.cpp's split); a newline run is merged, not
      looked up whole.
    """
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    vocab = {text.decode("utf-8", "replace"): i for text, i in vocabulary.token_index().items()}
    if vocabulary.model == "gemma4":
        merges = [tuple(m.decode("utf-8", "replace").split(" ", 1)) for m in vocabulary.merges]
        tok = Tokenizer(models.BPE(vocab, merges, byte_fallback=True))
        tok.normalizer = normalizers.Replace(" ", "\u2581")
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("[^\n]+|\n+"), behavior="isolated")
        return tok
    scores = vocabulary.scores
    ranked = []
    for text, i in vocab.items():
        for cut in range(1, len(text)):
            left, right = text[:cut], text[cut:]
            if left in vocab and right in vocab:
                ranked.append((-scores[i], i, cut, left, right))
    ranked.sort()
    tok = Tokenizer(models.BPE(vocab, [(left, right) for *_, left, right in ranked], byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    escape = [normalizers.Replace(" ", "\u2581")]
    if vocabulary.flags.get("add_space_prefix", True):
        escape.insert(0, normalizers.Prepend("\u2581"))
    tok.normalizer = normalizers.Sequence(escape)
    return tok


def first_difference(paragraphs, ours, theirs) -> str:
    """Where two lists of id lists first differ: the paragraph and the ids around it."""
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return f"paragraph {k} ({paragraphs[k][:60]!r}...): at id {at}, llama.cpp {a[at:at + 4]}, HF {b[at:at + 4]}"
    return "none"


def timed(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("vocab")
    parser.add_argument("corpora", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--limit-mb", type=float, default=1.0)
    args = parser.parse_args()

    try:
        from llama_cpp import Llama

        llama = Llama(args.vocab, vocab_only=True, verbose=False)
    except ImportError:
        llama = None
    load = timed(lambda: bpetok.from_gguf(args.vocab))
    tok = bpetok.from_gguf(args.vocab)
    tables = timed(lambda: tok.engine)  # the SPM and gemma4 models build their C merge tables on first use
    print(
        f"{args.vocab}: model={tok.vocabulary.model}, {tok.n_tokens:,} tokens, bpetok load {load:.2f} s CPU, "
        f"merge tables {tables:.2f} s CPU on first use, engine {tok.engine}"
    )
    try:
        hf_build = time.process_time()
        hf = hf_tokenizer(tok.vocabulary)
        print(f"HF tokenizers built from the GGUF in {time.process_time() - hf_build:.2f} s CPU")
    except ImportError:
        hf = None
    for corpus in args.corpora:
        paragraphs = read_paragraphs(corpus, int(args.limit_mb * MB))
        size = sum(len(p.encode()) for p in paragraphs) / MB
        cold, warm, ref, hf_first, hf_second = [], [], [], [], []
        for _ in range(args.repeat):
            fresh = bpetok.Tokenizer(tok.vocabulary)
            fresh.engine  # its merge tables, built on first use: timed above, not here
            cold.append(timed(lambda: [fresh.encode(p, parse_special=False) for p in paragraphs]))
            warm.append(timed(lambda: [fresh.encode(p, parse_special=False) for p in paragraphs]))
            if llama is not None:
                ref.append(timed(lambda: [llama.tokenize(p.encode(), add_bos=False, special=False) for p in paragraphs]))
            if hf is not None:
                hf.model._clear_cache()  # its cache of words (here: whole paragraphs, or lines for gemma4)
                hf_first.append(timed(lambda: [hf.encode(p, add_special_tokens=False).ids for p in paragraphs]))
                hf_second.append(timed(lambda: [hf.encode(p, add_special_tokens=False).ids for p in paragraphs]))

        def rate(times) -> str:
            return f"{size / statistics.median(times):.2f} MB/s"

        line = f"{corpus}: {size:.2f} MB, {len(paragraphs):,} paragraphs, bpetok cold {rate(cold)}, warm {rate(warm)}"
        if llama is not None:
            line += f", llama.cpp {rate(ref)}"
        if hf is not None:
            line += f", HF tokenizers {rate(hf_first)} (second pass {rate(hf_second)})"
        print(line)
        if llama is not None:
            expected = [llama.tokenize(p.encode(), add_bos=False, special=False) for p in paragraphs]
            ours = [tok.encode(p, parse_special=False) for p in paragraphs]
            print(f"  same ids as llama.cpp: bpetok {sum(map(list.__eq__, ours, expected))}/{len(paragraphs)}", end="")
            if hf is not None:
                theirs = [hf.encode(p, add_special_tokens=False).ids for p in paragraphs]
                print(f", HF {sum(map(list.__eq__, theirs, expected))}/{len(paragraphs)}; HF first differs: "
                      f"{first_difference(paragraphs, expected, theirs)}", end="")
            print()


if __name__ == "__main__":
    main()
