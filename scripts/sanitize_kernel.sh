#!/usr/bin/env bash
# Build the C modules (bpetok/models/gpt2/kernel/*.c, bpetok/models/_symbols.c, _trie.c, _ugm.c, _wpm.c, bpetok/_specials.c, _train.c, bpetok/vocab/_gguf.c) with AddressSanitizer and UndefinedBehaviorSanitizer
# and run the tests that feed it: the kernel's own (reference pieces, Hypothesis, hostile calls,
# threads), the compiled splitters and the bert/t5 spans against their Python twins, the oracle
# cases (llama.cpp's ids, qwen2 and llama3), the Hypothesis properties and the GGUF reader and
# fuzz tests.
#
#     scripts/sanitize_kernel.sh            # from the repository, in a venv with bpetok's test extra
#
# The package is copied to a temporary directory and the kernel built there, so the working
# tree's own build is untouched. Python itself is not instrumented: libasan is preloaded, and
# leak detection is off (the interpreter keeps memory until exit by design). Any finding stops
# the run with a report and a non-zero exit (--capture=sys: pytest leaves file descriptor 2 to
# the sanitizers, so the report is printed rather than lost with the dying process).
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar --exclude='*.so' --exclude=build --exclude=.venv --exclude=.hypothesis --exclude=__pycache__ -cf - \
    bpetok tests plugins scripts setup.py pyproject.toml | tar -xf - -C "$work"
cd "$work"
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1"
CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" python setup.py -q build_ext --inplace 2>&1 | grep -v Warning || true
for module in models/gpt2/_kernel models/_symbols models/_trie models/_ugm models/_wpm vocab/_gguf _specials _train; do
    test -f bpetok/$module*.so || { echo "$module did not build" >&2; exit 1; }
    # (grep reads all of nm's output: with -q it could stop early and nm die of SIGPIPE, which pipefail reports)
    nm -D bpetok/$module*.so | grep __asan_ >/dev/null || { echo "$module is not instrumented" >&2; exit 1; }
done
export LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:strict_string_checks=1:malloc_context_size=5:fast_unwind_on_malloc=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
unset BPETOK_PURE_PYTHON
python -c "import bpetok; t = bpetok.from_gguf('tests/data/ggml-vocab-qwen3.gguf.gz'); assert t.engine == 'C kernel', t.engine; print(bpetok.__file__, t.engine)"
# The out-of-memory test of the trainer's loop is left out: its address-space limit is below what ASan reserves.
python -m pytest -q -p no:cacheprovider --capture=sys tests/test_kernel.py tests/test_symbols.py tests/test_spm_words.py tests/test_exact.py \
    tests/test_properties.py tests/test_gguf.py tests/test_gguf_fuzz.py tests/test_fast.py tests/test_cache.py tests/test_split.py \
    tests/test_llama3.py tests/test_more_models.py tests/test_model_ugm.py tests/test_model_wpm.py tests/test_offsets_models.py tests/test_partition.py tests/test_plamo2_dictionary.py \
    tests/test_train_c.py \
    --deselect tests/test_train_c.py::test_c_loop_out_of_memory_is_memory_error_not_a_crash "$@"
echo "sanitized run: no finding"
