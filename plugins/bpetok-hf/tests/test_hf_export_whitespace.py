"""Exporting a whitespace GGUF (and refusing hybriddna): transformers loads the folder and gives
llama.cpp's recorded ids (tests/data/more-models/whitespace.jsonl.gz, 5,800 cases, both
parse_special values; parse_special=False is HF's ``split_special_tokens=True``).

The vocabulary is rebuilt as the repository's tests/test_more_models.py builds it (llama.cpp's
llama-bpe test vocabulary under ``model = whitespace``, ``pre = whitespace``), by the repository's
scripts/make_bpe_variants.py.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

import bpetok

from bpetok_hf.writer import ExportError, export_hf

ROOT = pathlib.Path(__file__).resolve().parents[3]
CASES = ROOT / "tests" / "data" / "more-models" / "whitespace.jsonl.gz"
sys.path.insert(0, str(ROOT / "scripts"))

from make_bpe_variants import bpe_variant  # noqa: E402


@pytest.fixture(scope="module")
def whitespace_gguf(tmp_path_factory):
    return bpe_variant(tmp_path_factory.mktemp("ws") / "whitespace.gguf", "whitespace", "whitespace")


@pytest.fixture(scope="module")
def folder(whitespace_gguf, cli_export):
    return cli_export(whitespace_gguf, "hf-whitespace")


@pytest.fixture(scope="module")
def hf_pair(folder):
    from transformers import AutoTokenizer

    return {True: AutoTokenizer.from_pretrained(str(folder)),
            False: AutoTokenizer.from_pretrained(str(folder), split_special_tokens=True)}


def test_transformers_gives_llama_cpp_ids(hf_pair, read_jsonl):
    cases = read_jsonl(CASES)
    assert len(cases) == 5800 and {c["special"] for c in cases} == {True, False}
    differ = [c for c in cases if hf_pair[c["special"]](c["text"], add_special_tokens=False)["input_ids"] != c["ids"]]
    assert not differ, f"{len(differ)} of {len(cases)} differ, e.g. {differ[0]!r:.200}"


def test_transformers_gives_bpetoks_ids_on_the_corpus(hf_pair, whitespace_gguf, corpus):
    # bpetok's GGUF route is held to llama.cpp's ids on every recorded case (tests/test_more_models.py).
    tok = bpetok.from_file(whitespace_gguf)
    differ = [(t, special) for t in corpus for special in (True, False)
              if hf_pair[special](t, add_special_tokens=False)["input_ids"] != tok.encode(t, parse_special=special)]
    assert not differ, f"{len(differ)} of {2 * len(corpus)} differ, e.g. {differ[0]!r:.200}"


def test_a_character_that_is_no_token_keeps_its_neighbours_apart(hf_pair, whitespace_gguf, read_jsonl):
    # llama.cpp: 'a', U+00AD (no token), 'b' stay three symbols, 'ab' is never made; HF would drop
    # the character and merge 'ab' but for the Isolated Split.
    case = next(c for c in read_jsonl(CASES) if c["text"] == "a\xadb" and c["special"])
    tok = bpetok.from_file(whitespace_gguf)
    assert case["ids"] != tok.encode("ab")
    assert hf_pair[True]("a\xadb", add_special_tokens=False)["input_ids"] == case["ids"]


def test_special_tokens_decode_and_config(hf_pair, folder, whitespace_gguf):
    tok = bpetok.from_file(whitespace_gguf)
    hf = hf_pair[True]
    for text in ("Hello world", "a<|begin_of_text|>b", " two  spaces\t"):
        assert hf(text)["input_ids"] == tok.encode(text, add_special=True), text
    # llama.cpp's pieces are byte-level ('é' is the byte 0xE9), as HF's ByteLevel decoder's.
    ids = hf("Hello world, élan ĠĊ", add_special_tokens=False)["input_ids"]
    assert hf.decode(ids) == tok.decode(ids) == "Helloworld,\ufffdlan \n"
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["add_bos_token"] is tok.add_bos and config["bos_token"] == "<|begin_of_text|>"


def test_hybriddna_refusal_says_why(tmp_path):
    path = bpe_variant(tmp_path / "dna.gguf", "hybriddna", "llama-bpe", with_dna=True)
    tok = bpetok.from_file(path)
    # The refusal's example, as llama.cpp's rule (bpetok's model is held to its recorded ids).
    ids = tok.encode("x<dna>acgtacg</dna>", parse_special=False)
    assert [tok.vocabulary.tokens[i] for i in ids[-3:-1]] == ["ACGTAC\ue000".encode(), "GAAAAA\ue000".encode()]
    with pytest.raises(ExportError, match=r"'hybriddna'.*6-byte k-mers.*'x<dna>acgtacg</dna>'.*cannot be exported"):
        export_hf(tok, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_merge_making_no_token_is_refused(tmp_path):
    path = bpe_variant(tmp_path / "ws.gguf", "whitespace", "whitespace", merges_extra=(b"q z",))
    with pytest.raises(ExportError, match=r"merge 'q' 'z' makes 'qz', which is no token"):
        export_hf(bpetok.from_file(path), tmp_path / "out")


def test_another_pre_is_refused(tmp_path):
    path = bpe_variant(tmp_path / "ws.gguf", "whitespace", "llama-bpe")
    with pytest.raises(ExportError, match=r"'whitespace'.*pre 'llama-bpe'.*pre 'whitespace'"):
        export_hf(bpetok.from_file(path), tmp_path / "out")
