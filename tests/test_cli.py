"""The bpetok command line: listing, info, tokenize, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import bpetok
from bpetok.apps.cli import main
from helpers import LLAMA_TESTS, QWEN3, SMOLLM2, gguf_with_pre


def run(*args, stdin: bytes = b""):
    """Run the installed console script as a user would."""
    return subprocess.run(["bpetok", *map(str, args)], input=stdin, capture_output=True, timeout=120)


def test_list_pretokenizers_json_lists_the_builtins_with_their_distribution():
    result = run("list-pretokenizers", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    for name in ("qwen2", "smollm"):
        assert rows[name]["distribution"] == "bpetok"
        assert rows[name]["version"] == bpetok.__version__
        assert rows[name]["model"] == "gpt2" and rows[name]["plugin"] == name


def test_list_pretokenizers_table(capsys):
    assert main(["list-pretokenizers"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["name", "model", "pretokenizer", "llama_type"]
    assert any(line.split()[0] == "smollm" for line in out[1:])
    lines = {line.split()[0]: line.split() for line in out[1:]}
    assert lines["llama4"][:4] == ["llama4", "gpt2", "gpt4o", "GPT4O"]
    assert lines["-"][:4] == ["-", "gpt2", "default", "DEFAULT"]  # a file without tokenizer.ggml.pre
    builtin = [line for line in lines.values() if line[5] == "bpetok"]  # installed plugins may add more
    assert len(builtin) == 93  # llama.cpp's 92 BPE pre names and the missing key
    assert lines["mmbert"][:4] == ["mmbert", "gpt2", "gemma4", "MMBERT"]
    assert lines["whitespace"][:4] == ["whitespace", "gpt2", "whitespace", "WHITESPACE"]


def test_info_names_a_raw_utf8_type(capsys, tmp_path):
    from test_raw_utf8 import gemma4_as_gpt2

    path = gemma4_as_gpt2(tmp_path / "sarvam.gguf", "sarvam-moe")
    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["model"], info["pre"], info["pretokenizer"], info["llama_type"]) == (
        "gpt2", "sarvam-moe", "gemma4", "SARVAM_MOE")


def test_info_names_the_llama_cpp_type(capsys):
    assert main(["info", str(LLAMA_TESTS / "ggml-vocab-falcon.gguf.gz"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["pre"], info["pretokenizer"], info["llama_type"]) == ("falcon", "default", "FALCON")


def test_list_models_json_lists_the_builtins_with_their_plugin():
    result = run("list-models", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["gpt2"]["plugin"] == "bpetok.models.gpt2" and rows["gpt2"]["distribution"] == "bpetok"
    assert rows["gpt2"]["pretokenized"] is True


def test_list_models_table(capsys):
    assert main(["list-models"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["name", "plugin"]
    assert any(line.split()[:2] == ["gpt2", "bpetok.models.gpt2"] for line in out[1:])


def test_info_json_reports_counts_and_special_ids(capsys):
    assert main(["info", str(QWEN3), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["n_tokens"] == 151_936 and info["pre"] == "qwen2" and info["model"] == "gpt2"
    assert sum(info["token_types"].values()) == 151_936
    assert info["eog_ids"] == [128247, 151643, 151645, 151662, 151663, 151664]
    assert info["special_ids"]["eos"] == 151645


def test_info_text(capsys):
    assert main(["info", str(SMOLLM2)]) == 0
    out = capsys.readouterr().out
    assert "n_tokens:        49,152" in out and "eog_ids:         0, 2, 4" in out


def test_tokenize_reads_stdin_and_parses_specials_by_default():
    tok = bpetok.from_gguf(QWEN3)
    text = "Hello <|im_end|> wörld"
    result = run("tokenize", QWEN3, stdin=text.encode())
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"tokens": tok.encode(text, parse_special=True)}
    result = run("tokenize", QWEN3, "--no-special", stdin=text.encode())
    assert json.loads(result.stdout) == {"tokens": tok.encode(text, parse_special=False)}


def test_tokenize_pieces_and_file(tmp_path, capsys):
    path = tmp_path / "in.txt"
    path.write_text("é<think>", encoding="utf-8")
    assert main(["tokenize", str(QWEN3), "--file", str(path), "--pieces"]) == 0
    tokens = json.loads(capsys.readouterr().out)["tokens"]
    assert "".join(t["piece"] for t in tokens) == "é<think>"
    assert tokens[-1]["piece"] == "<think>"


def test_tokenize_piece_that_is_not_utf8_is_a_byte_list(capsys, tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("𓀀", encoding="utf-8")  # Qwen3 splits it into partial UTF-8 byte tokens
    assert main(["tokenize", str(QWEN3), "--file", str(path), "--pieces"]) == 0
    tokens = json.loads(capsys.readouterr().out)["tokens"]
    assert any(isinstance(t["piece"], list) for t in tokens)
    joined = b"".join(bytes(t["piece"]) if isinstance(t["piece"], list) else t["piece"].encode() for t in tokens)
    assert joined == "𓀀".encode()


@pytest.mark.parametrize(
    "args, message",
    [
        (["info", "missing.gguf"], "missing.gguf: no such file"),
        (["tokenize", str(QWEN3), "--file", "missing.txt"], "missing.txt: cannot read"),
    ],
)
def test_errors_are_one_line_without_traceback(args, message):
    result = run(*args)
    assert result.returncode == 1
    err = result.stderr.decode()
    assert err.startswith("bpetok: error: ") and message in err
    assert "Traceback" not in err


def test_unknown_pre_is_one_line(tmp_path):
    path = gguf_with_pre(LLAMA_TESTS / "ggml-vocab-falcon.gguf.gz", tmp_path / "unknown.gguf", "no-such-pre")
    result = run("info", path)
    err = result.stderr.decode()
    assert result.returncode == 1 and err.startswith("bpetok: error: ") and "Traceback" not in err
    assert "'no-such-pre'" in err and "Installed:" in err


def test_corrupt_file_is_one_line(tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    result = run("info", path)
    assert result.returncode == 1 and "Traceback" not in result.stderr.decode()
    assert str(path) in result.stderr.decode()


def test_module_entry_point():
    result = subprocess.run([sys.executable, "-m", "bpetok.apps.cli", "--version"], capture_output=True, timeout=60)
    from bpetok.models.gpt2 import engine

    assert result.stdout.decode().strip() == f"bpetok {bpetok.__version__}, engine: {engine()}"


def test_model_that_is_not_a_file_says_what_it_is(tmp_path, capsys):
    import os

    fifo = tmp_path / "model.fifo"
    os.mkfifo(fifo)
    for path, kind in ((tmp_path, "is a directory"), (fifo, "is a named pipe (FIFO)"), ("/dev/null", "is a character device")):
        for command in (["info", str(path)], ["tokenize", str(path)]):
            assert main(command) == 1
            err = capsys.readouterr().err
            assert err.startswith(f"bpetok: error: {path}: {kind}, not a file") and err.count("\n") == 1, err
    with pytest.raises(bpetok.BpetokError, match="is a directory"):
        bpetok.from_gguf(tmp_path)


class _RecordingStdout:
    """A stdout that keeps what is written and the size of the largest single write."""

    def __init__(self):
        self.parts: list[str] = []
        self.largest = 0

    def write(self, text: str) -> int:
        self.parts.append(text)
        self.largest = max(self.largest, len(text))
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("pieces", [False, True])
def test_tokenize_streams_its_output(tmp_path, monkeypatch, pieces):
    # A 60 MB input with --pieces peaked at 6 GB when the whole JSON was built before printing.
    text = "Hello world, this is a line of text. <|im_end|>\n" * 20_000  # 220,000 tokens
    path = tmp_path / "in.txt"
    path.write_text(text, encoding="utf-8")
    out = _RecordingStdout()
    monkeypatch.setattr("sys.stdout", out)
    assert main(["tokenize", str(QWEN3), "--file", str(path), *(["--pieces"] if pieces else [])]) == 0
    written = "".join(out.parts)
    tokens = json.loads(written)["tokens"]
    ids = [t["id"] for t in tokens] if pieces else tokens
    assert ids == bpetok.from_gguf(QWEN3).encode(text)
    assert out.largest < len(written) / 3, "the output was built whole, then written"
