/* Pre-tokenizer splitters compiled into the kernel (bpetok/pretok/_split.c), for the families
 * whose PreTokenizerSpec declares kernel_split. Each is the twin of a pure-Python regex (the
 * readable form, bpetok/pretok/<family>.py) and of llama.cpp's hand-written splitter for it. */

#ifndef BPETOK_SPLIT_H
#define BPETOK_SPLIT_H

#include <stddef.h>

typedef enum {
    SPLIT_NONE = 0,
    SPLIT_QWEN2,  /* bpetok/pretok/qwen2.py PATTERN: one digit per piece */
    SPLIT_LLAMA3, /* bpetok/pretok/llama3.py PATTERN: digits in runs of up to three */
    SPLIT_SMOLLM, /* bpetok/pretok/smollm.py PATTERN: numbers cut out, then GPT-2's pattern */
} SplitKind;

/* The splitter a spec's kernel_split names, or SPLIT_NONE for a name this build lacks. */
SplitKind split_kind_of(const char *name);

/* The names split_kind_of knows, NULL-terminated. */
extern const char *const SPLIT_NAMES[];

/* Where the piece that starts at byte `at` (< n) of the UTF-8 text s[0 .. n) ends: a byte
 * offset in (at, n]. The text is a str's UTF-8 (lone surrogates as their three bytes); the
 * splitter never reads outside s[0 .. n). */
size_t split_next(SplitKind kind, const unsigned char *s, size_t n, size_t at);

/* Whether the codepoint that ends just before byte `at` (> 0) is whitespace as Python's
 * str.isspace() sees it: the tokenizer's space chunks are cut at a space after a non-space. */
int split_space_after_nonspace(const unsigned char *s, size_t n, size_t at);

#endif
