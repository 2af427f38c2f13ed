"""``bpetok train`` and ``bpetok extend``: the commands over :func:`bpetok.train.train` and
:func:`bpetok.train.extend` (a built-in plugin of the CLI hook, imported when the parser is built).
"""

from __future__ import annotations

import argparse
import sys

from bpetok._extend import read_pin_file
from bpetok.hookspecs import hookimpl
from bpetok.train import extend, train

__all__ = ["bpetok_register_commands"]


def _pins_from_args(args) -> list[str]:
    pins = list(args.pin or [])
    for path in args.pin_file or []:
        pins += read_pin_file(path)
    return pins


def _cmd_train(args) -> int:
    from bpetok.apps.datasets import connect_dask

    client = connect_dask(args.dask) if args.dask else None
    try:
        result = train(
            args.corpus, vocab_size=args.vocab_size, pre=args.pre, special_tokens=args.special or [],
            pins=_pins_from_args(args), min_frequency=args.min_frequency, output=args.output,
            progress=False if args.quiet else None, workers=args.workers, client=client,
        )
    finally:
        if client is not None:
            client.close()
    print(
        f"wrote {args.output}: {len(result.tokens):,} tokens, {len(result.merges):,} merges, "
        f"{len(result.pinned)} pinned terms, from {result.n_pieces:,} pieces ({result.n_unique:,} unique) "
        f"in {result.seconds:.1f} s"
    )
    if len(result.tokens) < args.vocab_size:
        print(f"note: stopped at {len(result.tokens):,} tokens: no pair occurs {args.min_frequency} times", file=sys.stderr)
    return 0


def _cmd_extend(args) -> int:
    result = extend(args.base, pins=_pins_from_args(args), output=args.output)
    print(
        f"wrote {args.output}: {result.n_tokens:,} tokens, {len(result.added)} pinned forms added as user-defined "
        f"tokens, {len(result.already)} already single tokens"
    )
    return 0


@hookimpl
def bpetok_register_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``bpetok train`` and ``bpetok extend`` (a built-in plugin of the CLI hook)."""
    from bpetok.apps.cli import positive_int

    p = subparsers.add_parser("train", help="learn a byte-level BPE vocabulary from text files, write a GGUF")
    p.add_argument("corpus", nargs="+", metavar="CORPUS", help="UTF-8 text files (.xz/.gz/.bz2 decompressed)")
    p.add_argument("--vocab-size", type=positive_int, required=True, metavar="N", help="tokens in the vocabulary, specials included")
    p.add_argument("--pre", default="qwen2", metavar="NAME", help="pre-tokenizer (bpetok list-pretokenizers); default qwen2")
    p.add_argument("--special", action="append", metavar="TOKEN", help="a special (CONTROL) token; the first is BOS/EOS")
    p.add_argument("--pin", action="append", metavar="TERM", help="make TERM and ' TERM' single tokens")
    p.add_argument("--pin-file", action="append", metavar="FILE", help="pin every line of FILE")
    p.add_argument("--min-frequency", type=positive_int, default=2, metavar="K", help="merge only pairs seen K times (default 2)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.gguf")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="count pieces on N local processes (default 1); merging stays in one")
    p.add_argument("--dask", metavar="SCHEDULER_ADDRESS", help="count pieces on this Dask cluster (tcp://host:8786)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train)

    p = subparsers.add_parser("extend", help="add pinned terms to a GGUF vocabulary without changing other ids")
    p.add_argument("base", metavar="BASE.gguf")
    p.add_argument("--pin", action="append", metavar="TERM", help="make TERM and ' TERM' single tokens")
    p.add_argument("--pin-file", action="append", metavar="FILE", help="pin every line of FILE")
    p.add_argument("-o", "--output", required=True, metavar="OUT.gguf")
    p.set_defaults(func=_cmd_extend)
