"""Encoding a corpus into token-id shards for training (``bpetok encode-dataset``).

The flow, one way: the driver (this process) cuts the inputs into *tasks* of about
:data:`BLOCK_BYTES` bytes each: a byte range of a JSONL or text file, cut at a line break, or a
few Parquet row groups (:func:`plan_tasks`), so only where to read travels, not the text. The
task runs in this process, on its threads or local worker processes (``concurrent.futures``) or on a Dask
cluster: it reads its records into *documents* (a text file, a line, a JSONL record's field, a
Parquet cell), encodes them and returns their ids, lengths and bad records (:func:`run_task`).
The results come back in task order and are cut into *shards* of whole documents holding at
most ``shard_tokens`` ids each.

Why the output does not depend on the workers or the engine: a document's ids are
``tok.encode(text)`` whichever process computes them, results are consumed in input order, and
a shard ends where its next document would not fit: the cut depends only on the documents'
lengths in ids, never on which task or worker they came from, nor on timing.

Why a rerun resumes: each shard is written to a temporary file in the output directory and
renamed when complete, and the manifest (written the same way) lists the finished shards with
their sha256. A rerun with the same model, inputs and options keeps the shards whose files still
match, skips the documents they hold (reading, not encoding, them) and carries on from there;
the cut of the rest is the same because a shard always starts a fresh cut.

Output (``OUTDIR``): ``shard-00000.npy`` (the ids, one flat array, ``uint16`` when the
vocabulary has at most 65,536 tokens, else ``uint32``) with ``shard-00000.idx.npy`` (``uint64``
offsets: document ``i`` is ``ids[idx[i]:idx[i + 1]]``), or ``shard-00000.parquet`` (one row per
document, an ``ids`` column of ``list<uint16>`` or ``list<uint32>``, as the manifest's ``dtype``
says); and ``manifest.json``; while a run writes there, its lock file (:mod:`bpetok.apps._outdir`).

This module is the run (:func:`encode_dataset`) and its command; the tasks as a worker runs them
are in dataset_tasks.py, planning and the pools in dataset_runner.py, shards and the manifest in
dataset_shards.py.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Iterable

from bpetok.apps import _outdir
from bpetok.errors import BpetokError
from bpetok.apps.dataset_runner import (
    ErrorLog,
    _after_kept,
    _load_vocabulary,
    connect_dask,
    in_order,
    in_order_here_too,
    plan_tasks,
    process_pool,
)
from bpetok.apps.dataset_shards import MANIFEST, _atomic_write, _read_manifest, _ShardWriter, _verified_prefix
from bpetok.apps.dataset_tasks import (
    DatasetError,
    ModelSource,
    Reading,
    _read_spilled,
    _remove_spilled,
    _zstandard,
    file_sha256,
    run_task,
    run_task_to_file,
)
from bpetok.hookspecs import hookimpl

__all__ = [
    "encode_dataset", "DatasetError", "DatasetResult", "ModelSource", "bpetok_register_commands", "connect_dask",
    "in_order", "process_pool",
]

FORMAT_VERSION = "bpetok-shards/1"
# The input a task reads: large enough that the per-task overhead (one round trip, a worker's
# reading and its returned ids) is small, small enough that a worker's memory stays far below 1 GiB.
BLOCK_BYTES = 1 << 22
# 2**26 ids: 128 MiB as uint16, 256 MiB as uint32; the writer holds one shard's ids (npy shards are
# written part by part, with no concatenated copy), so its memory is bounded by this, not by the corpus.
DEFAULT_SHARD_TOKENS = 1 << 26
# Tasks submitted ahead of the one being written, per worker: keeps every worker busy while
# bounding the texts and ids held in memory.
AHEAD_PER_WORKER = 2


# -- the run -------------------------------------------------------------------------------------


@dataclass
class DatasetResult:
    """What :func:`encode_dataset` wrote (the manifest's content) and what it skipped on a resume."""

    manifest: dict
    output_dir: str
    resumed_shards: int = 0

    @property
    def documents(self) -> int:
        return self.manifest["documents"]

    @property
    def tokens(self) -> int:
        return self.manifest["tokens"]

    @property
    def errors(self) -> dict[str, int]:
        return self.manifest["errors"]["counts"]


def _inputs(paths: list[str]) -> list[dict]:
    """The inputs as the plan records them, each checked to be a file this run can read."""
    out = []
    for path in paths:
        if not os.path.isfile(path):
            raise BpetokError(f"{path}: no such input file" + (" (it is a directory)" if os.path.isdir(path) else ""))
        if path.endswith(".zst"):
            _zstandard(path)
        st = os.stat(path)
        out.append({"path": path, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


def _progress_bar(enabled: bool | None):
    """A tqdm bar on stderr when it is a terminal (and tqdm is installed), else None."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(unit=" docs", unit_scale=True, desc="encoding", file=sys.stderr)


def encode_dataset(
    model: str | os.PathLike,
    inputs: Iterable[str | os.PathLike],
    output_dir: str | os.PathLike,
    *,
    field: str = "text",
    lines: bool = False,
    format: str = "npy",
    append_eos: bool = False,
    parse_special: bool = False,
    workers: int = 1,
    client=None,
    on_error: str = "fail",
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    block_bytes: int = BLOCK_BYTES,
    progress: bool | None = None,
) -> DatasetResult:
    """Encode every document of ``inputs`` with the GGUF vocabulary ``model`` into shards in ``output_dir``.

    >>> import json, tempfile
    >>> d = tempfile.mkdtemp()
    >>> with open(f"{d}/train.jsonl", "w") as f:
    ...     _ = f.write(json.dumps({"text": "Hello world"}) + "\\n")
    >>> r = encode_dataset("tests/data/ggml-vocab-qwen3.gguf.gz", [f"{d}/train.jsonl"], f"{d}/out", append_eos=True)
    >>> r.documents, r.tokens, r.manifest["dtype"], r.manifest["shards"][0]["file"]
    (1, 3, 'uint32', 'shard-00000.npy')

    :param inputs: text files (one document each, or one per line with ``lines``), JSONL
        (``.jsonl``/``.ndjson``: the ``field`` of each record) or Parquet (the ``field`` column);
        ``.gz``/``.xz``/``.bz2``/``.zst`` are decompressed on the fly.
    :param format: ``npy`` (flat ids + document offsets) or ``parquet`` (a list of ids per document).
    :param append_eos: end every document with the vocabulary's EOS id.
    :param parse_special: read special-token texts (``<|im_end|>``) in documents as their ids;
        off by default, so a document cannot inject control tokens.
    :param workers: how many tasks encode at once: on threads of this process where the tokenizer
        encodes without the GIL (:attr:`bpetok.Tokenizer.encodes_without_gil`), else on this
        process and ``workers - 1`` worker processes.
    :param client: a ``dask.distributed.Client``: run the tasks on its cluster instead; its workers
        read the inputs themselves, so they must see them at the same (absolute) paths.
    :param on_error: ``fail`` at the first unreadable record, or ``skip`` it and count it.
    :param shard_tokens: the most ids in a shard (a longer document gets a shard of its own).
    :param block_bytes: about how much input one task reads (the output does not depend on it).
    :raises BpetokError: unreadable model or input, a bad record with ``on_error="fail"``, an
        output directory holding another run's shards, or being written by another run at the
        moment (:class:`bpetok.apps._outdir.DirectoryBusy`, naming its pid).
    """
    import numpy as np

    from bpetok._args import as_int, check_flag, check_not_text

    check_not_text(inputs, "encode_dataset(inputs=...)", "a list of paths")
    model = os.fspath(model)
    paths = [os.fspath(p) for p in inputs]
    output_dir = os.fspath(output_dir)
    workers = as_int(workers, "encode_dataset(workers=...)")
    shard_tokens = as_int(shard_tokens, "encode_dataset(shard_tokens=...)")
    block_bytes = as_int(block_bytes, "encode_dataset(block_bytes=...)")
    for name, flag in (("lines", lines), ("append_eos", append_eos), ("parse_special", parse_special)):
        check_flag(flag, f"encode_dataset({name}=...)")
    if not paths:
        raise BpetokError("no inputs: give at least one text, JSONL or Parquet file")
    if format not in ("npy", "parquet"):
        raise BpetokError(f"format must be 'npy' or 'parquet', not {format!r}")
    if format == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise BpetokError("--format parquet needs pyarrow: pip install 'bpetok[parquet]'") from None
    if shard_tokens < 1 or workers < 1 or block_bytes < 1:
        raise BpetokError("shard_tokens, workers and block_bytes must be at least 1")
    errors = ErrorLog(on_error, paths)
    source = ModelSource(path=os.path.abspath(model), sha256=file_sha256(model))
    checked_inputs = _inputs(paths)  # before the output directory is created: a run refused creates nothing
    with _outdir.claimed(output_dir), ExitStack() as pool:
        # This process needs a tokenizer only when it encodes (not on Dask); else the vocabulary's facts will do.
        tok = source.tokenizer() if client is None else None
        vocabulary = tok.vocabulary if tok is not None else _load_vocabulary(model)
        # Local workers: threads sharing this tokenizer where its encoding runs without the GIL
        # (no second process to start, no second set of caches to warm, no ids to send back), else
        # processes; they start now, and build their tokenizers while this one plans the run.
        threads = processes = None
        if tok is not None and workers > 1:
            if tok.encodes_without_gil:
                threads = ThreadPoolExecutor(workers, thread_name_prefix="bpetok-encode")
                pool.callback(threads.shutdown, cancel_futures=True)
            else:
                pool.callback(_remove_spilled, output_dir)  # once the workers are gone (callbacks run last first)
                processes = pool.enter_context(process_pool(workers - 1, source))
        eos = None
        if append_eos:
            eos = vocabulary.special_ids.get("eos")
            if eos is None:
                raise BpetokError(f"{model}: the vocabulary has no EOS token (tokenizer.ggml.eos_token_id); drop --append-eos")
        dtype = np.uint16 if vocabulary.n_tokens <= 1 << 16 else np.uint32
        plan = {
            "model_sha256": source.sha256,
            "inputs": checked_inputs,
            "field": field, "lines": lines, "format": format, "append_eos": append_eos,
            "parse_special": parse_special, "on_error": on_error, "shard_tokens": shard_tokens,
        }
        manifest = {
            "format": FORMAT_VERSION,
            "model": {"path": model, "model": vocabulary.model, "pre": vocabulary.pre,
                      "sha256": source.sha256, "n_tokens": vocabulary.n_tokens, "eos_id": eos},
            "dtype": np.dtype(dtype).name,
            "plan": plan,
            "complete": False,
            "shards": [],
        }

        for name in os.listdir(output_dir):  # temporary files a killed run left behind (none is running: claimed)
            if name.startswith((".shard-", f".{MANIFEST}.")) and name.endswith(".tmp"):
                os.unlink(os.path.join(output_dir, name))
        previous = _read_manifest(output_dir)
        if previous is not None:
            if previous["plan"] != plan:
                changed = sorted(k for k in plan if previous["plan"].get(k) != plan[k])
                raise BpetokError(
                    f"{output_dir}: holds shards of another run ({', '.join(changed)} differ); "
                    "choose an empty output directory, or delete this one to start over"
                )
            manifest["shards"] = _verified_prefix(output_dir, previous["shards"])
        elif any(n.startswith("shard-") for n in os.listdir(output_dir)):
            raise BpetokError(f"{output_dir}: holds shards but no {MANIFEST}; choose an empty output directory")
        resumed = len(manifest["shards"])
        skip = sum(s["documents"] for s in manifest["shards"])

        def save_manifest() -> None:
            _atomic_write(output_dir, MANIFEST, lambda f: f.write(json.dumps(manifest, indent=1).encode() + b"\n"))

        writer = _ShardWriter(output_dir, format, dtype, shard_tokens, manifest["shards"], skip)
        writer.on_shard = save_manifest
        reading = Reading(field, parse_special, eos)
        tasks = plan_tasks(paths, key=field, lines=lines, block_bytes=block_bytes)
        work = _after_kept(tasks, skip, source, reading, errors)
        bar = _progress_bar(progress)

        try:
            if client is not None:
                from bpetok.apps._dask import ModelOnWorkers, result_from_worker

                plugin = ModelOnWorkers(source.sha256, _read_bytes(model))
                client.register_plugin(plugin)
                pool.callback(client.unregister_worker_plugin, plugin.name)
                n = max(sum(client.nthreads().values()), 1)
                results = in_order(lambda w: client.submit(run_task, source, w[0], reading, w[1], pure=False),
                                   work, AHEAD_PER_WORKER * n, result_from_worker(client))
            elif threads is not None:
                results = in_order(lambda w: threads.submit(run_task, source, w[0], reading, w[1]), work, AHEAD_PER_WORKER * workers)
            elif processes is not None:
                results = in_order_here_too(lambda w: processes.submit(run_task_to_file, source, w[0], reading, w[1], output_dir),
                                            lambda w: run_task(source, w[0], reading, w[1]),
                                            work, AHEAD_PER_WORKER * (workers - 1))
            else:
                results = (run_task(source, task, reading, kept) for task, kept in work)
            for result in results:
                _read_spilled(result)
                errors.absorb(result)
                writer.add(result.ids, result.lengths)
                if bar is not None:
                    bar.update(len(result.lengths))
            writer.flush()
        except Exception as e:
            if type(e).__name__ in ("BrokenProcessPool", "KilledWorker"):  # concurrent.futures', dask's
                raise BpetokError(
                    f"a worker died while encoding ({e}); the {len(manifest['shards'])} finished shards are kept: "
                    "run the same command again to resume"
                ) from e
            raise
        finally:
            writer.discard()  # a shard left incomplete (after flush, there is none)
            if bar is not None:
                bar.close()

        manifest["documents"] = sum(s["documents"] for s in manifest["shards"])
        manifest["tokens"] = sum(s["tokens"] for s in manifest["shards"])
        manifest["empty"] = dict(sorted(errors.empty.items()))
        manifest["errors"] = {"counts": dict(sorted(errors.counts.items())), "examples": errors.examples}
        manifest["complete"] = True
        save_manifest()
    return DatasetResult(manifest=manifest, output_dir=output_dir, resumed_shards=resumed)


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# -- command line ---------------------------------------------------------------------------------


def _cmd_encode_dataset(args) -> int:
    client = connect_dask(args.dask) if args.dask else None
    try:
        result = encode_dataset(
            args.model, args.inputs, args.output, field=args.field, lines=args.lines, format=args.format,
            append_eos=args.append_eos, parse_special=args.parse_special, workers=args.workers, client=client,
            on_error=args.on_error, shard_tokens=args.shard_tokens, progress=False if args.quiet else None,
        )
    finally:
        if client is not None:
            client.close()
    m = result.manifest
    resumed = f" ({result.resumed_shards} kept from an earlier run)" if result.resumed_shards else ""
    print(f"wrote {args.output}: {len(m['shards'])} shard{'s' if len(m['shards']) != 1 else ''}{resumed}, {m['documents']:,} documents, "
          f"{m['tokens']:,} tokens ({m['dtype']})")
    if result.errors:
        counts = ", ".join(f"{k}: {v:,}" for k, v in result.errors.items())
        print(f"skipped {sum(result.errors.values()):,} unreadable records ({counts}); "
              f"the first ones are listed in {os.path.join(args.output, MANIFEST)}:", file=sys.stderr)
        for line in m["errors"]["examples"][:5]:
            print(f"  {line}", file=sys.stderr)
    return 0


@hookimpl
def bpetok_register_commands(subparsers) -> None:
    """Add ``bpetok encode-dataset`` (a built-in plugin of the CLI hook)."""
    from bpetok.apps.cli import positive_int

    p = subparsers.add_parser("encode-dataset", help="encode text/JSONL/Parquet files into token-id shards")
    p.add_argument("model", metavar="MODEL.gguf")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="text, .jsonl or .parquet files (.gz/.xz/.bz2/.zst decompressed on the fly)")
    p.add_argument("-o", "--output", required=True, metavar="OUTDIR", help="directory for the shards and manifest.json")
    p.add_argument("--field", default="text", help="JSONL field / Parquet column holding the text (default: text)")
    p.add_argument("--lines", action="store_true", help="text files: one document per line (default: per file)")
    p.add_argument("--format", choices=("npy", "parquet"), default="npy", help="shard format (default: npy)")
    p.add_argument("--append-eos", action="store_true", help="end every document with the EOS token")
    p.add_argument("--parse-special", action="store_true",
                   help="read special-token texts in documents as their ids (default: as plain text)")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N", help="tasks encoding at once: threads with the C kernel's splitter, else processes (default 1)")
    p.add_argument("--dask", metavar="SCHEDULER_ADDRESS", help="run on this Dask cluster (tcp://host:8786)")
    p.add_argument("--on-error", choices=("skip", "fail"), default="fail",
                   help="an unreadable record: stop (default) or count it and go on")
    p.add_argument("--shard-tokens", type=positive_int, default=DEFAULT_SHARD_TOKENS, metavar="N",
                   help=f"the most tokens in a shard, of whole documents (default {DEFAULT_SHARD_TOKENS:,})")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_encode_dataset)

