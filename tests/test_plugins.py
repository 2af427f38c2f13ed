"""The plugin system: hooks with temporary plugins, entry-point discovery, blocking, refusals."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
import types

import pytest

import bpetok
from bpetok import hookimpl
from bpetok.plugins import DISABLE_ENV, PreTokenizerRegistry, make_plugin_manager
from bpetok.models import TokenizerModel
from bpetok.pretok import PreTokenizerSpec
from bpetok.pretok import qwen2 as qwen2_plugin
from helpers import LLAMA_TESTS, QWEN3, SMOLLM2, gguf_with_pre


@pytest.fixture
def pm():
    """A fresh manager with the built-ins (models, pre-tokenizers, commands), no entry points."""
    return make_plugin_manager(load_entry_points=False)


@pytest.fixture
def temporary_plugin(pm):
    """Register plugins for one test and always unregister them."""
    registered = []

    def add(plugin, name):
        pm.register(plugin, name=name)
        registered.append(plugin)
        return plugin

    try:
        yield add
    finally:
        for plugin in registered:
            pm.unregister(plugin)


class WordSplitter:
    """A toy pre-tokenizer: runs of non-space, each with its leading spaces."""

    def split(self, text):
        import re

        return re.findall(r"\s*\S+|\s+", text)


# -- bpetok_register_pretokenizers ---------------------------------------------------------------


def test_register_pretokenizers_adds_keys_with_their_plugin(pm, temporary_plugin):
    class Plugin:
        @hookimpl
        def bpetok_register_pretokenizers(self, register):
            register(PreTokenizerSpec(name="words", pre_names=("words", "words-v2"), factory=WordSplitter))

    temporary_plugin(Plugin(), "words-plugin")
    registry = PreTokenizerRegistry(pm)
    row = registry.get("gpt2", "words-v2")
    assert row is not None and row.spec.name == "words" and row.spec.plugin == "words-plugin"
    assert ("gpt2", "qwen2") in registry.keys() and ("gpt2", "smollm") in registry.keys()


def test_for_vocabulary_builds_the_pretokenizer_the_file_describes(pm, temporary_plugin):
    # A pre name whose pieces the file describes: the engine hands the loaded vocabulary over.
    class PatternSplitter:
        def __init__(self, pattern):
            import re

            self.regex = re.compile(pattern)

        def split(self, text):
            return self.regex.findall(text)

    class Plugin:
        @hookimpl
        def bpetok_register_pretokenizers(self, register):
            register(
                PreTokenizerSpec(
                    name="described",
                    pre_names=("described",),
                    factory=WordSplitter,
                    for_vocabulary=lambda vocab: PatternSplitter(vocab.metadata["test.pattern"]),
                )
            )

    temporary_plugin(Plugin(), "described-plugin")
    vocab = bpetok.load_vocabulary(QWEN3, plugin_manager=pm)
    vocab.pre = "described"
    vocab.metadata["test.pattern"] = r"\w|\W"  # one character per piece: no merge can apply
    tok = bpetok.tokenizer.from_vocabulary(vocab, plugin_manager=pm)
    assert tok.encode("Hello") == [tok.id(c) for c in "Hello"]
    assert len(bpetok.from_file(QWEN3, plugin_manager=pm).encode("Hello")) == 1


def test_duplicate_key_names_both_plugins(pm, temporary_plugin):
    class Rival:
        @hookimpl
        def bpetok_register_pretokenizers(self, register):
            register(PreTokenizerSpec(name="fake-qwen2", pre_names=("qwen2",), factory=WordSplitter))

    temporary_plugin(Rival(), "rival")
    with pytest.raises(bpetok.PluginError) as info:
        PreTokenizerRegistry(pm)
    message = str(info.value)
    assert "'qwen2'" in message and "'rival'" in message and DISABLE_ENV in message


def test_malformed_registration_is_a_plugin_error(pm, temporary_plugin):
    class Bad:
        @hookimpl
        def bpetok_register_pretokenizers(self, register):
            register(("not", "a", "spec"))

    temporary_plugin(Bad(), "bad")
    with pytest.raises(bpetok.PluginError, match="PreTokenizerSpec"):
        PreTokenizerRegistry(pm)


def test_third_party_pretokenizer_is_used_for_its_pre_name(pm, temporary_plugin, monkeypatch):
    """A plugin can claim an existing vocabulary's pre name once the built-in is gone."""
    pm.unregister(name="smollm")

    class Plugin:
        @hookimpl
        def bpetok_register_pretokenizers(self, register):
            register(PreTokenizerSpec(name="words", pre_names=("smollm",), factory=WordSplitter))

    temporary_plugin(Plugin(), "words-plugin")
    tok = bpetok.from_gguf(SMOLLM2, plugin_manager=pm)
    assert tok.spec.plugin == "words-plugin"
    # One piece "  x" now, where smollm's pre-tokenizer gives " " and " x".
    assert tok.encode("  x") == tok.model.bpe.encode_piece(b"  x")
    assert tok.encode("  x") != bpetok.from_gguf(SMOLLM2).encode("  x")
    assert tok.decode(tok.encode(" 123 abc")) == " 123 abc"


# -- bpetok_register_models ----------------------------------------------------------------------


class CharacterModel(TokenizerModel):
    """A toy model: one id per character that is a token, whole fragments at a time."""

    def __init__(self, vocabulary, pretokenizer):
        self.index = vocabulary.token_index()
        self.starts = []

    def encode_fragment(self, text, at_start):
        self.starts.append(at_start)
        return [self.index[c.encode()] for c in text if c.encode() in self.index]

    def normal_piece(self, text):
        return text.upper()


def _toy_vocabulary(model="chars"):
    return bpetok.Vocabulary(
        path="toy.gguf", model=model, pre="", tokens=[b"a", b"b", b"<sep>"], token_types=[1, 1, 3], merges=[],
    )


def test_register_models_adds_a_model_the_tokenizer_calls(pm, temporary_plugin):
    from bpetok.models import ModelSpec
    from bpetok.plugins import get_model_registry

    class Plugin:
        @hookimpl
        def bpetok_register_models(self, register):
            register(ModelSpec(name="chars", factory=CharacterModel, pretokenized=False, special_ids={"bos": 2}))

    temporary_plugin(Plugin(), "chars-plugin")
    row = get_model_registry(pm).get("chars")
    assert row.spec.plugin == "chars-plugin" and get_model_registry(pm).get("gpt2").spec.plugin == "bpetok.models.gpt2"
    tok = bpetok.Tokenizer(_toy_vocabulary(), plugin_manager=pm)
    assert tok.spec is None and tok.vocabulary.special_ids["bos"] == 2  # the model's default
    assert tok.encode("ab<sep>ba") == [0, 1, 2, 1, 0]
    assert tok.model.starts == [True, True]  # the text's start, then after a special token
    assert tok.decode([0, 2, 1]) == "A<sep>B"
    # A model without encode_fragment_bytes gets invalid UTF-8 decoded by llama.cpp's rule.
    assert tok.encode_bytes(b"a\xff<sep>b") == [0, 2, 1]


def test_a_model_outside_the_contract_is_refused_at_load(pm, temporary_plugin):
    from bpetok.models import ModelSpec

    class Loose:  # the two methods, but not the base class: its batch and bytes calls are missing
        def __init__(self, vocabulary, pretokenizer):
            pass

        def encode_fragment(self, text, at_start):
            return []

        def normal_piece(self, text):
            return text

    class Plugin:
        @hookimpl
        def bpetok_register_models(self, register):
            register(ModelSpec(name="chars", factory=Loose, pretokenized=False))

    temporary_plugin(Plugin(), "loose-plugin")
    with pytest.raises(bpetok.PluginError, match="'loose-plugin'.*Loose.*TokenizerModel.*docs/hooks.md"):
        bpetok.Tokenizer(_toy_vocabulary(), plugin_manager=pm)


def test_unknown_model_is_refused_with_what_is_installed(pm):
    with pytest.raises(bpetok.UnsupportedVocabularyError) as info:
        bpetok.Tokenizer(_toy_vocabulary("no-such-model"), plugin_manager=pm)
    message = str(info.value)
    assert "'no-such-model'" in message and "toy.gguf" in message
    assert "gpt2 (bpetok.models.gpt2)" in message and "bpetok_register_models" in message


def test_duplicate_model_names_both_plugins(pm, temporary_plugin):
    from bpetok.models import ModelSpec
    from bpetok.plugins import get_model_registry

    class Rival:
        @hookimpl
        def bpetok_register_models(self, register):
            register(ModelSpec(name="gpt2", factory=CharacterModel))

    temporary_plugin(Rival(), "rival")
    with pytest.raises(bpetok.PluginError) as info:
        get_model_registry(pm)
    assert "'gpt2'" in str(info.value) and "'rival'" in str(info.value) and "bpetok.models.gpt2" in str(info.value)


# -- the contract: calls through pluggy, one registry per manager, overrides run once ------------------


def test_implementations_may_take_a_subset_of_the_arguments(pm, temporary_plugin):
    """hookspecs.py promises it: the registries call implementations through pluggy."""
    from bpetok.plugins import get_model_registry, get_registry

    called = []

    class NoArguments:
        @hookimpl
        def bpetok_register_pretokenizers(self):
            called.append("pretokenizers")

        @hookimpl
        def bpetok_register_models(self):
            called.append("models")

    temporary_plugin(NoArguments(), "no-arguments")
    assert get_registry(pm).get("gpt2", "qwen2") is not None
    assert get_model_registry(pm).get("gpt2") is not None
    assert sorted(called) == ["models", "pretokenizers"]


def test_one_registry_per_plugin_manager(pm, temporary_plugin):
    from bpetok.plugins import get_model_registry, get_registry

    assert get_registry(pm) is get_registry(pm) and get_model_registry(pm) is get_model_registry(pm)
    other = make_plugin_manager(load_entry_points=False)
    assert get_registry(other) is not get_registry(pm)
    before = get_registry(pm)

    class Plugin:
        @hookimpl
        def bpetok_register_pretokenizers(self, register):
            register(PreTokenizerSpec(name="words", pre_names=("words",), factory=WordSplitter))

    temporary_plugin(Plugin(), "words-plugin")  # a new plugin: the registry is rebuilt once
    after = get_registry(pm)
    assert after is not before and after.get("gpt2", "words") is not None and get_registry(pm) is after


def test_attribute_overrides_run_once_whoever_builds_the_tokenizer(pm, temporary_plugin):
    calls = []

    class Counter:
        @hookimpl
        def bpetok_adjust_token_attributes(self, vocabulary):
            calls.append(vocabulary.path)

    temporary_plugin(Counter(), "counter")
    vocab = bpetok.load_vocabulary(SMOLLM2, plugin_manager=pm)
    tok = bpetok.Tokenizer(vocab, plugin_manager=pm)
    bpetok.Tokenizer(vocab, tok.spec, plugin_manager=pm)
    assert calls == [str(SMOLLM2)]
    # A vocabulary built in memory (as the trainer does) gets them from the Tokenizer itself.
    fresh = _vocabulary(["a", "b", "<|im_end|>"], types=[1, 1, 3])
    tok = bpetok.Tokenizer(fresh, plugin_manager=pm)
    assert calls == [str(SMOLLM2), "test.gguf"] and tok.eog_ids == {2}


# -- bpetok_load_vocabulary ----------------------------------------------------------------------


def test_loader_plugin_serves_its_own_format(pm, temporary_plugin, tmp_path):
    source = bpetok.load_vocabulary(SMOLLM2, plugin_manager=pm)

    class JsonLoader:
        @hookimpl
        def bpetok_load_vocabulary(self, path):
            if not path.endswith(".vocab.json"):
                return None
            return bpetok.Vocabulary(
                path=path, model="gpt2", pre="smollm", tokens=list(source.tokens),
                token_types=list(source.token_types), merges=list(source.merges),
                special_id_keys=list(source.special_id_keys),
            )

    temporary_plugin(JsonLoader(), "json-loader")
    path = tmp_path / "x.vocab.json"
    path.write_text("{}")
    tok = bpetok.from_gguf(path, plugin_manager=pm)
    assert tok.encode("Hello world") == bpetok.from_gguf(SMOLLM2).encode("Hello world")
    assert tok.eog_ids == {0, 2, 4}  # the built-in overrides ran on the plugin's vocabulary


def test_file_no_loader_recognises_is_refused(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("hello")
    with pytest.raises(bpetok.BpetokError, match="no installed vocabulary loader"):
        bpetok.from_gguf(path)


# -- bpetok_adjust_token_attributes --------------------------------------------------------------


def test_attribute_plugin_runs_after_the_builtin_overrides(pm, temporary_plugin):
    seen = {}

    class MakeHelloSpecial:
        @hookimpl(trylast=True)
        def bpetok_adjust_token_attributes(self, vocabulary):
            seen["eog"] = set(vocabulary.eog_ids)  # the built-in overrides already ran
            hello = vocabulary.id_of(b"Hello")
            vocabulary.attrs[hello] = bpetok.TokenAttr.USER_DEFINED

    temporary_plugin(MakeHelloSpecial(), "hello")
    tok = bpetok.from_gguf(SMOLLM2, plugin_manager=pm)
    assert seen["eog"] == {0, 2, 4}
    hello = tok.id("Hello")
    # USER_DEFINED tokens are cut out of the text before BPE, even inside a word.
    assert tok.encode("xHelloy", parse_special=False)[1] == hello
    assert hello not in bpetok.from_gguf(SMOLLM2).encode("xHelloy")


# -- entry points ---------------------------------------------------------------------------------


class FakeEntryPoint:
    def __init__(self, name, module):
        self.name, self.group, self._module = name, "bpetok", module

    def load(self):
        return self._module


class FakeDistribution:
    def __init__(self, name, version, entry_points):
        self.metadata = {"name": name}
        self.version = version
        self.entry_points = entry_points


def _fake_plugin_module():
    module = types.ModuleType("bpetok_words")

    @hookimpl
    def bpetok_register_pretokenizers(register):
        register(PreTokenizerSpec(name="words", pre_names=("words",), factory=WordSplitter))

    module.bpetok_register_pretokenizers = bpetok_register_pretokenizers
    return module


def test_entry_point_discovery_with_a_faked_distribution(monkeypatch):
    dist = FakeDistribution("bpetok-words", "1.2.3", [FakeEntryPoint("words", _fake_plugin_module())])
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [dist])
    registry = PreTokenizerRegistry(make_plugin_manager())
    row = registry.get("gpt2", "words")
    assert (row.spec.plugin, row.distribution, row.version) == ("words", "bpetok-words", "1.2.3")
    assert registry.get("gpt2", "qwen2").spec.plugin == "qwen2"  # a built-in, with no entry point


def test_a_builtin_listed_again_as_an_entry_point_loads_once(monkeypatch):
    """An older bpetok's metadata (an editable install of another checkout) still lists built-in
    pre-tokenizers in the entry-point group, under their own name or another: each is one plugin,
    bpetok's, and its keys are registered once (no "registered by both" error)."""
    old = FakeDistribution("bpetok", "0.0.1", [FakeEntryPoint("qwen2", qwen2_plugin), FakeEntryPoint("renamed", qwen2_plugin),
                                               FakeEntryPoint("words", _fake_plugin_module())])
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [old])
    pm = make_plugin_manager()
    assert pm.get_name(qwen2_plugin) == "qwen2" and pm.get_plugin("renamed") is None
    registry = PreTokenizerRegistry(pm)
    row = registry.get("gpt2", "qwen2")
    assert (row.spec.plugin, row.distribution, row.version) == ("qwen2", "bpetok", bpetok.plugins._bpetok_version())
    assert registry.get("gpt2", "words").distribution == "bpetok"  # a third-party entry point of that distribution


def test_a_builtin_pretokenizer_can_be_blocked(monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "smollm")
    registry = PreTokenizerRegistry(make_plugin_manager(load_entry_points=False))
    assert registry.get("gpt2", "smollm") is None and registry.get("gpt2", "qwen2") is not None


def test_blocked_plugin_is_not_loaded(monkeypatch):
    dist = FakeDistribution("bpetok-words", "1.2.3", [FakeEntryPoint("words", _fake_plugin_module())])
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [dist])
    monkeypatch.setenv(DISABLE_ENV, "other, words")
    assert PreTokenizerRegistry(make_plugin_manager()).get("gpt2", "words") is None


def test_broken_plugin_is_a_plugin_error(monkeypatch):
    class Broken(FakeEntryPoint):
        def load(self):
            raise ImportError("No module named 'missing_dependency'")

    dist = FakeDistribution("bpetok-broken", "0.1", [Broken("broken", None)])
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [dist])
    with pytest.raises(bpetok.PluginError, match="missing_dependency"):
        make_plugin_manager()


def test_builtin_pretokenizers_come_from_the_module_list_not_entry_points(monkeypatch):
    """Every module of bpetok/pretok/ with a pre-tokenizer hook is in BUILTIN_PRETOKENIZERS and
    loads with no entry point at all; bpetok's pyproject.toml declares none (they are for third parties)."""
    import pathlib

    from bpetok.plugins import BUILTIN_PRETOKENIZERS

    root = pathlib.Path(__file__).resolve().parent.parent
    with_hook = sorted(p.stem for p in (root / "bpetok" / "pretok").glob("*.py")
                       if "def bpetok_register_pretokenizers" in p.read_text(encoding="utf-8"))
    assert sorted(BUILTIN_PRETOKENIZERS) == with_hook
    assert "\n[project.entry-points.bpetok]" not in (root / "pyproject.toml").read_text(encoding="utf-8")
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [])
    registry = PreTokenizerRegistry(make_plugin_manager())
    assert {registry.get(m, p).spec.plugin for m, p in registry.keys()} == set(BUILTIN_PRETOKENIZERS)
    row = registry.get("gpt2", "qwen2")
    assert (row.distribution, row.version) == ("bpetok", bpetok.plugins._bpetok_version())


# -- bpetok_register_commands ------------------------------------------------------------------


def _subcommands(parser):
    import argparse

    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(action.choices)


def test_register_commands_adds_a_plugin_s_subcommand(pm, temporary_plugin, capsys):
    from bpetok.apps.cli import build_parser

    class Greeter:
        @hookimpl
        def bpetok_register_commands(self, subparsers):
            p = subparsers.add_parser("greet", help="say hello")
            p.add_argument("name")
            p.set_defaults(func=lambda args: print(f"hello {args.name}") or 3)

    temporary_plugin(Greeter(), "greeter")
    args = build_parser(pm).parse_args(["greet", "world"])
    assert args.func(args) == 3
    assert capsys.readouterr().out == "hello world\n"


def test_builtin_commands_arrive_through_the_hook(pm):
    """train, extend, serve and encode-dataset are the built-in plugins bpetok.apps.train_cli, .server_cli, .datasets."""
    from bpetok.apps.cli import build_parser

    assert {"train", "extend", "serve", "encode-dataset"} <= _subcommands(build_parser(pm))
    names = {name for name, _ in pm.list_name_plugin()}
    assert {"bpetok.apps.train_cli", "bpetok.apps.server_cli", "bpetok.apps.datasets"} <= names
    impls = pm.hook.bpetok_register_commands.get_hookimpls()
    assert {impl.plugin_name for impl in impls} >= {"bpetok.apps.train_cli", "bpetok.apps.server_cli", "bpetok.apps.datasets"}


def test_a_command_module_that_fails_to_import_is_shown_not_skipped(monkeypatch):
    """A built-in command module with an ImportError is a bug: it raises, no command goes missing."""
    from bpetok import plugins

    monkeypatch.setattr(plugins, "BUILTIN_PLUGINS", plugins.BUILTIN_PLUGINS + ("bpetok.no_such_commands",))
    with pytest.raises(ImportError, match="bpetok.no_such_commands"):
        make_plugin_manager(load_entry_points=False)


def test_a_command_plugin_that_fails_to_load_is_reported_by_the_cli(monkeypatch, capsys):
    from bpetok import plugins
    from bpetok.apps import cli

    class Broken(FakeEntryPoint):
        def load(self):
            raise ImportError("No module named 'missing_dependency'")

    dist = FakeDistribution("bpetok-broken", "0.1", [Broken("broken", None)])
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [dist])
    monkeypatch.setattr(plugins, "_pm", None)
    assert cli.main(["list-pretokenizers"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bpetok: error: ") and "missing_dependency" in err and DISABLE_ENV in err


# -- refusals ----------------------------------------------------------------------------------


def test_unknown_pre_is_refused_with_what_is_installed(tmp_path):
    path = gguf_with_pre(LLAMA_TESTS / "ggml-vocab-falcon.gguf.gz", tmp_path / "unknown.gguf", "no-such-pre")
    with pytest.raises(bpetok.UnsupportedVocabularyError) as info:
        bpetok.from_gguf(path)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "'no-such-pre'" in message and "unknown.gguf" in message
    assert "qwen2" in message and "smollm" in message and "plugin" in message


def test_model_other_than_gpt2_is_refused(pm):
    vocab = bpetok.load_vocabulary(SMOLLM2, plugin_manager=pm)
    vocab.model = "llama"
    registry = PreTokenizerRegistry(pm)
    assert registry.get("llama", "smollm") is None


def _vocabulary(tokens, merges=(), types=None, pre="smollm"):
    return bpetok.Vocabulary(
        path="test.gguf", model="gpt2", pre=pre, tokens=[t.encode() for t in tokens],
        token_types=types or [1] * len(tokens), merges=[m.encode() for m in merges],
    )


def test_two_fill_in_the_middle_candidates_are_refused(pm):
    vocab = _vocabulary(["a", "b", "<fim_pad>", "<PAD>"], types=[1, 1, 1, 1])
    with pytest.raises(bpetok.VocabularyError, match="fim_pad"):
        pm.hook.bpetok_adjust_token_attributes(vocabulary=vocab)


def test_explicit_fill_in_the_middle_id_is_used_instead(pm):
    vocab = _vocabulary(["a", "b", "<fim_pad>", "<PAD>"], types=[1, 1, 1, 1])
    vocab.special_id_keys = [("fim_pad", "tokenizer.ggml.fim_pad_token_id", 3)]
    pm.hook.bpetok_adjust_token_attributes(vocabulary=vocab)
    assert vocab.special_ids["fim_pad"] == 3 and 3 in vocab.eog_ids and 2 not in vocab.eog_ids


def test_merge_naming_a_missing_token_is_refused():
    from bpetok.models.gpt2 import BytePairModel

    with pytest.raises(bpetok.VocabularyError, match="'x'.*not in 'tokenizer.ggml.tokens'"):
        BytePairModel([b"a", b"b", b"ab"], [b"a b", b"ab x"], path="test.gguf")


def test_plugins_see_a_vocabulary_they_can_refuse(pm, temporary_plugin):
    class Refuser:
        @hookimpl
        def bpetok_adjust_token_attributes(self, vocabulary):
            raise bpetok.VocabularyError(f"{vocabulary.path}: refused by policy")

    temporary_plugin(Refuser(), "refuser")
    with pytest.raises(bpetok.VocabularyError, match="refused by policy"):
        bpetok.from_gguf(QWEN3, plugin_manager=pm)


def test_every_hook_has_a_test_and_is_documented():
    """Meta-test (datasette's): each hook spec is exercised above and its signature is in docs/hooks.md."""
    import inspect
    import pathlib

    from bpetok import hookspecs

    hooks = [name for name, f in vars(hookspecs).items() if name.startswith("bpetok_") and callable(f)]
    assert hooks
    this_file = pathlib.Path(__file__).read_text()
    docs = (pathlib.Path(__file__).parent.parent / "docs" / "hooks.md").read_text()
    for name in hooks:
        assert f"def {name}" in this_file or f"{name}(" in this_file, f"hook {name} has no test"
        signature = f"{name}{inspect.signature(getattr(hookspecs, name))}".replace("'", "")
        assert signature in docs, f"docs/hooks.md lacks the signature {signature}"


def test_command_modules_are_imported_only_for_the_cli():
    """The built-in command modules are stand-ins until the CLI asks for their commands, so each
    must implement no other hook (a stand-in would hide it)."""
    import inspect

    from bpetok import hookspecs, plugins

    hook_names = {name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("bpetok_")}
    for name in plugins.COMMAND_MODULES:
        module = importlib.import_module(name)
        assert {h for h in hook_names if hasattr(module, h)} == {"bpetok_register_commands"}, name
    code = (
        "import sys, bpetok; from bpetok.plugins import COMMAND_MODULES; "
        "tok = bpetok.from_gguf(sys.argv[1]); tok.encode('Hello world'); "
        "print(sorted(m for m in COMMAND_MODULES if m in sys.modules)); "
        "from bpetok.apps.cli import build_parser; build_parser(); "
        "print(sorted(m for m in COMMAND_MODULES if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(QWEN3)], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["[]", str(sorted(plugins.COMMAND_MODULES))]
