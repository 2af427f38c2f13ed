"""A Mistral Tekken-shaped and a Gemma-shaped model folder, as HF's own classes save them
(scripts/make_tekken_gemma_references.py, stored in tests/data/{tekken,gemma}-folder.json.gz), give
HF tokenizers' ids when bpetok opens the folder or its tokenizer.json.

Tekken: byte-level BPE, ``Split`` on Tekken's pattern + ``ByteLevel(use_regex=False)``,
``ignore_merges``, 1,000 control tokens, ``<s>`` by ``TemplateProcessing``. Gemma: SentencePiece BPE
(no dummy prefix, byte fallback, runs of newlines, spaces and tabs as added tokens, turn markers),
``<bos>`` by ``TemplateProcessing``."""

from __future__ import annotations

import functools
import json
import pathlib
import sys

import pytest

import bpetok

DATA = pathlib.Path(__file__).parent / "data"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))

import make_tekken_gemma_references as refs  # noqa: E402

NAMES = ("tekken", "gemma")
# The model each is read into, and llama.cpp's reference texts of the nearest vocabulary.
MODEL = {"tekken": "gpt2", "gemma": "llama"}
ORACLE = {"tekken": "qwen3", "gemma": "llama-spm"}
BOS = {"tekken": 1, "gemma": 2}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return functools.cache(lambda name: refs.unpack(name, tmp_path_factory.mktemp(name)))


@pytest.fixture(scope="module")
def loaded(folder):
    return functools.cache(lambda name, file=False: bpetok.from_file(folder(name) / "tokenizer.json" if file else folder(name)))


@pytest.mark.parametrize("file", [False, True], ids=["folder", "tokenizer_json"])
@pytest.mark.parametrize("name", NAMES)
def test_recorded_hf_ids(name, file, loaded, read_jsonl):
    # HF's answers pinned by the script, with and without the post-processor's BOS.
    tok = loaded(name, file)
    cases = read_jsonl(DATA / f"{name}-hf.jsonl.gz")
    assert [c["text"] for c in cases] == refs.TEXTS
    for case in cases:
        assert tok.encode(case["text"]) == case["ids"], case["text"]
        assert tok.encode(case["text"], add_special=True) == case["ids_special"], case["text"]
        assert case["ids_special"] == [BOS[name], *case["ids"]]


@pytest.mark.parametrize("file", [False, True], ids=["folder", "tokenizer_json"])
@pytest.mark.parametrize("name", NAMES)
def test_stored_folder_gives_hf_tokenizers_ids(name, file, folder, loaded, reference_texts):
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(folder(name) / "tokenizer.json"))
    tok = loaded(name, file)
    assert tok.vocabulary.model == MODEL[name]
    texts = reference_texts(ORACLE[name])
    texts += refs.TEXTS
    differ = [t for t in texts if tok.encode(t) != hf.encode(t, add_special_tokens=False).ids]
    assert not differ, f"{len(differ)} of {len(texts)} differ, e.g. {differ[0]!r:.200}"
    differ = [t for t in texts[::7] if tok.encode(t, add_special=True) != hf.encode(t).ids]
    assert not differ, f"add_special: {len(differ)} differ, e.g. {differ[0]!r:.200}"


def test_tekken_is_read_as_its_file_says(loaded, folder):
    tok = loaded("tekken")
    assert tok.vocabulary.metadata["hf.ignore_merges"] is True
    # The 1,000 control tokens keep Tekken's ids and are cut out of the text whole.
    assert tok.encode("[INST]x[/INST]<SPECIAL_20><SPECIAL_999>")[:1] == [3]
    assert tok.encode("<SPECIAL_20><SPECIAL_999>") == [20, 999]
    data = json.loads((folder("tekken") / "tokenizer.json").read_text(encoding="utf-8"))
    assert data["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == refs.TEKKEN_PATTERN


def test_tekken_without_ignore_merges_follows_hf_too(folder, tmp_path, corpus):
    # The same file with ignore_merges false: HF merges whole words it would otherwise keep.
    from tokenizers import Tokenizer

    data = json.loads((folder("tekken") / "tokenizer.json").read_text(encoding="utf-8"))
    data["model"]["ignore_merges"] = False
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    tok, hf = bpetok.from_file(path), Tokenizer.from_file(str(path))
    assert tok.vocabulary.metadata["hf.ignore_merges"] is False
    texts = corpus + refs.TEXTS
    assert [tok.encode(t) for t in texts] == [hf.encode(t, add_special_tokens=False).ids for t in texts]


@pytest.mark.parametrize("name", NAMES)
def test_configs_as_transformers_reads_them(name, folder, loaded):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(folder(name)))
    tok = loaded(name)
    # No unused ids after the last: the added tokens are vocab entries too (4,000 + 1,000; 4,000).
    assert tok.vocabulary.n_tokens == len(hf) == {"tekken": 5000, "gemma": 4000}[name]
    for key in ("bos", "eos", "unk", "pad"):
        assert tok.special_ids[key] == getattr(hf, f"{key}_token_id"), key
    assert tok.add_bos and not tok.add_eos
    assert tok.vocabulary.metadata["tokenizer.chat_template"] == hf.chat_template
    messages = [{"role": "user", "content": "Héllo  wörld"}, {"role": "assistant", "content": "Hi!"},
                {"role": "user", "content": "2 + 2?"}]
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True)
    assert rendered == hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    # The rendering holds BOS and the turn markers: encoded without add_special, as transformers does.
    assert tok.encode(rendered) == hf(rendered, add_special_tokens=False)["input_ids"]
    for text in ("Hello world", "  two  spaces ", "", "\n\n\nx"):
        assert tok.encode(text, add_special=True) == hf(text)["input_ids"], text
        assert tok.encode(text) == hf(text, add_special_tokens=False)["input_ids"], text


@pytest.mark.parametrize("name", NAMES)
def test_unicode_16_letters_and_digits_follow_hf(name, folder, loaded):
    # Tekken's case classes and \p{N} on characters newer than llama.cpp's tables (Cyrillic
    # U+1C89, Todhri, Garay, Tulu-Tigalari, Egyptian, Gurung Khema, Kirat Rai): HF's classes.
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(folder(name) / "tokenizer.json"))
    for text in ("x\u1c89y \U000105e0\U00010d5e.\U00011386\U00013460\U00010d40\U00016130\u1b4ez",
                 "Ab\U00016d40c \U00016d70\U00016d71 \U0001e5d0\U0001e5f1 \u1c89\u1c8a"):
        assert loaded(name).encode(text) == hf.encode(text, add_special_tokens=False).ids, text
