#!/usr/bin/env bash
# Build the kernel (bpetok/models/gpt2/kernel/) with ThreadSanitizer and run encode_batch on its own
# threads: a cold tokenizer (the helpers fill the shared caches together), then warm, lists and
# numpy, texts with special tokens among them; the results must agree.
#
#     scripts/tsan_batch.sh [CORPUS.txt.xz]    # from the repository, in a venv with bpetok installed
#
# As in sanitize_kernel.sh, the package is copied to a temporary directory and built there, and
# Python itself is not instrumented (libtsan is preloaded). Any race report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
corpus="${1:-}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar --exclude='*.so' --exclude=build --exclude=.venv --exclude=.hypothesis --exclude=__pycache__ -cf - \
    bpetok tests setup.py pyproject.toml | tar -xf - -C "$work"
cd "$work"
CFLAGS="-fsanitize=thread -g -O1" LDFLAGS="-fsanitize=thread" python setup.py -q build_ext --inplace 2>&1 | grep -v Warning || true
nm -D bpetok/models/gpt2/_kernel*.so | grep __tsan_ >/dev/null || { echo "the kernel is not instrumented" >&2; exit 1; }
export LD_PRELOAD="$(gcc -print-file-name=libtsan.so)"
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 report_signal_unsafe=0"
unset BPETOK_PURE_PYTHON
CORPUS="$corpus" python - <<'PY'
import lzma
import os

import bpetok

tok = bpetok.from_gguf("tests/data/ggml-vocab-qwen3.gguf.gz")
assert tok.engine == "C kernel", tok.engine
if os.environ["CORPUS"]:
    with lzma.open(os.environ["CORPUS"], "rt", encoding="utf-8") as f:
        texts = [p for p in f.read().split("\n\n") if p][:6000]
else:  # the reference cases: about 2M code points, several of the kernel's parts
    import sys

    sys.path.insert(0, "tests")
    from helpers import load_cases

    texts = [c["text"] for c in load_cases("qwen3")]
texts += ["x <think> y", "<|im_end|> and more"] * 20
cold = tok.encode_batch(texts, workers=3)
warm = tok.encode_batch(texts, workers=3)
ids, offsets = tok.encode_batch_to_numpy(texts, workers=2)
assert cold == warm == [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
print(f"{sum(map(len, texts))} code points, {len(ids)} ids on 2-3 threads: no race reported")
PY
