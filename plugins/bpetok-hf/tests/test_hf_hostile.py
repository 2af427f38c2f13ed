"""Hostile tokenizer.json files: every wrong type, id out of range, duplicate, gzip bomb and deep
nesting is a VocabularyError naming the file and the key, fast and without a big allocation; a
Split regex that backtracks catastrophically is a RegexTimeoutError, and real patterns stay exact."""

from __future__ import annotations

import copy
import gzip
import json
import time
import tracemalloc

import pytest

import bpetok
from bpetok.errors import RegexTimeoutError
from bpetok_hf.pretok import GPT2_PATTERN, HFPreTokenizer, SplitPass


def _byte_level_alphabet() -> list[str]:
    """GPT-2's bytes -> printable characters, the texts of a byte-level vocabulary's 256 byte tokens."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def _base() -> dict:
    """A small, valid byte-level BPE tokenizer.json: 256 byte tokens, 3 merges, one added token."""
    vocab = {text: i for i, text in enumerate(_byte_level_alphabet())}
    for text in ("Ġt", "he", "Ġthe"):
        vocab[text] = len(vocab)
    return {
        "version": "1.0",
        "added_tokens": [{"id": 259, "content": "<|end|>", "special": True, "lstrip": False, "rstrip": False,
                          "single_word": False, "normalized": False}],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": r"\p{N}"}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [["Ġ", "t"], ["h", "e"], ["Ġt", "he"]]},
    }


def _write(tmp_path, data, name="tokenizer.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_the_base_file_loads_with_hf_tokenizers_ids(tmp_path):
    # The hostile files below are this one with one value broken: it must load, and as HF does.
    from tokenizers import Tokenizer

    path = _write(tmp_path, _base())
    text = "the 42 then<|end|> the"
    expected = Tokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids
    assert bpetok.from_file(path).encode(text) == expected
    assert 259 in expected and 258 in expected  # the added token and the merge 'Ġthe'


def _at(*keys, value):
    """A change setting data[k1][k2]... = value."""

    def change(data):
        node = data
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return change


def _drop(*keys):
    def change(data):
        node = data
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]

    return change


def _vocab_extra(text, token_id):
    return lambda d: d["model"]["vocab"].update({text: token_id})


def _added(**fields):
    token = {"id": 260, "content": "<|x|>", "special": True}
    token.update(fields)
    return lambda d: d["added_tokens"].append(token)


def _template(ids):
    return _at("post_processor", value={
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|end|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": ids, "tokens": ["<|end|>"]}},
    })


def _nested_processors(depth):
    node = {"type": "ByteLevel"}
    for _ in range(depth):
        node = {"type": "Sequence", "processors": [node]}
    return _at("post_processor", value=node)


PT = ("pre_tokenizer", "pretokenizers")
VOCAB_A = "model.vocab['a']"
# name -> (change to the base file, the key the error must name)
HOSTILE = {
    "id_string": (_at("model", "vocab", "a", value="97"), VOCAB_A),
    "id_float": (_at("model", "vocab", "a", value=97.0), VOCAB_A),
    "id_nan": (_at("model", "vocab", "a", value=float("nan")), VOCAB_A),
    "id_infinity": (_at("model", "vocab", "a", value=float("inf")), VOCAB_A),
    "id_null": (_at("model", "vocab", "a", value=None), VOCAB_A),
    "id_true": (_at("model", "vocab", "a", value=True), VOCAB_A),  # json's true is Python's 1
    "id_false": (_at("model", "vocab", "a", value=False), VOCAB_A),
    "id_minus_one": (_at("model", "vocab", "a", value=-1), VOCAB_A),
    "id_minus_1000": (_at("model", "vocab", "a", value=-1000), VOCAB_A),
    "id_10e12": (_at("model", "vocab", "a", value=10**12), VOCAB_A),
    "id_30m": (_at("model", "vocab", "a", value=30_000_000), VOCAB_A),
    "id_just_past_the_end": (_at("model", "vocab", "a", value=260), VOCAB_A),  # 259 entries + 1 added
    "id_list": (_at("model", "vocab", "a", value=[97]), VOCAB_A),
    "id_object": (_at("model", "vocab", "a", value={}), VOCAB_A),
    "two_texts_one_id": (_at("model", "vocab", "b", value=97), "model.vocab['b']"),
    "empty_token_text": (_vocab_extra("", 259), "model.vocab['']"),
    "model_null": (_at("model", value=None), "model"),
    "model_list": (_at("model", value=[]), "model"),
    "model_string": (_at("model", value="BPE"), "model"),
    "model_type_int": (_at("model", "type", value=5), "model.type"),
    "vocab_missing": (_drop("model", "vocab"), "model.vocab"),
    "vocab_list": (_at("model", "vocab", value=[["a", 0]]), "model.vocab"),
    "vocab_string": (_at("model", "vocab", value="a"), "model.vocab"),
    "vocab_null": (_at("model", "vocab", value=None), "model.vocab"),
    "merges_int": (_at("model", "merges", value=5), "model.merges"),
    "merges_null": (_at("model", "merges", value=None), "model.merges"),
    "merges_object": (_at("model", "merges", value={"a": "b"}), "model.merges"),
    "merges_string": (_at("model", "merges", value="h e"), "model.merges"),
    "merges_missing": (_drop("model", "merges"), "model.merges"),
    "merge_int": (_at("model", "merges", 0, value=7), "model.merges[0]"),
    "merge_null": (_at("model", "merges", 0, value=None), "model.merges[0]"),
    "merge_one_string": (_at("model", "merges", 0, value=["h"]), "model.merges[0]"),
    "merge_three_strings": (_at("model", "merges", 0, value=["h", "e", "x"]), "model.merges[0]"),
    "merge_ints": (_at("model", "merges", 0, value=[1, 2]), "model.merges[0]"),
    "merge_no_space": (_at("model", "merges", 0, value="he"), "model.merges[0]"),
    "merge_nested": (_at("model", "merges", 1, value=[[["h"]], "e"]), "model.merges[1]"),
    "merge_unknown_token": (lambda d: d["model"]["merges"].append(["zz", "qq"]), "merge 3 'zz qq'"),
    "unk_token_int": (_at("model", "unk_token", value=3), "model.unk_token"),
    "ignore_merges_string": (_at("model", "ignore_merges", value="yes"), "model.ignore_merges"),
    "dropout_string": (_at("model", "dropout", value="0.1"), "model.dropout"),
    "dropout_nan": (_at("model", "dropout", value=float("nan")), "model.dropout"),
    "byte_fallback_int": (_at("model", "byte_fallback", value=1), "model.byte_fallback"),
    "suffix_int": (_at("model", "end_of_word_suffix", value=1), "model.end_of_word_suffix"),
    "added_tokens_object": (_at("added_tokens", value={"id": 259}), "added_tokens"),
    "added_tokens_string": (_at("added_tokens", value="<|end|>"), "added_tokens"),
    "added_token_string": (_at("added_tokens", 0, value="<|end|>"), "added_tokens[0]"),
    "added_token_null": (_at("added_tokens", 0, value=None), "added_tokens[0]"),
    "added_id_string": (_at("added_tokens", 0, "id", value="259"), "added_tokens[0].id"),
    "added_id_true": (_at("added_tokens", 0, "id", value=True), "added_tokens[0].id"),
    "added_id_10e12": (_at("added_tokens", 0, "id", value=10**12), "added_tokens[0].id"),
    "added_id_missing": (_drop("added_tokens", 0, "id"), "added_tokens[0].id"),
    "added_content_int": (_at("added_tokens", 0, "content", value=5), "added_tokens[0].content"),
    "added_content_empty": (_at("added_tokens", 0, "content", value=""), "added_tokens[0].content"),
    "added_special_string": (_at("added_tokens", 0, "special", value="false"), "added_tokens[0].special"),
    "added_two_on_one_id": (_added(id=259), "added_tokens[1].id"),
    "normalizer_string": (_at("normalizer", value="NFC"), "normalizer"),
    "normalizer_list": (_at("normalizer", value=[]), "normalizer"),
    "normalizers_int": (_at("normalizer", value={"type": "Sequence", "normalizers": 3}), "normalizer.normalizers"),
    "decoder_string": (_at("decoder", value="ByteLevel"), "decoder"),
    "decoder_int": (_at("decoder", value=1), "decoder"),
    "decoders_int": (_at("decoder", value={"type": "Sequence", "decoders": 1}), "decoder.decoders"),
    "pre_tokenizer_string": (_at("pre_tokenizer", value="ByteLevel"), "pre_tokenizer"),
    "pretokenizers_int": (_at(*PT, value=3), "pre_tokenizer.pretokenizers"),
    "pretokenizer_string": (_at(*PT, 0, value="Split"), "pre_tokenizer.pretokenizers[0]"),
    "pattern_string": (_at(*PT, 0, "pattern", value=r"\p{N}"), "pre_tokenizer.pretokenizers[0].pattern"),
    "pattern_regex_int": (_at(*PT, 0, "pattern", value={"Regex": 5}), "pre_tokenizer.pretokenizers[0].pattern.Regex"),
    "pattern_huge": (_at(*PT, 0, "pattern", value={"Regex": "a" * 20_000}), "pattern.Regex"),
    # 19 characters the regex package would unroll into all the memory there is when compiling.
    "pattern_nested_repeats": (_at(*PT, 0, "pattern", value={"Regex": "(?:x{65535}){65535}"}), "pattern.Regex"),
    "pattern_does_not_compile": (_at(*PT, 0, "pattern", value={"Regex": "(a"}), "pre_tokenizer.pretokenizers[0].pattern"),
    "behavior_list": (_at(*PT, 0, "behavior", value=["Isolated"]), "pre_tokenizer.pretokenizers[0].behavior"),
    "invert_string": (_at(*PT, 0, "invert", value="no"), "pre_tokenizer.pretokenizers[0].invert"),
    "use_regex_string": (_at(*PT, 1, "use_regex", value="false"), "pre_tokenizer.pretokenizers[1].use_regex"),
    "post_processor_list": (_at("post_processor", value=[]), "post_processor"),
    "processors_int": (_at("post_processor", value={"type": "Sequence", "processors": 1}), "post_processor.processors"),
    "processors_deep": (_nested_processors(300), "post_processor.processors[0].processors[0]"),
    "template_id_10e12": (_template([10**12]), "post_processor.special_tokens['<|end|>'].ids[0]"),
    "template_id_string": (_template(["259"]), "post_processor.special_tokens['<|end|>'].ids[0]"),
    "template_ids_null": (_template(None), "post_processor.special_tokens['<|end|>'].ids"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_values_are_refused_naming_the_key(case, tmp_path):
    change, key = HOSTILE[case]
    data = copy.deepcopy(_base())
    change(data)
    path = _write(tmp_path, data)
    start = time.monotonic()
    with pytest.raises(bpetok.VocabularyError) as info:
        bpetok.from_file(path)
    assert time.monotonic() - start < 5  # generous: these are refused in milliseconds
    message = str(info.value)
    assert str(path) in message and key in message, message


def test_a_huge_id_fails_fast_without_allocating(tmp_path):
    # 140 bytes that once made the reader allocate 30,000,000 tokens (7 GB before it was killed).
    path = tmp_path / "tokenizer.json"
    path.write_text(
        '{"model": {"type": "BPE", "vocab": {"a": 30000000}, "merges": []}, "decoder": {"type": "ByteLevel"},'
        ' "pre_tokenizer": {"type": "ByteLevel"}}',
        encoding="utf-8",
    )
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(bpetok.VocabularyError, match=r"model\.vocab\['a'\] is 30000000, outside the file's ids 0..0"):
            bpetok.from_file(path)
        elapsed = time.monotonic() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 5 and peak < 20 << 20, (elapsed, peak)


def test_deep_nesting_is_refused(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text('{"model": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    with pytest.raises(bpetok.VocabularyError, match="nested too deeply"):
        bpetok.from_file(path)
    deep_config = tmp_path / "tokenizer_config.json"
    _write(tmp_path, _base())
    deep_config.write_text('{"bos_token": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    with pytest.raises(bpetok.VocabularyError, match="tokenizer_config.json: JSON nested too deeply"):
        bpetok.from_file(tmp_path / "tokenizer.json")


def test_gzip_bomb_stops_at_the_gguf_inflate_limit(tmp_path, monkeypatch):
    # The same bound and the same inflate as a .gguf.gz (bpetok.vocab.gguf.MAX_GUNZIPPED, 1 GiB), made
    # 1 MiB here so the test inflates little: 64 MiB of spaces, 64 KB on disk.
    import bpetok.vocab.gguf

    monkeypatch.setattr(bpetok.vocab.gguf, "MAX_GUNZIPPED", 1 << 20)
    member = gzip.compress(b" " * (8 << 20))
    path = tmp_path / "tokenizer.json.gz"
    path.write_bytes(member * 8)  # gzip members concatenated inflate to one stream
    tracemalloc.start()
    try:
        with pytest.raises(bpetok.VocabularyError, match="decompresses to more than 1048576 bytes"):
            bpetok.from_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(bpetok.VocabularyError) or peak < 16 << 20, peak
    plain = tmp_path / "tokenizer.json"
    plain.write_bytes(b" " * (2 << 20))
    with pytest.raises(bpetok.VocabularyError, match="more than 1048576"):
        bpetok.from_file(plain)


def test_a_file_of_millions_of_tiny_values_is_refused_before_parsing(tmp_path):
    # 20M empty lists would be 1.3 GB of Python objects from 60 MB of text (60 kB as gzip).
    path = tmp_path / "tokenizer.json.gz"
    path.write_bytes(gzip.compress(b'{"model": [' + b"[]," * 20_000_000 + b"[]]}"))
    tracemalloc.start()
    try:
        with pytest.raises(bpetok.VocabularyError, match="JSON values") as info:
            bpetok.from_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(info.value) and peak < 300 << 20, peak


def test_a_valid_gz_file_loads(tmp_path):
    from tokenizers import Tokenizer

    plain = _write(tmp_path, _base())
    path = tmp_path / "tokenizer.json.gz"
    path.write_bytes(gzip.compress(plain.read_bytes()))
    expected = Tokenizer.from_file(str(plain)).encode("the then", add_special_tokens=False).ids
    assert bpetok.from_file(path).encode("the then") == expected


# -- regex time limit ------------------------------------------------------------------------------

BACKTRACKING = r"(a|aa)+$"


def test_a_backtracking_split_regex_raises_the_typed_error_quickly():
    pretokenizer = HFPreTokenizer([SplitPass(BACKTRACKING)], timeout=0.2)
    start = time.monotonic()
    with pytest.raises(RegexTimeoutError) as info:
        pretokenizer.split("a" * 40 + "b")  # about a minute without a limit
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert BACKTRACKING in message and "41-character text" in message and "BPETOK_REGEX_TIMEOUT" in message
    assert isinstance(info.value, bpetok.BpetokError)


def test_the_limit_is_per_text_not_per_piece():
    # 300 pieces that each backtrack for a few milliseconds: together past the limit.
    pretokenizer = HFPreTokenizer([SplitPass(" "), SplitPass(BACKTRACKING)], timeout=0.3)
    start = time.monotonic()
    with pytest.raises(RegexTimeoutError, match="splitting a 6600-character text"):
        pretokenizer.split(" ".join(["a" * 20 + "b"] * 300) + " ")
    assert time.monotonic() - start < 10


def test_the_default_limit_stops_a_backtracking_file(tmp_path, monkeypatch):
    monkeypatch.delenv("BPETOK_REGEX_TIMEOUT", raising=False)
    data = _base()
    data["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": BACKTRACKING}
    tok = bpetok.from_file(_write(tmp_path, data))
    assert tok.encode("aab") == tok.encode("aa") + tok.encode("b")  # short texts are unaffected
    start = time.monotonic()
    with pytest.raises(RegexTimeoutError, match="per text"):
        tok.encode("a" * 45 + "b")
    assert time.monotonic() - start < 30  # the 2 s default, generously


def test_the_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("BPETOK_REGEX_TIMEOUT", "0.1")
    assert HFPreTokenizer([SplitPass(GPT2_PATTERN)]).timeout == 0.1
    monkeypatch.setenv("BPETOK_REGEX_TIMEOUT", "0")
    assert HFPreTokenizer([SplitPass(GPT2_PATTERN)]).timeout is None
    monkeypatch.setenv("BPETOK_REGEX_TIMEOUT", "soon")
    with pytest.raises(bpetok.BpetokError, match="BPETOK_REGEX_TIMEOUT='soon'"):
        HFPreTokenizer([SplitPass(GPT2_PATTERN)])


def test_the_limit_leaves_pieces_unchanged(corpus):
    limited = HFPreTokenizer([SplitPass(r"\p{N}"), SplitPass(GPT2_PATTERN)])
    unlimited = HFPreTokenizer([SplitPass(r"\p{N}"), SplitPass(GPT2_PATTERN)], timeout=0)
    assert limited.timeout and unlimited.timeout is None
    for text in corpus:
        assert limited.split(text) == unlimited.split(text)
