"""Vocabularies made elsewhere: trained and extended by bpetok and exported for transformers; trained
by Hugging Face's own `tokenizers` BPE trainer and loaded by bpetok-hf. transformers runs offline."""

from __future__ import annotations

import gzip
import pathlib

import pytest

import bpetok
from bpetok_hf.writer import export_hf

PINS = ["QLoRA", "Unsloth", "bpetok"]
PINNED_TEXT = "Fine-tune with QLoRA or Unsloth, then ship bpetok.\nQLoRA(Unsloth)[bpetok]"  # each pin bare and after a space


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    # No hub access: from_pretrained reads the directory or fails.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _fast(directory):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(directory))


def _differ(texts, *encoders):
    return [t for t in texts if len({tuple(encode(t)) for encode in encoders}) > 1]


@pytest.fixture(scope="module")
def extended_qwen3(gguf_path, tmp_path_factory):
    """Qwen3 extended with pins (bpetok's extend: USER_DEFINED tokens), exported."""
    folder = tmp_path_factory.mktemp("qwen3-ext")
    result = bpetok.extend(gguf_path("qwen3"), pins=PINS, output=folder / "qwen3-ext.gguf")
    tok = bpetok.from_file(folder / "qwen3-ext.gguf")
    export_hf(tok, folder / "hf")
    return result, tok, folder / "hf"


def test_extended_qwen3_keeps_pins_single_tokens_in_transformers(extended_qwen3):
    result, tok, directory = extended_qwen3
    hf = _fast(directory)
    for form, token_id in result.added.items():
        assert hf(form, add_special_tokens=False)["input_ids"] == [token_id], form
        assert hf.convert_ids_to_tokens(token_id) == form
    ids = hf(PINNED_TEXT, add_special_tokens=False)["input_ids"]
    assert ids == tok.encode(PINNED_TEXT)
    assert set(result.added.values()) <= set(ids)
    assert hf.decode(ids) == PINNED_TEXT == tok.decode(ids)


def test_extended_qwen3_gives_bpetoks_ids_in_transformers(extended_qwen3, oracle_texts, corpus):
    _, tok, directory = extended_qwen3
    hf = _fast(directory)
    texts = [c["text"] for c in oracle_texts("qwen3")] + corpus
    wrong = _differ(texts, tok.encode, lambda t: hf(t, add_special_tokens=False)["input_ids"])
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, first {wrong[0]!r}"


@pytest.mark.parametrize("name", ["qwen3", "smollm2", "llama-bpe"])
def test_transformers_gives_bpetoks_ids_with_and_without_special(name, exported, gguf_tokenizer, corpus):
    tok = gguf_tokenizer(name)
    hf = _fast(exported(name))
    texts = corpus[::5] + ["Hello world", " x", ""]
    assert not _differ(texts, tok.encode, lambda t: hf(t, add_special_tokens=False)["input_ids"])
    # add_special: llama.cpp adds BOS for llama-bpe (add_bos_token), nothing for the other two.
    wrong = _differ(texts, lambda t: tok.encode(t, add_special=True), lambda t: hf(t)["input_ids"])
    assert not wrong, wrong[:1]
    assert (hf("x")["input_ids"][0] == 128000) is (name == "llama-bpe")


def test_bpetok_trained_vocabulary_exports_with_its_pins(corpus, tmp_path, oracle_texts):
    out = tmp_path / "trained.gguf"
    bpetok.train(texts=corpus, vocab_size=800, pre="qwen2", special_tokens=["<|endoftext|>"], pins=["QLoRA"], output=out)
    tok = bpetok.from_file(out)
    export_hf(tok, tmp_path / "hf")
    hf = _fast(tmp_path / "hf")
    texts = corpus + [c["text"] for c in oracle_texts("qwen3")][::4] + [PINNED_TEXT]
    wrong = _differ(texts, tok.encode, lambda t: hf(t, add_special_tokens=False)["input_ids"])
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, first {wrong[0]!r}"
    assert len(hf(" QLoRA", add_special_tokens=False)["input_ids"]) == 1


def test_chat_template_goes_to_tokenizer_config(gguf_path, tmp_path):
    from bpetok.vocab.gguf import GGUFValueType
    from bpetok.vocab.gguf_writer import write_gguf

    # Qwen3's template as llama.cpp's tests keep it (models/templates, MIT: data/LICENSE-llama.cpp).
    with gzip.open(pathlib.Path(__file__).parent / "data" / "Qwen-Qwen3-0.6B.jinja.gz", "rt") as f:
        template = f.read()
    # A Qwen3 GGUF with its chat template (bpetok's extend copies every key of the base).
    result = bpetok.extend(gguf_path("qwen3"), pins=["QLoRA"])
    write_gguf(tmp_path / "chat.gguf", [*result.items, ("tokenizer.chat_template", GGUFValueType.STRING, template, None)])
    tok = bpetok.from_file(tmp_path / "chat.gguf")
    export_hf(tok, tmp_path / "hf")
    hf = _fast(tmp_path / "hf")
    assert hf.chat_template == template
    messages = [{"role": "user", "content": "What is QLoRA?"}]
    rendered = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered.startswith("<|im_start|>user\nWhat is QLoRA?<|im_end|>\n<|im_start|>assistant\n")
    ids = hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert list(ids) == tok.encode(rendered)
    # And back: bpetok-hf reads the template from tokenizer_config.json, and bpetok renders it.
    back = bpetok.from_file(tmp_path / "hf" / "tokenizer.json")
    assert back.vocabulary.metadata["tokenizer.chat_template"] == template
    assert back.apply_chat_template(messages, add_generation_prompt=True) == rendered


# -- a tokenizer.json from Hugging Face's own trainer ----------------------------------------------

QWEN2_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


@pytest.mark.parametrize("split", ["byte_level_regex", "qwen2_split"])
def test_tokenizer_trained_by_hf_loads_with_hf_ids(split, corpus, oracle_texts, tmp_path):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    if split == "byte_level_regex":  # GPT-2 style: ByteLevel runs its own regex
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:  # Qwen style: a Split, then ByteLevel without regex
        hf.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(corpus, trainer)
    hf.add_tokens(["QLoRA"])  # an added token that is not special: USER_DEFINED
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))

    tok = bpetok.from_file(path)
    assert tok.vocabulary.pre == "hf-regex"  # the file's own passes, HF's Unicode classes
    assert tok.token_type(tok.id("QLoRA")) == bpetok.TokenType.USER_DEFINED
    assert tok.token_type(tok.id("<|im_end|>")) == bpetok.TokenType.CONTROL
    texts = corpus + [c["text"] for c in oracle_texts("qwen3")] + [PINNED_TEXT + "<|im_end|>"]
    wrong = _differ(texts, tok.encode, lambda t: hf.encode(t, add_special_tokens=False).ids)
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, first {wrong[0]!r}"
