"""The plugin as bpetok sees it: registration, the installed entry point, blocking, the CLI."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

import bpetok
import bpetok_llama3
from bpetok.plugins import DISABLE_ENV, PreTokenizerRegistry, make_plugin_manager

ENTRY_POINT = "llama3"
# llama.cpp src/llama-vocab.cpp: every pre name mapped to LLAMA_VOCAB_PRE_TYPE_LLAMA3.
LLAMA3_PRE_NAMES = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"}
NOT_INSTALLED = "bpetok-llama3 is not installed; run: python3 -m pip install -e plugins/bpetok-llama3"


def bpetok_cli(*args: str, env_extra: dict[str, str] | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    """Run ``bpetok ARGS`` in a fresh interpreter, so entry points are discovered as a user's would be."""
    env = {k: v for k, v in os.environ.items() if k != DISABLE_ENV}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "bpetok.cli", *args],
        input=stdin.encode(), capture_output=True, env=env, timeout=120,
    )


def installed_distribution() -> importlib.metadata.Distribution:
    try:
        return importlib.metadata.distribution("bpetok-llama3")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(NOT_INSTALLED)


# -- registration --------------------------------------------------------------------------------


def test_registers_every_llama3_pre_name_with_llama_cpp_s_flags(plugin_manager):
    registry = PreTokenizerRegistry(plugin_manager)
    assert set(bpetok_llama3.PRE_NAMES) == LLAMA3_PRE_NAMES
    for pre in sorted(LLAMA3_PRE_NAMES):
        row = registry.get("gpt2", pre)
        assert row is not None, pre
        assert row.spec.name == "llama3"
        assert row.spec.plugin == "llama3"
        assert (row.spec.ignore_merges, row.spec.add_bos, row.spec.clean_spaces) == (True, True, True)
    assert registry.get("gpt2", "llama4") is None  # llama.cpp maps llama4 to GPT4O, not LLAMA3


def test_from_gguf_uses_the_plugin(plugin_manager, llama_bpe_path):
    tok = bpetok.from_gguf(llama_bpe_path, plugin_manager=plugin_manager)
    assert (tok.vocabulary.pre, tok.spec.name, tok.spec.plugin) == ("llama-bpe", "llama3", "llama3")
    assert tok.encode("Hello world<|eot_id|>") == [9906, 1917, 128009]


# -- without the plugin ----------------------------------------------------------------------------


def test_without_the_plugin_llama_bpe_is_refused(llama_bpe_path):
    pm = make_plugin_manager(load_entry_points=False)  # the GGUF loader and overrides, no pre-tokenizer
    with pytest.raises(bpetok.UnsupportedVocabularyError) as info:
        bpetok.from_gguf(llama_bpe_path, plugin_manager=pm)
    message = str(info.value)
    assert str(llama_bpe_path) in message
    assert "tokenizer.ggml.pre='llama-bpe'" in message
    assert "Installed: none" in message
    assert "docs/plugins.md" in message  # what to do


def test_blocking_the_entry_point_refuses_llama_bpe(monkeypatch, llama_bpe_path):
    installed_distribution()
    monkeypatch.setenv(DISABLE_ENV, ENTRY_POINT)
    pm = make_plugin_manager()  # entry points loaded, this one blocked
    assert pm.is_blocked(ENTRY_POINT)
    with pytest.raises(bpetok.UnsupportedVocabularyError, match="tokenizer.ggml.pre='llama-bpe'") as info:
        bpetok.from_gguf(llama_bpe_path, plugin_manager=pm)
    installed = str(info.value).split("Installed: ")[1]
    assert "qwen2 (gpt2)" in installed and "llama-bpe (gpt2)" not in installed


def test_blocked_plugin_cli_gives_the_helpful_error(llama_bpe_path):
    installed_distribution()
    result = bpetok_cli("info", str(llama_bpe_path), env_extra={DISABLE_ENV: ENTRY_POINT})
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert stderr.startswith("bpetok: error: ") and "Traceback" not in stderr
    assert "tokenizer.ggml.pre='llama-bpe'" in stderr and "install a package" in stderr
    listed = json.loads(bpetok_cli("list-pretokenizers", "--json", env_extra={DISABLE_ENV: ENTRY_POINT}).stdout)
    assert not {row["name"] for row in listed} & LLAMA3_PRE_NAMES


# -- installed -------------------------------------------------------------------------------------


def test_installed_entry_point():
    dist = installed_distribution()
    eps = [ep for ep in dist.entry_points if ep.group == "bpetok"]
    assert [(ep.name, ep.value) for ep in eps] == [(ENTRY_POINT, "bpetok_llama3")]
    assert eps[0].load() is bpetok_llama3
    assert any(req.startswith("bpetok") and not req.startswith("bpetok-") for req in dist.requires or [])


def test_list_pretokenizers_shows_the_distribution_and_version():
    dist = installed_distribution()
    result = bpetok_cli("list-pretokenizers", "--json")
    assert result.returncode == 0, result.stderr.decode()
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert LLAMA3_PRE_NAMES <= set(rows)
    for pre in LLAMA3_PRE_NAMES:
        row = rows[pre]
        assert (row["distribution"], row["version"]) == ("bpetok-llama3", dist.version), row
        assert (row["plugin"], row["pretokenizer"], row["model"]) == (ENTRY_POINT, "llama3", "gpt2")
        assert row["ignore_merges"] is True and row["clean_spaces"] is True
    table = bpetok_cli("list-pretokenizers").stdout.decode()
    line = next(line for line in table.splitlines() if line.startswith("llama-bpe "))
    assert line.split() == ["llama-bpe", "gpt2", "llama3", "llama3", "bpetok-llama3", dist.version]


def test_from_gguf_picks_the_installed_plugin(llama_bpe_path):
    installed_distribution()
    script = (
        "import json, sys, bpetok\n"
        "tok = bpetok.from_gguf(sys.argv[1])\n"
        "print(json.dumps([tok.spec.plugin, tok.encode('Hello world<|eot_id|>'), tok.encode('Hi', add_special=True)]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != DISABLE_ENV}
    result = subprocess.run([sys.executable, "-c", script, str(llama_bpe_path)], capture_output=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout) == [ENTRY_POINT, [9906, 1917, 128009], [128000, 13347]]


def test_cli_info_and_tokenize(llama_bpe_path):
    installed_distribution()
    info = json.loads(bpetok_cli("info", str(llama_bpe_path), "--json").stdout)
    assert (info["pre"], info["pretokenizer"], info["plugin"]) == ("llama-bpe", "llama3", ENTRY_POINT)
    assert (info["n_tokens"], info["add_bos"], info["eog_ids"]) == (128256, True, [128001, 128009])
    out = bpetok_cli("tokenize", str(llama_bpe_path), stdin="Hello world 1234567<|eot_id|>")
    assert json.loads(out.stdout) == {"tokens": [9906, 1917, 220, 4513, 10961, 22, 128009]}
