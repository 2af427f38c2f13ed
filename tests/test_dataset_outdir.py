"""encode-dataset's output directory: one run at a time, created only for a run that writes,
files made as any file is, and no process or temporary file outliving a killed run."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

import bpetok
import bpetok.apps.datasets as ds
from bpetok.apps import _outdir
from bpetok.errors import BpetokError
from helpers import SMOLLM2, load_cases

SMOLLM2_EOS = 2  # <|endoftext|>, tokenizer.ggml.eos_token_id

# The CLI with small tasks, each made to take 50 ms longer: a run of the cases lasts seconds, so
# two runs started together overlap whatever the machine's load.
SLOW_CLI = (
    "import sys, time, bpetok.apps.cli, bpetok.apps.datasets as d; d.encode_dataset.__kwdefaults__['block_bytes'] = 20_000; "
    "run = d.run_task; d.run_task = lambda *a, **k: (time.sleep(0.05), run(*a, **k))[1]; "
    "sys.exit(bpetok.apps.cli.main(sys.argv[1:]))"
)


@pytest.fixture(scope="module")
def smollm2_cases():
    """llama.cpp's ids (parse_special=false) for the non-empty texts of the reference cases."""
    return [c for c in load_cases("smollm2") if not c["special"] and c["text"]]


@pytest.fixture(scope="module")
def smollm2_jsonl(tmp_path_factory, smollm2_cases):
    path = tmp_path_factory.mktemp("in") / "cases.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for case in smollm2_cases:
            f.write(json.dumps({"text": case["text"]}) + "\n")
    return str(path)


def verified_documents(out) -> list[list[int]]:
    """Every document's ids, after checking that the directory holds a complete run's files, each
    with the sha256 the manifest gives, and nothing else."""
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"]
    names = {"manifest.json"}
    docs = []
    for shard in manifest["shards"]:
        for name, digest in ((shard["file"], shard["sha256"]), (shard["index"], shard["index_sha256"])):
            assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
            names.add(name)
        ids = np.load(out / shard["file"])
        idx = np.load(out / shard["index"])
        docs += [ids[idx[i]:idx[i + 1]].tolist() for i in range(len(idx) - 1)]
    assert set(os.listdir(out)) == names  # no lock file, no temporary file left
    assert manifest["documents"] == len(docs)
    return docs


def busy_message(out, pid: int) -> str:
    return (f"bpetok: error: {out}: another encode-dataset run (pid {pid}) is writing to it; wait for it to end, "
            "or choose another output directory\n")


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=300)
    finally:
        proc.kill()


def test_two_runs_started_together_with_different_options(tmp_path, smollm2_jsonl, smollm2_cases):
    """One gets the directory, the other fails at once naming its pid; before the lock both exited 0
    and the directory held a mix of their shards (one not matching its sha256, documents lost)."""
    out = tmp_path / "out"
    command = [sys.executable, "-c", SLOW_CLI, "encode-dataset", str(SMOLLM2), smollm2_jsonl, "-o", str(out),
               "--shard-tokens", "20000", "-q"]
    with_eos = subprocess.Popen(command + ["--append-eos"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    without = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (_, eos_err), (_, plain_err) = finish(with_eos), finish(without)
    assert sorted([with_eos.returncode, without.returncode]) == [0, 1], (eos_err, plain_err)
    won, lost_err = (with_eos, plain_err) if with_eos.returncode == 0 else (without, eos_err)
    assert lost_err == busy_message(out, won.pid)
    eos = [SMOLLM2_EOS] if won is with_eos else []
    assert verified_documents(out) == [c["ids"] + eos for c in smollm2_cases]


def test_an_identical_run_started_half_a_second_later(tmp_path, smollm2_jsonl, smollm2_cases):
    """Before the lock, the later run removed the first one's temporary manifest as a dead run's,
    and the first one died renaming it. Now the later one fails at once, while the first runs on."""
    out = tmp_path / "out"
    command = [sys.executable, "-c", SLOW_CLI, "encode-dataset", str(SMOLLM2), smollm2_jsonl, "-o", str(out),
               "--shard-tokens", "20000", "-q"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    second = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, second_err = finish(second)
    still_running = first.poll() is None
    _, first_err = finish(first)
    assert first.returncode == 0, first_err
    assert second.returncode == 1 and second_err == busy_message(out, first.pid)
    assert still_running  # it failed at once, not once the first had finished
    assert verified_documents(out) == [c["ids"] for c in smollm2_cases]


def test_a_directory_held_in_this_process_is_refused_too(tmp_path, smollm2_jsonl):
    out = tmp_path / "out"
    out.mkdir()
    with _outdir.holding(str(out)):
        assert (out / _outdir.LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with pytest.raises(_outdir.DirectoryBusy, match=rf"another encode-dataset run \(pid {os.getpid()}\)"):
            bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], out)
        assert os.listdir(out) == [_outdir.LOCK_FILE]  # the refused run touched nothing
    assert os.listdir(out) == []
    bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], out)  # free again


def test_a_sigkilled_run_leaves_no_worker_behind_and_its_lock_is_free(tmp_path, smollm2_jsonl, smollm2_cases):
    """--workers 2 on the pure-Python engine (processes, not threads): SIGKILL the run's own process.
    Its worker waited on a queue whose write end it holds itself, so it slept on for good (and the
    forkserver and resource tracker with it); now it ends with its parent. The rerun takes the dead
    run's lock, removes its temporary files and resumes."""
    import psutil  # comes with dask[distributed], in the test extra

    out = tmp_path / "out"
    command = [sys.executable, "-c", SLOW_CLI, "encode-dataset", str(SMOLLM2), smollm2_jsonl, "-o", str(out),
               "--shard-tokens", "20000", "-q", "--workers", "2"]
    on_processes = {**os.environ, "BPETOK_PURE_PYTHON": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=on_processes)
    descendants: list = []
    try:
        deadline = time.monotonic() + 300
        while not (out / "manifest.json").exists():  # a shard is written: the worker is at work
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.01)
        descendants = psutil.Process(proc.pid).children(recursive=True)
        forkserver = [p for p in descendants if "forkserver" in " ".join(p.cmdline())]
        assert len(forkserver) == 2, descendants  # the forkserver and the worker it forked
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _, alive = psutil.wait_procs(descendants, timeout=60)
    finally:
        proc.kill()
        for p in descendants:  # any left (they hold the run's stdout and stderr: communicate would wait for them)
            if p.is_running():
                p.kill()
        proc.communicate()
    assert alive == []
    partial = json.loads((out / "manifest.json").read_text())
    assert not partial["complete"], "the run finished before it was killed: make the input larger"
    assert (out / _outdir.LOCK_FILE).read_text() == f"{proc.pid}\n"  # left behind, but no longer locked

    rerun = subprocess.run(command, capture_output=True, text=True, env=on_processes)
    assert rerun.returncode == 0, rerun.stderr
    assert f"({len(partial['shards'])} kept from an earlier run)" in rerun.stdout
    assert verified_documents(out) == [c["ids"] for c in smollm2_cases]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_output_files_are_made_as_any_file_is(tmp_path, smollm2_jsonl, umask, mode):
    """0666 less the umask, as open() makes a file (tempfile made them 0600)."""
    old = os.umask(umask)
    try:
        bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], tmp_path / "npy", shard_tokens=50_000)
        bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], tmp_path / "parquet", shard_tokens=50_000, format="parquet")
    finally:
        os.umask(old)
    for out in (tmp_path / "npy", tmp_path / "parquet"):
        names = os.listdir(out)
        assert len(names) > 3
        assert {name: stat.S_IMODE(os.stat(out / name).st_mode) for name in names} == dict.fromkeys(names, mode)
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~umask


def test_a_run_refused_or_failing_before_writing_leaves_no_directory(tmp_path, monkeypatch):
    out = tmp_path / "new" / "out"
    bad = tmp_path / "bad.jsonl.zst"
    bad.write_bytes(b"not zstd at all\n" * 10)
    with pytest.raises(BpetokError, match=r"bad\.jsonl\.zst: cannot decompress the input"):
        bpetok.encode_dataset(SMOLLM2, [bad], out)
    assert os.listdir(tmp_path) == ["bad.jsonl.zst"]  # neither new/ nor new/out is left

    monkeypatch.setitem(sys.modules, "zstandard", None)  # not installed
    with pytest.raises(BpetokError, match=r"bad\.jsonl\.zst: reading \.zst files needs the zstandard package"):
        bpetok.encode_dataset(SMOLLM2, [bad], out)
    assert os.listdir(tmp_path) == ["bad.jsonl.zst"]

    out.mkdir(parents=True)  # a directory that was there is left there
    with pytest.raises(BpetokError, match="zstandard"):
        bpetok.encode_dataset(SMOLLM2, [bad], out)
    assert os.listdir(out) == []


def test_a_run_failing_after_writing_keeps_what_it_wrote(tmp_path, smollm2_jsonl, monkeypatch):
    writes = ds._ShardWriter.flush

    def third_shard_fails(self):
        if len(self.shards) == 2:
            raise RuntimeError("stopped")
        writes(self)

    monkeypatch.setattr(ds._ShardWriter, "flush", third_shard_fails)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="stopped"):
        bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], out, shard_tokens=20_000)
    assert sorted(os.listdir(out)) == ["manifest.json", "shard-00000.idx.npy", "shard-00000.npy",
                                       "shard-00001.idx.npy", "shard-00001.npy"]
