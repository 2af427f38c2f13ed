"""Build a Mistral Tekken-shaped and a Gemma-shaped Hugging Face model folder offline with HF's own
classes, store them gzipped in the plugin's tests/data, and record HF tokenizers' ids for them.

    python plugins/bpetok-hf/scripts/make_tekken_gemma_references.py   # rewrite tests/data/{tekken,gemma}-*

- tekken: a byte-level BPE of 4,000 ranks trained by HF ``tokenizers``' ``BpeTrainer`` on the
  plugin's corpus sample under Tekken's pre-tokenizer, written as a Mistral ``tekken.json`` (its
  ``config.pattern``, the 20 named control tokens of Tekken v7 then ``<SPECIAL_20>`` ...
  ``<SPECIAL_999>``, the byte ranks after them) and converted by transformers' own
  ``MistralConverter`` (integrations/mistral): ``Split(pattern, Isolated)`` +
  ``ByteLevel(use_regex=False)``, BPE with ``ignore_merges: true``, the 1,000 control tokens as
  special added tokens. The hub's Tekken files (Mistral Nemo, Pixtral, Ministral) add ``<s>`` with
  a ``TemplateProcessing`` post-processor; so does this one. Saved by ``PreTrainedTokenizerFast``
  with ``<s>``/``</s>``/``<unk>``/``<pad>`` and a Mistral ``[INST]`` chat template.
- gemma: a SentencePiece BPE of 4,000 pieces trained by the sentencepiece package on the same
  sample with Gemma's settings (ids ``<pad> <eos> <bos> <unk>`` 0-3, no dummy prefix, no
  whitespace folding, identity normalization, byte fallback, split digits, whitespace-only pieces,
  ``<start_of_turn>``/``<end_of_turn>`` control tokens, runs of 2-31 newlines, spaces and tabs as
  user-defined pieces), converted by transformers' ``GemmaTokenizer`` (``<bos>`` added) and saved
  with Gemma's chat template.

Each folder is stored as ``tests/data/<name>-folder.json.gz`` (file name -> text), from which
:func:`unpack` writes it back for the tests; ``tests/data/<name>-hf.jsonl.gz`` holds HF's ids of
:data:`TEXTS` with and without the special tokens (``ids``, ``ids_special``).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from make_hf_references import DATA, NORMALIZATION_TEXTS, SPM_TEXTS  # noqa: E402

# config.pattern of Mistral's tekken.json (Mistral Nemo's, llama.cpp's "tekken" pre-tokenizer).
TEKKEN_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TEKKEN_CONTROL = [
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
    "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
]
TEKKEN_N_SPECIAL = 1000
TEKKEN_RANKS = 4000
TEKKEN_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
    "[SYSTEM_PROMPT]{{ message['content'] }}[/SYSTEM_PROMPT]{% elif message['role'] == 'user' %}"
    "[INST]{{ message['content'] }}[/INST]{% else %}{{ message['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)

GEMMA_PIECES = 4000
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
    "else message['role'] %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

# Texts about Tekken's split (case runs, one digit per piece, "/" after punctuation), its control
# tokens, and Gemma's whitespace runs and turn markers.
EXTRA_TEXTS = [
    "HTTPServer XMLHttpRequest camelCaseWord ÀÉÎõü ǅungla",
    "12345 + 3.14159 = ٣٤٥ 二十 ⅷ", "a/b // c/ d!/ e?/\n/", "[INST]Hello[/INST]Hi</s>",
    "<s>[INST] x [/INST] <SPECIAL_20><SPECIAL_999> [TOOL_CALLS][{\"a\": 1}]",
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "<bos>x<eos> <pad> <unk>",
    "a\n\n\nb   c\t\t\td" + " " * 40 + "e" + "\n" * 35 + "f", "\r\n\r\n x \u00a0 \u3000 y",
]
TEXTS = SPM_TEXTS + NORMALIZATION_TEXTS + EXTRA_TEXTS


def _corpus() -> list[str]:
    with gzip.open(DATA / "corpus-sample.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def _byte_decoder() -> dict[str, int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {c: b for b, c in bytes_to_unicode().items()}


def tekken_ranks() -> list[bytes]:
    """Byte-level BPE ranks as tiktoken keeps them: the 256 bytes, then each merge's token in order."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(TEKKEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=TEKKEN_RANKS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer=trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    decode = _byte_decoder()
    ranks = [bytes([b]) for b in range(256)]
    seen = set(ranks)
    for left, right in merges:
        token = bytes(decode[c] for c in left + right)
        if token not in seen:
            seen.add(token)
            ranks.append(token)
    return ranks


def tekken_json(ranks: list[bytes]) -> dict:
    """A Mistral ``tekken.json`` (v7 layout) of byte ranks."""
    return {
        "config": {"pattern": TEKKEN_PATTERN, "num_vocab_tokens": len(ranks) + TEKKEN_N_SPECIAL,
                   "default_vocab_size": len(ranks) + TEKKEN_N_SPECIAL,
                   "default_num_special_tokens": TEKKEN_N_SPECIAL, "version": "v7"},
        "vocab": [{"rank": i, "token_bytes": base64.b64encode(t).decode("ascii"),
                   "token_str": t.decode("utf-8", errors="replace")} for i, t in enumerate(ranks)],
        "special_tokens": [{"rank": i, "token_str": s, "is_control": True} for i, s in enumerate(TEKKEN_CONTROL)],
    }


def tekken_folder(out: str | pathlib.Path) -> pathlib.Path:
    """The Tekken-shaped folder, built from the training run (see the module's docstring)."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.mistral.tokenizer import MistralConverter

    out = pathlib.Path(out)
    source = out.parent / f"{out.name}-source"
    source.mkdir(parents=True, exist_ok=True)
    (source / "tekken.json").write_text(json.dumps(tekken_json(tekken_ranks())), encoding="utf-8")
    backend = MistralConverter(vocab_file=str(source / "tekken.json")).converted()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="<pad>", chat_template=TEKKEN_CHAT_TEMPLATE)
    if tok.convert_tokens_to_ids("<SPECIAL_999>") != 999 or tok.convert_tokens_to_ids("[INST]") != 3:
        raise SystemExit("the control tokens did not keep Tekken's ids")
    tok.save_pretrained(str(out))
    return out


def gemma_model(out: pathlib.Path) -> pathlib.Path:
    """``out/tokenizer.model``: a SentencePiece BPE trained with Gemma's settings."""
    import sentencepiece as spm

    runs = ["\n" * k for k in range(2, 32)] + ["\u2581" * k for k in range(2, 32)] + ["\t" * k for k in range(1, 32)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_corpus()), model_writer=model, model_type="bpe", vocab_size=GEMMA_PIECES,
        byte_fallback=True, add_dummy_prefix=False, remove_extra_whitespaces=False, normalization_rule_name="identity",
        split_digits=True, allow_whitespace_only_pieces=True, character_coverage=0.9995, num_threads=1,
        max_sentence_length=1 << 20, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
        control_symbols=["<mask>", "[@BOS@]", "<start_of_turn>", "<end_of_turn>"], user_defined_symbols=runs,
        minloglevel=2,
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.model").write_bytes(model.getvalue())
    return out / "tokenizer.model"


def gemma_folder(out: str | pathlib.Path) -> pathlib.Path:
    """The Gemma-shaped folder transformers' ``GemmaTokenizer`` saves from :func:`gemma_model`."""
    from transformers import AutoTokenizer

    out = pathlib.Path(out)
    source = out.parent / f"{out.name}-source"
    gemma_model(source)
    config = {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>",
              "pad_token": "<pad>", "add_bos_token": True, "add_eos_token": False,
              "chat_template": GEMMA_CHAT_TEMPLATE}
    (source / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(str(source))
    if tok.convert_tokens_to_ids("<bos>") != 2:
        raise SystemExit("<bos> is not id 2")
    tok.save_pretrained(str(out))
    return out


FOLDERS = {"tekken": tekken_folder, "gemma": gemma_folder}


def pack(folder: pathlib.Path, name: str) -> pathlib.Path:
    """``tests/data/<name>-folder.json.gz``: the folder's files, name -> text."""
    files = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.iterdir()) if p.is_file()}
    # transformers keeps the temporary tokenizer.model's path: dropped, so that a rerun writes the same bytes.
    config = json.loads(files["tokenizer_config.json"])
    if config.pop("vocab_file", None) is not None:
        files["tokenizer_config.json"] = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    path = DATA / f"{name}-folder.json.gz"
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(json.dumps(files, ensure_ascii=False, sort_keys=True).encode("utf-8"))
    return path


def unpack(name: str, out: str | pathlib.Path) -> pathlib.Path:
    """Write the stored folder ``name`` into ``out`` and return it."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(DATA / f"{name}-folder.json.gz", "rt", encoding="utf-8") as f:
        for file_name, text in json.load(f).items():
            (out / file_name).write_text(text, encoding="utf-8")
    return out


def record(folder: pathlib.Path, name: str) -> None:
    """``tests/data/<name>-hf.jsonl.gz``: HF tokenizers' ids of each of :data:`TEXTS`, without and with
    the post-processor's special tokens."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(folder / "tokenizer.json"))
    with gzip.GzipFile(DATA / f"{name}-hf.jsonl.gz", "wb", mtime=0) as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
        for text in TEXTS:
            case = {"text": text, "ids": hf.encode(text, add_special_tokens=False).ids,
                    "ids_special": hf.encode(text).ids}
            f.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(DATA / f"{name}-hf.jsonl.gz", len(TEXTS), "texts")


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for name, build in FOLDERS.items():
            folder = build(pathlib.Path(tmp) / name)
            print(pack(folder, name), sorted(p.name for p in folder.iterdir()))
            record(folder, name)


if __name__ == "__main__":
    main()
