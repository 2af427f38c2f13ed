"""The package layout: the paths modules had before bpetok/vocab/ and bpetok/apps/ still import, as
the very module at the new path (one object, so a monkeypatch through either name holds)."""

from __future__ import annotations

import importlib
import pathlib
import subprocess
import sys

import pytest

from bpetok._old_paths import MOVED

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_module_at_its_new_path(old):
    new = MOVED[old]
    assert importlib.import_module(old) is importlib.import_module(new)
    assert sys.modules[old].__name__ == new
    parent, _, name = old.rpartition(".")
    assert getattr(importlib.import_module(parent), name) is sys.modules[new]
    # the source is gone from the old place (a checkout may keep an old __pycache__ there: no matter)
    where = ROOT / old.replace(".", "/")
    assert not where.with_suffix(".py").exists() and not (where / "__init__.py").exists()


def test_documented_old_imports_work_in_a_fresh_interpreter():
    """What users wrote before the layout: `from bpetok.chat import ChatLimits`, bpetok.gguf.read_gguf,
    uvicorn's `bpetok.server:app_from_env`."""
    code = (
        "from bpetok.chat import ChatLimits; from bpetok.gguf import read_gguf; import bpetok.server as s; "
        "import bpetok.apps.chat, bpetok.vocab.gguf, bpetok.apps.server; "
        "assert ChatLimits is bpetok.apps.chat.ChatLimits and read_gguf is bpetok.vocab.gguf.read_gguf; "
        "assert s.app_from_env is bpetok.apps.server.app_from_env; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_name_that_never_existed_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("bpetok.no_such_module")


def test_importing_an_old_path_first_leaves_the_module_its_own_spec():
    """The playground's files are found through the package's spec (importlib.resources): importing
    it by its old path first must not leave it the old path's spec, which has no package locations."""
    code = (
        "import bpetok.playground; import bpetok.apps.playground as p; from importlib.resources import files; "
        "assert p.__spec__.name == 'bpetok.apps.playground'; "
        "assert (files('bpetok.apps.playground') / 'index.html').is_file(); print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
