"""The fenced examples of README.md and docs/*.md run as written in a fresh clone.

The convention, for whoever writes a doc:

- A block fenced ```` ```sh ```` (or ``bash``/``shell``) is a command to run: it runs with
  ``bash -e -o pipefail``. A block fenced ```` ```python ```` runs in a new Python process.
- A block fenced ```` ```text output ```` right after a block that runs (blank lines between at
  most) is that block's expected standard output, compared exactly (surrounding whitespace aside).
- Every other fence is not run: ```` ```text ```` for a synopsis (``[--pin-file F]``), printed
  output or a file layout, ```` ```console ```` for a session whose output is shown after ``$``
  prompts, ```` ```toml ````, ```` ```json ````, and a bare ```` ``` ````.
- A ``sh``/``python`` block that cannot run here (it needs a file the repository does not ship,
  a user's ``MODEL.gguf`` or a corpus; it installs packages; it serves or runs for minutes) is
  named in ``SKIP`` below by its file and the start of its text, with the reason, and is
  reported as skipped with that reason. ``test_every_skip_names_an_example`` fails when an entry
  no longer names a block, so the list cannot go stale.

Each example runs in a temporary directory holding links to the repository's top-level entries,
so paths such as ``tests/data/ggml-vocab-qwen3.gguf.gz`` resolve as from the repository root while
the files an example writes land in the temporary directory; the repository root is first on
``PYTHONPATH``, so the ``bpetok`` command and ``import bpetok`` use this tree. Each has a timeout.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_AS = {"sh": "bash", "bash": "bash", "shell": "bash", "python": "python"}
TIMEOUT_S = 120

NEEDS_MODEL = "needs a GGUF of the user's own (MODEL.gguf); the repository ships only vocabularies"
NEEDS_CORPUS = "needs a benchmark corpus (docs/benchmarks.md, 'Corpora'), not in the repository"
INSTALLS = "installs packages into the environment"
LONG = "runs for minutes"

# (file relative to the repository, start of the block's text) -> why it is not run here.
SKIP: dict[tuple[str, str], str] = {
    ("README.md", "python3 -m pip install '.[chat]'"): INSTALLS,
    ("README.md", "python -m pip install -e"): INSTALLS + " and runs the whole test suite",
    ("docs/benchmarks.md", "python3 -m pip install -e '.[dev,bench]'"): INSTALLS,
    ("docs/benchmarks.md", "python3 benchmarks/bench.py VOCAB.gguf"): NEEDS_CORPUS + "; " + LONG,
    ("docs/benchmarks.md", "python3 benchmarks/spm_bench.py"): NEEDS_CORPUS + " and sentencepiece; " + LONG,
    ("docs/benchmarks.md", "python3 benchmarks/specials_bench.py"): NEEDS_CORPUS,
    ("docs/benchmarks.md", "python benchmarks/offsets_bench.py"): NEEDS_CORPUS + "; " + LONG,
    ("docs/benchmarks.md", "python3 benchmarks/cold_vs_quicktok.py"): NEEDS_CORPUS + "; " + LONG,
    ("docs/benchmarks.md", "python3 benchmarks/llama_cpp_ratio.py CORPUS"): NEEDS_CORPUS + " and the llama extra; " + LONG,
    ("docs/datasets.md", "pip install 'bpetok[jsonl"): INSTALLS,
    ("docs/datasets.md", "# JSONL (the \"text\" field"): "needs the user's MODEL.gguf, inputs (JSONL, text, Parquet) "
                                                           "and a Dask scheduler",
    ("docs/datasets.md", "import bpetok\nfrom dask"): "needs the user's MODEL.gguf, inputs and a Dask scheduler",
    ("docs/datasets.md", "import numpy as np, torch"): "needs PyTorch, which bpetok does not depend on",
    ("docs/datasets.md", "python3 benchmarks/dataset_memory.py"): NEEDS_CORPUS + "; " + LONG,
    ("docs/datasets.md", "pip install -e '.[bench,dask]'"): INSTALLS + "; " + NEEDS_CORPUS + "; " + LONG,
    ("docs/training.md", "python3 benchmarks/train_bench.py"): NEEDS_CORPUS + "; " + LONG,
    ("docs/training.md", "python3 benchmarks/train_pathological.py"): LONG + " (each case up to 60 s)",
    ("docs/training.md", "apt-get install python3-doc"): INSTALLS + " and writes 3 GB of corpora",
    ("docs/training.md", "nice python benchmarks/train_scale_bench.py"): NEEDS_CORPUS + "; " + LONG,
    ("docs/benchmarks.md", "nice python benchmarks/train_scale_bench.py"): NEEDS_CORPUS + "; " + LONG,
    ("docs/chat.md", "import bpetok"): NEEDS_MODEL + " (Qwen3-8B-Q4_K_M.gguf) and a tool schema",
    ("docs/chat.md", "from bpetok.apps.chat import ChatLimits"): "a fragment: needs tok and messages from the first example",
    ("docs/chat.md", "stream = tok.decode_stream()"): "a fragment: needs tok and generated_ids from a serving loop",
    # Pages other helpers own; their examples are fragments of a plugin module or need a server.
    ("docs/hooks.md", "from bpetok import hookimpl"): "a fragment of a plugin module",
    ("docs/hooks.md", "DEEPSEEK_V3 = "): "a fragment: needs the names defined in bpetok/pretok",
    ("docs/plugins.md", "@hookimpl"): "a fragment of a plugin module (needs its imports)",
    ("docs/plugins.md", "from bpetok.hookspecs import hookimpl"): "a fragment of a plugin module",
    ("docs/plugins.md", ">>> from bpetok.pretok.chain"): "a doctest-style session, not a script",
    ("docs/plugins.md", "python plugins/bpetok-hf/scripts/compare_corpora.py"):
        NEEDS_CORPUS + " (EN/CODE/MULTI.txt.xz)",
    ("docs/server.md", "pip install 'bpetok[server]'"): INSTALLS + " and serves until stopped",
    ("docs/server.md", "curl -s localhost:8080"): "needs a running bpetok serve",
    ("docs/server.md", "python benchmarks/server_"): "benchmarks a running server, for seconds to minutes",
}


@dataclasses.dataclass(frozen=True)
class Example:
    path: str  # relative to the repository root
    line: int  # of the opening fence
    language: str
    code: str
    output: str | None = None  # the text of a ```text output block right after it

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.code.splitlines() if line.strip()), "")

    def skip_reason(self) -> str | None:
        return next((why for (path, start), why in SKIP.items()
                     if path == self.path and self.code.lstrip().startswith(start)), None)


FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,})(?P<info>[^`]*)$")


def examples_in(path: pathlib.Path) -> list[Example]:
    """Every fenced block of ``path`` whose language is one that runs (``RUN_AS``)."""
    found = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        language = opening["info"].strip().split(" ")[0].lower()
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^ *{fence}\s*$", lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        if language in RUN_AS:
            found.append(Example(str(path.relative_to(ROOT)), i + 1, language, "\n".join(body) + "\n",
                                 output_after(lines, j + 1)))
        i = j + 1
    return found


def output_after(lines: list[str], start: int) -> str | None:
    """The body of a ```text output block starting at ``start`` after blank lines, if there is one."""
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start == len(lines) or lines[start].strip() != "```text output":
        return None
    end = lines.index("```", start + 1)
    return "\n".join(lines[start + 1:end])


EXAMPLES = [example for doc in DOCS for example in examples_in(doc)]


def workdir(tmp_path: pathlib.Path) -> pathlib.Path:
    """A directory that looks like the repository root but takes the example's writes."""
    for entry in ROOT.iterdir():
        if entry.name not in {".git", "build"} and not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.path}:{e.line}" for e in EXAMPLES])
def test_example_runs(example: Example, tmp_path: pathlib.Path) -> None:
    reason = example.skip_reason()
    if reason is not None:
        pytest.skip(f"{example.first_line[:60]!r}: {reason}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
               MPLBACKEND="Agg")
    if RUN_AS[example.language] == "bash":
        command = ["bash", "-e", "-o", "pipefail", "-c", example.code]
    else:
        command = [sys.executable, "-c", example.code]
    result = subprocess.run(command, cwd=workdir(tmp_path), env=env, capture_output=True, text=True,
                            timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (
        f"{example.path}:{example.line} exited {result.returncode}\n--- stdout\n{result.stdout[-3000:]}"
        f"\n--- stderr\n{result.stderr[-3000:]}")
    if example.output is not None:
        assert result.stdout.strip() == example.output.strip()


def test_every_skip_names_an_example() -> None:
    named = {(e.path, start) for e in EXAMPLES for (path, start) in SKIP
             if path == e.path and e.code.lstrip().startswith(start)}
    assert set(SKIP) - named == set()


def test_the_docs_have_examples_that_run() -> None:
    """The finder sees the fences (a regex that matched nothing would make every test vacuous)."""
    ran = [e for e in EXAMPLES if e.skip_reason() is None]
    assert {e.path for e in ran} >= {"README.md", "docs/training.md", "docs/benchmarks.md", "docs/datasets.md"}
    assert {e.language for e in ran} == {"sh", "python"}
    assert any(e.output is not None for e in ran)
