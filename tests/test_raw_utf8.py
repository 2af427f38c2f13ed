"""The five pre names llama.cpp b11434 runs as BPE over raw UTF-8 for a gpt2 vocabulary, against llama.cpp.

``gemma4``, ``granite-embed-multi-311m``, ``mmbert``, ``sarvam-moe`` and ``whitespace`` have no
test vocabulary in llama.cpp. tests/data/pretok-raw/<pre>.json.gz holds llama.cpp b11434's answers
(``scripts/record_reference_cases.py --raw-utf8``, through scripts/llama_vocab_driver.c) on a copy
of its Gemma 4 test vocabulary with ``tokenizer.ggml.model = gpt2`` and that pre: ids for
tests/data/pretok-cases.inp and a few more texts (null where llama.cpp aborts), both
``parse_special`` values, raw-byte inputs, BOS, detokenized bytes, the EOG set and
``token_to_piece`` for every id (a SHA-256 of the whole table, and a sample to show a difference).
"""

from __future__ import annotations

import gzip
import json

import pytest

import bpetok
from bpetok.errors import InputError
from bpetok.plugins import get_registry
from helpers import DATA, GEMMA4, read_inputs

PRES = ["gemma4", "granite-embed-multi-311m", "mmbert", "sarvam-moe", "whitespace"]


def _record(pre: str) -> dict:
    with gzip.open(DATA / "pretok-raw" / f"{pre}.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def gemma4_as_gpt2(path, pre: str):
    """llama.cpp's Gemma 4 test vocabulary as a gpt2 model with ``pre``, the copy the cases were recorded on."""
    from bpetok.vocab.gguf import GGUFValueType, read_gguf
    from bpetok.vocab.gguf_writer import items_of, write_gguf

    items = []
    for key, vtype, value, elem in items_of(read_gguf(GEMMA4)):
        if key == "tokenizer.ggml.model":
            items += [(key, vtype, "gpt2", elem), ("tokenizer.ggml.pre", GGUFValueType.STRING, pre, None)]
        else:
            items.append((key, vtype, value, elem))
    write_gguf(path, items)
    return path


_tokenizers: dict[str, bpetok.Tokenizer] = {}


@pytest.fixture
def tok(pre, tmp_path_factory) -> bpetok.Tokenizer:
    if pre not in _tokenizers:
        path = gemma4_as_gpt2(tmp_path_factory.mktemp("raw") / f"{pre}.gguf", pre)
        _tokenizers[pre] = bpetok.from_gguf(path)
    return _tokenizers[pre]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return read_inputs(DATA / "pretok-cases.inp")


@pytest.mark.parametrize("pre", PRES)
def test_every_name_loads_as_its_type(pre, tok):
    record = _record(pre)
    assert tok.spec is get_registry().get("gpt2", pre).spec and not tok.spec.byte_encode
    assert (tok.n_tokens, tok.add_bos, tok.special_ids["bos"]) == (record["n_tokens"], record["add_bos"],
                                                                    record["bos_id"])
    assert tok.eog_ids == frozenset(record["eog"])


@pytest.mark.parametrize("pre", PRES)
def test_ids_match_llama_cpp(pre, tok, texts):
    record = _record(pre)
    cases = texts + record["extra"]
    assert record["pre"] == pre and record["model"] == "gpt2" and len(record["ids"]) == len(cases) > 290
    checked = aborted = 0
    for i, text in enumerate(cases):
        for parse_special in (False, True):
            expected = record["ids"][i] if not parse_special else record["special"].get(str(i), record["ids"][i])
            if expected is None:  # llama.cpp aborts (GGML_ASSERT): bpetok refuses
                with pytest.raises(InputError, match="aborts"):
                    tok.encode(text, parse_special=parse_special)
                aborted += 1
            else:
                assert tok.encode(text, parse_special=parse_special) == expected, (i, text, parse_special)
                assert tok.encode_reference(text, parse_special=parse_special) == expected
                checked += 1
    assert checked > 2 * 200
    if pre == "whitespace":  # a space next to other whitespace: most prose has one
        assert aborted > 50
    else:
        assert aborted == 0


@pytest.mark.parametrize("pre", PRES)
def test_raw_bytes_match_llama_cpp(pre, tok):
    for data_hex, expected in _record(pre)["bytes"]:
        data = bytes.fromhex(data_hex)
        if expected is None:
            with pytest.raises(InputError, match="aborts"):
                tok.encode_bytes(data, parse_special=False)
        else:
            assert tok.encode_bytes(data, parse_special=False) == expected, data


@pytest.mark.parametrize("pre", PRES)
def test_bos_detokenize_count_and_batch_match(pre, tok, texts):
    record = _record(pre)
    assert tok.encode("Hi", parse_special=False, add_special=True) == record["bos"]
    detokenized = [(ids, detok) for ids, detok in zip(record["ids"], record["detok"]) if ids is not None]
    assert len(detokenized) > 20
    for ids, detok in detokenized:  # clean_spaces (not for sarvam-moe) included
        assert tok.decode_bytes(ids) == bytes.fromhex(detok), ids
    sample = [t for t, ids in zip(texts, record["ids"]) if ids is not None][:60]
    expected = [ids for ids in record["ids"] if ids is not None][:60]
    assert tok.encode_batch(sample, parse_special=False) == expected
    assert [tok.count(t, parse_special=False) for t in sample] == list(map(len, expected))


@pytest.mark.parametrize("pre", PRES)
def test_token_to_piece_matches_llama_cpp_for_every_id(pre, tok):
    import hashlib

    record = _record(pre)
    rows = [[i, tok.piece(i).hex(), tok.token_bytes(i).hex()] for i in range(tok.n_tokens)]
    for row in record["pieces_sample"]:
        assert rows[row[0]] == row
    assert hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest() == record["pieces_sha256"]


def test_whitespace_refusal_names_the_input_and_the_reason(tmp_path):
    tok = bpetok.from_gguf(gemma4_as_gpt2(tmp_path / "ws.gguf", "whitespace"))
    with pytest.raises(InputError, match=r"'a  b'.*piece '  '.*llama.cpp aborts.*whitespace"):
        tok.encode("a  b")
    assert tok.encode("a\tb") == tok.encode("a") + [tok.id("\t")] + tok.encode("b")


@pytest.mark.parametrize("pre", ["whitespace", "mmbert"])
def test_the_trainer_refuses_a_raw_utf8_pre(pre):
    from bpetok.train import train

    with pytest.raises(bpetok.BpetokError, match=f"'{pre}'.*raw UTF-8.*byte-level BPE only"):
        train(texts=["low lower lowest"] * 5, vocab_size=262, min_frequency=1, progress=False, pre=pre)
