"""Reading tokenizer.json: what is reproduced (Split behaviours, merge forms, added tokens, hub
spellings of llama.cpp's patterns) and what is refused, naming the part."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bpetok
from bpetok_hf.pretok import HFPreTokenizer, SplitPass


@pytest.fixture(scope="module")
def qwen3_json(exported):
    return json.loads((exported("qwen3") / "tokenizer.json").read_text(encoding="utf-8"))


def _write(tmp_path, data, name="tokenizer.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# -- Split semantics against HF tokenizers' own pre-tokenizer --------------------------------------

BEHAVIORS = {
    "Isolated": "isolated",
    "MergedWithPrevious": "merged_with_previous",
    "MergedWithNext": "merged_with_next",
    "Contiguous": "contiguous",
}
PATTERNS = [r"\p{N}", r"\s+", r"-|x", r"[a-z]+", r"(?=a)", r"a*", r"\b", r"'s|'t| ?\p{L}+"]


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="ab 1-,\n  xé٣'s", max_size=16),
    pattern=st.sampled_from(PATTERNS),
    behavior=st.sampled_from(sorted(BEHAVIORS)),
    invert=st.booleans(),
)
def test_split_pass_gives_hf_pieces(text, pattern, behavior, invert):
    from tokenizers import Regex, pre_tokenizers

    hf = pre_tokenizers.Split(Regex(pattern), BEHAVIORS[behavior], invert=invert)
    expected = [piece for piece, _ in hf.pre_tokenize_str(text)]
    assert HFPreTokenizer([SplitPass(pattern, behavior, invert)]).split(text) == expected


# -- what the loader reads -------------------------------------------------------------------------


def test_merges_as_strings_load_as_pairs(qwen3_json, tmp_path, exported):
    data = copy.deepcopy(qwen3_json)
    data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]
    strings = bpetok.from_file(_write(tmp_path, data))
    pairs = bpetok.from_file(exported("qwen3") / "tokenizer.json")
    assert strings.vocabulary.merges == pairs.vocabulary.merges
    assert strings.vocabulary.merges[0] == b"\xc4\xa0 \xc4\xa0"  # 'Ġ Ġ', Qwen's first merge


def test_added_tokens_get_the_converters_types(exported, gguf_tokenizer):
    # llama.cpp's converter: special -> CONTROL, otherwise USER_DEFINED; the GGUF says the same.
    tok = bpetok.from_file(exported("qwen3") / "tokenizer.json")
    gguf = gguf_tokenizer("qwen3")
    for token_id in (151643, 151644, 151645, 151665, 151667):  # <|endoftext|> ... <think>
        assert tok.token_type(token_id) == gguf.token_type(token_id), token_id
    assert tok.token_type(151667) == bpetok.TokenType.USER_DEFINED  # <think> is not special in Qwen3
    assert tok.token_type(151644) == bpetok.TokenType.CONTROL


def test_only_added_tokens_are_cut_out(exported, gguf_tokenizer, tmp_path):
    # llama.cpp makes Qwen's ordinary token '</s>' CONTROL by its text (an end-of-generation
    # guess); HF cuts out only the file's added tokens, so the exported file lists it as one.
    from tokenizers import Tokenizer

    gguf = gguf_tokenizer("qwen3")
    slash_s = gguf.id("</s>")
    assert gguf.token_type(slash_s) == bpetok.TokenType.NORMAL and gguf.encode("a</s>") == [64, slash_s]
    hf = Tokenizer.from_file(str(exported("qwen3") / "tokenizer.json"))
    assert hf.encode("a</s>", add_special_tokens=False).ids == [64, slash_s]
    # A hub file without that added token: HF BPEs '</s>', and so does bpetok-hf.
    data = json.loads((exported("qwen3") / "tokenizer.json").read_text(encoding="utf-8"))
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "</s>"]
    path = _write(tmp_path, data)
    hf2 = Tokenizer.from_file(str(path))
    tok = bpetok.from_file(path)
    assert tok.encode("a</s>") == hf2.encode("a</s>", add_special_tokens=False).ids != [64, slash_s]
    assert slash_s in tok.eog_ids  # llama.cpp's end-of-generation set is kept


@pytest.mark.parametrize(
    ("family", "pretokenizer"),
    [
        (
            "qwen2",
            {
                "type": "Split",
                "pattern": {
                    "Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
                },
                "behavior": "Isolated",
                "invert": False,
            },
        ),
        ("smollm", {"type": "Digits", "individual_digits": True}),
    ],
)
def test_hub_spellings_of_llama_cpp_patterns_give_hf_ids(family, pretokenizer, exported, tmp_path, oracle_texts, hf_ids):
    # Qwen's hub file writes (?i:...) where llama.cpp writes '[sS]; SmolLM2's is Digits + ByteLevel(use_regex).
    # The file's own passes run (never the family's splitter, on llama.cpp's Unicode tables).
    from tokenizers import Tokenizer

    name = "qwen3" if family == "qwen2" else "smollm2"
    data = json.loads((exported(name) / "tokenizer.json").read_text(encoding="utf-8"))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": family == "smollm"}
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [pretokenizer, byte_level]}
    path = _write(tmp_path, data)
    tok = bpetok.from_file(path)
    assert tok.spec.name == "hf-regex"
    hf = Tokenizer.from_file(str(path))
    texts = [c["text"] for c in oracle_texts(name)]
    wrong = [t for t in texts if tok.encode(t) != hf_ids(hf, t)]
    assert not wrong, f"{len(wrong)} differ, first {wrong[0]!r}"


def test_chat_template_and_special_roles_come_from_tokenizer_config(tmp_path, exported, qwen3_json):
    _write(tmp_path, qwen3_json)
    config = {"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"}, "chat_template": "{{ x }}"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tok = bpetok.from_file(tmp_path / "tokenizer.json")
    assert tok.special_ids["eos"] == 151645 and tok.special_ids["pad"] == 151643
    assert tok.vocabulary.metadata["tokenizer.chat_template"] == "{{ x }}"
    assert 151645 in tok.eog_ids


# -- refusals --------------------------------------------------------------------------------------


def _mutate(data, change):
    data = copy.deepcopy(data)
    change(data)
    return data


REFUSALS = {
    "normalizer": (lambda d: d.update(normalizer={"type": "BertNormalizer"}), "'BertNormalizer'"),
    "normalized_added_token": (
        lambda d: (d.update(normalizer={"type": "NFC"}), d["added_tokens"][0].update(normalized=True)),
        "normalized: true under normalizer NFC",
    ),
    "wordpiece": (lambda d: d["model"].update(type="WordPiece"), "pre_tokenizer is type 'Sequence'; bpetok-hf reads WordPiece"),
    "unigram": (lambda d: d.update(model={"type": "Unigram", "vocab": []}), "'Split + ByteLevel'; bpetok-hf reads Unigram"),
    "decoder": (lambda d: d.update(decoder={"type": "Metaspace"}), "decoder"),
    "removed": (lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(behavior="Removed"), "behavior"),
    "prefix_space": (
        lambda d: d["pre_tokenizer"]["pretokenizers"][1].update(add_prefix_space=True),
        "add_prefix_space",
    ),
    "whitespace": (lambda d: d["pre_tokenizer"]["pretokenizers"].insert(0, {"type": "Whitespace"}), "'Whitespace'"),
    "no_byte_level": (lambda d: d["pre_tokenizer"]["pretokenizers"].pop(), "ByteLevel"),
    "single_word": (lambda d: d["added_tokens"][0].update(single_word=True), "single_word"),
    "dropout": (lambda d: d["model"].update(dropout=0.1), "model.dropout"),
    "suffix": (lambda d: d["model"].update(end_of_word_suffix="</w>"), "end_of_word_suffix"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_unreproducible_parts_are_refused_by_name(case, qwen3_json, tmp_path):
    change, part = REFUSALS[case]
    path = _write(tmp_path, _mutate(qwen3_json, change))
    with pytest.raises(bpetok.VocabularyError) as info:
        bpetok.from_file(path)
    assert str(path) in str(info.value) and part in str(info.value)


def test_other_json_is_left_to_other_loaders(tmp_path):
    path = _write(tmp_path, {"hello": 1}, name="config.json")
    with pytest.raises(bpetok.BpetokError, match="no installed vocabulary loader"):
        bpetok.from_file(path)
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(bpetok.VocabularyError, match="cannot read it as JSON"):
        bpetok.from_file(broken)
