"""Build Hugging Face model folders offline with transformers' own tokenizer classes, and record
Hugging Face tokenizers' ids for them into the plugin's tests/data.

    python plugins/bpetok-hf/scripts/make_hf_references.py            # rewrite tests/data/*-hf.jsonl.gz

- qwen2: ``Qwen2TokenizerFast`` from the vocab and merges of tests/data/ggml-vocab-qwen3.gguf.gz
  and its added tokens (``normalized: false``, as the hub's Qwen files have them), the Qwen3 chat
  template. transformers writes ``"normalizer": {"type": "NFC"}``, as for every Qwen2/2.5/3 folder.

- llama / gemma: ``LlamaTokenizer`` and ``GemmaTokenizer`` (transformers' fast classes) converted from
  a SentencePiece model built with the sentencepiece package's ``ModelProto`` from the pieces,
  scores and types of tests/data/llama.cpp-tests/ggml-vocab-llama-spm.gguf.gz (a Llama 2
  vocabulary). transformers writes ``Metaspace(prepend_scheme="always")`` for the first, Gemma's
  ``Replace(" ", "▁")`` + ``Split(" ")`` for the second.

The tests build the same folders with :func:`qwen2_folder` (imported from this file) and compare
bpetok with HF tokenizers live; the recorded ids pin HF's answers on the texts below, which are
about normalization, in case a later tokenizers release changes them.
"""

from __future__ import annotations

import gzip
import io
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data"

# Texts NFC / NFKC change: composed and decomposed accents, compatibility characters, marks in
# non-canonical order, marks HF's older Unicode tables do not know (U+0898, U+1E2EC), and an added
# token next to a combining mark.
NORMALIZATION_TEXTS = [
    "café cafe\u0301 CAFE\u0301",
    "\u212b \u00c5 A\u030a \u2126 \u03a9",
    "ﬁne ﬂow ½ ² \uff21\uff22\uff23 \u3000wide\u3000space",
    "a\u0323\u0307 a\u0307\u0323 \u1e0b\u0323 \u1e9b\u0323",
    "\u0915\u093c \u0929 \u09a1\u09bc \u0f40\u0fb5",
    "한국어 \u1112\u1161\u11ab\u1100\u116e\u11a8",
    "x\u0898\u0301 y\u0301\u0898 z\U0001e2ec\u0300\u0316 \u08ca\u0327",
    "<|im_end|>\u0301 e<|im_start|>\u0301 \u0301<|endoftext|>",
    "ΣΑΣ σας İstanbul ǅ ß ẞ",
    "  leading and trailing  \t\n",
    "\u0000 \u200b zero\u200dwidth \ufeff",
]


def _gguf_tokenizer(name: str):
    sys.path[:0] = [str(ROOT), str(ROOT / "plugins" / "bpetok-hf")]
    import bpetok

    return bpetok.from_file(ROOT / "tests" / "data" / name)


def qwen2_folder(out: str | pathlib.Path) -> pathlib.Path:
    """A Qwen2 folder (tokenizer.json, tokenizer_config.json, chat_template.jinja) as transformers saves it."""
    from transformers import AddedToken, Qwen2TokenizerFast

    vocab = _gguf_tokenizer("ggml-vocab-qwen3.gguf.gz").vocabulary
    normal = {t.decode("utf-8"): i for i, t in enumerate(vocab.tokens) if vocab.token_types[i] == 1}
    merges = [tuple(m.decode("utf-8").split(" ")) for m in vocab.merges]
    # Special tokens named after the added tokens are in, so that each keeps the GGUF's id.
    tok = Qwen2TokenizerFast(vocab=normal, merges=merges, unk_token=None, bos_token=None, eos_token=None, pad_token=None)
    tok.add_tokens([
        AddedToken(vocab.tokens[i].decode("utf-8"), special=vocab.token_types[i] == 3, normalized=False)
        for i in range(vocab.n_tokens) if vocab.token_types[i] != 1
    ])
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
    if tok.convert_tokens_to_ids("<|im_end|>") != 151645:
        raise SystemExit("the added tokens did not keep the GGUF's ids")
    with gzip.open(DATA / "Qwen-Qwen3-0.6B.jinja.gz", "rt", encoding="utf-8") as f:
        tok.chat_template = f.read()
    out = pathlib.Path(out)
    tok.save_pretrained(out)
    return out


# Texts about SentencePiece's spaces, byte fallback and added tokens.
SPM_TEXTS = [
    "Hello world", " Hello", "  two leading", "trailing  ", " ", "\n\n x", "\t tab",
    "<s>Hello</s>", "<s> Hello", "a</s> b<unk>c", "▁x ▁▁y", "🦙 llama ꙮ \u0000 \U0010fffd",
    "日本語のテキスト", "Ünïcödé façade", "    def f(x):\n        return x",
]


def sentencepiece_model(gguf_name: str, out: pathlib.Path, add_dummy_prefix: bool = True) -> pathlib.Path:
    """``out/tokenizer.model``: a SentencePiece BPE model of a llama GGUF's pieces, scores and types."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    vocab = _gguf_tokenizer(gguf_name).vocabulary
    proto = pb.ModelProto()
    proto.trainer_spec.model_type = pb.TrainerSpec.BPE
    proto.trainer_spec.byte_fallback = True
    proto.trainer_spec.vocab_size = vocab.n_tokens
    proto.trainer_spec.unk_id, proto.trainer_spec.bos_id, proto.trainer_spec.eos_id, proto.trainer_spec.pad_id = 0, 1, 2, -1
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = add_dummy_prefix
    proto.normalizer_spec.remove_extra_whitespaces = False
    kinds = pb.ModelProto.SentencePiece
    types = {1: kinds.NORMAL, 2: kinds.UNKNOWN, 3: kinds.CONTROL, 4: kinds.USER_DEFINED, 5: kinds.UNUSED, 6: kinds.BYTE}
    for i, text in enumerate(vocab.tokens):
        piece = proto.pieces.add()
        piece.piece, piece.score, piece.type = text.decode("utf-8"), vocab.scores[i], types[vocab.token_types[i]]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.model").write_bytes(proto.SerializeToString())
    return out / "tokenizer.model"


def spm_folder(out: str | pathlib.Path, tokenizer_class: str) -> pathlib.Path:
    """A folder transformers saves for ``tokenizer_class`` (LlamaTokenizer, GemmaTokenizer) converted
    from :func:`sentencepiece_model` of the llama-spm GGUF."""
    from transformers import AutoTokenizer

    out = pathlib.Path(out)
    source = out.parent / f"{out.name}-source"
    sentencepiece_model("llama.cpp-tests/ggml-vocab-llama-spm.gguf.gz", source)
    config = {"tokenizer_class": tokenizer_class, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (source / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(out))
    return out


def record(folder: pathlib.Path, name: str, texts: list[str]) -> None:
    """``tests/data/<name>.jsonl.gz``: each text with HF tokenizers' ids (add_special_tokens=False)."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(folder / "tokenizer.json"))
    with gzip.GzipFile(DATA / f"{name}.jsonl.gz", "wb", mtime=0) as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps({"text": text, "ids": hf.encode(text, add_special_tokens=False).ids}, ensure_ascii=False) + "\n")
    print(DATA / f"{name}.jsonl.gz", len(texts), "texts")


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        record(qwen2_folder(pathlib.Path(tmp) / "qwen2"), "qwen2-hf", NORMALIZATION_TEXTS)
        record(spm_folder(pathlib.Path(tmp) / "llama", "LlamaTokenizer"), "llama-spm-hf", SPM_TEXTS)
        record(spm_folder(pathlib.Path(tmp) / "gemma", "GemmaTokenizer"), "gemma-spm-hf", SPM_TEXTS)


if __name__ == "__main__":
    main()
