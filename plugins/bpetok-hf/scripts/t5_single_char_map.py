"""Write a t5 GGUF whose charsmap keeps only the single-character keys of another's: the shape of
map ``bpetok export --format hf`` writes exactly (keys of more than one character are refused).

    python plugins/bpetok-hf/scripts/t5_single_char_map.py OUT.gguf \\
        [--from tests/data/llama.cpp-tests/ggml-vocab-nomic-bert-moe.gguf.gz]

For nomic-bert-moe (XLM-R's ``nmt_nfkc`` map) that keeps 4,837 of its 224,711 keys: fullwidth
forms, compatibility characters, deleted controls (U+0001 among them), each as llama.cpp maps it
alone. The tests (tests/test_hf_export_ugm.py) export the result and hold transformers' ids to
bpetok's GGUF ids for it.
"""

from __future__ import annotations

import argparse
import pathlib

import numpy

import bpetok
from bpetok.gguf import read_gguf
from bpetok.gguf_writer import items_of, write_gguf
from bpetok.vocab import CHARSMAP_KEY
from bpetok_hf.charsmap_builder import build_charsmap

NOMIC = pathlib.Path(__file__).resolve().parents[3] / "tests/data/llama.cpp-tests/ggml-vocab-nomic-bert-moe.gguf.gz"


def single_char_gguf(source: str | pathlib.Path, out: str | pathlib.Path) -> pathlib.Path:
    """Copy ``source`` (a t5 GGUF with a charsmap) to ``out`` with only its single-character keys."""
    tok = bpetok.from_file(source)
    fast = tok.model.charsmap._fast
    if fast is None:
        raise ValueError(f"{source}: its charsmap has keys ending inside a character")
    blob = build_charsmap({chr(cp): replacement for cp, replacement in fast[0].items()})
    items = items_of(read_gguf(source))
    (old,) = [item for item in items if item[0] == CHARSMAP_KEY]
    items = [item for item in items if item[0] != CHARSMAP_KEY]
    write_gguf(out, items + [(CHARSMAP_KEY, old[1], numpy.frombuffer(blob, dtype=old[2].dtype), old[3])])
    return pathlib.Path(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--from", dest="source", default=str(NOMIC))
    args = parser.parse_args()
    single_char_gguf(args.source, args.out)


if __name__ == "__main__":
    main()
