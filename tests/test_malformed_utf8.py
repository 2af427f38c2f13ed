"""Raw bytes, invalid UTF-8 included: llama.cpp's ids, recorded live by scripts/record_malformed_utf8.py.

Lone continuation bytes, truncated sequences, overlongs, encoded surrogates, 0xF8..0xFF, next to
letters and special tokens, and random mixes; a sequence past U+10FFFF makes llama.cpp abort
(recorded as ``ids: null``; Gemma 4 also aborts on an overlong space) and is an InputError here.
"""

from __future__ import annotations

import gzip
import json

import pytest

from bpetok.apps.cli import main
from bpetok.errors import InputError
from helpers import DATA, QWEN3, SMOLLM2, VOCABS


def load(name: str) -> list[dict]:
    with gzip.open(DATA / f"malformed-utf8-{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_encode_bytes_matches_llama_cpp_on_malformed_utf8(vocab_tokenizer):
    name, tok = vocab_tokenizer
    cases = load(name)
    assert len(cases) > 1000
    wrong = []
    for case in cases:
        data = bytes.fromhex(case["hex"])
        if case["ids"] is None:
            with pytest.raises(InputError, match="llama.cpp aborts"):
                tok.encode_bytes(data, parse_special=case["special"])
            continue
        got = tok.encode_bytes(data, parse_special=case["special"])
        if got != case["ids"]:
            wrong.append((data, case["special"], got, case["ids"]))
    assert not wrong, f"{len(wrong)} of {len(cases)} differ, e.g. {wrong[:3]}"


def test_encode_bytes_of_valid_utf8_is_encode(qwen3):
    text = "Hello <|im_end|> wörld 𓀀"
    for special in (False, True):
        assert qwen3.encode_bytes(text.encode(), parse_special=special) == qwen3.encode(text, parse_special=special)
    assert qwen3.encode_bytes(bytearray(b"hi")) == qwen3.encode_bytes(memoryview(b"hi")) == qwen3.encode("hi")
    with pytest.raises(TypeError, match="use encode\\(\\) for a str"):
        qwen3.encode_bytes("hi")


def test_beyond_unicode_error_names_the_offset(qwen3):
    with pytest.raises(InputError, match="f4 90 80 80 at offset 13"):
        qwen3.encode_bytes(b"a<|im_end|>\xffb\xf4\x90\x80\x80c")


@pytest.mark.parametrize("name, path", [("qwen3", QWEN3), ("smollm2", SMOLLM2)])
def test_cli_tokenizes_the_raw_bytes_of_stdin_and_file(name, path, tmp_path, capsys, monkeypatch):
    assert VOCABS[name] == path
    cases = [c for c in load(name) if c["ids"] is not None][::150]
    for case in cases:
        data = bytes.fromhex(case["hex"])
        flags = [] if case["special"] else ["--no-special"]
        file = tmp_path / "in.bin"
        file.write_bytes(data)
        assert main(["tokenize", str(path), "--file", str(file), *flags]) == 0
        assert json.loads(capsys.readouterr().out) == {"tokens": case["ids"]}, data
        monkeypatch.setattr("sys.stdin", _Stdin(data))
        assert main(["tokenize", str(path), *flags]) == 0
        assert json.loads(capsys.readouterr().out) == {"tokens": case["ids"]}, data


def test_cli_reports_input_llama_cpp_aborts_on(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", _Stdin(b"ok \xf7\xbf\xbf\xbf"))
    assert main(["tokenize", str(QWEN3)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bpetok: error: bytes f7 bf bf bf at offset 3") and "remove or replace" in err


class _Stdin:
    def __init__(self, data: bytes):
        import io

        self.buffer = io.BytesIO(data)
