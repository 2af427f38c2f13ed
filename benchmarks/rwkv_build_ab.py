"""Two builds of the rwkv walk (``bpetok.models._trie``) side by side in one process.

    python3 benchmarks/rwkv_build_ab.py OLD_trie.so NEW_trie.so [--repeat 9] [--warm]

OLD and NEW are compiled ``_trie`` modules (say main's checkout's ``bpetok/models/_trie*.so`` and
this one's). Both get the same flattened trie of rwkv-world and the specials' automata of one
tokenizer, and encode 0.25 MB of whole paragraphs of each corpus with ``encode_cut`` (what
``Tokenizer.encode`` calls for this model), in turn ``--repeat`` times: CPU seconds, the best
pass of each, as MB/s of UTF-8 and NEW's speed over OLD's. Each pass gets fresh tries (cold: every
id's int still to make) unless ``--warm``. The ids of both are checked equal first. On a shared
machine this ratio is steadier than two runs of llama_cpp_ratio.py: both builds see the same load.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.machinery
import importlib.util
import os
import time

import bpetok
from bpetok.models import rwkv
from models_bench import read_paragraphs  # benchmarks/ is on the path: scripts run from it

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = os.path.join(HERE, "..", "tests", "data", "more-models", "ggml-vocab-rwkv-world.gguf.gz")
CORPORA = "/work/shared/corpus"


def load_build(path: str):
    """The compiled module at ``path``, loaded under its own name beside any other build."""
    loader = importlib.machinery.ExtensionFileLoader("bpetok.models._trie", path)
    spec = importlib.util.spec_from_file_location("bpetok.models._trie", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--warm", action="store_true", help="one trie per build for all passes")
    parser.add_argument("--corpora", default=CORPORA, help="the directory of en/code/multi.txt.xz")
    args = parser.parse_args()
    tok = bpetok.from_file(VOCAB)
    cut_args = tok._text_encoder.args  # (unk, plain automaton, special automaton)
    arrays = rwkv._flatten(tok.model._build_trie())
    builds = {"old": load_build(args.old), "new": load_build(args.new)}

    def encoder(label: str):
        return functools.partial(builds[label].Trie(*arrays).encode_cut, *cut_args)

    encoders = {label: encoder(label) for label in builds}
    for corpus in ("en", "code", "multi"):
        texts = read_paragraphs(os.path.join(args.corpora, f"{corpus}.txt.xz"), 250_000)
        mb = sum(len(t.encode()) for t in texts) / 1e6
        assert all(encoders["old"](t, False) == encoders["new"](t, False) for t in texts), "the builds' ids differ"
        best = dict.fromkeys(builds, float("inf"))
        for _ in range(args.repeat):
            for label in builds:
                encode = encoders[label] if args.warm else encoder(label)
                ids = None
                gc.collect()
                start = time.process_time()
                ids = [encode(t, False) for t in texts]
                best[label] = min(best[label], time.process_time() - start)
        del ids
        print(f"{corpus:6} old {mb / best['old']:7.1f} MB/s  new {mb / best['new']:7.1f} MB/s  "
              f"new/old {best['old'] / best['new']:.3f}")


if __name__ == "__main__":
    main()
