"""Tokenizer models beyond gpt2: SentencePiece-style BPE (``llama``) and ``gemma4``, through the models hook.

Expected ids and texts are llama.cpp b11434's (llama-cpp-python 0.3.36: ``Llama.tokenize(text,
add_bos=False, special=True)`` and ``llama_detokenize(ids, remove_special=False,
unparse_special=True)``); the full reference sets are in test_exact.py.
"""

from __future__ import annotations

import json

import pytest

import bpetok
from bpetok.errors import InputError
from bpetok.vocab.gguf import GGUFValueType, read_gguf
from bpetok.vocab.gguf_writer import items_of, write_gguf
from helpers import GEMMA4, LLAMA_SPM, PHI3


@pytest.fixture(scope="module")
def llama_spm() -> bpetok.Tokenizer:
    return bpetok.from_gguf(LLAMA_SPM)


@pytest.fixture(scope="module")
def phi3() -> bpetok.Tokenizer:
    return bpetok.from_gguf(PHI3)


@pytest.fixture(scope="module")
def spm_without_prefix(tmp_path_factory) -> bpetok.Tokenizer:
    """llama-spm with ``tokenizer.ggml.add_space_prefix = false`` written into the file."""
    path = tmp_path_factory.mktemp("spm") / "no-prefix.gguf"
    items = items_of(read_gguf(LLAMA_SPM)) + [("tokenizer.ggml.add_space_prefix", GGUFValueType.BOOL, False, None)]
    write_gguf(path, items)
    return bpetok.from_gguf(path)


SPACE_PREFIX_CASES = [
    # text, llama.cpp's ids with the default add_space_prefix (true), with add_space_prefix false
    ("Hello world", [15043, 3186], [10994, 3186]),
    (" Hello", [29871, 15043], [15043]),
    ("a</s>b c", [263, 2, 289, 274], [29874, 2, 29890, 274]),  # the prefix again after a special
    ("</s> x", [2, 29871, 921], [2, 921]),
    ("\n\n x</s>", [29871, 13, 13, 921, 2], [13, 13, 921, 2]),
    ("héllo ▁ 日本", [298, 3610, 417, 1678, 30325, 30346], [29882, 3610, 417, 1678, 30325, 30346]),
]


@pytest.mark.parametrize("text, with_prefix, without_prefix", SPACE_PREFIX_CASES)
def test_space_prefix_where_llama_cpp_adds_it(llama_spm, spm_without_prefix, text, with_prefix, without_prefix):
    assert llama_spm.encode(text) == with_prefix
    assert spm_without_prefix.encode(text) == without_prefix


def test_the_model_arrives_through_the_hook(llama_spm):
    assert llama_spm.model_spec.name == "llama" and llama_spm.model_spec.plugin == "bpetok.models.llama"
    assert llama_spm.spec is None  # no pre-tokenizer: whole fragments go to the model
    assert llama_spm.add_bos and not llama_spm.add_eos and llama_spm.add_space_prefix
    assert llama_spm.special_ids["bos"] == 1 and llama_spm.special_ids["unk"] == 0


def test_bos_by_default_and_no_eos(llama_spm):
    assert llama_spm.encode("Hello world", add_special=True) == [1, 15043, 3186]
    assert llama_spm.encode("", add_special=True) == [1]


def test_byte_fallback_and_rstrip_on_phi3(phi3):
    # No token for the emoji: its four UTF-8 bytes as <0xF0> <0x9F> <0x98> <0x80>.
    assert phi3.encode("😀") == [29871, 243, 162, 155, 131]
    # Phi-3's specials are RSTRIP (llama.cpp's rule by name): the spaces after <|end|> go.
    assert phi3.encode("x <|end|>  y") == [921, 29871, 32007, 343]
    assert phi3.encode("<|user|>\nHi<|end|>\n<|assistant|>") == [32010, 6324, 32007, 32001]
    assert phi3.eog_ids == {2, 32000, 32007}


@pytest.mark.parametrize(
    "ids, text",
    [
        ([1, 15043, 3186], b"<s> Hello world"),  # BOS first: the next piece keeps its space
        ([15043, 3186], b"Hello world"),  # the first piece's leading space is the prefix: dropped
        ([29871, 15043], b" Hello"),
        ([29871, 243, 162, 155, 131, 3431], "😀 ok".encode()),  # byte tokens joined into UTF-8
        ([2, 15043], b"</s> Hello"),
        ([243, 162], b"\xf0\x9f"),
    ],
)
def test_decode_follows_llama_cpp_s_detokenizer(phi3, ids, text):
    assert phi3.decode_bytes(ids) == text


def test_pieces_unescape_spaces(llama_spm):
    assert llama_spm.piece(15043) == b" Hello" and llama_spm.piece(29871) == b" "
    assert llama_spm.piece(13) == b"\n" and llama_spm.piece(1) == b"<s>" and llama_spm.token_bytes(1) == b""
    assert llama_spm.id("▁Hello") == 15043


def test_count_and_batch_agree_with_encode(llama_spm):
    texts = ["Hello world", " two  spaces", "a</s>b", "", "日本語のテキスト\n\nnext"]
    assert llama_spm.encode_batch(texts) == [llama_spm.encode(t) for t in texts]
    assert [llama_spm.count(t) for t in texts] == [len(llama_spm.encode(t)) for t in texts]
    assert llama_spm.encode_batch(texts, parse_special=False)[2] == llama_spm.encode("a</s>b", parse_special=False)
    assert llama_spm.encode_reference("a</s>b c") == [263, 2, 289, 274]


def test_cli_info_and_list_models(capsys):
    from bpetok.apps.cli import main

    assert main(["info", str(PHI3), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["model"], info["model_plugin"], info["pretokenizer"]) == ("llama", "bpetok.models.llama", None)
    assert info["add_bos"] is True and info["add_space_prefix"] is True and info["eog_ids"] == [2, 32000, 32007]
    assert main(["list-models", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["llama"]["plugin"] == "bpetok.models.llama" and rows["llama"]["pretokenized"] is False


def test_a_model_nobody_registers_stays_refused():
    vocab = bpetok.Vocabulary(path="x.gguf", model="no-such-model", pre="", tokens=[b"a"], token_types=[1], merges=[])
    with pytest.raises(bpetok.UnsupportedVocabularyError, match=r"'no-such-model'.*Installed: bert \(bpetok.models.wpm\).*llama.*t5 \(bpetok.models.ugm\)"):
        bpetok.Tokenizer(vocab)


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"a\xffb", [263, 258, 101]),  # 0xFF starts a "4-byte" symbol: it takes the b with it
        (b"\xe4\xb8a", [29871, 231, 187, 100]),
        (b"\xc0\xbc x", [29871, 195, 191, 921]),
        (b"x</s>\xff yz", [921, 2, 29871, 258, 229, 153, 132, 12339]),
        (b"ab\xe4", [633, 231]),
        (b"\x80\x80 hi", [29871, 131, 131, 7251]),
    ],
)
def test_invalid_utf8_bytes_as_llama_cpp_reads_them(llama_spm, data, expected):
    """The SentencePiece session works on raw bytes (unicode_len_utf8 of each symbol's first byte)."""
    assert llama_spm.encode_bytes(data) == expected


def test_serve_answers_for_a_sentencepiece_vocabulary(tmp_path, phi3):
    from helpers import load_cases
    from test_server import Server, request

    srv = Server(tmp_path / "server.log", model=PHI3)
    try:
        srv.wait_healthy()
        props = request(srv.port, "GET", "/props")[2]
        assert (props["model"], props["pretokenizer"], props["add_bos"]) == ("llama", None, True)
        assert props["bos_token"] == "<s>" and props["eog_ids"] == [2, 32000, 32007]
        for case in load_cases("phi-3")[::50]:
            body = {"content": case["text"], "parse_special": case["special"]}
            assert request(srv.port, "POST", "/tokenize", body)[2]["tokens"] == case["ids"], case
        answer = request(srv.port, "POST", "/tokenize", {"content": "<|user|>\nHi<|end|>", "add_special": True})[2]
        assert answer["tokens"] == [1, 32010, 6324, 32007]
        detokenized = request(srv.port, "POST", "/detokenize", {"tokens": answer["tokens"]})[2]["content"]
        assert detokenized == phi3.decode(answer["tokens"]) == "<s><|user|> Hi<|end|>"
    finally:
        srv.stop()


# -- gemma4 ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gemma4() -> bpetok.Tokenizer:
    return bpetok.from_gguf(GEMMA4)


def test_gemma4_arrives_through_the_hook(gemma4):
    assert gemma4.model_spec.plugin == "bpetok.models.gemma4" and gemma4.spec is None
    assert gemma4.vocabulary.pre == "gemma4"  # llama.cpp's rule: the file has no pre key
    assert gemma4.add_bos and not gemma4.add_space_prefix and gemma4.clean_spaces
    assert gemma4.eog_ids == {1, 50, 106}


def test_gemma4_decode_cleans_spaces_as_llama_cpp_does(gemma4):
    assert gemma4.decode([236781, 2360, 570]) == "x? y"  # "x ? y": clean_spaces, as for BPE models
    assert gemma4.decode([2, 9259, 1902]) == "<bos>Hello world"


@pytest.mark.parametrize(
    "text, expected",
    [
        # llama.cpp b11434's ids (llama-cpp-python 0.3.36, add_bos=False, special=True)
        ("Hello world", [9259, 1902]),
        ("\n\n\n", [109]),  # a newline run that is a token: whole
        ("a\n\n b", [236746, 108, 518]),
        ("<|turn>user\nHi<turn|>\n", [105, 2364, 107, 10979, 106, 107]),
        ("  two  spaces ", [138, 13498, 138, 35220, 236743]),
        ("😀 ok", [242398, 7546]),
    ],
)
def test_gemma4_ids(gemma4, text, expected):
    assert gemma4.encode(text) == expected


def test_gemma4_forces_bos_even_when_the_file_says_false(tmp_path):
    items = [item for item in items_of(read_gguf(GEMMA4)) if item[0] != "tokenizer.ggml.add_bos_token"]
    items.append(("tokenizer.ggml.add_bos_token", GGUFValueType.BOOL, False, None))
    write_gguf(tmp_path / "gemma4-no-bos.gguf", items)
    tok = bpetok.from_gguf(tmp_path / "gemma4-no-bos.gguf")
    assert tok.add_bos and tok.encode("Hello world", add_special=True) == [2, 9259, 1902]


def test_gemma4_refuses_what_llama_cpp_aborts_on(gemma4):
    with pytest.raises(InputError, match="overlong encoding of a space"):
        gemma4.encode_bytes(b"\xc0\xa0x")
    assert gemma4.encode_bytes(b"x \xc0\x8a\n y") == [236781, 236743, 108, 570]  # an overlong newline splits
