"""The model contract (bpetok.models.TokenizerModel), pickling, and the not-built warning.

A third-party model that writes only the two abstract methods gets every public API: the
defaults of the base class do the rest. Its expected ids come from its own definition (one id per
character), computed here without the Tokenizer.
"""

from __future__ import annotations

import json
import multiprocessing
import pickle
import random
import subprocess
import sys
import warnings

import numpy as np
import pytest

import bpetok
import bpetok.compiled
import bpetok.plugins
from bpetok import hookimpl
from bpetok.vocab.gguf import GGUFValueType as T
from bpetok.models import ModelSpec, TokenizerModel
from bpetok.plugins import make_plugin_manager
from bpetok.pretok import PreTokenizerSpec
from ggufbuild import build
from helpers import QWEN3

SPECIALS = ["<unk>", "<|im_start|>", "<|im_end|>"]
CHARACTERS = [chr(c) for c in range(32, 127)] + ["\n", "é", "日"]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class CharacterModel(TokenizerModel):
    """One id per character; a character that is no token is ``<unk>`` (id 0). Only the contract's
    two abstract methods."""

    def __init__(self, vocabulary, pretokenizer):
        self.index = vocabulary.token_index()

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        index = self.index
        return [index.get(c.encode("utf-8", "surrogatepass"), 0) for c in text]

    def normal_piece(self, text: bytes) -> bytes:
        return text


class ToyModelPlugin:
    @hookimpl
    def bpetok_register_models(self, register):
        register(ModelSpec(name="toy-chars", factory=CharacterModel, pretokenized=False, special_ids={"eos": 2}))


def expected_ids(text: str) -> list[int]:
    """The toy model's ids of ``text``, specials included, by its definition."""
    ids: dict[str, int] = {c: i + len(SPECIALS) for i, c in enumerate(CHARACTERS)}
    out, i = [], 0
    while i < len(text):
        for k, special in enumerate(SPECIALS[1:], 1):
            if text.startswith(special, i):
                out.append(k)
                i += len(special)
                break
        else:
            out.append(ids.get(text[i], 0))
            i += 1
    return out


@pytest.fixture(scope="module")
def toy_gguf(tmp_path_factory):
    tokens = [t.encode() for t in SPECIALS + CHARACTERS]
    types = [2, 3, 3] + [1] * len(CHARACTERS)  # UNKNOWN, CONTROL, CONTROL, then NORMAL
    built = build([
        ("general.architecture", T.STRING, b"toy"),
        ("tokenizer.ggml.model", T.STRING, b"toy-chars"),
        ("tokenizer.ggml.tokens", T.ARRAY, (T.STRING, tokens)),
        ("tokenizer.ggml.token_type", T.ARRAY, (T.INT32, types)),
        ("tokenizer.chat_template", T.STRING, TEMPLATE.encode()),
    ])
    path = tmp_path_factory.mktemp("toy") / "toy.gguf"
    path.write_bytes(built.data)
    return path


@pytest.fixture
def toy_plugins(monkeypatch):
    """The process-wide plugin manager, with the toy model's plugin (what an installed plugin gives)."""
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(ToyModelPlugin(), name="toy-plugin")
    monkeypatch.setattr(bpetok.plugins, "_pm", pm)
    return pm


def new_words(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice("abcdefghijklmnopqrstuvwxyzé日") for _ in range(rng.randint(1, 9))) for _ in range(count)]


def test_a_model_of_only_the_abstract_methods_gets_every_api(toy_gguf, toy_plugins, tmp_path):
    tok = bpetok.from_file(toy_gguf)
    assert tok.model_spec.plugin == "toy-plugin" and tok.engine == "pure Python" and not tok.encodes_without_gil
    words = new_words(1, 5000)
    text = " ".join(words) + " <|im_end|>\n\t~"
    assert tok.encode(text) == expected_ids(text)
    assert tok.encode_reference(text) == expected_ids(text)
    assert tok.encode_bytes(text.encode() + b"\xff") == expected_ids(text) + [0]  # U+FFFD: no token
    assert tok.count(text) == len(expected_ids(text))
    batch = words[:2000] + ["", "a<|im_start|>b"]
    assert tok.encode_batch(batch, workers=2) == [expected_ids(w) for w in batch]
    ids, offsets = tok.encode_batch_to_numpy(batch)
    assert ids.dtype == np.uint32 and offsets[-1] == len(ids)
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [expected_ids(w) for w in batch]
    shown = text.replace("\t", "<unk>")  # no token for a tab: <unk>, which renders as its text
    assert tok.decode(tok.encode(text)) == shown
    assert tok.decode(tok.encode(text), skip_special=True) == shown.replace("<unk>", "").replace("<|im_end|>", "")
    stream = tok.decode_stream()
    assert "".join(stream.step(i) for i in tok.encode(text)) + stream.flush() == shown
    messages = [{"role": "user", "content": words[0]}]
    prompt = f"<|im_start|>user\n{words[0]}<|im_end|>\n<|im_start|>assistant\n"
    assert tok.apply_chat_template(messages, add_generation_prompt=True) == prompt
    assert tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True) == expected_ids(prompt)

    from bpetok.apps.server_requests import tokenize_request

    assert tokenize_request(tok, {"content": words[1]}) == {"tokens": expected_ids(words[1])}
    assert tokenize_request(tok, {"content": [words[2], 7]}) == {"tokens": expected_ids(words[2]) + [7]}

    from bpetok.apps.datasets import encode_dataset

    docs = words[2000:2300]
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    result = encode_dataset(toy_gguf, [jsonl], tmp_path / "out", append_eos=True, progress=False)
    assert result.documents == len(docs)
    shard = result.manifest["shards"][0]["file"]
    flat = np.load(tmp_path / "out" / shard)
    assert flat.tolist() == [i for d in docs for i in expected_ids(d) + [2]]


def test_the_base_class_refuses_a_model_missing_an_abstract_method():
    class Half(TokenizerModel):
        def encode_fragment(self, text, at_start):
            return []

    with pytest.raises(TypeError, match="normal_piece"):
        Half()  # type: ignore[abstract]


# -- pickling --------------------------------------------------------------------------------------


def _encode_in_worker(tok: bpetok.Tokenizer, text: str) -> list[int]:
    return tok.encode(text)


def test_a_tokenizer_pickles_as_its_file_not_its_tables(qwen3):
    texts = ["Hello world <|im_end|>", " ".join(new_words(2, 300))]
    qwen3.encode(texts[1])  # warm caches are not part of the pickle
    data = pickle.dumps(qwen3)
    assert len(data) < 1000  # the path and options; no vocabulary, no kernel
    assert pickle.dumps(bpetok.from_gguf(QWEN3)) == data  # the same for the same tokenizer
    copy = pickle.loads(data)
    warm = "chunks" if qwen3.model.compiled else "pieces"  # the pure-Python engine caches pieces only
    assert copy.engine == qwen3.engine and copy.cache_info()[warm]["entries"] == 0 < qwen3.cache_info()[warm]["entries"]
    assert [copy.encode(t) for t in texts] == [qwen3.encode(t) for t in texts]


def test_a_pickle_keeps_the_options_and_an_in_memory_vocabulary(qwen3):
    tok = bpetok.Tokenizer(qwen3.vocabulary, qwen3.spec, cache_bytes=0)
    tok.add_bos = True
    copy = pickle.loads(pickle.dumps(tok))
    assert copy.cache_bytes == 0 and copy.add_bos and copy.spec.name == qwen3.spec.name
    assert copy.vocabulary is not qwen3.vocabulary and copy.vocabulary.tokens == qwen3.vocabulary.tokens
    text = "Hello world <|im_end|> " + " ".join(new_words(3, 50))
    assert copy.encode(text, add_special=True) == tok.encode(text, add_special=True)


def test_spawned_workers_get_the_same_ids(qwen3):
    texts = [" ".join(new_words(seed, 200)) + " <|im_end|>" for seed in range(4)]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        ids = pool.starmap(_encode_in_worker, [(qwen3, t) for t in texts])
    assert ids == [qwen3.encode(t) for t in texts]


def test_datasets_fingerprint_of_a_map_is_stable(qwen3):
    """``datasets`` fingerprints a map by hashing its function, tokenizer included: the hash is
    the same across processes and however much the tokenizer has encoded, so its cache is reused."""
    datasets = pytest.importorskip("datasets")  # the test extra has it; a bare install may not
    from datasets.fingerprint import Hasher

    before = Hasher.hash(qwen3)
    qwen3.encode(" ".join(new_words(4, 500)))
    assert Hasher.hash(qwen3) == before
    script = f"import bpetok\nfrom datasets.fingerprint import Hasher\nprint(Hasher.hash(bpetok.from_gguf({str(QWEN3)!r})))"
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert other == before
    data = datasets.Dataset.from_dict({"text": ["Hello world", "second text <|im_end|>"]})
    first = data.map(_tokenize_with(qwen3), batched=True)
    second = data.map(_tokenize_with(bpetok.from_gguf(QWEN3)), batched=True)
    assert first._fingerprint == second._fingerprint and first["ids"] == [qwen3.encode(t) for t in data["text"]]


def _tokenize_with(tok):
    def tokenize(batch):
        return {"ids": tok.encode_batch(batch["text"])}

    return tokenize


# -- the pure-Python engine because the kernel is not built ------------------------------------------


@pytest.fixture
def kernel_not_built(monkeypatch):
    """As if setup.py had not built the C modules: importing them fails."""
    monkeypatch.delenv("BPETOK_PURE_PYTHON", raising=False)
    monkeypatch.setitem(sys.modules, "bpetok.models.gpt2._kernel", None)
    monkeypatch.setitem(sys.modules, "bpetok.models._symbols", None)
    monkeypatch.setattr(bpetok.compiled, "_warned", False)


def test_a_missing_kernel_is_said_once_with_how_to_build_it(kernel_not_built):
    with pytest.warns(RuntimeWarning, match=r"C kernel .* not built.*pip install \..*build_ext --inplace"):
        tok = bpetok.from_gguf(QWEN3)
    assert tok.engine == "pure Python"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bpetok.from_gguf(QWEN3).encode("Hello world")  # once per process


def test_info_says_the_kernel_is_not_built(kernel_not_built, capsys):
    from bpetok.apps.cli import main

    with pytest.warns(RuntimeWarning):
        assert main(["info", str(QWEN3), "--json"]) == 0
    engine = json.loads(capsys.readouterr().out)["engine"]
    assert engine.startswith("pure Python (the C kernel is not built") and "build_ext --inplace" in engine


def test_asking_for_pure_python_warns_nothing(monkeypatch):
    monkeypatch.setenv("BPETOK_PURE_PYTHON", "1")
    monkeypatch.setattr(bpetok.compiled, "_warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bpetok.from_gguf(QWEN3).engine == "pure Python"


class DeclaringModel(CharacterModel):
    """The toy model with each declared attribute changed from its default."""

    emits_special_tokens = False
    may_add_eos = False

    def __init__(self, vocabulary, pretokenizer):
        super().__init__(vocabulary, pretokenizer)
        self.flags_pretokenizer = PreTokenizerSpec(name="toy", pre_names=("toy",), factory=list, add_bos=True, clean_spaces=True)

    def render_piece(self, token_id: int, text: bytes, attr: int) -> bytes | None:
        return text.upper() if text == b"a" else None  # its own piece for one token, the rules for the rest


class DeclaringModelPlugin:
    @hookimpl
    def bpetok_register_models(self, register):
        register(ModelSpec(name="toy-declared", factory=DeclaringModel, pretokenized=False,
                           special_ids={"bos": 1, "eos": 2}))


def test_the_declared_attributes_change_what_the_tokenizer_does(tmp_path, monkeypatch):
    tokens = [t.encode() for t in SPECIALS + CHARACTERS]
    built = build([
        ("general.architecture", T.STRING, b"toy"),
        ("tokenizer.ggml.model", T.STRING, b"toy-declared"),
        ("tokenizer.ggml.tokens", T.ARRAY, (T.STRING, tokens)),
        ("tokenizer.ggml.token_type", T.ARRAY, (T.INT32, [2, 3, 3] + [1] * len(CHARACTERS))),
        ("tokenizer.ggml.add_eos_token", T.BOOL, True),
    ])
    path = tmp_path / "declared.gguf"
    path.write_bytes(built.data)
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(DeclaringModelPlugin(), name="declaring-plugin")
    monkeypatch.setattr(bpetok.plugins, "_pm", pm)
    tok = bpetok.from_file(path)
    # add_bos and clean_spaces from flags_pretokenizer (the file has no add_bos key); no EOS though the file asks for it.
    assert (tok.add_bos, tok.clean_spaces, tok.add_eos) == (True, True, False)
    text = "ab<|im_end|>b"
    plain = [i for i in expected_ids(text) if i != 2]  # the special token found is dropped
    assert tok.encode(text) == plain and tok.count(text) == len(plain)
    assert tok.encode(text, add_special=True) == [1] + plain
    assert tok.encode_batch([text, "ba"]) == [plain, expected_ids("ba")]
    assert tok.decode(tok.encode("abc")) == "Abc" and tok.decode([2]) == "<|im_end|>"
