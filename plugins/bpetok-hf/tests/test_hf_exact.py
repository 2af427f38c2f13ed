"""Exported tokenizer.json files give bpetok's ids in Hugging Face tokenizers, and bpetok-hf loads
them back with HF's ids: on llama.cpp's reference texts and on corpus paragraphs."""

from __future__ import annotations

import json

import pytest

import bpetok

NAMES = ["qwen3", "smollm2", "llama-bpe"]
# The pre name a loaded export runs: its own passes (llama-bpe's BPE model has ignore_merges).
PRE = {"qwen3": "hf-regex", "smollm2": "hf-regex", "llama-bpe": "hf-regex-ignore-merges"}
# Codepoints of Unicode 16.0 that HF's Oniguruma classes and llama.cpp's 15.1 table do not:
# letters (Cyrillic U+1C89, Todhri U+105E0, Garay U+10D5E, Tulu-Tigalari U+11386, Egyptian
# U+13460), digits (Garay U+10D40, Gurung Khema U+16130), punctuation (Balinese U+1B4E).
NEW_CODEPOINTS = "\u1c89\U000105e0\U00010d5e\U00011386\U00013460\U00010d40\U00016130\u1b4e"


def _differ(texts, *encoders):
    """The texts on which the encoders' ids are not all equal, with each encoder's ids."""
    wrong = []
    for text in texts:
        ids = [encode(text) for encode in encoders]
        if any(x != ids[0] for x in ids[1:]):
            wrong.append((text, ids))
    return wrong


@pytest.mark.parametrize("name", NAMES)
def test_exported_tokenizer_json_gives_llama_cpp_ids_in_hf(name, hf_tokenizer, oracle_texts, hf_ids):
    # HF tokenizers on the exported file against llama.cpp's own recorded ids (parse_special=True).
    hf = hf_tokenizer(name)
    cases = oracle_texts(name)
    assert len(cases) == 2900
    wrong = [(c["text"], c["ids"]) for c in cases if hf_ids(hf, c["text"]) != c["ids"]]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ, first: {wrong[0]!r}"


@pytest.mark.parametrize("name", NAMES)
def test_loaded_tokenizer_json_gives_hf_ids_on_oracle_texts(name, exported, hf_tokenizer, oracle_texts, hf_ids):
    tok = bpetok.from_file(exported(name) / "tokenizer.json")
    assert tok.vocabulary.pre == PRE[name]  # the file's own passes, even where a family has the pattern
    hf = hf_tokenizer(name)
    wrong = _differ([c["text"] for c in oracle_texts(name)], tok.encode, lambda t: hf_ids(hf, t))
    assert not wrong, f"{len(wrong)} differ, first: {wrong[0]!r}"


@pytest.mark.parametrize("name", NAMES)
def test_corpus_paragraphs_agree_three_ways(name, gguf_tokenizer, exported, hf_tokenizer, corpus, hf_ids):
    # The GGUF in bpetok (llama.cpp's ids), the export in HF, the export loaded back in bpetok.
    assert len(corpus) == 600
    back = bpetok.from_file(exported(name) / "tokenizer.json")
    hf = hf_tokenizer(name)
    wrong = _differ(corpus, gguf_tokenizer(name).encode, lambda t: hf_ids(hf, t), back.encode)
    assert not wrong, f"{len(wrong)} of {len(corpus)} paragraphs differ, first: {wrong[0]!r}"


def _own_pattern_copy(exported_dir, tmp_path):
    """The exported file with each Split regex wrapped in (?:...): same pieces, but no registered
    family has that text, so bpetok-hf runs the file's own passes (hf-regex)."""
    data = json.loads((exported_dir / "tokenizer.json").read_text(encoding="utf-8"))
    for item in data["pre_tokenizer"]["pretokenizers"]:
        if item["type"] == "Split":
            item["pattern"]["Regex"] = "(?:" + item["pattern"]["Regex"] + ")"
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", NAMES)
def test_file_own_regex_gives_hf_ids(name, exported, oracle_texts, corpus, tmp_path, hf_ids):
    from tokenizers import Tokenizer

    path = _own_pattern_copy(exported(name), tmp_path)
    tok = bpetok.from_file(path)
    expected_pre = "hf-regex-ignore-merges" if name == "llama-bpe" else "hf-regex"
    assert (tok.vocabulary.pre, tok.spec.name) == (expected_pre, "hf-regex")
    hf = Tokenizer.from_file(str(path))
    texts = [c["text"] for c in oracle_texts(name)] + corpus
    wrong = _differ(texts, tok.encode, lambda t: hf_ids(hf, t))
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, first: {wrong[0]!r}"


def test_ignore_merges_is_needed_for_llama_bpe(exported, hf_tokenizer, oracle_texts, tmp_path, hf_ids):
    # The BPE model's ignore_merges is read from the file: without it, ' Việt'-like words differ.
    data = json.loads((exported("llama-bpe") / "tokenizer.json").read_text(encoding="utf-8"))
    assert data["model"]["ignore_merges"] is True
    data["model"]["ignore_merges"] = False
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    tok = bpetok.from_file(path)
    assert tok.vocabulary.pre == "hf-regex" and not tok.spec.ignore_merges  # llama3 has ignore_merges
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(path))
    texts = [c["text"] for c in oracle_texts("llama-bpe")]
    assert not _differ(texts, tok.encode, lambda t: hf_ids(hf, t))
    with_merges = hf_tokenizer("llama-bpe")
    assert _differ(texts, tok.encode, lambda t: hf_ids(with_merges, t))  # the flag changes ids


def _new_codepoint_texts() -> list[str]:
    texts = []
    for i, c in enumerate(NEW_CODEPOINTS):
        texts += [f"ab{c}cd", f"{c}{c} x{c}", f" 12{c}3 {c}4", f"it's{c}'s", f"{c}\n\n {c}!", f"\u00e9{c}{NEW_CODEPOINTS[i - 1]}z"]
    return texts + [NEW_CODEPOINTS, " ".join(NEW_CODEPOINTS)]


@pytest.mark.parametrize("name", NAMES)
def test_unicode_16_codepoints_split_as_hf_does(name, exported, gguf_tokenizer, hf_tokenizer, hf_ids):
    # The GGUF route keeps llama.cpp's split; a loaded tokenizer.json gives HF's ids.
    hf, tok = hf_tokenizer(name), bpetok.from_file(exported(name) / "tokenizer.json")
    texts = _new_codepoint_texts()
    assert not _differ(texts, tok.encode, lambda t: hf_ids(hf, t))
    assert _differ(texts, gguf_tokenizer(name).encode, lambda t: hf_ids(hf, t))  # the tables do disagree here
