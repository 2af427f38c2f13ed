"""The installed plugin: its entry point, its pre names, `bpetok export`, blocking it."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

import bpetok
from bpetok.plugins import make_plugin_manager
from bpetok_hf.writer import ExportError, export_hf

# llama.cpp's test vocabularies in bpetok's own test data.
LLAMA_TESTS = pathlib.Path(__file__).resolve().parents[3] / "tests" / "data" / "llama.cpp-tests"


def _bpetok(*args, input_text=None):
    return subprocess.run(
        [sys.executable, "-m", "bpetok.apps.cli", *map(str, args)], capture_output=True, text=True, input=input_text
    )


def test_installed_entry_point_registers_the_hf_regex_pre_names():
    done = _bpetok("list-pretokenizers", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    for pre, ignore_merges in (("hf-regex", False), ("hf-regex-ignore-merges", True)):
        assert rows[pre]["plugin"] == "hf" and rows[pre]["distribution"] == "bpetok-hf"
        assert rows[pre]["ignore_merges"] is ignore_merges


def test_export_command_writes_both_files_and_tokenize_reads_them(gguf_path, tmp_path):
    done = _bpetok("export", gguf_path("qwen3"), "--format", "hf", "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    done = _bpetok("tokenize", tmp_path / "out" / "tokenizer.json", input_text="Hello world<|im_end|>")
    assert json.loads(done.stdout) == {"tokens": [9707, 1879, 151645]}  # llama.cpp's ids for the GGUF
    config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["eos_token"] == "<|im_end|>" and config["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_export_command_errors_are_one_line(tmp_path):
    done = _bpetok("export", tmp_path / "missing.gguf", "-o", tmp_path / "out")
    assert done.returncode == 1 and done.stderr.startswith("bpetok: error: ") and "missing.gguf" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def _raw_utf8_copy(tmp_path) -> pathlib.Path:
    """llama.cpp's Gemma 4 test vocabulary as a gpt2 model with pre mmbert (BPE over raw UTF-8)."""
    from bpetok.vocab.gguf import GGUFValueType, read_gguf
    from bpetok.vocab.gguf_writer import items_of, write_gguf

    items = []
    for key, vtype, value, elem in items_of(read_gguf(LLAMA_TESTS / "ggml-vocab-gemma-4.gguf.gz")):
        if key == "tokenizer.ggml.model":
            items += [(key, vtype, "gpt2", elem), ("tokenizer.ggml.pre", GGUFValueType.STRING, "mmbert", None)]
        else:
            items.append((key, vtype, value, elem))
    write_gguf(tmp_path / "mmbert.gguf", items)
    return tmp_path / "mmbert.gguf"


@pytest.mark.parametrize("vocab", ["mmbert"])
def test_export_refuses_what_is_not_byte_level_bpe(vocab, tmp_path):
    path = _raw_utf8_copy(tmp_path) if vocab == "mmbert" else LLAMA_TESTS / vocab
    done = _bpetok("export", path, "--format", "hf", "-o", tmp_path / "out")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"bpetok: error: {path}: ") and done.stderr.count("\n") == 1
    assert "byte-level BPE (gpt2)" in done.stderr and not (tmp_path / "out").exists()
    what = {"mmbert": "pre 'mmbert' runs BPE over raw UTF-8"}[vocab]
    assert what in done.stderr
    with pytest.raises(ExportError, match="byte-level BPE"):  # a ValueError subclass from bpetok's errors
        export_hf(bpetok.from_file(path), tmp_path / "out")


def test_blocked_plugin_leaves_tokenizer_json_unread(exported, monkeypatch):
    assert "export" in _bpetok("--help").stdout
    monkeypatch.setenv("BPETOK_DISABLE_PLUGINS", "hf")
    pm = make_plugin_manager()
    with pytest.raises(bpetok.BpetokError, match="no installed vocabulary loader"):
        bpetok.from_file(exported("qwen3") / "tokenizer.json", plugin_manager=pm)
    assert "export" not in _bpetok("--help").stdout  # the command came with the plugin
