"""Every byte-level BPE pre-tokenizer llama.cpp b11434 has: names, flags, and ids against llama.cpp.

- :data:`LLAMA_CPP_TYPES` is llama.cpp's own table (``llama_vocab::impl::load``): each accepted
  ``tokenizer.ggml.pre`` name, its type and the flags that change ids or decoding.
- tests/data/pretok/<pre>.json.gz holds llama.cpp's ids for tests/data/pretok-cases.inp, recorded
  by ``scripts/record_reference_cases.py --pretok`` on a copy of the qwen2 test vocabulary with only
  ``tokenizer.ggml.pre`` changed (so llama.cpp split with that type's rules); the tests here build
  the same copy and compare every id, both ``parse_special`` values.
- llama.cpp's .inp/.out vectors and oracle cases for the test vocabularies that have a type of
  their own (gpt-2, mpt, falcon, deepseek-llm/coder, qwen35, gpt-neox with no pre at all).
"""

from __future__ import annotations

import gzip
import json

import pytest

import bpetok
import bpetok.vocab.gguf
import bpetok.tokenizer
from bpetok.plugins import get_registry
from helpers import (DATA, LLAMA_TESTS, gguf_with_pre, load_cases, read_inputs, read_vectors, sharing_bpe_models,
                     with_pre, wrong_cases)

QWEN2 = LLAMA_TESTS / "ggml-vocab-qwen2.gguf.gz"

# (pre name, llama.cpp type, clean_spaces, ignore_merges, add_bos, add_sep, a default BOS id),
# from llama.cpp b11434 src/llama-vocab.cpp. The last five run BPE over raw UTF-8 instead of bytes
# (RAW_UTF8; llama.cpp also forces add_bos on for GEMMA4 after reading the file's key).
LLAMA_CPP_TYPES = [
    ("default", "DEFAULT", True, False, False, False, True),
    ("minicpm5", "MINICPM5", True, True, False, False, True),
    ("llama3", "LLAMA3", True, True, True, False, True),
    ("llama-v3", "LLAMA3", True, True, True, False, True),
    ("llama-bpe", "LLAMA3", True, True, True, False, True),
    ("falcon3", "LLAMA3", True, True, True, False, True),
    ("falcon-h1", "LLAMA3", True, True, True, False, True),
    ("pixtral", "LLAMA3", True, True, True, False, True),
    ("midm-2.0", "LLAMA3", True, True, True, False, True),
    ("lfm2", "LLAMA3", True, True, True, False, True),
    ("jina-v5-nano", "LLAMA3", True, True, True, False, True),
    ("deepseek-llm", "DEEPSEEK_LLM", False, False, False, False, True),
    ("deepseek-coder", "DEEPSEEK_CODER", False, False, False, False, True),
    ("deepseek-v3", "DEEPSEEK3_LLM", False, False, False, False, True),
    ("spark2_5", "SPARK2_5", False, False, False, False, True),
    ("youtu", "YOUTU", False, True, False, False, True),
    ("falcon", "FALCON", True, False, False, False, True),
    ("mpt", "MPT", True, False, False, False, True),
    ("starcoder", "STARCODER", True, False, False, False, True),
    ("gpt-2", "GPT2", True, False, False, False, True),
    ("phi-2", "GPT2", True, False, False, False, True),
    ("jina-es", "GPT2", True, False, False, False, True),
    ("jina-de", "GPT2", True, False, False, False, True),
    ("gigachat", "GPT2", True, False, False, False, True),
    ("jina-v2-es", "GPT2", True, False, False, False, True),
    ("jina-v2-de", "GPT2", True, False, False, False, True),
    ("a.x-4.0", "GPT2", True, False, False, False, True),
    ("mellum", "GPT2", True, False, False, False, True),
    ("modern-bert", "GPT2", True, False, False, False, True),
    ("jais-2", "JAIS2", True, False, False, False, True),
    ("jina-v1-en", "GPT2", True, False, False, True, True),
    ("jina-v2-code", "GPT2", True, False, False, True, True),
    ("roberta-bpe", "GPT2", True, False, False, True, True),
    ("refact", "REFACT", True, False, False, False, True),
    ("command-r", "COMMAND_R", False, False, False, False, True),
    ("qwen2", "QWEN2", False, False, False, False, True),
    ("deepseek-r1-qwen", "QWEN2", False, False, False, False, True),
    ("kormo", "QWEN2", False, False, False, False, True),
    ("f2llmv2", "QWEN2", False, False, False, False, True),
    ("qwen35", "QWEN35", False, False, False, False, True),
    ("stablelm2", "STABLELM2", True, False, False, False, True),
    ("olmo", "OLMO", True, False, False, False, True),
    ("dbrx", "DBRX", True, False, False, False, True),
    ("smaug-bpe", "SMAUG", True, False, False, False, True),
    ("poro-chat", "PORO", False, False, False, False, True),
    ("chatglm-bpe", "CHATGLM4", True, False, False, False, False),
    ("glm4", "CHATGLM4", True, True, False, False, False),
    ("glm5", "CHATGLM4", True, True, False, False, False),
    ("viking", "VIKING", False, False, False, False, True),
    ("jais", "JAIS", True, False, False, False, True),
    ("tekken", "TEKKEN", False, True, True, False, True),
    ("smollm", "SMOLLM", False, False, False, False, True),
    ("codeshell", "CODESHELL", True, False, False, False, True),
    ("bloom", "BLOOM", True, False, False, False, True),
    ("gpt3-finnish", "GPT3_FINNISH", True, False, False, False, True),
    ("exaone", "EXAONE", True, False, False, False, True),
    ("exaone4", "GPT2", True, False, False, False, True),
    ("exaone-moe", "EXAONE_MOE", True, False, False, False, True),
    ("chameleon", "CHAMELEON", False, False, True, False, True),
    ("minerva-7b", "MINERVA", True, False, False, False, True),
    ("megrez", "QWEN2", True, False, False, False, True),
    ("gpt-4o", "GPT4O", False, False, False, False, True),
    ("llama4", "GPT4O", False, False, False, False, True),
    ("kanana2", "GPT4O", False, False, False, False, True),
    ("talkie", "GPT4O", False, False, False, False, True),
    ("granite-embed-multi-97m", "GRANITE_EMB_MULTI", False, True, False, False, True),
    ("tiny_aya", "TINY_AYA", False, False, False, False, True),
    ("cohere2moe", "TINY_AYA", False, False, False, False, True),
    ("superbpe", "SUPERBPE", False, False, False, False, True),
    ("trillion", "TRILLION", False, False, False, False, True),
    ("granite-docling", "GRANITE_DOCLING", False, False, False, False, True),
    ("bailingmoe", "BAILINGMOE", False, False, False, False, True),
    ("bailingmoe2", "BAILINGMOE", False, False, False, False, True),
    ("llada-moe", "BAILINGMOE", False, False, False, False, True),
    ("seed-coder", "SEED_CODER", False, False, False, False, True),
    ("hunyuan", "HUNYUAN", False, False, False, False, True),
    ("hunyuan-dense", "HUNYUAN_DENSE", False, False, False, False, True),
    ("hy_v4", "HY_V4", False, False, False, False, True),
    ("joyai-llm", "JOYAI_LLM", False, False, False, False, True),
    ("kimi-k2", "KIMI_K2", False, False, False, False, True),
    ("ufakzeka", "UFAKZEKA", False, False, False, False, True),
    ("grok-2", "GROK_2", False, False, False, False, True),
    ("afmoe", "AFMOE", False, False, False, False, True),
    ("laguna", "LAGUNA", False, False, False, False, True),
    ("minimax-m2", "MINIMAX_M2", False, False, False, False, True),
    ("solar-open", "SOLAR_OPEN", False, False, False, False, True),
    ("mellum2", "MELLUM2", True, False, False, False, True),
    ("gemma4", "GEMMA4", True, False, False, False, True),
    ("granite-embed-multi-311m", "GEMMA4", True, False, False, False, True),
    ("mmbert", "MMBERT", True, False, False, False, True),
    ("sarvam-moe", "SARVAM_MOE", False, False, False, False, True),
    ("whitespace", "WHITESPACE", True, False, False, False, True),
]
# pre name -> (escape_whitespaces, newline runs looked up whole, mmbert's metaspace words) for the
# types llama.cpp runs with byte_encode = false; their cases are in tests/data/pretok-raw/
# (tests/test_raw_utf8.py).
RAW_UTF8 = {
    "gemma4": (True, True, False),
    "granite-embed-multi-311m": (True, True, False),
    "mmbert": (True, True, True),
    "sarvam-moe": (True, False, False),
    "whitespace": (False, False, False),
}
RECORDED = sorted(p.name[: -len(".json.gz")] for p in (DATA / "pretok").glob("*.json.gz"))
RECORDED_RAW = sorted(p.name[: -len(".json.gz")] for p in (DATA / "pretok-raw").glob("*.json.gz"))


def test_the_table_is_llama_cpp_s_92_names():
    names = [row[0] for row in LLAMA_CPP_TYPES]
    assert len(set(names)) == len(names) == 92
    assert len({row[1] for row in LLAMA_CPP_TYPES}) == 58


@pytest.mark.parametrize("row", LLAMA_CPP_TYPES, ids=lambda row: row[0])
def test_byte_encode_and_the_raw_utf8_flags_follow_the_type(row):
    spec = get_registry().get("gpt2", row[0]).spec
    raw = RAW_UTF8.get(row[0])
    assert spec.byte_encode is (raw is None)
    assert (spec.escape_whitespaces, spec.newline_runs_whole, spec.metaspace_words) == (raw or (False, False, False))


@pytest.mark.parametrize("row", LLAMA_CPP_TYPES, ids=lambda row: row[0])
def test_every_name_is_registered_with_llama_cpp_s_type_and_flags(row):
    pre, llama_type, clean_spaces, ignore_merges, add_bos, add_sep, bos_default = row
    registered = get_registry().get("gpt2", pre)
    assert registered is not None, f"pre {pre!r} is not registered"
    spec = registered.spec
    assert (spec.llama_type, spec.clean_spaces, spec.ignore_merges, spec.add_bos, spec.add_sep, spec.bos_default) == (
        llama_type, clean_spaces, ignore_merges, add_bos, add_sep, bos_default)


def test_a_missing_pre_key_is_llama_cpp_s_default_type():
    assert get_registry().get("gpt2", "").spec is get_registry().get("gpt2", "default").spec


def test_every_type_has_recorded_cases():
    specs = {get_registry().get("gpt2", pre).spec for pre, *_ in LLAMA_CPP_TYPES}
    recorded = {get_registry().get("gpt2", pre).spec for pre in RECORDED}
    assert specs == recorded | {get_registry().get("gpt2", pre).spec for pre in RAW_UTF8}
    assert sorted(RAW_UTF8) == RECORDED_RAW  # every name, not just every type: GEMMA4 has two


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return read_inputs(DATA / "pretok-cases.inp")


@pytest.fixture(scope="module")
def qwen2_vocabulary():
    with sharing_bpe_models():
        yield bpetok.load_vocabulary(QWEN2)


@pytest.mark.parametrize("pre", RECORDED)
def test_ids_match_llama_cpp_on_a_vocabulary_with_this_pre(pre, texts, qwen2_vocabulary):
    with gzip.open(DATA / "pretok" / f"{pre}.json.gz", "rt", encoding="utf-8") as f:
        record = json.load(f)
    assert record["pre"] == pre and len(record["ids"]) == len(texts) > 250
    tok = bpetok.tokenizer.from_vocabulary(with_pre(qwen2_vocabulary, pre))
    assert tok.spec is get_registry().get("gpt2", pre).spec
    for i, text in enumerate(texts):
        assert tok.encode(text, parse_special=False) == record["ids"][i], (i, text)
        expected = record["special"].get(str(i), record["ids"][i])
        assert tok.encode(text, parse_special=True) == expected, (i, text)
    # add_special: BOS as llama.cpp adds it (or refuses: a type with no default BOS id)
    if isinstance(record["bos"], list):
        assert tok.encode("Hi", parse_special=False, add_special=True) == record["bos"]
    else:
        with pytest.raises(bpetok.BpetokError, match="bos"):
            tok.encode("Hi", parse_special=False, add_special=True)
    # llama_detokenize's bytes, clean_spaces included
    for ids, detok in zip(record["ids"], record["detok"]):
        assert tok.decode_bytes(ids) == bytes.fromhex(detok), ids


@pytest.mark.parametrize("pre", ["gpt-4o", "kimi-k2", "glm4", ""])
def test_a_file_with_this_pre_loads_with_its_type(pre, tmp_path):
    tok = bpetok.from_gguf(gguf_with_pre(QWEN2, tmp_path / "vocab.gguf", pre))
    assert tok.vocabulary.pre == pre
    assert tok.spec is get_registry().get("gpt2", pre or "default").spec


def test_kimi_k2_loads_without_merges_as_llama_cpp_does(tmp_path):
    from bpetok.vocab.gguf import read_gguf
    from bpetok.vocab.gguf_writer import items_of, write_gguf

    skip = ("tokenizer.ggml.merges", "tokenizer.ggml.pre")
    items = [item for item in items_of(read_gguf(QWEN2)) if item[0] not in skip]
    path = tmp_path / "vocab.gguf"
    write_gguf(path, items + [("tokenizer.ggml.pre", bpetok.vocab.gguf.GGUFValueType.STRING, "kimi-k2", None)])
    tok = bpetok.from_gguf(path)
    assert tok.encode("ab") == [tok.id("a"), tok.id("b")]  # no merges: one token per byte symbol
    write_gguf(path, items + [("tokenizer.ggml.pre", bpetok.vocab.gguf.GGUFValueType.STRING, "qwen2", None)])
    with pytest.raises(bpetok.GGUFError, match="tokenizer.ggml.merges"):
        bpetok.from_gguf(path)


# -- llama.cpp's test vocabularies whose type is not qwen2/smollm/llama3 ---------------------------

VOCAB_PRE = {"gpt-2": "gpt-2", "mpt": "mpt", "falcon": "falcon", "deepseek-llm": "deepseek-llm",
             "deepseek-coder": "deepseek-coder", "gpt-neox": ""}


_tokenizers: dict[str, bpetok.Tokenizer] = {}


def _tokenizer(name: str, tmp_path_factory) -> bpetok.Tokenizer:
    if name not in _tokenizers:
        if name == "qwen35":  # llama.cpp's qwen35 test vocabulary is its qwen2 one with pre "qwen35"
            path = gguf_with_pre(QWEN2, tmp_path_factory.mktemp("qwen35") / "ggml-vocab-qwen35.gguf", "qwen35")
        else:
            path = LLAMA_TESTS / f"ggml-vocab-{name}.gguf.gz"
        tok = _tokenizers[name] = bpetok.from_gguf(path)
        assert tok.vocabulary.pre == VOCAB_PRE.get(name, name)
    return _tokenizers[name]


# gpt-neox: llama.cpp ships no .inp/.out for it; its oracle cases are checked.
@pytest.mark.parametrize("name", sorted(set(VOCAB_PRE) - {"gpt-neox"}) + ["qwen35"])
def test_llama_cpp_vectors(name, tmp_path_factory):
    tok = _tokenizer(name, tmp_path_factory)
    vectors = read_vectors(name)
    assert len(vectors) >= 46
    for text, expected in vectors:
        assert tok.encode(text, parse_special=False) == expected, text


@pytest.mark.parametrize("name", sorted(VOCAB_PRE) + ["qwen35"])
def test_oracle_cases(name, tmp_path_factory):
    tok = _tokenizer(name, tmp_path_factory)
    cases = load_cases(name)
    assert len(cases) == 290
    wrong = [c["text"] for c in wrong_cases(tok.encode, cases)]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ from llama.cpp, first: {wrong[0]!r}"


# llama_vocab_bos / llama_vocab_get_add_bos of llama.cpp b11434 (llama-cpp-python 0.3.36) on a copy
# of the qwen2 test vocabulary without tokenizer.ggml.bos_token_id, with this pre.
NO_BOS_KEY = {"glm4": (None, False), "chatglm-bpe": (None, False), "gpt-2": (11, False), "tekken": (11, True)}


@pytest.mark.parametrize("pre", sorted(NO_BOS_KEY))
def test_default_bos_id_follows_the_type(pre, tmp_path):
    from bpetok.vocab.gguf import GGUFValueType, read_gguf
    from bpetok.vocab.gguf_writer import items_of, write_gguf

    skip = ("tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id")
    items = [item for item in items_of(read_gguf(QWEN2)) if item[0] not in skip]
    write_gguf(tmp_path / "vocab.gguf", items + [("tokenizer.ggml.pre", GGUFValueType.STRING, pre, None)])
    tok = bpetok.from_gguf(tmp_path / "vocab.gguf")
    assert (tok.special_ids["bos"], tok.add_bos) == NO_BOS_KEY[pre]
