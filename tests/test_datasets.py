"""encode-dataset: shards hold llama.cpp's ids, the same bytes whatever the workers, resumable, no silent drops."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bpetok
import bpetok.apps.datasets as ds
from bpetok.apps import dataset_shards, dataset_tasks
from bpetok.errors import BpetokError
from helpers import QWEN3, SMOLLM2, load_cases


def cases(name: str) -> list[dict]:
    """llama.cpp's ids (parse_special=false) for the non-empty texts of the reference cases."""
    return [c for c in load_cases(name) if not c["special"] and c["text"]]


def write_jsonl(path, texts, field="text") -> str:
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({field: t}) + "\n")
    return str(path)


def read_npy_shards(out) -> list[list[int]]:
    """Every document's ids, in order, read back through the index files."""
    manifest = json.loads((out / "manifest.json").read_text())
    docs = []
    for shard in manifest["shards"]:
        ids = np.load(out / shard["file"], mmap_mode="r")
        idx = np.load(out / shard["index"])
        docs += [ids[idx[i]:idx[i + 1]].tolist() for i in range(len(idx) - 1)]
    return docs


def files(out) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in sorted(os.listdir(out))}


@pytest.fixture(scope="module")
def smollm2_cases():
    return cases("smollm2")


@pytest.fixture(scope="module")
def smollm2_jsonl(tmp_path_factory, smollm2_cases):
    return write_jsonl(tmp_path_factory.mktemp("in") / "cases.jsonl", [c["text"] for c in smollm2_cases])


def test_shards_hold_llama_cpp_ids(tmp_path, smollm2_cases, smollm2_jsonl):
    out = tmp_path / "out"
    result = bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], out, shard_tokens=20_000, block_bytes=30_000)
    assert read_npy_shards(out) == [c["ids"] for c in smollm2_cases]
    manifest = result.manifest
    assert manifest["dtype"] == "uint16"  # 49,152 tokens fit
    assert len(manifest["shards"]) > 3
    assert manifest["documents"] == len(smollm2_cases)
    assert manifest["tokens"] == sum(len(c["ids"]) for c in smollm2_cases)
    assert manifest["model"]["pre"] == "smollm" and manifest["complete"]
    for shard in manifest["shards"]:
        assert shard["tokens"] <= 20_000
        assert np.load(out / shard["file"]).dtype == np.uint16


def test_qwen3_uint32_and_eos(tmp_path):
    texts = [c["text"] for c in cases("qwen3")[:300]]
    expected = [c["ids"] + [151645] for c in cases("qwen3")[:300]]  # Qwen3's EOS, <|im_end|>
    out = tmp_path / "out"
    result = bpetok.encode_dataset(QWEN3, [write_jsonl(tmp_path / "q.jsonl", texts)], out, append_eos=True)
    assert result.manifest["dtype"] == "uint32"
    assert read_npy_shards(out) == expected
    assert np.load(out / "shard-00000.npy", mmap_mode="r").dtype == np.uint32


def test_parquet_ids_have_the_manifests_dtype(tmp_path):
    """list<uint32> for Qwen3's 151,669 tokens (int32 before: the manifest said uint32), list<uint16> for SmolLM2's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for model, name, dtype in ((QWEN3, "qwen3", pa.uint32()), (SMOLLM2, "smollm2", pa.uint16())):
        texts = [c["text"] for c in cases(name)[:100]]
        out = tmp_path / name
        result = bpetok.encode_dataset(model, [write_jsonl(tmp_path / f"{name}.jsonl", texts)], out, format="parquet")
        assert result.manifest["dtype"] == str(dtype)
        ids = pq.read_table(out / "shard-00000.parquet").column("ids")
        assert ids.type.value_type == dtype
        assert ids.to_pylist() == [c["ids"] for c in cases(name)[:100]]


def test_special_texts_are_plain_text_unless_asked(tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", ["a<|im_end|>b"])
    tok = bpetok.from_gguf(QWEN3)
    bpetok.encode_dataset(QWEN3, [path], tmp_path / "plain")
    bpetok.encode_dataset(QWEN3, [path], tmp_path / "special", parse_special=True)
    assert read_npy_shards(tmp_path / "plain") == [tok.encode("a<|im_end|>b", parse_special=False)]
    assert read_npy_shards(tmp_path / "special") == [tok.encode("a<|im_end|>b", parse_special=True)]
    assert 151645 in read_npy_shards(tmp_path / "special")[0]


def test_a_document_longer_than_a_shard_gets_its_own(tmp_path):
    path = write_jsonl(tmp_path / "l.jsonl", ["short", "word " * 200, "end"])
    result = bpetok.encode_dataset(SMOLLM2, [path], tmp_path / "out", shard_tokens=50)
    assert [s["documents"] for s in result.manifest["shards"]] == [1, 1, 1]


def test_threads_asking_for_the_tokenizer_at_once_build_it_once(monkeypatch):
    """A Dask worker's threads start their first tasks together: one tokenizer, not one each."""
    real = bpetok.from_gguf
    built = []

    def slow_from_gguf(path):
        time.sleep(0.2)  # long enough for the other thread to ask meanwhile
        built.append(path)
        return real(path)

    monkeypatch.setattr(bpetok, "from_gguf", slow_from_gguf)
    monkeypatch.setattr(dataset_tasks, "_TOKENIZERS", {})
    source = ds.ModelSource(path=str(SMOLLM2), sha256=ds.file_sha256(SMOLLM2))
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: source.tokenizer(), range(2))
    assert first is second and len(built) == 1


@pytest.mark.parametrize("on", ["threads", "processes"])
def test_two_workers_write_the_same_bytes(tmp_path, smollm2_jsonl, monkeypatch, on):
    """Threads where the tokenizer encodes without the GIL (the C kernel's splitter), else processes."""
    one, two = tmp_path / "one", tmp_path / "two"
    bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], one, shard_tokens=20_000, block_bytes=20_000)
    if on == "processes":
        monkeypatch.setattr(bpetok.Tokenizer, "encodes_without_gil", property(lambda self: False))
    kernel = bpetok.from_gguf(SMOLLM2).engine == "C kernel"  # the pure-Python engine holds the GIL: processes
    used = []
    for name in ("process_pool", "ThreadPoolExecutor"):
        monkeypatch.setattr(ds, name, lambda *a, _real=getattr(ds, name), _name=name, **k: used.append(_name) or _real(*a, **k))
    bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], two, shard_tokens=20_000, block_bytes=20_000, workers=2)
    assert used == ["ThreadPoolExecutor" if on == "threads" and kernel else "process_pool"]
    assert files(one) == files(two)


def test_this_process_runs_tasks_while_the_oldest_is_unfinished():
    """in_order_here_too, with a thread pool standing in for the worker processes: results in task
    order; while the pool's first task is held up, this process runs the next ones itself."""
    release = threading.Event()
    ran_here: list[int] = []

    def on_pool(i):
        if i == 0:
            assert release.wait(10)
        return "pool", i

    def here(i):
        ran_here.append(i)
        if len(ran_here) == 3:
            release.set()
        return "here", i

    with ThreadPoolExecutor(1) as pool:
        out = list(ds.in_order_here_too(lambda i: pool.submit(on_pool, i), here, range(30), 2))
    assert [i for _, i in out] == list(range(30))
    assert ran_here[:3] == [2, 3, 4]  # tasks 0 and 1 went to the pool, then 0 held it up
    assert {where for where, _ in out} == {"pool", "here"}


@pytest.mark.parametrize("where", ["pool", "here"])
def test_a_task_error_reaches_the_caller_wherever_it_ran(where):
    def fails(i, at):
        if at == where and i >= 3:
            raise ValueError(f"task {i} failed {at}")
        time.sleep(0.001)
        return i

    with ThreadPoolExecutor(1) as pool, pytest.raises(ValueError, match=f"failed {where}"):
        list(ds.in_order_here_too(lambda i: pool.submit(fails, i, "pool"), lambda i: fails(i, "here"), range(50), 2))


def test_block_size_does_not_change_the_output(tmp_path, smollm2_jsonl):
    bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], tmp_path / "a", shard_tokens=20_000, block_bytes=7_000)
    bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], tmp_path / "b", shard_tokens=20_000, block_bytes=500_000)
    assert files(tmp_path / "a") == files(tmp_path / "b")


class Interrupt(Exception):
    pass


def run_interrupted_after_3_shards(monkeypatch, inputs, output, **kwargs) -> None:
    """encode_dataset stopped by an exception once three shards are written (the manifest names them)."""
    real_flush = ds._ShardWriter.flush

    def flush_then_die(self):
        if len(self.shards) == 3:
            raise Interrupt
        real_flush(self)

    with monkeypatch.context() as patched:
        patched.setattr(ds._ShardWriter, "flush", flush_then_die)
        with pytest.raises(Interrupt):
            bpetok.encode_dataset(SMOLLM2, inputs, output, **kwargs)


def test_shards_written_as_they_come_are_what_np_save_writes(tmp_path, smollm2_jsonl, monkeypatch):
    """An npy shard's ids go to its file as results arrive (synced every _SYNC_BYTES, here a few
    KB) and its header is rewritten at the end: the file is np.save's, byte for byte; a run
    stopped in the middle of a shard leaves no temporary file behind."""
    import io

    monkeypatch.setattr(dataset_shards, "_SYNC_BYTES", 5_000)
    out = tmp_path / "out"
    bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], out, shard_tokens=20_000, block_bytes=20_000)
    shards = json.loads((out / "manifest.json").read_text())["shards"]
    assert len(shards) > 3
    for shard in shards:
        saved = io.BytesIO()
        np.save(saved, np.load(out / shard["file"]))
        assert (out / shard["file"]).read_bytes() == saved.getvalue()
    cut = tmp_path / "cut"
    run_interrupted_after_3_shards(monkeypatch, [smollm2_jsonl], cut, shard_tokens=20_000, block_bytes=20_000)
    assert [n for n in os.listdir(cut) if n.endswith(".tmp")] == []


def test_rerun_after_an_interruption_resumes_to_the_same_bytes(tmp_path, smollm2_jsonl, monkeypatch):
    fresh, resumed = tmp_path / "fresh", tmp_path / "resumed"
    kwargs = dict(shard_tokens=20_000, block_bytes=20_000)
    bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], fresh, **kwargs)

    run_interrupted_after_3_shards(monkeypatch, [smollm2_jsonl], resumed, **kwargs)
    partial = json.loads((resumed / "manifest.json").read_text())
    assert not partial["complete"] and len(partial["shards"]) == 3

    encoded = []
    real_encode = dataset_tasks.encode_block
    monkeypatch.setattr(dataset_tasks, "encode_block", lambda m, texts, *a: encoded.append(len(texts)) or real_encode(m, texts, *a))
    result = bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], resumed, **kwargs)
    assert result.resumed_shards == 3
    assert sum(encoded) == result.documents - sum(s["documents"] for s in partial["shards"])
    assert files(fresh) == files(resumed)


# `bpetok encode-dataset` itself (cli.main with the command's argv), with blocks of 20,000 characters
# instead of 4M: the run then writes its shards one by one between encodes, and there is a moment to
# interrupt it after the first one on a small input (with 4M-character blocks all shards of a small
# input come out in one burst after a single encode).
SMALL_BLOCKS_CLI = (
    "import sys, bpetok.apps.cli, bpetok.apps.datasets as d; d.encode_dataset.__kwdefaults__['block_bytes'] = 20_000; "
    "sys.exit(bpetok.apps.cli.main(sys.argv[1:]))"
)


def wait_for_shards(out, proc, n: int) -> dict:
    """Poll the output directory until its manifest lists ``n`` finished shards; the manifest."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            manifest = json.loads((out / "manifest.json").read_text())
        except (FileNotFoundError, ValueError):
            manifest = {"shards": []}
        if len(manifest["shards"]) >= n:
            return manifest
        assert proc.poll() is None, f"the run ended ({proc.returncode}) before writing {n} shards"
        time.sleep(0.002)
    raise AssertionError(f"no {n} shards in {out} after 300 s")


def stats(out, names) -> dict[str, tuple[int, int]]:
    return {name: ((st := os.stat(out / name)).st_ino, st.st_mtime_ns) for name in names}


def test_sigkilled_run_resumes_to_the_same_bytes_without_rewriting_finished_shards(tmp_path, smollm2_cases):
    texts = [c["text"] for c in smollm2_cases]
    data = write_jsonl(tmp_path / "in.jsonl", texts + [t.upper() for t in texts])  # ~50 shards
    fresh, killed = tmp_path / "fresh", tmp_path / "killed"
    command = [sys.executable, "-c", SMALL_BLOCKS_CLI, "encode-dataset", str(SMOLLM2), data, "--shard-tokens", "20000", "-q"]
    done = subprocess.run(command + ["-o", str(fresh)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    proc = subprocess.Popen(command + ["-o", str(killed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_shards(killed, proc, 1)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    partial = json.loads((killed / "manifest.json").read_text())
    assert not partial["complete"], "the run finished before it was killed: make the input larger"
    finished = [name for s in partial["shards"] for name in (s["file"], s["index"])]
    before = stats(killed, finished)

    rerun = subprocess.run(command + ["-o", str(killed)], capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert f"({len(partial['shards'])} kept from an earlier run)" in rerun.stdout
    assert stats(killed, finished) == before  # kept in place: same inodes, never rewritten
    assert files(killed) == files(fresh)  # the same names and bytes: no temporary file left behind


def test_a_killed_worker_process_stops_the_run_clearly_and_a_rerun_finishes_it(tmp_path, smollm2_cases):
    """--workers 2 on the pure-Python engine (which encodes on processes, not threads): this
    process and one forkserver worker; SIGKILL the worker mid-run."""
    import psutil  # comes with dask[distributed], in the test extra

    texts = [c["text"] for c in smollm2_cases]
    texts = [t for k in range(8) for t in (texts if k % 2 else [t.upper() for t in texts])]  # long enough to kill mid-run
    data = write_jsonl(tmp_path / "in.jsonl", texts)
    fresh, killed = tmp_path / "fresh", tmp_path / "killed"
    command = [sys.executable, "-c", SMALL_BLOCKS_CLI, "encode-dataset", str(SMOLLM2), data, "--shard-tokens", "20000", "-q"]
    done = subprocess.run(command + ["-o", str(fresh)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    on_processes = {**os.environ, "BPETOK_PURE_PYTHON": "1"}
    proc = subprocess.Popen(command + ["-o", str(killed), "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=on_processes)
    try:
        wait_for_shards(killed, proc, 1)
        servers = [c for c in psutil.Process(proc.pid).children() if "forkserver" in " ".join(c.cmdline())]
        workers = [w for server in servers for w in server.children()]
        assert len(workers) == 1, (servers, workers)
        workers[0].kill()
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    assert "bpetok: error: a worker died while encoding" in err and "run the same command again to resume" in err, err
    assert "Traceback" not in err

    rerun = subprocess.run(command + ["-o", str(killed), "--workers", "2"], capture_output=True, text=True, env=on_processes)
    assert rerun.returncode == 0, rerun.stderr
    assert files(killed) == files(fresh)


def test_a_damaged_shard_is_written_again(tmp_path, smollm2_jsonl):
    out = tmp_path / "out"
    bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], out, shard_tokens=20_000)
    before = files(out)
    (out / "shard-00002.npy").write_bytes(b"truncated")
    (out / ".shard-00004.npy.x.tmp").write_bytes(b"left by a killed run")
    result = bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], out, shard_tokens=20_000)
    assert result.resumed_shards == 2
    assert files(out) == before


def test_another_runs_output_directory_is_refused(tmp_path, smollm2_jsonl):
    out = tmp_path / "out"
    bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], out)
    with pytest.raises(BpetokError, match="another run.*shard_tokens"):
        bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], out, shard_tokens=1000)


BAD_JSONL = b"\n".join([
    b'{"text": "good one"}',
    b'{"text": "broken',
    b'{"text": "bad \xff byte"}',
    b'{"body": "no text field"}',
    b'{"text": 12}',
    b'["not", "an object"]',
    b'{"text": "lone \\udc80 surrogate"}',
    b"",
    b'{"text": "good two"}',
]) + b"\n"


def test_bad_records_are_counted_and_skipped(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(BAD_JSONL)
    result = bpetok.encode_dataset(SMOLLM2, [path], tmp_path / "out", on_error="skip")
    tok = bpetok.from_gguf(SMOLLM2)
    assert read_npy_shards(tmp_path / "out") == [tok.encode("good one", parse_special=False), tok.encode("good two", parse_special=False)]
    assert result.errors == {"invalid_json": 1, "invalid_utf8": 2, "missing_field": 1, "not_a_string": 1, "not_an_object": 1}
    assert result.manifest["empty"] == {"lines": 1}
    assert result.manifest["errors"]["examples"][0] == f"{path}:2: not valid JSON (Unterminated string starting at: column 10)"


# Lines where orjson and the standard library's json disagree, or either could fail: each must be
# read (or counted as bad) the same way with orjson installed as without it.
TRICKY_JSONL = BAD_JSONL.split(b"\n")[:-1] + [
    b'{"text": "dup", "text": "last wins"}',
    b'{"text": NaN, "n": 1}',
    b'{"text": "x", "n": NaN}',  # json reads NaN, orjson does not
    b'{"text": "big", "n": 123456789012345678901234567890}',
    b'{"text": "huge", "n": 1' + b"0" * 5000 + b"}",  # past Python's int digit limit
    b'{"text": 1e400}',
    b'{"text": "' + b"[" * 5 + b'"}',
    b"[" * 100_000 + b"]" * 100_000,  # deeper than json's recursion limit
    b'\xef\xbb\xbf{"text": "after a BOM"}',
    b'{"text": "crlf"}\r',
    b'   ',
    b'{"text": ""}',
    b'{"text": "pair \\ud83d\\ude00 ok"}',
    b'{"text": "tab\tinside"}',
    b'{"te\\u0078t": "escaped key"}',
    b'{"text": "nul \\u0000 kept"}',
    b'{"text": "\xed\xa0\x80 raw surrogate"}',
    b'"a string"',
    b"null",
]


def jsonl_read(lines, fast: bool, monkeypatch) -> tuple:
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(dataset_tasks, "_orjson_loads", lambda: None)
        result = dataset_tasks.TaskResult(np.zeros(0, np.uint32), np.zeros(0, np.int64), 0, 0, 0)
        texts = list(dataset_tasks._jsonl_documents(lines, "text", 0, result))
    return texts, result.errors, result.examples, result.empty


def test_orjson_reads_jsonl_as_the_standard_library_does(monkeypatch):
    import orjson  # noqa: F401 - the jsonl extra, which the test extra installs

    assert dataset_tasks._orjson_loads() is not None
    read = jsonl_read(TRICKY_JSONL, True, monkeypatch)
    assert read == jsonl_read(TRICKY_JSONL, False, monkeypatch)
    texts, errors, examples, empty = read
    assert texts == ["good one", "good two", "last wins", "x", "big", "[[[[[", "crlf", "pair \U0001f600 ok", "escaped key", "nul \x00 kept"]
    assert errors == {"invalid_json": 5, "invalid_utf8": 3, "not_a_string": 3, "not_an_object": 3, "missing_field": 1}
    assert empty == {"lines": 2, "documents": 1}
    reasons = dict((record, reason) for _, record, reason in examples)
    assert reasons[14].startswith("not readable JSON (Exceeds the limit")  # the 5,000-digit int: no crash
    assert reasons[17] == "JSON nested too deeply to read"  # no RecursionError
    assert reasons[18].startswith("not valid JSON (Unexpected UTF-8 BOM")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["text", "body", "n"]) | st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(records=st.lists(json_values, max_size=6), ascii=st.booleans(), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=2))
def test_orjson_and_json_agree_on_any_lines(records, ascii, flips):
    """Random JSON (NaN, big ints, surrogates and all), some of it with a byte changed."""
    data = bytearray(b"\n".join(json.dumps(r, ensure_ascii=ascii).encode("utf-8", "surrogatepass") for r in records))
    for at, byte in flips:
        if data:
            data[at % len(data)] = byte
    lines = bytes(data).split(b"\n")
    with pytest.MonkeyPatch.context() as m:
        assert jsonl_read(lines, True, m) == jsonl_read(lines, False, m)


def test_a_bad_record_fails_by_default_naming_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(BAD_JSONL)
    with pytest.raises(ds.DatasetError, match=r"bad\.jsonl:2: not valid JSON.*--on-error skip"):
        bpetok.encode_dataset(SMOLLM2, [path], tmp_path / "out")


def test_cli_reports_skipped_records_and_fails_without_traceback(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(BAD_JSONL)
    run = [sys.executable, "-m", "bpetok.apps.cli", "encode-dataset", str(SMOLLM2), str(path)]
    ok = subprocess.run(run + ["-o", str(tmp_path / "a"), "--on-error", "skip"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "1 shard, 2 documents, 4 tokens (uint16)" in ok.stdout
    assert "skipped 6 unreadable records (invalid_json: 1, invalid_utf8: 2," in ok.stderr
    bad = subprocess.run(run + ["-o", str(tmp_path / "b")], capture_output=True, text=True)
    assert bad.returncode == 1
    assert bad.stderr.startswith("bpetok: error: ") and "bad.jsonl:2" in bad.stderr and "Traceback" not in bad.stderr


def test_text_files_by_file_and_by_line_and_compressed(tmp_path):
    tok = bpetok.from_gguf(SMOLLM2)
    texts = [c["text"].replace("\n", " ").replace("\r", " ") for c in cases("smollm2")[:200]]
    texts = [t for t in texts if t.strip()]
    body = "\n".join(texts).encode() + b"\n"
    inputs = {"plain.txt": body, "a.txt.gz": gzip.compress(body), "b.txt.xz": lzma.compress(body),
              "c.txt.bz2": bz2.compress(body)}
    import zstandard

    inputs["d.txt.zst"] = zstandard.ZstdCompressor().compress(body)
    for name, data in inputs.items():
        (tmp_path / name).write_bytes(data)
        bpetok.encode_dataset(SMOLLM2, [tmp_path / name], tmp_path / f"out-{name}", lines=True)
        assert read_npy_shards(tmp_path / f"out-{name}") == [tok.encode(t, parse_special=False) for t in texts], name
    bpetok.encode_dataset(SMOLLM2, [tmp_path / "plain.txt", tmp_path / "a.txt.gz"], tmp_path / "whole")
    whole = tok.encode(body.decode(), parse_special=False)
    assert read_npy_shards(tmp_path / "whole") == [whole, whole]


def test_undecodable_text_line_is_counted(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"fine\nnot \xc3( utf8\n\nfine too\n")
    result = bpetok.encode_dataset(SMOLLM2, [path], tmp_path / "out", lines=True, on_error="skip")
    assert result.documents == 2 and result.errors == {"invalid_utf8": 1}
    assert result.manifest["errors"]["examples"] == [f"{path}:2: invalid UTF-8 at byte 4 (b'\\xc3( u')"]


def test_truncated_compressed_input_is_a_clear_error(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "x"}\n' * 1000)[:-20])
    with pytest.raises(BpetokError, match=r"t\.jsonl\.gz: cannot decompress the input"):
        bpetok.encode_dataset(SMOLLM2, [path], tmp_path / "out")


def test_parquet_in_and_out(tmp_path, smollm2_cases):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [c["text"] for c in smollm2_cases[:400]]
    pq.write_table(pa.table({"id": list(range(400)), "content": texts}), tmp_path / "in.parquet", row_group_size=100)
    result = bpetok.encode_dataset(SMOLLM2, [tmp_path / "in.parquet"], tmp_path / "out", field="content",
                                   format="parquet", shard_tokens=5_000)
    rows = []
    for shard in result.manifest["shards"]:
        table = pq.read_table(tmp_path / "out" / shard["file"])
        assert table.schema.field("ids").type.value_type == pa.uint16()
        rows += table.column("ids").to_pylist()
    assert rows == [c["ids"] for c in smollm2_cases[:400]]
    with pytest.raises(BpetokError, match="no column 'text'.*--field"):
        bpetok.encode_dataset(SMOLLM2, [tmp_path / "in.parquet"], tmp_path / "out2")


def test_wrong_argument_types_are_type_errors(tmp_path, smollm2_jsonl):
    with pytest.raises(TypeError, match=r"encode_dataset\(inputs=...\) takes a list of paths"):
        bpetok.encode_dataset(SMOLLM2, smollm2_jsonl, tmp_path / "a")
    with pytest.raises(TypeError, match=r"encode_dataset\(workers=...\) must be an integer"):
        bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], tmp_path / "b", workers=True)
    with pytest.raises(TypeError, match=r"encode_dataset\(append_eos=...\) must be True or False"):
        bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], tmp_path / "c", append_eos="yes")
    with pytest.raises(BpetokError, match="at least 1"):
        bpetok.encode_dataset(SMOLLM2, [smollm2_jsonl], tmp_path / "d", shard_tokens=0)


# -- tasks: workers read byte ranges, row groups or files themselves -------------------------------


def test_byte_range_tasks_cover_the_file_cut_at_line_breaks(tmp_path, smollm2_jsonl):
    data = open(smollm2_jsonl, "rb").read()
    tasks = list(ds.plan_tasks([smollm2_jsonl], key="text", lines=False, block_bytes=5_000))
    assert len(tasks) > 10 and all(t.kind == "jsonl" and t.data is None for t in tasks)
    assert tasks[0].start == 0 and tasks[-1].stop == len(data)
    for before, after in zip(tasks, tasks[1:]):
        assert before.stop == after.start and data[before.stop - 1:before.stop] == b"\n"
    assert all(t.stop - t.start >= 5_000 for t in tasks[:-1])  # nothing ends early: cut at the next line break


@pytest.mark.parametrize("name", ["bad.jsonl", "bad.jsonl.gz"])
def test_bad_records_are_numbered_by_line_in_the_file_whatever_the_tasks(tmp_path, name):
    """Each task numbers its lines from 1; the driver makes them the file's line numbers."""
    body = b"".join(BAD_JSONL.replace(b"good one", b"good %d" % i) for i in range(30))  # 9 lines each
    (tmp_path / name).write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    bpetok.encode_dataset(SMOLLM2, [tmp_path / name], tmp_path / "one", on_error="skip")
    many = bpetok.encode_dataset(SMOLLM2, [tmp_path / name], tmp_path / "many", on_error="skip", block_bytes=100)
    assert files(tmp_path / "one") == files(tmp_path / "many")
    assert many.errors == {"invalid_json": 30, "invalid_utf8": 60, "missing_field": 30, "not_a_string": 30, "not_an_object": 30}
    examples = many.manifest["errors"]["examples"]
    assert len(examples) == dataset_tasks.EXAMPLES_KEPT
    assert examples[6] == f"{tmp_path / name}:11: not valid JSON (Unterminated string starting at: column 10)"
    with pytest.raises(ds.DatasetError, match=rf"{name}:2: not valid JSON"):
        bpetok.encode_dataset(SMOLLM2, [tmp_path / name], tmp_path / "fail", block_bytes=100)


def test_parquet_row_groups_as_tasks_and_null_rows_named(tmp_path, smollm2_cases):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts: list[str | None] = [c["text"] for c in smollm2_cases[:400]]
    texts[250] = None
    pq.write_table(pa.table({"content": texts}), tmp_path / "in.parquet", row_group_size=100)
    assert len(list(ds.plan_tasks([str(tmp_path / "in.parquet")], key="content", lines=False, block_bytes=1))) == 4
    kwargs = dict(field="content", on_error="skip", shard_tokens=5_000)
    bpetok.encode_dataset(SMOLLM2, [tmp_path / "in.parquet"], tmp_path / "one", **kwargs)
    four = bpetok.encode_dataset(SMOLLM2, [tmp_path / "in.parquet"], tmp_path / "four", block_bytes=1, workers=2, **kwargs)
    assert files(tmp_path / "one") == files(tmp_path / "four")
    assert four.manifest["errors"]["examples"] == [f"{tmp_path / 'in.parquet'}: row 251: column 'content' is null"]
    assert read_npy_shards(tmp_path / "four") == [c["ids"] for i, c in enumerate(smollm2_cases[:400]) if i != 250]


def test_a_worker_that_cannot_open_the_input_says_so(tmp_path):
    source = ds.ModelSource(path=str(SMOLLM2), sha256="x")
    task = dataset_tasks.Task("jsonl", (0,), (str(tmp_path / "elsewhere.jsonl"),), 0, 100)
    with pytest.raises(ds.DatasetError, match=r"elsewhere\.jsonl: cannot open the input on .*same path"):
        ds.run_task(source, task, dataset_tasks.Reading("text", False, None))


def test_resume_counts_the_kept_shards_bad_records_again(tmp_path, smollm2_cases, monkeypatch):
    """The manifest of a resumed run, errors and their examples included, is the fresh run's."""
    lines = [json.dumps({"text": c["text"]}).encode() for c in smollm2_cases]
    for i in range(0, len(lines), 97):
        lines.insert(i, b'{"text": "broken')
    (tmp_path / "in.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    kwargs = dict(shard_tokens=20_000, block_bytes=30_000, on_error="skip", workers=2)
    fresh = bpetok.encode_dataset(SMOLLM2, [tmp_path / "in.jsonl"], tmp_path / "fresh", **kwargs)
    assert fresh.errors["invalid_json"] > 20

    run_interrupted_after_3_shards(monkeypatch, [tmp_path / "in.jsonl"], tmp_path / "resumed", **kwargs)
    resumed = bpetok.encode_dataset(SMOLLM2, [tmp_path / "in.jsonl"], tmp_path / "resumed", **kwargs)
    assert resumed.resumed_shards == 3
    assert files(tmp_path / "fresh") == files(tmp_path / "resumed")


FAULTS = """
import resource, sys
from bpetok.apps import dataset_tasks

def faults_of_buffers():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):
        buffer = bytearray(1 << 20)  # written: its pages are touched
        del buffer
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

frozen = faults_of_buffers()
dataset_tasks._unfix_mmap_threshold()
print(frozen, faults_of_buffers())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc tunables")
def test_a_frozen_mmap_threshold_is_lifted_on_workers():
    """Dask starts workers with MALLOC_TRIM_THRESHOLD_ set, which freezes glibc's mmap threshold:
    each buffer of a MiB is then a fresh mapping whose 256 pages fault in; after the task's set-up
    they come from the heap again."""
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="65536")
    run = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    frozen, lifted = map(int, run.stdout.split())
    assert frozen > 200 * 200 and lifted < frozen / 10, (frozen, lifted)
