"""Exporting a bert (WordPiece) GGUF: llama.cpp's word split spelled out as Replace, Precompiled and
Split steps; transformers loads the folder and gives llama.cpp's recorded ids
(tests/data/bert-bge.jsonl.gz)."""

from __future__ import annotations

import json
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.gguf import GGUFValueType, read_gguf
from bpetok.gguf_writer import items_of, write_gguf

from bpetok_hf.writer import ExportError, export_hf

ROOT = pathlib.Path(__file__).resolve().parents[3]
BERT = ROOT / "tests" / "data" / "llama.cpp-tests" / "ggml-vocab-bert-bge.gguf.gz"


@pytest.fixture(scope="module")
def bert_gguf():
    return bpetok.from_file(BERT)


@pytest.fixture(scope="module")
def bert_folder(cli_export):
    return cli_export(BERT, "hf-bert")


@pytest.fixture(scope="module")
def bert_hf(bert_folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(bert_folder))


def test_transformers_gives_llama_cpp_ids(bert_hf, oracle_texts):
    cases = oracle_texts("bert-bge")
    assert len(cases) == 2900
    differ = [c["text"] for c in cases if bert_hf(c["text"], add_special_tokens=False)["input_ids"] != c["ids"]]
    assert not differ, f"{len(differ)} of {len(cases)} differ, e.g. {differ[0]!r:.200}"


def test_transformers_gives_llama_cpp_ids_on_the_corpus_sample(bert_gguf, bert_hf, corpus):
    differ = [t for t in corpus if bert_hf(t, add_special_tokens=False)["input_ids"] != bert_gguf.encode(t)]
    assert not differ, f"{len(differ)} of {len(corpus)} differ, e.g. {differ[0]!r:.200}"


# Letters llama.cpp changes (upper case, accented, fullwidth) next to what HF's grapheme clusters
# would join to them: combining marks, emoji modifiers, a ZWJ; no U+2581 (llama.cpp's word-initial
# match after it is HF's known difference, README).
_CLUSTER_TEXT = st.text(alphabet=st.sampled_from(
    list("AaEeKkZz ÀÉÅÑéñ.,!中각") + ["\uff21", "\uff4b", "\u0300", "\u0301", "\u0308", "\u0323", "\u20dd",
                                   "\U0001f3fb", "\U0001f3ff", "\U0001f44d", "\u200d", "\ufe0f", "\u1100", "\u1161"]),
    max_size=10)


@settings(max_examples=300, deadline=None)
@given(_CLUSTER_TEXT)
def test_marks_and_modifiers_after_changed_letters_as_llama_cpp(bert_gguf, bert_hf, text):
    # bpetok's GGUF route stands in for llama.cpp here: it gives llama.cpp's recorded ids on every
    # reference case (tests/test_model_wpm.py). Without the U+0001 ending HF's cluster after each
    # changed character, "A" + U+1F3FB is "a" in HF (the modifier goes) and [UNK] in llama.cpp.
    assert bert_hf(text, add_special_tokens=False)["input_ids"] == bert_gguf.encode(text), ascii(text)


def test_the_cluster_breaker_is_a_dropped_control(bert_gguf, bert_folder):
    from bpetok_hf.writer_wpm import _BREAKER_CP, _classes

    dropped = _classes(bert_gguf)[0]
    assert _BREAKER_CP in dropped  # gone from the text before the breakers go in
    steps = json.loads((bert_folder / "tokenizer.json").read_text(encoding="utf-8"))["normalizer"]["normalizers"]
    assert [s["type"] for s in steps] == ["Replace", "Replace", "Replace", "Precompiled"]
    assert steps[2]["content"] == "\x01"


def test_cls_and_sep_as_llama_cpp(bert_gguf, bert_hf, bert_folder):
    for text in ("Hello world", "  two  spaces ", "[CLS] inside [SEP] text", ""):
        assert bert_hf(text)["input_ids"] == bert_gguf.encode(text, add_special=True), text
    config = json.loads((bert_folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert (config["cls_token"], config["sep_token"], config["unk_token"], config["mask_token"]) == (
        "[CLS]", "[SEP]", "[UNK]", "[MASK]")
    assert bert_hf.cls_token_id == 101 and bert_hf.sep_token_id == 102


def test_the_export_loads_back_with_hf_ids(bert_hf, bert_folder, reference_texts):
    back = bpetok.from_file(bert_folder)
    assert back.vocabulary.model == "hf-wordpiece"
    texts = reference_texts("bert-bge")
    differ = [t for t in texts if back.encode(t) != bert_hf(t, add_special_tokens=False)["input_ids"]]
    assert not differ, f"{len(differ)} differ, e.g. {differ[0]!r:.200}"


def _with(tmp_path, changes: dict, tokens: dict | None = None) -> pathlib.Path:
    items = []
    for key, vtype, value, elem in items_of(read_gguf(BERT)):
        if key in changes:
            continue
        if key == "tokenizer.ggml.tokens" and tokens:
            value = [tokens.get(i, t) for i, t in enumerate(value)]
        items.append((key, vtype, value, elem))
    items += [(key, GGUFValueType.BOOL, value, None) for key, value in changes.items()]
    write_gguf(tmp_path / "bert.gguf", items)
    return tmp_path / "bert.gguf"


def test_a_cased_vocabulary_keeps_case_and_accents(bert_hf, tmp_path, oracle_texts):
    # tokenizer.ggml.normalizer.lowercase false: llama.cpp neither lowercases nor strips accents.
    from transformers import AutoTokenizer

    tok = bpetok.from_file(_with(tmp_path, {"tokenizer.ggml.normalizer.lowercase": False}))
    export_hf(tok, tmp_path / "out")
    hf = AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    texts = [c["text"] for c in oracle_texts("bert-bge")[::5]] + ["ÉCOLE École", "Hello World"]
    assert hf("ÉCOLE", add_special_tokens=False)["input_ids"] != bert_hf("ÉCOLE", add_special_tokens=False)["input_ids"]
    differ = [t for t in texts if hf(t, add_special_tokens=False)["input_ids"] != tok.encode(t)]
    assert not differ, f"{len(differ)} of {len(texts)} differ, e.g. {differ[0]!r:.200}"


def test_tokens_hf_cannot_spell_apart_are_refused(tmp_path):
    # "▁##jhl" (the word "##jhl") and "jhl" (the continuation "##jhl") are one text to HF.
    path = _with(tmp_path, {}, tokens={29000: "\u2581##jhl".encode()})
    with pytest.raises(ExportError, match="tokens 29000 and 29001 are both '##jhl'"):
        export_hf(bpetok.from_file(path), tmp_path / "out")
    assert not (tmp_path / "out").exists()
