"""encode-dataset and training counts on a Dask cluster (a 2-process LocalCluster): the same bytes as local runs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import bpetok
import bpetok.apps.datasets as ds
from bpetok.apps import dataset_tasks
from bpetok.apps.cli import main
from helpers import SMOLLM2, load_cases

distributed = pytest.importorskip("dask.distributed", reason="the dask extra: pip install 'bpetok[dask]'")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("in") / "cases.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for case in load_cases("smollm2"):
            if not case["special"] and case["text"]:
                f.write(json.dumps({"text": case["text"]}) + "\n")
    return path


def files(out) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in sorted(os.listdir(out))}


def test_dask_writes_the_same_bytes_as_local(tmp_path, client, corpus):
    kwargs = dict(shard_tokens=20_000, block_bytes=20_000, append_eos=True)
    bpetok.encode_dataset(SMOLLM2, [corpus], tmp_path / "local", **kwargs)
    result = bpetok.encode_dataset(SMOLLM2, [corpus], tmp_path / "dask", client=client, **kwargs)
    assert len(result.manifest["shards"]) > 3
    assert files(tmp_path / "local") == files(tmp_path / "dask")
    # Each worker built its own tokenizer from the GGUF bytes it was sent (nothing else travels).
    built = client.run(lambda: list(dataset_tasks._TOKENIZERS))
    assert list(built.values()) == [[result.manifest["model"]["sha256"]]] * 2


def test_results_come_from_the_workers_unless_the_client_says_not(tmp_path, client, corpus, monkeypatch):
    """Fetched from the worker that holds them (the scheduler's way re-pickles the ids in-band),
    unless the client was made with direct_to_workers=False; the same bytes either way."""
    asked = []
    gather = client.gather
    monkeypatch.setattr(client, "gather", lambda future, direct=None: asked.append(direct) or gather(future, direct=direct))
    bpetok.encode_dataset(SMOLLM2, [corpus], tmp_path / "direct", block_bytes=20_000, client=client)
    assert len(asked) > 3 and set(asked) == {True}
    asked.clear()
    monkeypatch.setattr(client, "direct_to_workers", False)
    bpetok.encode_dataset(SMOLLM2, [corpus], tmp_path / "scheduler", block_bytes=20_000, client=client)
    assert len(asked) > 3 and set(asked) == {False}
    assert files(tmp_path / "direct") == files(tmp_path / "scheduler")


def test_a_worker_with_two_threads_writes_the_same_bytes(tmp_path, corpus):
    """One worker process, two threads: its tasks share the one tokenizer it builds."""
    kwargs = dict(shard_tokens=20_000, block_bytes=10_000)
    bpetok.encode_dataset(SMOLLM2, [corpus], tmp_path / "local", **kwargs)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        bpetok.encode_dataset(SMOLLM2, [corpus], tmp_path / "dask", client=client, **kwargs)
    assert files(tmp_path / "local") == files(tmp_path / "dask")


def test_cli_dask_scheduler_address(tmp_path, client, corpus):
    bpetok.encode_dataset(SMOLLM2, [corpus], tmp_path / "local", format="parquet", shard_tokens=30_000)
    run = subprocess.run(
        [sys.executable, "-m", "bpetok.apps.cli", "encode-dataset", str(SMOLLM2), str(corpus), "-o", str(tmp_path / "dask"),
         "--format", "parquet", "--shard-tokens", "30000", "--dask", client.scheduler.address],
        capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stderr
    assert files(tmp_path / "local") == files(tmp_path / "dask")


@pytest.mark.parametrize("address, says", [
    ("not-an-address", "not HOST:PORT with a port number from 1 to 65535"),
    ("tcp://127.0.0.1:notaport", "not HOST:PORT with a port number from 1 to 65535"),
    ("http://127.0.0.1:1", "http:// is not a scheme this command can reach a scheduler by"),
])
@pytest.mark.parametrize("command", ["encode-dataset", "train"])
def test_a_malformed_dask_address_is_a_one_line_error(tmp_path, corpus, command, address, says):
    """Checked before connecting (Client raises a bare ValueError from deep inside distributed)
    and before anything is read or written."""
    args = {"encode-dataset": ["encode-dataset", str(SMOLLM2), str(corpus), "-o", str(tmp_path / "out")],
            "train": ["train", str(corpus), "--vocab-size", "600", "-o", str(tmp_path / "out.gguf")]}[command]
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "bpetok.apps.cli", *args, "--dask", address], capture_output=True, text=True)
    assert run.returncode == 1, run.stderr
    assert run.stderr == (f"bpetok: error: --dask {address!r}: {says}; give the scheduler's address as tcp://HOST:PORT, "
                          "e.g. tcp://127.0.0.1:8786 (or tls://, ucx://, ws://, wss://)\n")
    assert run.stdout == "" and os.listdir(tmp_path) == []
    assert time.monotonic() - start < 20  # not the 20 s connection timeout: no connection was tried


def test_a_well_formed_dask_address_passes_the_check():
    from bpetok.apps._dask import check_scheduler_address

    for address in ("tcp://127.0.0.1:8786", "127.0.0.1:8786", "tls://scheduler.example:8786", "tcp://[::1]:8786", "ws://h:1"):
        assert check_scheduler_address(address) == address
    for address in ("tcp://:8786", "tcp://h:0", "tcp://h:65536", "tcp://h:8786/path", "inproc://x", " tcp://h:1"):
        with pytest.raises(bpetok.BpetokError, match=f"--dask {re.escape(repr(address))}: "):
            check_scheduler_address(address)


def test_a_lost_worker_does_not_change_the_output(tmp_path, corpus):
    """A worker process killed mid-run: Dask runs its blocks again elsewhere (its nanny starts a new
    worker), the run finishes, and the shards are the bytes of a local run."""
    kwargs = dict(shard_tokens=20_000, block_bytes=10_000)
    bpetok.encode_dataset(SMOLLM2, [corpus], tmp_path / "local", **kwargs)
    # Its own cluster: the module's one keeps its two workers (and their tokenizers) for the other tests.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        pids = client.run(os.getpid)
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["result"] = bpetok.encode_dataset(SMOLLM2, [corpus], tmp_path / "dask", client=client, **kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised below, in the test's thread
                outcome["error"] = e

        thread = threading.Thread(target=run)
        thread.start()
        manifest_path = tmp_path / "dask" / "manifest.json"
        deadline = time.monotonic() + 300
        while not manifest_path.exists() and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.002)  # polling for the first finished shard
        killed = sorted(pids.values())[0]
        os.kill(killed, signal.SIGKILL)
        partial = json.loads(manifest_path.read_text())
        thread.join(300)
        assert "error" not in outcome, outcome.get("error")
        assert not partial["complete"], "the run finished before a worker was killed: make the input larger"
        client.wait_for_workers(2, timeout=60)
        assert killed not in client.run(os.getpid).values()  # the nanny started a new worker
    assert outcome["result"].manifest["complete"]
    assert files(tmp_path / "local") == files(tmp_path / "dask")


def test_a_replacement_worker_gets_the_model_too(tmp_path):
    """The GGUF's bytes reach a worker that joins after the run started (a nanny's replacement for a
    killed one): scattered data would be lost with its worker, a worker plugin is set up again."""
    from bpetok.apps._dask import ModelOnWorkers

    data = open(SMOLLM2, "rb").read()
    plugin = ModelOnWorkers(ds.file_sha256(SMOLLM2), data)

    def holds_model() -> bool:
        return dataset_tasks._WORKER_MODELS.get(plugin.sha256) == data

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        client.register_plugin(plugin)
        pids = client.run(os.getpid)
        os.kill(min(pids.values()), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:  # until the scheduler has dropped the killed worker and the nanny's new one has joined
            now = client.run(os.getpid, on_error="ignore")
            if len(now) == 2 and min(pids.values()) not in now.values():
                break
            assert time.monotonic() < deadline, "the nanny did not replace the killed worker"
            time.sleep(0.1)
        assert list(client.run(holds_model).values()) == [True, True]
        client.unregister_worker_plugin(plugin.name)
        assert list(client.run(holds_model).values()) == [False, False]


def test_training_counts_on_dask_give_the_same_vocabulary(tmp_path, client, monkeypatch):
    text = "\n".join(c["text"] for c in load_cases("smollm2") if not c["special"])
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text, encoding="utf-8", errors="surrogatepass")
    train_mod = sys.modules["bpetok.train"]
    monkeypatch.setattr(train_mod, "CHUNK_CHARS", 5000)  # many tasks
    monkeypatch.setattr(train_mod, "TASK_CHUNKS", 2)
    kwargs = dict(vocab_size=600, pre="smollm", special_tokens=["<|endoftext|>"], pins=["QLoRA"], progress=False)
    here = bpetok.train([corpus], output=tmp_path / "here.gguf", **kwargs)
    there = bpetok.train([corpus], output=tmp_path / "dask.gguf", client=client, **kwargs)
    assert here.merges == there.merges and len(here.merges) > 300
    assert (tmp_path / "here.gguf").read_bytes() == (tmp_path / "dask.gguf").read_bytes()
    assert main(["train", str(corpus), "--vocab-size", "600", "--pre", "smollm", "--special", "<|endoftext|>",
                 "--pin", "QLoRA", "-q", "--dask", client.scheduler.address, "-o", str(tmp_path / "cli.gguf")]) == 0
    assert (tmp_path / "cli.gguf").read_bytes() == (tmp_path / "here.gguf").read_bytes()
