"""Build WordPiece and Unigram Hugging Face model folders offline with transformers' own tokenizer
classes, and record Hugging Face tokenizers' ids for them into the plugin's tests/data.

    python plugins/bpetok-hf/scripts/make_wp_ugm_references.py    # rewrite tests/data/{bert,xlmr,t5}*-hf.jsonl.gz

- bert, bert-cased: ``BertTokenizerFast`` (``do_lower_case`` true / false) from the vocab.txt of
  tests/data/llama.cpp-tests/ggml-vocab-bert-bge.gguf.gz (llama.cpp's converter wrote ``▁x`` for a
  word-initial ``x``, ``x`` for ``##x`` and kept ``[...]``: undone here).
- xlmr: ``XLMRobertaTokenizerFast`` from the pieces, scores and precompiled charsmap of
  tests/data/llama.cpp-tests/ggml-vocab-nomic-bert-moe.gguf.gz (an XLM-R vocabulary:
  ``<s> ... </s>``).
- t5: ``T5TokenizerFast`` from the same pieces and charsmap in T5's order (``<pad>``, ``</s>``,
  ``<unk>``, the pieces, 3 ``<extra_id_N>``): ``... </s>``.

The tests build the same folders with the functions here and compare bpetok with HF tokenizers
live on llama.cpp's reference texts and corpus paragraphs; the recorded ids pin HF's answers on
the texts below in case a later tokenizers release changes them.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from make_hf_references import _gguf_tokenizer, record  # noqa: E402

BERT_GGUF = "llama.cpp-tests/ggml-vocab-bert-bge.gguf.gz"
UNIGRAM_GGUF = "llama.cpp-tests/ggml-vocab-nomic-bert-moe.gguf.gz"

# Texts about BERT's and SentencePiece's normalization, splitting and unknown words.
TEXTS = [
    "Hello World! It's a test, isn't it?", "  leading and trailing  \t\n", "ÉCOLE école e\u0301cole",
    "한국어 텍스트 \u1112\u1161\u11ab", "中文分词测试 日本語のテキスト", "İstanbul ΣΑΣ ß ǅ", "ﬁne ½ ² \uff21\uff22\uff23",
    "\uff21\u0301 A\u0301 ﬁ\u0301x \r\n x", "a\U0001f3fb 👍🏽 🦙 ꙮ", "\u0000 \u200b zero\u200dwidth \ufeff \x7f",
    "x" * 120 + " " + "y" * 99, "antidisestablishmentarianism supercalifragilistic",
    "$100 + 50% = #hashtag @user <tag> [x] {y} ~z `q` ^w |v \\u",
    "▁x ▁▁y a▁b", "[CLS] [SEP] [MASK] [UNK] <s> </s> <unk> <pad> <mask>", "    def f(x):\n        return x",
    "\u0300start with mark", "\u1c89\U000105e0\U00010d5e\U00011386\U00013460\U00010d40\U00016130\u1b4e",
]


def bert_vocab() -> dict[str, int]:
    """bert-bge's WordPiece vocabulary as HF writes it: ``##`` for continuations."""
    vocab = _gguf_tokenizer(BERT_GGUF).vocabulary
    out = {}
    for i, data in enumerate(vocab.tokens):
        text = data.decode("utf-8")
        if text.startswith("\u2581"):
            text = text[1:]
        elif not (text.startswith("[") and text.endswith("]")):
            text = "##" + text
        out[text] = i
    return out


def bert_folder(out: str | pathlib.Path, lowercase: bool = True) -> pathlib.Path:
    """A folder ``BertTokenizerFast`` saves (``[CLS] ... [SEP]``)."""
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast(vocab=bert_vocab(), do_lower_case=lowercase)
    if tok.convert_tokens_to_ids("[CLS]") != 101:
        raise SystemExit("the vocabulary did not keep the GGUF's ids")
    out = pathlib.Path(out)
    tok.save_pretrained(str(out))
    return out


def unigram_pieces() -> tuple[list[tuple[str, float]], bytes, list[int]]:
    """nomic-bert-moe's pieces with their scores, its charsmap, its token types."""
    vocab = _gguf_tokenizer(UNIGRAM_GGUF).vocabulary
    pieces = [(t.decode("utf-8"), float(s)) for t, s in zip(vocab.tokens, vocab.scores)]
    return pieces, bytes(vocab.metadata["tokenizer.ggml.precompiled_charsmap"]), list(vocab.token_types)


def xlmr_folder(out: str | pathlib.Path) -> pathlib.Path:
    """A folder ``XLMRobertaTokenizerFast`` saves (``<s> ... </s>``)."""
    from transformers import XLMRobertaTokenizerFast

    pieces, charsmap, _ = unigram_pieces()
    tok = XLMRobertaTokenizerFast(vocab=pieces, _spm_precompiled_charsmap=charsmap)
    if tok.convert_tokens_to_ids("<mask>") != 250001:
        raise SystemExit("the vocabulary did not keep the GGUF's ids")
    out = pathlib.Path(out)
    tok.save_pretrained(str(out))
    return out


def t5_folder(out: str | pathlib.Path) -> pathlib.Path:
    """A folder ``T5TokenizerFast`` saves (``... </s>``), the pieces in T5's order."""
    from transformers import T5TokenizerFast

    pieces, charsmap, types = unigram_pieces()
    normal = [p for p, t in zip(pieces, types) if t == 1]
    extra = [(f"<extra_id_{i}>", 0.0) for i in range(2, -1, -1)]
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *normal, *extra]
    tok = T5TokenizerFast(vocab=vocab, _spm_precompiled_charsmap=charsmap, extra_ids=3)
    out = pathlib.Path(out)
    tok.save_pretrained(str(out))
    return out


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        record(bert_folder(pathlib.Path(tmp) / "bert"), "bert-hf", TEXTS)
        record(bert_folder(pathlib.Path(tmp) / "bert-cased", lowercase=False), "bert-cased-hf", TEXTS)
        record(xlmr_folder(pathlib.Path(tmp) / "xlmr"), "xlmr-hf", TEXTS)
        record(t5_folder(pathlib.Path(tmp) / "t5"), "t5-hf", TEXTS)


if __name__ == "__main__":
    main()
