"""Exporting a t5 (Unigram) GGUF.

A charsmap with keys of more than one character (nomic-bert-moe's, XLM-R's ``nmt_nfkc``) is refused:
HF's ``Precompiled`` goes by grapheme cluster where llama.cpp takes the longest key, and the
refusal's example is checked here with HF tokenizers' own ``Precompiled``. A map of single
characters is written exactly: nomic-bert-moe's own vocabulary with its 4,837 single-character keys
(scripts/t5_single_char_map.py) is exported, transformers loads the folder, and its ids are held to
bpetok's ids for that GGUF on llama.cpp's 2,900 reference texts, the corpus sample and
Hypothesis-made text of the map's letters and combining marks. llama.cpp has recorded no ids for
that map; bpetok's GGUF route is held equal to llama.cpp's recorded ids on every reference case
(tests/test_model_ugm.py, whose normalizer is a walk of any charsmap's trie as llama.cpp walks
it), so on this map it stands in for llama.cpp.
"""

from __future__ import annotations

import functools
import json
import pathlib
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.vocab import CHARSMAP_KEY

from bpetok_hf.writer import ExportError, export_hf

ROOT = pathlib.Path(__file__).resolve().parents[3]
T5 = ROOT / "tests" / "data" / "llama.cpp-tests" / "ggml-vocab-nomic-bert-moe.gguf.gz"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))

from t5_single_char_map import single_char_gguf  # noqa: E402


@pytest.fixture(scope="module")
def t5_gguf():
    return bpetok.from_file(T5)


@pytest.fixture(scope="module")
def single_path(tmp_path_factory):
    return single_char_gguf(T5, tmp_path_factory.mktemp("t5-single") / "t5.gguf")


@pytest.fixture(scope="module")
def single_gguf(single_path):
    return bpetok.from_file(single_path)


@pytest.fixture(scope="module")
def t5_folder(single_path, cli_export):
    return cli_export(single_path, "hf-t5")


@pytest.fixture(scope="module")
def t5_hf(t5_folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(t5_folder))


@pytest.fixture(scope="module")
def t5_cases(read_jsonl):
    """llama.cpp's ids for nomic-bert-moe (T5), both parse_special values."""
    return read_jsonl(ROOT / "tests" / "data" / "nomic-bert-moe.jsonl.gz")


# --- a map with longer keys: refused --------------------------------------------------------------

def test_a_map_with_longer_keys_is_refused_with_an_example(t5_gguf, tmp_path):
    with pytest.raises(ExportError) as e:
        export_hf(t5_gguf, tmp_path / "out")
    message = str(e.value)
    assert message.startswith(f"{T5}: tokenizer.ggml.model is 't5' and its charsmap has keys of more than one")
    # The first key in code point order, and a text on which the normalizers part.
    assert "with the key '<' + U+0338 -> U+226E the text '<' + U+0338 + U+0301 normalizes to U+226E + U+0301 " \
           "in llama.cpp and U+226E in HF" in message
    assert not (tmp_path / "out").exists()


def test_the_refusal_example_is_hf_tokenizers_own_behaviour(t5_gguf):
    # HF tokenizers' Precompiled, after the cluster-ending Replace the export would write (after each
    # key character that starts no longer key), against llama.cpp's walk of the map.
    from tokenizers import Regex, normalizers

    from bpetok_hf.writer_wpm import _char_class

    charsmap = t5_gguf.model.charsmap
    blob = bytes(t5_gguf.vocabulary.metadata[CHARSMAP_KEY])
    table, starters = charsmap._fast[0], charsmap._fast[1]
    alone = {cp for cp in table if chr(cp) not in starters}
    hf = normalizers.Sequence([normalizers.Replace(Regex(f"(?<={_char_class(alone)})"), "\x01"),
                               normalizers.Precompiled(blob)])
    for text, llama, hf_text in [("<\u0338\u0301", "\u226e\u0301", "\u226e"),
                                 ("a\u0308\u0301", "\xe4\u0301", "\xe4"),
                                 ("\u1100\u1161\u11a8", "\uac01", "\u1100\u1161\u11a8"),  # 9 bytes: by character
                                 ("\uff76\uff9e", "\u30ac", "\u30ab\u3099"),
                                 ("\uff21\u0301", "\xc1", "A")]:  # the shorter key Ａ stands for Ａ + U+0301
        assert charsmap.normalize_reference(text.encode()).decode() == llama, ascii(text)
        assert hf.normalize_str(text) == hf_text, ascii(text)


def test_the_cli_refuses_in_one_line(tmp_path, cli):
    result = cli("export", T5, "--format", "hf", "-o", tmp_path / "o")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "keys of more than one character" in lines[0] and str(T5) in lines[0], result.stderr
    assert not (tmp_path / "o").exists()


def test_a_map_keeping_u0001_is_refused(tmp_path):
    # The cluster-ending U+0001 must be deleted by the map, else it stays in HF's text.
    from bpetok.gguf import read_gguf
    from bpetok.gguf_writer import items_of, write_gguf

    from bpetok_hf.charsmap_builder import build_charsmap

    items = items_of(read_gguf(T5))
    (old,) = [item for item in items if item[0] == CHARSMAP_KEY]
    blob = build_charsmap({"\uff21": "A"})
    write_gguf(tmp_path / "t5.gguf", [item for item in items if item[0] != CHARSMAP_KEY]
               + [(CHARSMAP_KEY, old[1], __import__("numpy").frombuffer(blob, dtype=old[2].dtype), old[3])])
    with pytest.raises(ExportError, match=r"t5\.gguf: .*its charsmap keeps U\+0001"):
        export_hf(bpetok.from_file(tmp_path / "t5.gguf"), tmp_path / "out")


# --- a map of single characters: exact ------------------------------------------------------------

def test_the_map_is_single_characters_ending_clusters(single_gguf, t5_folder):
    fast = single_gguf.model.charsmap._fast
    assert len(fast[0]) == 4837 and not fast[1]
    steps = json.loads((t5_folder / "tokenizer.json").read_text(encoding="utf-8"))["normalizer"]["normalizers"]
    assert steps[0]["type"] == "Replace" and steps[0]["content"] == "\x01" and steps[1]["type"] == "Precompiled"


def test_transformers_gives_bpetoks_ids_on_the_reference_texts(single_gguf, t5_hf, t5_cases):
    # HF always cuts special tokens out (parse_special=True); with parse_special=False the texts
    # holding no special token's text are the same question.
    specials = [t for t in t5_hf.all_special_tokens if t]
    cases = [c for c in t5_cases if c["special"] or not any(s in c["text"] for s in specials)]
    assert len(cases) > 5000
    differ = [c["text"] for c in cases
              if t5_hf(c["text"], add_special_tokens=False)["input_ids"] != single_gguf.encode(c["text"], parse_special=c["special"])]
    assert not differ, f"{len(differ)} of {len(cases)} differ, e.g. {differ[0]!r:.200}"


def test_transformers_gives_bpetoks_ids_on_the_corpus_sample(single_gguf, t5_hf, corpus):
    differ = [t for t in corpus if t5_hf(t, add_special_tokens=False)["input_ids"] != single_gguf.encode(t)]
    assert not differ, f"{len(differ)} of {len(corpus)} differ, e.g. {differ[0]!r:.200}"


@functools.cache
def _alphabet() -> list[str]:
    """The characters of nomic-bert-moe's full map that start or continue a key (letters, combining
    marks, jamo, halfwidth kana...), its single-character keys, spaces and plain letters."""
    charsmap = bpetok.from_file(T5).model.charsmap
    table, starters, follows = charsmap._fast
    seconds = [chr(cp) for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and follows.fullmatch(chr(cp))]
    return sorted(set(map(chr, table)) | set(starters) | set(seconds) | set(" aeAE\n"))



@settings(max_examples=400, deadline=None)
@given(st.deferred(lambda: st.text(alphabet=st.sampled_from(_alphabet()), max_size=12)))
def test_transformers_gives_bpetoks_ids_on_letters_and_marks(single_gguf, t5_hf, text):
    assert t5_hf(text, add_special_tokens=False)["input_ids"] == single_gguf.encode(text), ascii(text)


def test_special_tokens_as_llama_cpp(single_gguf, t5_hf, t5_folder):
    for text in ("Hello world", "  two  spaces ", "<s>inside</s> text", ""):
        assert t5_hf(text)["input_ids"] == single_gguf.encode(text, add_special=True), text
    config = json.loads((t5_folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["add_bos_token"] is True and config["add_eos_token"] is True
    assert t5_hf.unk_token_id == single_gguf.special_ids["unk"] == 3


def test_the_export_loads_back_with_hf_ids(t5_hf, t5_folder, corpus, t5_cases):
    back = bpetok.from_file(t5_folder)
    assert back.vocabulary.model == "hf-unigram"
    texts = [c["text"] for c in t5_cases[::8]] + corpus[:200]
    differ = [t for t in texts if back.encode(t) != t5_hf(t, add_special_tokens=False)["input_ids"]]
    assert not differ, f"{len(differ)} differ, e.g. {differ[0]!r:.200}"


def test_without_remove_extra_whitespaces_spaces_stay(single_path, tmp_path):
    # llama.cpp: each space a ▁, one more before the first non-space; an all-space text gets none.
    from transformers import AutoTokenizer

    from bpetok.gguf import GGUFValueType, read_gguf
    from bpetok.gguf_writer import items_of, write_gguf

    key = "tokenizer.ggml.remove_extra_whitespaces"
    items = [item for item in items_of(read_gguf(single_path)) if item[0] != key]
    write_gguf(tmp_path / "t5.gguf", items + [(key, GGUFValueType.BOOL, False, None)])
    tok = bpetok.from_file(tmp_path / "t5.gguf")
    assert tok.vocabulary.flags["remove_extra_whitespaces"] is False
    export_hf(tok, tmp_path / "out")
    hf = AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    for text in ("a  b", "  lead", "trail  ", "   ", "x\n y", ""):
        assert hf(text, add_special_tokens=False)["input_ids"] == tok.encode(text), repr(text)
