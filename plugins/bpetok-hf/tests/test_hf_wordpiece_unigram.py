"""WordPiece (BERT) and Unigram (XLM-R, T5) tokenizer.json files and model folders, as transformers'
own fast classes save them (scripts/make_wp_ugm_references.py), give HF tokenizers' ids."""

from __future__ import annotations

import functools
import json
import pathlib
import sys

import pytest

import bpetok
from bpetok import VocabularyError

DATA = pathlib.Path(__file__).parent / "data"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))

import make_wp_ugm_references as refs  # noqa: E402

FOLDERS = {
    "bert": lambda out: refs.bert_folder(out),
    "bert-cased": lambda out: refs.bert_folder(out, lowercase=False),
    "xlmr": refs.xlmr_folder,
    "t5": refs.t5_folder,
}
ORACLE = {"bert": "bert-bge", "bert-cased": "bert-bge", "xlmr": "nomic-bert-moe", "t5": "nomic-bert-moe"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return functools.cache(lambda name: FOLDERS[name](tmp_path_factory.mktemp(name)))


@pytest.fixture(scope="module")
def loaded(folder):
    """bpetok's tokenizer of a folder, loaded once."""
    return functools.cache(lambda name: bpetok.from_file(folder(name)))


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_a_saved_folder_gives_hf_tokenizers_ids(name, folder, loaded, reference_texts):
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(folder(name) / "tokenizer.json"))
    tok = loaded(name)
    texts = reference_texts(ORACLE[name])  # of the vocabulary the folder was made from
    assert len(texts) == 3500
    differ = [t for t in texts if tok.encode(t) != hf.encode(t, add_special_tokens=False).ids]
    assert not differ, f"{len(differ)} of {len(texts)} differ, e.g. {differ[0]!r:.200}"


@pytest.mark.parametrize("name", ["bert", "t5"])
def test_recorded_hf_ids(name, folder, read_jsonl):
    # HF's answers pinned by scripts/make_wp_ugm_references.py; the tokenizer.json read alone.
    tok = bpetok.from_file(folder(name) / "tokenizer.json")
    cases = read_jsonl(DATA / f"{name}-hf.jsonl.gz")
    assert [c["text"] for c in cases] == refs.TEXTS
    for case in cases:
        assert tok.encode(case["text"]) == case["ids"], case["text"]


@pytest.mark.parametrize("name, first, last", [("bert", 101, 102), ("bert-cased", 101, 102), ("xlmr", 0, 2), ("t5", None, 1)])
def test_add_special_is_the_post_processors_template(name, first, last, folder, loaded):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(folder(name)))
    tok = loaded(name)
    for text in ("Hello world", "  two  spaces ", ""):
        ids = tok.encode(text, add_special=True)
        assert ids == hf(text)["input_ids"], text
        assert ids[-1] == last and (first is None or ids[0] == first)


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_the_fast_path_equals_the_reference(name, loaded, corpus):
    # WordPiece's word cache, Unigram's C lattice: held to the plain per-word / Python Viterbi.
    model = loaded(name).model
    for text in corpus[:150] + refs.TEXTS:
        assert model.encode_fragment(text, True) == model.encode_fragment_reference(text, True), text


def test_unicode_16_text_follows_hf(folder, loaded):
    # Cyrillic U+1C89, Todhri, Garay, Tulu-Tigalari, Egyptian, Garay and Gurung Khema digits,
    # Balinese punctuation: HF's BERT classes, not llama.cpp's 15.1 table.
    from tokenizers import Tokenizer

    text = "x\u1c89y \U000105e0\U00010d5e.\U00011386\U00013460\U00010d40\U00016130\u1b4ez"
    for name in ("bert", "bert-cased"):
        hf = Tokenizer.from_file(str(folder(name) / "tokenizer.json"))
        assert loaded(name).encode(text) == hf.encode(text, add_special_tokens=False).ids


def _edited(folder, name, tmp_path, edit):
    data = json.loads((folder(name) / "tokenizer.json").read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "name, edit, message",
    [
        ("bert", lambda d: d.update(normalizer={"type": "StripAccents"}), "normalizer type 'StripAccents'"),
        ("bert", lambda d: d.update(pre_tokenizer={"type": "Digits"}), "pre_tokenizer is type 'Digits'"),
        ("bert", lambda d: d["model"].update(max_input_chars_per_word=-1), "max_input_chars_per_word is -1"),
        ("xlmr", lambda d: d["model"].update(byte_fallback=True), "model.byte_fallback is true"),
        ("xlmr", lambda d: d["pre_tokenizer"]["pretokenizers"][1].update(prepend_scheme="first"),
         "prepend_scheme is 'first'"),
        ("xlmr", lambda d: d["model"].update(unk_id=None), "model.unk_id is null"),
        ("xlmr", lambda d: d["model"]["vocab"].__setitem__(5, ["x", "high"]), r"model.vocab\[5\]"),
        ("t5", lambda d: d.update(pre_tokenizer={"type": "Punctuation"}), "pre_tokenizer is 'Punctuation'"),
        ("t5", lambda d: d.update(normalizer={"type": "Precompiled", "precompiled_charsmap": "@@"}), "not base64"),
    ],
)
def test_what_is_not_reproduced_is_refused_by_name(name, edit, message, folder, tmp_path):
    with pytest.raises(VocabularyError, match=message):
        bpetok.from_file(_edited(folder, name, tmp_path, edit))


@pytest.mark.parametrize("name, processor", [
    ("bert", {"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}),
    ("xlmr", {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": True,
              "add_prefix_space": True}),
])
def test_older_files_post_processors_add_the_same_ends(name, processor, folder, tmp_path):
    # Files saved by older transformers say BertProcessing / RobertaProcessing instead of a template.
    from tokenizers import Tokenizer

    path = _edited(folder, name, tmp_path, lambda d: d.update(post_processor=processor))
    hf, tok = Tokenizer.from_file(str(path)), bpetok.from_file(path)
    for text in ("Hello world", "x"):
        assert tok.encode(text, add_special=True) == hf.encode(text).ids


def test_another_normalizer_may_stand_in_for_bert_normalizer(folder, tmp_path, corpus):
    # WordPiece with NFKC + Lowercase (any normalizer bpetok-hf reads), as HF runs it.
    from tokenizers import Tokenizer

    steps = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    path = _edited(folder, "bert", tmp_path, lambda d: d.update(normalizer=steps))
    hf, tok = Tokenizer.from_file(str(path)), bpetok.from_file(path)
    texts = corpus[:100] + refs.TEXTS
    assert [tok.encode(t) for t in texts] == [hf.encode(t, add_special_tokens=False).ids for t in texts]
