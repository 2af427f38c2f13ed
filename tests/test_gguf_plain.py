"""``read_gguf(numpy=False)``, the mode the vocabulary loader uses so that loading never imports numpy.

Every value must equal what the default (numpy) mode gives, and errors must be the same.
"""

from __future__ import annotations

import subprocess
import sys
from array import array

import pytest

import bpetok
from bpetok.vocab.gguf import read_gguf
from ggufbuild import EVERY_TYPE, build
from helpers import QWEN3, SMOLLM2


def as_lists(metadata: dict) -> dict:
    return {key: lists(value) for key, value in metadata.items()}


def lists(value):
    """numpy arrays and array.arrays (nested in lists too) as plain lists."""
    if isinstance(value, list):
        return [lists(v) for v in value]
    return value.tolist() if hasattr(value, "tolist") else value


def test_every_type_reads_the_same_without_numpy(tmp_path):
    path = tmp_path / "every.gguf"
    path.write_bytes(build(EVERY_TYPE).data)
    with_numpy, plain = read_gguf(path), read_gguf(path, numpy=False)
    assert plain.types == with_numpy.types and plain.keys == with_numpy.keys
    assert as_lists(plain.metadata) == as_lists(with_numpy.metadata)
    assert isinstance(plain.metadata["a.u32"], array) and plain.metadata["a.u32"].itemsize == 4
    assert all(type(b) is bool for b in plain.metadata["a.bool"])


@pytest.mark.parametrize("path", [QWEN3, SMOLLM2], ids=lambda p: p.name)
def test_shipped_vocabularies_read_the_same_without_numpy(path):
    assert as_lists(read_gguf(path, numpy=False).metadata) == as_lists(read_gguf(path).metadata)


def test_truncated_file_gives_the_same_error_without_numpy(tmp_path):
    data = build(EVERY_TYPE).data
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: len(data) - 3])
    messages = []
    for numpy in (True, False):
        with pytest.raises(bpetok.GGUFError) as info:
            read_gguf(path, numpy=numpy)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_loading_a_tokenizer_does_not_import_numpy():
    code = (
        "import sys, bpetok; tok = bpetok.from_gguf(sys.argv[1]); ids = tok.encode('Hello world'); "
        "print(ids, 'numpy' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(QWEN3)], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["[9707,", "1879]", "False"]
