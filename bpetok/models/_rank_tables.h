/* gemma4's tables for the compiled merge loop (bpetok/models/_symbols.c, included after the
 * Merger type and setup()): built at load from the GGUF's token index and merge strings, what
 * bpetok/models/gemma4.py's ``merge`` looks up as ``ranks[left + b" " + right]``.
 *
 * Each text a merge names (its left and right halves, cut at the first space, and the merged
 * text) gets an id: its token's, else a *virtual* one from n_tokens on (a text that is no token
 * falls back to its bytes when it ends up a final symbol). A merge string whose first space is at
 * its start, at its end, or that holds a second space can never apply (symbols hold no space)
 * and is left out. The first of two equal merge strings keeps its rank, as llama.cpp's emplace.
 */

#ifndef BPETOK_RANK_TABLES_H
#define BPETOK_RANK_TABLES_H

#include "_merger_load.h"

typedef struct {
    const unsigned char *p; /* NULL for a free slot */
    uint64_t hash;
    uint32_t len, id;
} Name;

/* Text -> id while the tables are built; the texts are borrowed (the token index's keys, the
 * merge strings) or owned (merged texts that are no token: ``owned``). */
typedef struct {
    Name *slots;
    size_t mask, count;
    unsigned char **owned;
    size_t n_owned, owned_capacity;
} Names;

static void names_free(Names *t)
{
    for (size_t i = 0; i < t->n_owned; i++)
        free(t->owned[i]);
    free(t->owned);
    free(t->slots);
}

static uint32_t names_find(const Names *t, const unsigned char *p, uint32_t len, uint64_t hash)
{
    for (size_t i = (size_t)hash & t->mask; t->slots[i].p; i = (i + 1) & t->mask) {
        const Name *s = &t->slots[i];
        if (s->hash == hash && s->len == len && memcmp(s->p, p, len) == 0)
            return s->id;
    }
    return NO_SYMBOL;
}

static void names_place(Name *slots, size_t mask, Name e)
{
    size_t i = (size_t)e.hash & mask;
    while (slots[i].p)
        i = (i + 1) & mask;
    slots[i] = e;
}

/* Add a text not yet there; doubles past half full. 0, or -1 when out of memory. */
static int names_add(Names *t, const unsigned char *p, uint32_t len, uint64_t hash, uint32_t id)
{
    if ((t->count + 1) * 2 > t->mask + 1) {
        size_t size = (t->mask + 1) * 2;
        if (size > SIZE_MAX / sizeof(Name))
            return -1;
        Name *slots = (Name *)calloc(size, sizeof(Name));
        if (!slots)
            return -1;
        for (size_t i = 0; i <= t->mask; i++)
            if (t->slots[i].p)
                names_place(slots, size - 1, t->slots[i]);
        free(t->slots);
        t->slots = slots;
        t->mask = size - 1;
    }
    names_place(t->slots, t->mask, (Name){p, hash, len, id});
    t->count++;
    return 0;
}

/* The id of ``p[0..len)``: its token's, else a virtual one (new ones from *n_symbols on); ``copy``:
 * the text is a temporary buffer, kept in ``owned`` when it becomes a name. NO_SYMBOL when out of
 * memory or past 2**31 - 1 ids. */
static uint32_t name_id(Names *t, const unsigned char *p, uint32_t len, uint64_t hash, int copy, uint32_t *n_symbols)
{
    uint32_t id = names_find(t, p, len, hash);
    if (id != NO_SYMBOL)
        return id;
    if (*n_symbols >= (uint32_t)INT32_MAX - 1)
        return NO_SYMBOL;
    if (copy) {
        if (t->n_owned == t->owned_capacity) {
            size_t capacity = t->owned_capacity ? t->owned_capacity * 2 : 64;
            unsigned char **owned = (unsigned char **)realloc(t->owned, capacity * sizeof(unsigned char *));
            if (!owned)
                return NO_SYMBOL;
            t->owned = owned;
            t->owned_capacity = capacity;
        }
        unsigned char *kept = (unsigned char *)malloc(len ? len : 1);
        if (!kept)
            return NO_SYMBOL;
        memcpy(kept, p, len);
        t->owned[t->n_owned++] = kept;
        p = kept;
    }
    if (names_add(t, p, len, hash, *n_symbols) < 0)
        return NO_SYMBOL;
    return (*n_symbols)++;
}

#define RANK_BATCH 32

/* A merge string of a batch: its halves in place, the merged text at ``joined_at`` of the batch's buffer. */
typedef struct {
    const unsigned char *p;
    uint32_t left_len, right_len, rank;
    size_t joined_at;
    uint64_t hashes[3]; /* left, right, merged */
    uint64_t key;       /* left id << 32 | right id */
    uint32_t merged;
} MergeText;

PyDoc_STRVAR(rank_merger_doc, "rank_merger(index, merges, n_tokens, byte_ids, missing_byte_fails=False) -> Merger\n\n"
                              "gemma4's tables from its token index (text -> id) and merge strings (``b\"left right\"``,\n"
                              "the rank their position): two adjacent symbols merge by the lowest rank of ``left right``;\n"
                              "a final symbol that is no token falls back to its bytes' ``byte_ids`` (a byte without one\n"
                              "is dropped, or makes encode() give None with missing_byte_fails).");

/* Fill ``self``'s units and merges from the token index (bytes -> id below n_tokens) and the
 * merge strings (a list of bytes, rank = position). 0, or -1 with an exception set. */
static int build_ranks(Merger *self, PyObject *index, PyObject *merges)
{
    if (!PyList_Check(merges)) {
        PyErr_SetString(PyExc_TypeError, "merges must be a list");
        return -1;
    }
    Names names = {0};
    unsigned char *joined = NULL;
    size_t joined_room = 0;
    int status = -1;
    Py_ssize_t n_index = PyDict_Size(index), n_merges = PyList_GET_SIZE(merges), pos = 0;
    size_t size = 16;
    while (size < (size_t)n_index * 2 + 2)
        size *= 2;
    if (!(names.slots = (Name *)calloc(size, sizeof(Name))))
        goto no_memory;
    names.mask = size - 1;
    PyObject *key, *value;
    while (PyDict_Next(index, &pos, &key, &value)) {
        const unsigned char *p;
        uint32_t len, id;
        if (token_index_entry(key, value, self->n_tokens, &p, &len, &id) < 0)
            goto done;
        if (names_add(&names, p, len, word_hash(p, len), id) < 0) /* dict keys: each once */
            goto no_memory;
    }
    if (table_init(&self->merges, (size_t)n_merges) < 0)
        goto no_memory;
    uint32_t n_symbols = self->n_tokens;
    /* In batches: every text's hash first, its slot fetched ahead (the tables are far bigger than
     * the CPU's caches), then the lookups. */
    MergeText batch[RANK_BATCH];
    for (Py_ssize_t first = 0; first < n_merges && first < (Py_ssize_t)UINT32_MAX; first += RANK_BATCH) {
        int count = 0;
        size_t used = 0;
        for (Py_ssize_t rank = first; rank < n_merges && rank < first + RANK_BATCH; rank++) {
            PyObject *item = PyList_GET_ITEM(merges, rank);
            if (!PyBytes_Check(item)) {
                PyErr_Format(PyExc_ValueError, "merge %zd is not bytes", rank);
                goto done;
            }
            const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(item);
            size_t n = (size_t)PyBytes_GET_SIZE(item);
            const unsigned char *space = n ? (const unsigned char *)memchr(p, ' ', n) : NULL;
            if (!space || space == p || space == p + n - 1 || memchr(space + 1, ' ', n - (size_t)(space + 1 - p)) ||
                n >= (size_t)UINT32_MAX)
                continue; /* can never apply: symbols hold no space */
            MergeText *m = &batch[count++];
            m->rank = (uint32_t)rank;
            m->p = p;
            m->left_len = (uint32_t)(space - p);
            m->right_len = (uint32_t)(n - m->left_len - 1);
            m->joined_at = used;
            used += n;
        }
        if (used > joined_room) {
            unsigned char *bigger = (unsigned char *)realloc(joined, used);
            if (!bigger)
                goto no_memory;
            joined = bigger;
            joined_room = used;
        }
        for (int j = 0; j < count; j++) {
            MergeText *m = &batch[j];
            unsigned char *text = joined + m->joined_at;
            memcpy(text, m->p, m->left_len);
            memcpy(text + m->left_len, m->p + m->left_len + 1, m->right_len);
            m->hashes[0] = word_hash(m->p, m->left_len);
            m->hashes[1] = word_hash(m->p + m->left_len + 1, m->right_len);
            m->hashes[2] = word_hash(text, m->left_len + m->right_len);
            for (int h = 0; h < 3; h++)
                PREFETCH(&names.slots[(size_t)m->hashes[h] & names.mask]);
        }
        for (int j = 0; j < count; j++) {
            MergeText *m = &batch[j];
            uint32_t left = name_id(&names, m->p, m->left_len, m->hashes[0], 0, &n_symbols);
            uint32_t right = left == NO_SYMBOL ? NO_SYMBOL : name_id(&names, m->p + m->left_len + 1, m->right_len, m->hashes[1], 0, &n_symbols);
            uint32_t merged = right == NO_SYMBOL ? NO_SYMBOL
                                                 : name_id(&names, joined + m->joined_at, m->left_len + m->right_len, m->hashes[2], 1, &n_symbols);
            if (merged == NO_SYMBOL)
                goto no_memory;
            m->key = (uint64_t)left << 32 | right;
            m->merged = merged;
            PREFETCH(&self->merges.slots[mix64(m->key) & self->merges.mask]);
        }
        for (int j = 0; j < count; j++) /* sized for all; the first of equal keys stays */
            table_insert(&self->merges, batch[j].key, batch[j].rank, batch[j].merged);
    }
    if (table_init(&self->units, 1024) < 0)
        goto no_memory;
    for (size_t i = 0; i <= names.mask; i++) {
        const Name *s = &names.slots[i];
        if (s->p && is_one_symbol(s->p, s->len) && table_put(&self->units, unit_key(s->p, s->len), 0, s->id) < 0)
            goto no_memory;
    }
    self->n_symbols = n_symbols;
    fill_ascii(self);
    status = 0;
    goto done;
no_memory:
    PyErr_NoMemory();
done:
    free(joined);
    names_free(&names);
    return status;
}

static PyObject *rank_merger(PyObject *Py_UNUSED(module), PyObject *args)
{
    return build_merger(args, build_ranks);
}

#endif
