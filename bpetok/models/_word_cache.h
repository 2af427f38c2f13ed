/* The word cache of the compiled merge loop (bpetok/models/_symbols.c): a word's UTF-8 -> its ids.
 *
 * Open addressing, doubled past half full. It has a byte budget (its slots and entries together):
 * past it the cache stops growing, what it holds stays valid, and new words are merged every
 * time, as the Tokenizer's own caches do. The caller holds the Merger's lock around every call.
 */

#ifndef BPETOK_WORD_CACHE_H
#define BPETOK_WORD_CACHE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Words longer than this many bytes are never cached (one would take a large part of the budget). */
#define WORD_CACHE_LONGEST 256

typedef struct {
    uint64_t hash;
    uint32_t *ids;   /* n_ids ids, then the word's len bytes; NULL for a free slot */
    uint32_t len, n_ids;
} CachedWord;

typedef struct {
    CachedWord *slots;
    size_t mask; /* slots - 1, a power of two minus one; 0 with no slots */
    size_t count;
    size_t used;   /* bytes of slots and entries */
    size_t budget; /* 0: no cache */
} WordCache;

static inline uint64_t word_hash(const unsigned char *p, uint32_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdULL;
        h ^= h >> 29;
    }
    uint64_t tail = 0;
    for (uint32_t j = 0; i < n; i++, j++)
        tail |= (uint64_t)p[i] << (8 * j);
    h = (h ^ tail) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 32;
    return h;
}

static inline const unsigned char *cached_text(const CachedWord *e)
{
    return (const unsigned char *)(e->ids + e->n_ids);
}

/* The word's ids into ``out``: how many, or -1 when it is not cached. */
static inline Py_ssize_t word_cache_get(const WordCache *c, uint64_t hash, const unsigned char *p, uint32_t n, int32_t *out)
{
    if (!c->slots)
        return -1;
    for (size_t i = (size_t)hash & c->mask;; i = (i + 1) & c->mask) {
        const CachedWord *e = &c->slots[i];
        if (!e->ids)
            return -1;
        if (e->hash == hash && e->len == n && memcmp(cached_text(e), p, n) == 0) {
            memcpy(out, e->ids, (size_t)e->n_ids * sizeof(uint32_t));
            return (Py_ssize_t)e->n_ids;
        }
    }
}

static void word_cache_place(CachedWord *slots, size_t mask, CachedWord e)
{
    size_t i = (size_t)e.hash & mask;
    while (slots[i].ids)
        i = (i + 1) & mask;
    slots[i] = e;
}

/* Remember a word's ids if they fit the budget (a word already there is left as it is). */
static void word_cache_put(WordCache *c, uint64_t hash, const unsigned char *p, uint32_t n, const int32_t *ids, uint32_t n_ids)
{
    if (c->slots) /* already there: another thread merged the same word meanwhile */
        for (size_t i = (size_t)hash & c->mask; c->slots[i].ids; i = (i + 1) & c->mask) {
            const CachedWord *e = &c->slots[i];
            if (e->hash == hash && e->len == n && memcmp(cached_text(e), p, n) == 0)
                return;
        }
    size_t entry = (size_t)n_ids * sizeof(uint32_t) + n;
    size_t size = c->slots ? c->mask + 1 : 0;
    size_t bigger = (c->count + 1) * 2 > size ? (size ? size * 2 : 16) : size;
    size_t grow = (bigger - size) * sizeof(CachedWord); /* the old slots go as the new come */
    if (c->used + entry + grow > c->budget)
        return;
    if (bigger != size) {
        CachedWord *slots = (CachedWord *)calloc(bigger, sizeof(CachedWord));
        if (!slots)
            return;
        for (size_t i = 0; i < size; i++)
            if (c->slots[i].ids)
                word_cache_place(slots, bigger - 1, c->slots[i]);
        free(c->slots);
        c->slots = slots;
        c->mask = bigger - 1;
        c->used += grow;
    }
    uint32_t *blob = (uint32_t *)malloc(entry ? entry : 1);
    if (!blob)
        return;
    memcpy(blob, ids, (size_t)n_ids * sizeof(uint32_t));
    memcpy(blob + n_ids, p, n);
    CachedWord e = {hash, blob, n, n_ids};
    word_cache_place(c->slots, c->mask, e);
    c->count++;
    c->used += entry;
}

static void word_cache_free(WordCache *c)
{
    if (c->slots) {
        for (size_t i = 0; i <= c->mask; i++)
            free(c->slots[i].ids);
        free(c->slots);
    }
    c->slots = NULL;
    c->mask = c->count = c->used = 0;
}

/* The body of a kernel's set_cache_budget(bytes) method: empty the cache, let it grow to that many
 * bytes (0: no cache). NULL with an exception set for a value that is no byte count. */
static inline PyObject *word_cache_set_budget(WordCache *c, PyObject *arg)
{
    Py_ssize_t budget = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (budget == -1 && PyErr_Occurred())
        return NULL;
    if (budget < 0) {
        PyErr_SetString(PyExc_ValueError, "the cache budget is a number of bytes >= 0");
        return NULL;
    }
    word_cache_free(c);
    c->budget = (size_t)budget;
    Py_RETURN_NONE;
}

/* The body of a kernel's cache_stats() method: (entries, bytes used, budget). */
static inline PyObject *word_cache_stats(const WordCache *c)
{
    return Py_BuildValue("(nnn)", (Py_ssize_t)c->count, (Py_ssize_t)c->used, (Py_ssize_t)c->budget);
}

/* The set_cache_budget() and cache_stats() methods of a type T whose objects keep their WordCache
 * in ``cache``: WORD_CACHE_METHODS(T) defines T_set_cache_budget and T_cache_stats (with their
 * docs), WORD_CACHE_METHODDEFS(T) is their two entries in T's method table. */
#define WORD_CACHE_METHODS(T)                                                                                          \
    PyDoc_STRVAR(T##_set_cache_budget_doc,                                                                             \
                 "set_cache_budget(bytes: int): empty the word cache and let it grow to that many bytes (0: no cache)"); \
    static PyObject *T##_set_cache_budget(T *self, PyObject *arg)                                                      \
    {                                                                                                                  \
        return word_cache_set_budget(&self->cache, arg);                                                               \
    }                                                                                                                  \
    PyDoc_STRVAR(T##_cache_stats_doc, "cache_stats() -> (entries, bytes used, budget)");                               \
    static PyObject *T##_cache_stats(T *self, PyObject *Py_UNUSED(ignored))                                            \
    {                                                                                                                  \
        return word_cache_stats(&self->cache);                                                                         \
    }

#define WORD_CACHE_METHODDEFS(T)                                                                                       \
    {"set_cache_budget", (PyCFunction)T##_set_cache_budget, METH_O, T##_set_cache_budget_doc},                         \
    {"cache_stats", (PyCFunction)T##_cache_stats, METH_NOARGS, T##_cache_stats_doc}

#endif
