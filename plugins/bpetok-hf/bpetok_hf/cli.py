"""``bpetok export MODEL --format hf -o DIR``: write a vocabulary as tokenizer.json + tokenizer_config.json.

The plugin's ``bpetok_register_commands`` implementation calls :func:`add_command`, which adds
the parser with ``func`` set. ``python -m bpetok_hf export ...`` runs the same command alone.
"""

from __future__ import annotations

import argparse
import sys

FORMATS = ("hf",)


def _cmd_export(args) -> int:
    import bpetok

    from bpetok_hf.writer import export_hf

    tok = bpetok.from_file(args.model)
    for path in export_hf(tok, args.output):
        print(path)
    return 0


def add_command(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="write a vocabulary in another format (hf: tokenizer.json + tokenizer_config.json, bpetok-hf)",
    )
    p.add_argument("model", metavar="MODEL", help="a GGUF (or any vocabulary file bpetok opens)")
    p.add_argument("--format", choices=FORMATS, default="hf", help="output format (default: hf)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="directory to write the files into")
    p.set_defaults(func=_cmd_export)


def main(argv: list[str] | None = None) -> int:
    from bpetok import BpetokError

    parser = argparse.ArgumentParser(prog="python -m bpetok_hf")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    add_command(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except (BpetokError, OSError) as e:
        print(f"bpetok: error: {e}", file=sys.stderr)
        return 1
