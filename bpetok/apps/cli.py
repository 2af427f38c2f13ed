"""The ``bpetok`` command line.

The commands defined here describe and tokenize; every other subcommand arrives through the
``bpetok_register_commands(subparsers)`` hook (docs/hooks.md), implemented by the built-in plugins
``bpetok.apps.train_cli``, ``bpetok.apps.server_cli``, ``bpetok.apps.chat`` and ``bpetok.apps.datasets`` and by any installed plugin. A plugin that fails to import
is reported, never a silently missing command.
Errors a user can fix are printed as one line, ``bpetok: error: ...``, with exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable

import pluggy

import bpetok
from bpetok.errors import BpetokError

def positive_int(text: str) -> int:
    """argparse type for a whole number >= 1 (shared by the subcommands of feature modules)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _cmd_list_pretokenizers(args) -> int:
    from bpetok.plugins import get_registry

    rows = [
        {
            "name": row.pre,
            "model": row.model,
            "pretokenizer": row.spec.name,
            "llama_type": row.spec.llama_type,
            "plugin": row.spec.plugin,
            "distribution": row.distribution,
            "version": row.version,
            "clean_spaces": row.spec.clean_spaces,
            "ignore_merges": row.spec.ignore_merges,
            "add_bos": row.spec.add_bos,
            "space_chunks": row.spec.space_chunks,
            "description": row.spec.description,
        }
        for row in get_registry().rows()
    ]
    return _print_rows(rows, ("name", "model", "pretokenizer", "llama_type", "plugin", "distribution", "version"), args.json)


def _print_rows(rows: list[dict], headers: tuple[str, ...], as_json: bool) -> int:
    """The rows as JSON (``--json``: every field) or as a table of ``headers``; the exit status."""
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows, headers)
    return 0


def _print_table(rows: list[dict], headers: tuple[str, ...]) -> None:
    # An empty cell shows as '-' (the empty pre name is a file without tokenizer.ggml.pre: llama.cpp's default type).
    table = [headers] + [tuple(str(r[h] if r[h] not in (None, "") else "-") for h in headers) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())


def _cmd_list_models(args) -> int:
    from bpetok.plugins import get_model_registry

    rows = [
        {
            "name": row.name,
            "plugin": row.spec.plugin,
            "distribution": row.distribution,
            "version": row.version,
            "pretokenized": row.spec.pretokenized,
            "description": row.spec.description,
        }
        for row in get_model_registry().rows()
    ]
    return _print_rows(rows, ("name", "plugin", "distribution", "version", "description"), args.json)


def _engine_of(tok) -> str:
    """The tokenizer's engine, and why where it is pure Python because the C kernel is not built."""
    from bpetok.compiled import pure_python_reason

    reason = pure_python_reason() if tok.engine == "pure Python" else None
    return f"{tok.engine} ({reason})" if reason else tok.engine


def _cmd_info(args) -> int:
    from collections import Counter

    from bpetok.apps.chat import chat_templates

    tok = bpetok.from_file(args.model)
    vocab = tok.vocabulary
    types = Counter(tok.token_type(i).name for i in range(tok.n_tokens))
    info = {
        "path": vocab.path,
        "model": vocab.model,
        "pre": vocab.pre,
        "model_plugin": tok.model_spec.plugin,
        "pretokenizer": tok.spec.name if tok.spec is not None else None,
        "llama_type": tok.spec.llama_type if tok.spec is not None else None,
        "plugin": tok.spec.plugin if tok.spec is not None else None,
        "n_tokens": tok.n_tokens,
        "n_merges": len(vocab.merges),
        "token_types": dict(sorted(types.items())),
        "special_ids": {k: v for k, v in vocab.special_ids.items() if v is not None},
        "eog_ids": sorted(tok.eog_ids),
        "add_bos": tok.add_bos,
        "add_eos": tok.add_eos,
        "add_sep": tok.add_sep,
        "add_space_prefix": tok.add_space_prefix,
        "engine": _engine_of(tok),
        "chat_templates": sorted(chat_templates(vocab)),
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key, value in info.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            value = ", ".join(map(str, value)) or "-"
        elif isinstance(value, int) and not isinstance(value, bool):
            value = f"{value:,}"
        elif value is None:
            value = "-"
        print(f"{key + ':':16} {value}")
    return 0


def _piece_json(data: bytes):
    """A piece as a string when it is valid UTF-8, else its byte values (llama-server's convention)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


_OUTPUT_SLICE = 65536  # tokens formatted at a time by `bpetok tokenize`


def _cmd_tokenize(args) -> int:
    tok = bpetok.from_file(args.model)
    if args.file is not None:
        try:
            with open(args.file, "rb") as f:
                data = f.read()
        except OSError as e:
            raise BpetokError(f"{args.file}: cannot read the input file ({e.strerror})") from e
    else:
        data = sys.stdin.buffer.read()
    if args.ids and not args.color:
        raise BpetokError("--ids goes with --color (the JSON output always has the ids)")
    if args.offsets or args.color:
        return _tokenize_text(tok, data, args)
    # The raw bytes, invalid UTF-8 included: llama.cpp's ids for exactly what was given.
    ids = tok.encode_bytes(data, parse_special=not args.no_special)
    del data
    # The JSON is written a slice of tokens at a time, never built whole: with --pieces, a list of
    # dicts for a 60 MB input took 6 GB (docs/benchmarks.md, "tokenize --pieces").
    out = sys.stdout
    out.write('{"tokens": [')
    for start in range(0, len(ids), _OUTPUT_SLICE):
        part = ids[start : start + _OUTPUT_SLICE]
        items: Iterable[str]
        if args.pieces:
            items = [json.dumps({"id": i, "piece": _piece_json(tok.piece(i))}, ensure_ascii=False) for i in part]
        else:
            items = map(str, part)
        if start:
            out.write(", ")
        out.write(", ".join(items))
    out.write("]}\n")
    return 0


def _tokenize_text(tok: bpetok.Tokenizer, data: bytes, args) -> int:
    """``tokenize --offsets`` (JSON with each token's spans) and ``tokenize --color``: both need text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        flag = "--offsets" if args.offsets else "--color"
        raise BpetokError(
            f"{args.file or 'stdin'}: {flag} needs UTF-8 text, byte {e.start} is not; tokenize without {flag}"
        ) from None
    found = tok.encode_with_offsets(text, parse_special=not args.no_special)
    out = sys.stdout
    if args.color:
        use_color = out.isatty() and not os.environ.get("NO_COLOR")
        out.write(render_pieces(tok, text, found, ids=args.ids, color=use_color))
        return 0
    out.write('{"tokens": [')
    for start in range(0, len(found.ids), _OUTPUT_SLICE):
        items = []
        for k in range(start, min(start + _OUTPUT_SLICE, len(found.ids))):
            token: dict = {"id": found.ids[k]}
            if args.pieces:
                token["piece"] = _piece_json(tok.piece(found.ids[k]))
            token["offsets"] = found.offsets[k]
            token["byte_offsets"] = found.byte_offsets[k]
            token["partial"] = found.partial[k]
            items.append(json.dumps(token, ensure_ascii=False))
        if start:
            out.write(", ")
        out.write(", ".join(items))
    out.write("]}\n")
    return 0


# Background colors that alternate between tokens (256-colour palette: pale blue, green, yellow, pink).
_BACKGROUNDS = (153, 151, 223, 218)


def render_pieces(tok: bpetok.Tokenizer, text: str, found, *, ids: bool = False, color: bool = True) -> str:
    """The text cut into its tokens: each in the next background color (``color``), else
    between ``|``; ``ids``: each token's id after it in brackets. A character split over several
    tokens is shown once, with its first token; a token of no text (BOS) shows its piece."""
    out = []
    shown = 0  # characters of the text shown so far
    for k, token_id in enumerate(found.ids):
        start, end = found.offsets[k]
        if start == end:
            part = tok.piece(token_id).decode("utf-8", "replace")
        else:
            part = text[max(start, shown) : end]
            shown = max(shown, end)
        label = f"[{token_id}]" if ids else ""
        if color:
            part = part.replace("\n", "\u21b5\n")  # a visible mark where the line breaks
            background = _BACKGROUNDS[k % len(_BACKGROUNDS)]
            out.append(f"\x1b[48;5;{background};38;5;16m{part}\x1b[0m" + (f"\x1b[2m{label}\x1b[0m" if label else ""))
        else:
            out.append(part + label)
    return ("" if color else "|").join(out) + "\n"


def build_parser(plugin_manager: pluggy.PluginManager | None = None) -> argparse.ArgumentParser:
    """The ``bpetok`` parser: the commands below, then every ``bpetok_register_commands`` plugin's.

    :param plugin_manager: the manager whose plugins add commands (default: the process-wide one).
    """
    parser = argparse.ArgumentParser(prog="bpetok", description="llama.cpp-exact BPE tokenizer.")
    from bpetok.models.gpt2 import engine

    parser.add_argument("--version", action="version", version=f"bpetok {bpetok.__version__}, engine: {engine()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("list-pretokenizers", help="list installed pre-tokenizers and their plugins")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_list_pretokenizers)

    p = sub.add_parser("list-models", help="list installed tokenizer models and their plugins")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_list_models)

    p = sub.add_parser("info", help="describe a GGUF vocabulary")
    p.add_argument("model", metavar="MODEL.gguf")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("tokenize", help="print the token ids of stdin (or --file) as JSON")
    p.add_argument("model", metavar="MODEL.gguf")
    p.add_argument("--file", help="read the text from this file instead of stdin")
    p.add_argument("--no-special", action="store_true", help="do not parse special tokens written in the text")
    p.add_argument("--pieces", action="store_true", help="give each token's piece too")
    p.add_argument(
        "--offsets",
        action="store_true",
        help="give each token's character and byte span in the text (UTF-8 input only; conventions in bpetok.offsets)",
    )
    p.add_argument(
        "--color",
        action="store_true",
        help="show the text cut into tokens, in alternating background colors on a terminal "
        "(between | when stdout is not one, or NO_COLOR is set)",
    )
    p.add_argument("--ids", action="store_true", help="with --color: each token's id after it")
    p.set_defaults(func=_cmd_tokenize)

    if plugin_manager is None:
        from bpetok.plugins import get_plugin_manager

        plugin_manager = get_plugin_manager()
    plugin_manager.hook.bpetok_register_commands(subparsers=sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except BpetokError as e:  # a plugin that fails to load: say which, rather than lose its commands
        print(f"bpetok: error: {e}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except BrokenPipeError:  # `bpetok ... | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except (BpetokError, OSError) as e:
        print(f"bpetok: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
