/* The normalizer's output of bpetok/models/_ugm.c: a growing buffer of bytes and, where spans are
 * asked for (encode_with_spans), the input bytes each one came from.
 */

#ifndef BPETOK_SOURCED_BYTES_H
#define BPETOK_SOURCED_BYTES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Where a normalized byte came from in the input: its bytes [from, to). */
typedef struct {
    uint32_t from, to;
} Source;

/* Bytes, and with sources (for the spans) where each came from. */
typedef struct {
    unsigned char *p;
    size_t len, cap;
    int with_sources;
    Source *src;
} Buffer;

static void free_buffer(Buffer *b)
{
    free(b->p);
    free(b->src);
}

/* Room for n more bytes (and their sources); -1: out of memory. */
static int reserve(Buffer *b, size_t n)
{
    if (n > SIZE_MAX / 8 - b->len)
        return -1;
    if (b->len + n <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
        cap *= 2;
    unsigned char *grown = realloc(b->p, cap);
    if (!grown)
        return -1;
    b->p = grown; /* cap stays the smaller of the two until both have grown */
    if (b->with_sources) {
        Source *src = realloc(b->src, cap * sizeof(Source));
        if (!src)
            return -1;
        b->src = src;
    }
    b->cap = cap;
    return 0;
}

/* n bytes of p, each (with sources) from the input's [from, to). */
static int put_bytes(Buffer *b, const unsigned char *p, size_t n, size_t from, size_t to)
{
    if (n == 0) /* an empty replacement: nothing to copy (the buffer may not exist yet) */
        return 0;
    if (reserve(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, p, n);
    if (b->with_sources)
        for (size_t k = 0; k < n; k++)
            b->src[b->len + k] = (Source){(uint32_t)from, (uint32_t)to};
    b->len += n;
    return 0;
}

/* n bytes of the input from byte ``at`` on, each its own source. */
static int put_input(Buffer *b, const unsigned char *p, size_t n, size_t at)
{
    if (reserve(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, p, n);
    if (b->with_sources)
        for (size_t k = 0; k < n; k++)
            b->src[b->len + k] = (Source){(uint32_t)(at + k), (uint32_t)(at + k + 1)};
    b->len += n;
    return 0;
}

/* Bytes [i, j) of m with their sources. */
static int put_from(Buffer *b, const Buffer *m, size_t i, size_t j)
{
    if (j <= i)
        return 0;
    if (reserve(b, j - i) < 0)
        return -1;
    memcpy(b->p + b->len, m->p + i, j - i);
    if (b->with_sources)
        memcpy(b->src + b->len, m->src + i, (j - i) * sizeof(Source));
    b->len += j - i;
    return 0;
}

#endif
