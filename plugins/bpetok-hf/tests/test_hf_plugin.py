"""The installed plugin: its entry point, its pre names, `bpetok export`, blocking it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import bpetok
from bpetok.plugins import make_plugin_manager


def _bpetok(*args, input_text=None):
    return subprocess.run(
        [sys.executable, "-m", "bpetok.cli", *map(str, args)], capture_output=True, text=True, input=input_text
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
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    done = _bpetok("tokenize", tmp_path / "out" / "tokenizer.json", input_text="Hello world<|im_end|>")
    assert json.loads(done.stdout) == {"tokens": [9707, 1879, 151645]}  # llama.cpp's ids for the GGUF
    config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["eos_token"] == "<|im_end|>" and config["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_export_command_errors_are_one_line(tmp_path):
    done = _bpetok("export", tmp_path / "missing.gguf", "-o", tmp_path / "out")
    assert done.returncode == 1 and done.stderr.startswith("bpetok: error: ") and "missing.gguf" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_blocked_plugin_leaves_tokenizer_json_unread(exported, monkeypatch):
    assert "export" in _bpetok("--help").stdout
    monkeypatch.setenv("BPETOK_DISABLE_PLUGINS", "hf")
    pm = make_plugin_manager()
    with pytest.raises(bpetok.BpetokError, match="no installed vocabulary loader"):
        bpetok.from_file(exported("qwen3") / "tokenizer.json", plugin_manager=pm)
    assert "export" not in _bpetok("--help").stdout  # the command came with the plugin
