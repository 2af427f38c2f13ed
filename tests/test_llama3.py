"""llama3 (built in): token-identical to llama.cpp on the llama-bpe vocabulary (Llama 3's tokenizer).

Carried over from the former plugins/bpetok-llama3 when llama3 moved into bpetok's core.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

import bpetok
from bpetok.plugins import DISABLE_ENV, PreTokenizerRegistry, make_plugin_manager
from bpetok.pretok import llama3
from helpers import DATA, LLAMA_TESTS, load_cases, read_vectors, wrong_cases

LLAMA_BPE = LLAMA_TESTS / "ggml-vocab-llama-bpe.gguf.gz"
# llama.cpp src/llama-vocab.cpp: every pre name mapped to LLAMA_VOCAB_PRE_TYPE_LLAMA3.
LLAMA3_PRE_NAMES = {
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano",
}


@pytest.fixture(scope="module")
def llama_bpe() -> bpetok.Tokenizer:
    return bpetok.from_gguf(LLAMA_BPE)


@pytest.fixture(scope="module")
def oracle_cases() -> list[dict]:
    """5,800 texts with llama.cpp's llama_tokenize(add_special=False, parse_special) ids."""
    return load_cases("llama-bpe")


@pytest.fixture(scope="module")
def add_special_cases() -> list[dict]:
    """Recorded with scripts/record_reference_cases.py --add-special: ids with BOS, and llama_detokenize's bytes."""
    return load_cases("llama-bpe-add-special")


def bpetok_cli(*args: str, env_extra: dict[str, str] | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    """Run ``bpetok ARGS`` in a fresh interpreter, so entry points are discovered as a user's would be."""
    env = {k: v for k, v in os.environ.items() if k != DISABLE_ENV}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "bpetok.apps.cli", *args],
        input=stdin.encode(), capture_output=True, env=env, timeout=120,
    )


# -- exactness -------------------------------------------------------------------------------------


@pytest.mark.parametrize("special", [False, True], ids=["parse_special=False", "parse_special=True"])
def test_reference_cases(llama_bpe, oracle_cases, special):
    cases = [c for c in oracle_cases if c["special"] is special]
    assert len(cases) == 2900
    wrong = [(c["text"], c["ids"]) for c in cases if llama_bpe.encode(c["text"], parse_special=special) != c["ids"]]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ from llama.cpp, first: {wrong[0]!r}"


def test_llama_cpp_test_vectors(llama_bpe):
    # llama.cpp's test-tokenizer-0 tokenizes these with add_special=False, parse_special=False.
    vectors = read_vectors("llama-bpe")
    assert len(vectors) == 46
    for text, expected in vectors:
        assert llama_bpe.encode(text, parse_special=False) == expected, text


def test_every_piece_matches_token_to_piece(llama_bpe):
    # Recorded by scripts/record_pieces.py: [id, token_to_piece(special=True), (special=False)].
    with gzip.open(DATA / "llama-bpe.dump.json.gz", "rt") as f:
        dump = json.load(f)
    assert len(dump) == llama_bpe.n_tokens == 128256
    wrong = [i for i, special, plain in dump
             if llama_bpe.piece(i) != bytes.fromhex(special) or llama_bpe.token_bytes(i) != bytes.fromhex(plain)]
    assert not wrong, f"{len(wrong)} pieces differ, first id {wrong[0]}"


def test_eog_set_is_llama_cpp_s(llama_bpe):
    # scripts/record_pieces.py prints llama_vocab_is_eog's ids: <|end_of_text|>, <|eot_id|>.
    assert llama_bpe.eog_ids == {128001, 128009}


def test_add_special_adds_bos_and_decode_cleans_spaces(llama_bpe, add_special_cases):
    # The file has no tokenizer.ggml.add_bos_token key: add_bos comes from the spec (True, as llama.cpp).
    assert "add_bos" not in llama_bpe.vocabulary.flags
    assert llama_bpe.add_bos is True
    assert len(add_special_cases) == 116
    for case in add_special_cases:
        ids = llama_bpe.encode(case["text"], parse_special=case["special"], add_special=True)
        assert ids == case["ids"], case["text"]
        assert ids[0] == 128000
        # llama_detokenize(remove_special=False, unparse_special=True), clean_spaces included.
        assert llama_bpe.decode_bytes(ids) == bytes.fromhex(case["detok"]), case["text"]


def test_clean_spaces_is_needed(llama_bpe, add_special_cases):
    assert llama_bpe.decode(llama_bpe.encode("Hello , world ! it 's")) == "Hello, world! it's"
    plain = bpetok.Tokenizer(llama_bpe.vocabulary, dataclasses.replace(llama_bpe.spec, clean_spaces=False))
    differ = [c for c in add_special_cases if plain.decode_bytes(c["ids"]) != bytes.fromhex(c["detok"])]
    assert len(differ) == 8


def test_ignore_merges_is_needed(llama_bpe, oracle_cases):
    # " Việt" is token 101798, but the merges alone reach " Vi" + "ệ" + "t".
    assert llama_bpe.encode(" Việt") == [101798]
    plain = bpetok.Tokenizer(llama_bpe.vocabulary, dataclasses.replace(llama_bpe.spec, ignore_merges=False))
    assert plain.encode(" Việt") == [11655, 26298, 83]
    assert len(wrong_cases(plain.encode, oracle_cases)) == 14


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("1234567", ["123", "456", "7"]),  # numbers in runs of three, from the left
        ("x ١٢٣٤ ½½½½", ["x", " ", "١٢٣", "٤", " ", "½½½", "½"]),  # any \p{N}, not just ASCII digits
        ("y'ALL I'M it's", ["y", "'ALL", " I", "'M", " it", "'s"]),  # contractions in any case
        ("ab.\n\n  ", ["ab", ".\n\n", "  "]),  # punctuation keeps its newlines
        ("a\u3000\u3000b", ["a", "\u3000", "\u3000b"]),  # one non-letter prefix, even U+3000
        ("\U0002ebf0x", ["\U0002ebf0x"]),  # CJK Ext I (Unicode 15.1) is a letter, as in llama.cpp
    ],
)
def test_pretokenizer_pieces(text, pieces):
    assert llama3.make_pretokenizer().split(text) == pieces


# -- the fast path ----------------------------------------------------------------------------------

ATOMS = st.sampled_from(
    [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\x1c", "a", "Việt", "word", "'s", "'LL", "'", ",", "!!",
     "1", "1234567", "١٢٣٤", "½", "\u0301", "👍🏽", "<|eot_id|>", "<|begin_of_text|>", "é", "中文"]
)
TEXTS = st.one_of(st.lists(ATOMS, max_size=30).map("".join), st.text(max_size=40))


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, special=st.booleans())
def test_fast_encode_equals_reference(llama_bpe, text, special):
    expected = llama_bpe.encode_reference(text, parse_special=special)
    assert llama_bpe.encode(text, parse_special=special) == expected
    assert llama_bpe.encode(text, parse_special=special) == expected  # again, from the caches


# -- registration, blocking, the command line ------------------------------------------------------


def test_registers_every_llama3_pre_name_with_llama_cpp_s_flags():
    registry = PreTokenizerRegistry(make_plugin_manager())
    assert set(llama3.PRE_NAMES) == LLAMA3_PRE_NAMES
    for pre in sorted(LLAMA3_PRE_NAMES):
        row = registry.get("gpt2", pre)
        assert row is not None, pre
        assert (row.spec.name, row.spec.plugin, row.spec.llama_type) == ("llama3", "llama3", "LLAMA3")
        assert (row.spec.ignore_merges, row.spec.add_bos, row.spec.clean_spaces) == (True, True, True)
    assert registry.get("gpt2", "llama4").spec.llama_type == "GPT4O"  # not LLAMA3


def test_blocking_the_entry_point_refuses_llama_bpe(monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "llama3")
    pm = make_plugin_manager()  # entry points loaded, this one blocked
    assert pm.is_blocked("llama3")
    with pytest.raises(bpetok.UnsupportedVocabularyError, match="tokenizer.ggml.pre='llama-bpe'") as info:
        bpetok.from_gguf(LLAMA_BPE, plugin_manager=pm)
    installed = str(info.value).split("Installed: ")[1]
    assert "qwen2 (gpt2)" in installed and "llama-bpe (gpt2)" not in installed


def test_blocked_plugin_cli_gives_the_helpful_error():
    result = bpetok_cli("info", str(LLAMA_BPE), env_extra={DISABLE_ENV: "llama3"})
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert stderr.startswith("bpetok: error: ") and "Traceback" not in stderr
    assert "tokenizer.ggml.pre='llama-bpe'" in stderr and "install a package" in stderr
    listed = json.loads(bpetok_cli("list-pretokenizers", "--json", env_extra={DISABLE_ENV: "llama3"}).stdout)
    assert not {row["name"] for row in listed} & LLAMA3_PRE_NAMES


def test_cli_info_and_tokenize():
    info = json.loads(bpetok_cli("info", str(LLAMA_BPE), "--json").stdout)
    assert (info["pre"], info["pretokenizer"], info["plugin"], info["llama_type"]) == (
        "llama-bpe", "llama3", "llama3", "LLAMA3")
    assert (info["n_tokens"], info["add_bos"], info["eog_ids"]) == (128256, True, [128001, 128009])
    out = bpetok_cli("tokenize", str(LLAMA_BPE), stdin="Hello world 1234567<|eot_id|>")
    assert json.loads(out.stdout) == {"tokens": [9906, 1917, 220, 4513, 10961, 22, 128009]}
