/* Load time for the byte-level BPE kernel (bpetok/models/gpt2/kernel/kernel.h lists its files):
 * a Kernel's tables from BytePairModel's (kernel_tables_init, behind Kernel(...)), and
 * build_merges, which reads a vocabulary's raw merge strings into the merge table in C
 * (BytePairModel._build_ranks is its readable twin).
 *
 * The tables come from BytePairModel, built once per vocabulary: each byte's initial symbol, the
 * merges keyed by (left symbol, right symbol) -> (rank, merged symbol), and for each virtual
 * symbol (a merge result that is not a token) the ids its bytes fall back to. Every symbol is
 * range-checked here, so the merge loops (merge.c) can trust them.
 */

#include "kernel.h"
#include "../../../_module.h"

static int read_u32(PyObject *value, uint32_t limit, const char *what, uint32_t *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (v >= limit) {
        PyErr_Format(PyExc_ValueError, "kernel tables: %s %llu out of range (< %u)", what, v, limit);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* Put one merge in the table; with keep_first, a pair already there keeps its (lower) rank. */
static int merge_add(Kernel *self, unsigned long long left, unsigned long long right, unsigned long long rank,
                     unsigned long long merged, int keep_first)
{
    if (left >= self->n_symbols || right >= self->n_symbols || merged >= self->n_symbols || rank >= NO_RANK) {
        PyErr_SetString(PyExc_ValueError, "kernel tables: a merge names a symbol out of range");
        return -1;
    }
    uint64_t mkey = left << 32 | right;
    uint64_t h = mix64(mkey), bit = h >> self->merges.filter_shift;
    uint64_t i = h & self->merges.mask;
    self->merges.filter[bit >> 6] |= (uint64_t)1 << (bit & 63);
    while (self->merges.slots[i].key != EMPTY_KEY && self->merges.slots[i].key != mkey)
        i = (i + 1) & self->merges.mask;
    if (keep_first && self->merges.slots[i].key == mkey)
        return 0;
    self->merges.slots[i].key = mkey;
    self->merges.slots[i].rank = (uint32_t)rank;
    self->merges.slots[i].merged = (uint32_t)merged;
    return 0;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The merges of a build_merges table, in rank order: a duplicated pair keeps its first (lowest) rank. */
static int merges_from_table(Kernel *self, const unsigned char *table, size_t count)
{
    for (size_t r = 0; r < count; r++) {
        const unsigned char *row = table + 12 * r;
        uint32_t left = le32(row), right = le32(row + 4), merged = le32(row + 8);
        if (left == UINT32_MAX && right == UINT32_MAX && merged == UINT32_MAX)
            continue; /* a merge that never matches */
        if (merge_add(self, left, right, r, merged, 1) < 0)
            return -1;
    }
    return 0;
}

/* Each one-byte piece's ids, merged once here by bpe_piece (see Kernel.byte_piece_ids). 0, or -1
 * with an exception set. */
static int byte_pieces_init(Kernel *self)
{
    size_t bound = ids_bound(self, 1);
    uint32_t *ids = PyMem_RawMalloc(bound * sizeof(uint32_t));
    Scratch scratch = {0};
    Py_ssize_t got = 0;
    for (int b = 0; b < 256 && ids != NULL && got >= 0; b++) {
        unsigned char byte = (unsigned char)b;
        got = bpe_piece(self, &scratch, &byte, 1, ids, bound);
        self->byte_piece_n[b] = got == 1 || got == 2 ? (unsigned char)got : 0;
        if (got == 1 || got == 2)
            memcpy(self->byte_piece_ids[b], ids, (size_t)got * sizeof(uint32_t));
    }
    scratch_free(&scratch);
    PyMem_RawFree(ids);
    if (ids == NULL || got == -1) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* (see kernel.h) */
int kernel_tables_init(Kernel *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"byte_ids", "ranks", "stride", "shift", "n_tokens", "virtual_emit", "whole",
                             "byte_chars", "cache_bytes", "seed", "chunk_bytes", "split", NULL};
    PyObject *byte_ids, *ranks, *virtual_emit, *whole, *byte_chars;
    unsigned long long stride, seed;
    unsigned int shift, n_tokens;
    Py_ssize_t cache_bytes, chunk_bytes = 0;
    const char *split = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOKIIO!OO!nK|nz", kwlist, &byte_ids, &ranks, &stride,
                                     &shift, &n_tokens, &PyList_Type, &virtual_emit, &whole, &PyList_Type,
                                     &byte_chars, &cache_bytes, &seed, &chunk_bytes, &split))
        return -1;
    if (!PyDict_Check(ranks) && !PyBytes_Check(ranks)) {
        PyErr_SetString(PyExc_TypeError, "kernel tables: ranks must be a dict or the table of build_merges");
        return -1;
    }
    if (self->merges.slots != NULL || self->virtual_start != NULL) { /* before anything changes under a user */
        PyErr_SetString(PyExc_RuntimeError, "Kernel is already initialised");
        return -1;
    }
    self->split = split ? split_kind_of(split) : SPLIT_NONE;
    if (split && self->split == SPLIT_NONE) {
        PyErr_Format(PyExc_ValueError, "kernel: no compiled splitter named '%.100s' (see bpetok.models.gpt2._kernel.SPLITTERS)",
                     split);
        return -1;
    }
    Py_ssize_t n_virtual = PyList_GET_SIZE(virtual_emit);
    if ((unsigned long long)n_tokens + n_virtual >= UINT32_MAX || shift >= 63 || stride == 0 ||
        cache_bytes < 0 || chunk_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "kernel tables: bad sizes");
        return -1;
    }
    self->n_tokens = n_tokens;
    self->n_symbols = (uint32_t)(n_tokens + n_virtual);
    self->seed = seed;
    self->cache.budget = (size_t)cache_bytes;
    /* The id objects' most: the table and an int per token. */
    size_t id_most = (size_t)n_tokens * (sizeof(PyObject *) + ID_OBJECT_BYTES);
    if (n_tokens > 0 && self->cache.budget / 2 >= id_most) {
        self->id_reserved = id_most;
        self->cache.budget -= id_most;
    }
    self->chunks.budget = (size_t)chunk_bytes;

    if (read_byte_ids(byte_ids, self->n_symbols, 0, "kernel tables: byte_ids", self->byte_ids) < 0)
        return -1;
    if (PyList_GET_SIZE(byte_chars) != 256) {
        PyErr_SetString(PyExc_ValueError, "kernel tables: byte_chars must have 256 entries");
        return -1;
    }
    for (int b = 0; b < 256; b++) {
        PyObject *c = PyList_GET_ITEM(byte_chars, b);
        if (!PyBytes_Check(c) || PyBytes_GET_SIZE(c) < 1 || PyBytes_GET_SIZE(c) > 2) {
            PyErr_SetString(PyExc_ValueError, "kernel tables: byte_chars must be 1-2 byte UTF-8 strings");
            return -1;
        }
        memcpy(self->byte_chars[b], PyBytes_AS_STRING(c), PyBytes_GET_SIZE(c));
        self->byte_char_len[b] = (unsigned char)PyBytes_GET_SIZE(c);
    }

    /* Virtual symbols' fallback ids. */
    size_t total = 0;
    for (Py_ssize_t v = 0; v < n_virtual; v++) {
        PyObject *ids = PyList_GET_ITEM(virtual_emit, v);
        if (!PyList_Check(ids)) {
            PyErr_SetString(PyExc_TypeError, "kernel tables: virtual_emit must be a list of lists of ids");
            return -1;
        }
        total += (size_t)PyList_GET_SIZE(ids);
    }
    self->virtual_start = PyMem_RawMalloc((n_virtual + 1) * sizeof(uint32_t));
    self->virtual_ids = PyMem_RawMalloc((total ? total : 1) * sizeof(uint32_t));
    if (!self->virtual_start || !self->virtual_ids || total >= UINT32_MAX) {
        PyErr_NoMemory();
        return -1;
    }
    self->max_fallback = 1;
    size_t at = 0;
    for (Py_ssize_t v = 0; v < n_virtual; v++) {
        PyObject *ids = PyList_GET_ITEM(virtual_emit, v);
        self->virtual_start[v] = (uint32_t)at;
        Py_ssize_t len = PyList_GET_SIZE(ids);
        if ((size_t)len > self->max_fallback)
            self->max_fallback = (uint32_t)len;
        for (Py_ssize_t j = 0; j < len; j++) {
            if (at >= total) { /* the list changed under us */
                PyErr_SetString(PyExc_RuntimeError, "kernel tables: virtual_emit changed while read");
                return -1;
            }
            if (read_u32(PyList_GET_ITEM(ids, j), n_tokens, "fallback id", &self->virtual_ids[at++]) < 0)
                return -1;
        }
    }
    self->virtual_start[n_virtual] = (uint32_t)at;

    /* The merge table, load at most 1/2. */
    Py_ssize_t count = PyDict_Check(ranks) ? PyDict_GET_SIZE(ranks) : PyBytes_GET_SIZE(ranks) / 12;
    if (PyBytes_Check(ranks) && PyBytes_GET_SIZE(ranks) % 12 != 0) {
        PyErr_SetString(PyExc_ValueError, "kernel tables: a build_merges table is a multiple of 12 bytes");
        return -1;
    }
    size_t size = 1024;
    while (size < (size_t)count * 2)
        size *= 2;
    unsigned filter_bits = 12; /* at least 16 bits per merge: few pairs without a merge get through */
    while (((size_t)1 << filter_bits) < (size_t)count * 16 && filter_bits < 40)
        filter_bits++;
    self->merges.filter = PyMem_RawCalloc((size_t)1 << (filter_bits - 6), sizeof(uint64_t));
    if (self->merges.filter == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->merges.filter_shift = 64 - filter_bits;
    self->merges.slots = PyMem_RawMalloc(size * sizeof(Merge));
    if (self->merges.slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < size; i++)
        self->merges.slots[i].key = EMPTY_KEY;
    self->merges.mask = size - 1;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    if (PyBytes_Check(ranks)) {
        if (merges_from_table(self, (const unsigned char *)PyBytes_AS_STRING(ranks), (size_t)count) < 0)
            return -1;
    } else {
        unsigned long long mask = (1ULL << shift) - 1;
        while (PyDict_Next(ranks, &pos, &key, &value)) {
            unsigned long long k = PyLong_AsUnsignedLongLong(key);
            if (k == (unsigned long long)-1 && PyErr_Occurred())
                return -1;
            unsigned long long packed = PyLong_AsUnsignedLongLong(value);
            if (packed == (unsigned long long)-1 && PyErr_Occurred())
                return -1;
            unsigned long long left = k / stride, right = k % stride, rank = packed >> shift, merged = packed & mask;
            if (merge_add(self, left, right, rank, merged, 0) < 0)
                return -1;
        }
    }

    self->n_ranks = 0;
    for (size_t i = 0; i < size; i++)
        if (self->merges.slots[i].key != EMPTY_KEY && self->merges.slots[i].rank >= self->n_ranks)
            self->n_ranks = self->merges.slots[i].rank + 1; /* rank < NO_RANK: checked by merge_add */

    /* ignore_merges: whole tokens by their GPT-2 text. */
    if (whole != Py_None) {
        if (!PyDict_Check(whole)) {
            PyErr_SetString(PyExc_TypeError, "kernel tables: whole must be a dict or None");
            return -1;
        }
        self->ignore_merges = 1;
        self->whole.budget = SIZE_MAX;
        pos = 0;
        while (PyDict_Next(whole, &pos, &key, &value)) {
            uint32_t id;
            if (!PyBytes_Check(key)) {
                PyErr_SetString(PyExc_TypeError, "kernel tables: whole's keys must be bytes");
                return -1;
            }
            if (read_u32(value, n_tokens, "token id", &id) < 0)
                return -1;
            const unsigned char *text = (const unsigned char *)PyBytes_AS_STRING(key);
            size_t len = (size_t)PyBytes_GET_SIZE(key);
            if (table_add(&self->whole, hash_bytes(seed, text, len), text, len, &id, 1) < 0) {
                PyErr_NoMemory();
                return -1;
            }
        }
    }
    return byte_pieces_init(self);
}

void kernel_tables_free(Kernel *self)
{
    PyMem_RawFree(self->merges.slots);
    PyMem_RawFree(self->merges.filter);
    PyMem_RawFree(self->virtual_start);
    PyMem_RawFree(self->virtual_ids);
    table_free(&self->whole);
    table_free(&self->cache);
    table_free(&self->chunks);
}

/* -- the merge table from the raw merges (BytePairModel._build_ranks in C) ------------------- */

/* Symbol texts -> symbol ids while the merges are read: a token's text is its bytes object in
 * the tokens list, a virtual symbol's text lives in an arena. Open addressing over ids. */
typedef struct {
    uint32_t *slots; /* symbol id, or UINT32_MAX for a free slot */
    size_t mask;
    size_t count;
    PyObject *tokens; /* list of bytes, checked; nothing runs Python code while this is used */
    uint32_t n_tokens;
    unsigned char *arena; /* virtual texts back to back */
    size_t arena_len, arena_cap;
    size_t *virtual_start; /* virtual k's text: arena[start[k] .. start[k + 1]) */
    size_t n_virtual, virtual_cap;
} SymbolTexts;

static void symbol_text(const SymbolTexts *t, uint32_t id, const unsigned char **text, size_t *len)
{
    if (id < t->n_tokens) {
        PyObject *b = PyList_GET_ITEM(t->tokens, id);
        *text = (const unsigned char *)PyBytes_AS_STRING(b);
        *len = (size_t)PyBytes_GET_SIZE(b);
    } else {
        size_t k = id - t->n_tokens;
        *text = t->arena + t->virtual_start[k];
        *len = t->virtual_start[k + 1] - t->virtual_start[k];
    }
}

/* The slot holding text, or the free slot where it would go. */
static size_t symbol_slot(const SymbolTexts *t, const unsigned char *text, size_t len)
{
    for (size_t i = hash_bytes(0, text, len) & t->mask;; i = (i + 1) & t->mask) {
        uint32_t id = t->slots[i];
        if (id == UINT32_MAX)
            return i;
        const unsigned char *other;
        size_t other_len;
        symbol_text(t, id, &other, &other_len);
        if (other_len == len && memcmp(other, text, len) == 0)
            return i;
    }
}

/* Make room for one more symbol (load at most 1/2). 0, or -1 with MemoryError set. */
static int symbol_reserve(SymbolTexts *t)
{
    if ((t->count + 1) * 2 <= t->mask + 1)
        return 0;
    size_t capacity = (t->mask + 1) * 2;
    uint32_t *slots = PyMem_RawMalloc(capacity * sizeof(uint32_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(slots, 0xff, capacity * sizeof(uint32_t));
    uint32_t *old = t->slots;
    size_t old_capacity = t->mask + 1;
    t->slots = slots;
    t->mask = capacity - 1;
    for (size_t k = 0; k < old_capacity; k++) {
        if (old[k] == UINT32_MAX)
            continue;
        const unsigned char *text;
        size_t len;
        symbol_text(t, old[k], &text, &len);
        t->slots[symbol_slot(t, text, len)] = old[k];
    }
    PyMem_RawFree(old);
    return 0;
}

/* The id of a virtual symbol for text (added if new); UINT32_MAX with MemoryError set. */
static uint32_t symbol_virtual(SymbolTexts *t, const unsigned char *text, size_t len)
{
    if (symbol_reserve(t) < 0)
        return UINT32_MAX;
    size_t i = symbol_slot(t, text, len);
    if (t->slots[i] != UINT32_MAX)
        return t->slots[i];
    if ((uint64_t)t->n_tokens + t->n_virtual + 1 >= UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "build_merges: too many symbols");
        return UINT32_MAX;
    }
    if (t->n_virtual + 2 > t->virtual_cap) {
        size_t cap = t->virtual_cap ? t->virtual_cap * 2 : 256;
        size_t *starts = PyMem_RawRealloc(t->virtual_start, cap * sizeof(size_t));
        if (starts == NULL) {
            PyErr_NoMemory();
            return UINT32_MAX;
        }
        t->virtual_start = starts;
        t->virtual_cap = cap;
    }
    if (len > t->arena_cap - t->arena_len) {
        size_t cap = t->arena_cap ? t->arena_cap : 4096;
        while (len > cap - t->arena_len)
            cap *= 2;
        unsigned char *arena = PyMem_RawRealloc(t->arena, cap);
        if (arena == NULL) {
            PyErr_NoMemory();
            return UINT32_MAX;
        }
        t->arena = arena;
        t->arena_cap = cap;
    }
    if (len)
        memcpy(t->arena + t->arena_len, text, len);
    t->virtual_start[t->n_virtual] = t->arena_len;
    t->arena_len += len;
    t->virtual_start[++t->n_virtual] = t->arena_len;
    uint32_t id = t->n_tokens + (uint32_t)(t->n_virtual - 1);
    t->slots[i] = id;
    t->count++;
    return id;
}

static void symbol_texts_free(SymbolTexts *t)
{
    PyMem_RawFree(t->slots);
    PyMem_RawFree(t->arena);
    PyMem_RawFree(t->virtual_start);
}

/* The table's slots are read at random, each one a cache miss: the slots of the merge this many
 * ranks ahead are requested early, so that the misses of several merges overlap. */
#define MERGE_LOOKAHEAD 8

static inline void prefetch_text(const SymbolTexts *t, const unsigned char *text, size_t len)
{
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&t->slots[hash_bytes(0, text, len) & t->mask]);
#else
    (void)t, (void)text, (void)len;
#endif
}

/* Request the slots the merge will read: its left and right texts and their concatenation. */
static void prefetch_merge(const SymbolTexts *t, PyObject *merge, unsigned char *joined)
{
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(merge);
    size_t len = (size_t)PyBytes_GET_SIZE(merge);
    const unsigned char *space = len > 1 ? memchr(p + 1, ' ', len - 1) : NULL;
    if (space == NULL)
        return;
    size_t cut = (size_t)(space - p);
    prefetch_text(t, p, cut);
    prefetch_text(t, p + cut + 1, len - cut - 1);
    memcpy(joined, p, cut);
    memcpy(joined + cut, p + cut + 1, len - cut - 1);
    prefetch_text(t, joined, len - 1);
}

const char build_merges_doc[] =
    "build_merges(tokens, merges, virtual_texts) -> (table: bytes, new_virtual_texts: list[bytes]) or None\n\n"
    "BytePairModel._build_ranks in C. For merge r, table holds three little-endian uint32 at 12 * r: left,\n"
    "right and merged symbol (0xFFFFFFFF x 3: the merge has no space at byte 1 or later, so never matches).\n"
    "A merged text that is not a token gets a virtual id, numbered after tokens and virtual_texts (the\n"
    "virtual symbols made so far, e.g. for bytes without a token), in rank order; the new ones are\n"
    "returned. None: a merge names a text that is not a token (the reference then raises its error).";

PyObject *module_build_merges(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *tokens, *merges, *virtual_texts;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &tokens, &PyList_Type, &merges, &PyList_Type, &virtual_texts))
        return NULL;
    Py_ssize_t n_tokens = PyList_GET_SIZE(tokens), n_merges = PyList_GET_SIZE(merges);
    Py_ssize_t n_given = PyList_GET_SIZE(virtual_texts);
    if ((uint64_t)n_tokens + n_given + n_merges >= UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "build_merges: too many symbols");
        return NULL;
    }
    size_t longest = 0;
    for (Py_ssize_t i = 0; i < n_tokens; i++)
        if (!PyBytes_Check(PyList_GET_ITEM(tokens, i))) {
            PyErr_SetString(PyExc_TypeError, "build_merges: tokens must be a list of bytes");
            return NULL;
        }
    for (Py_ssize_t i = 0; i < n_given; i++)
        if (!PyBytes_Check(PyList_GET_ITEM(virtual_texts, i))) {
            PyErr_SetString(PyExc_TypeError, "build_merges: virtual_texts must be a list of bytes");
            return NULL;
        }
    for (Py_ssize_t r = 0; r < n_merges; r++) {
        PyObject *m = PyList_GET_ITEM(merges, r);
        if (!PyBytes_Check(m)) {
            PyErr_SetString(PyExc_TypeError, "build_merges: merges must be a list of bytes");
            return NULL;
        }
        if ((size_t)PyBytes_GET_SIZE(m) > longest)
            longest = (size_t)PyBytes_GET_SIZE(m);
    }
    SymbolTexts t = {0};
    t.tokens = tokens;
    t.n_tokens = (uint32_t)n_tokens;
    size_t capacity = 1024;
    while (capacity < (size_t)(n_tokens + n_given) * 2)
        capacity *= 2;
    t.slots = PyMem_RawMalloc(capacity * sizeof(uint32_t));
    unsigned char *joined = PyMem_RawMalloc(longest ? longest : 1);
    unsigned char *ahead = PyMem_RawMalloc(longest ? longest : 1);
    PyObject *table = PyBytes_FromStringAndSize(NULL, n_merges * 12);
    PyObject *result = NULL;
    if (t.slots == NULL || joined == NULL || ahead == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (table == NULL)
        goto done;
    memset(t.slots, 0xff, capacity * sizeof(uint32_t));
    t.mask = capacity - 1;
    /* A duplicated token text keeps its last id, as dict(zip(tokens, ids)) does. */
    for (Py_ssize_t i = 0; i < n_tokens; i++) {
        PyObject *b = PyList_GET_ITEM(tokens, i);
        size_t slot = symbol_slot(&t, (const unsigned char *)PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
        if (t.slots[slot] == UINT32_MAX)
            t.count++;
        t.slots[slot] = (uint32_t)i;
    }
    for (Py_ssize_t i = 0; i < n_given; i++) {
        PyObject *b = PyList_GET_ITEM(virtual_texts, i);
        Py_ssize_t before = (Py_ssize_t)t.n_virtual;
        if (symbol_virtual(&t, (const unsigned char *)PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b)) ==
            UINT32_MAX)
            goto done;
        if ((Py_ssize_t)t.n_virtual != before + 1) {
            PyErr_SetString(PyExc_ValueError, "build_merges: virtual_texts must be new, distinct texts");
            goto done;
        }
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(table);
    for (Py_ssize_t r = 0; r < n_merges; r++) {
        if (r + MERGE_LOOKAHEAD < n_merges)
            prefetch_merge(&t, PyList_GET_ITEM(merges, r + MERGE_LOOKAHEAD), ahead);
        PyObject *m = PyList_GET_ITEM(merges, r);
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(m);
        size_t len = (size_t)PyBytes_GET_SIZE(m);
        /* Split at the first space at byte index >= 1 (llama.cpp); none: the merge never matches. */
        const unsigned char *space = len > 1 ? memchr(p + 1, ' ', len - 1) : NULL;
        uint32_t row[3] = {UINT32_MAX, UINT32_MAX, UINT32_MAX};
        if (space != NULL) {
            size_t cut = (size_t)(space - p);
            uint32_t left = t.slots[symbol_slot(&t, p, cut)];
            uint32_t right = t.slots[symbol_slot(&t, p + cut + 1, len - cut - 1)];
            if (left >= t.n_tokens || right >= t.n_tokens) { /* not a token (free slot, or virtual) */
                Py_INCREF(Py_None);
                result = Py_None;
                goto done;
            }
            memcpy(joined, p, cut);
            memcpy(joined + cut, p + cut + 1, len - cut - 1);
            size_t joined_len = len - 1;
            uint32_t merged = t.slots[symbol_slot(&t, joined, joined_len)];
            if (merged == UINT32_MAX && (merged = symbol_virtual(&t, joined, joined_len)) == UINT32_MAX)
                goto done;
            row[0] = left;
            row[1] = right;
            row[2] = merged;
        }
        for (int j = 0; j < 3; j++)
            for (int b = 0; b < 4; b++)
                out[12 * r + 4 * j + b] = (unsigned char)(row[j] >> (8 * b));
    }
    PyObject *new_virtual = PyList_New((Py_ssize_t)t.n_virtual - n_given);
    if (new_virtual == NULL)
        goto done;
    for (size_t k = (size_t)n_given; k < t.n_virtual; k++) {
        PyObject *text = PyBytes_FromStringAndSize((const char *)t.arena + t.virtual_start[k],
                                                   (Py_ssize_t)(t.virtual_start[k + 1] - t.virtual_start[k]));
        if (text == NULL) {
            Py_DECREF(new_virtual);
            goto done;
        }
        PyList_SET_ITEM(new_virtual, (Py_ssize_t)(k - (size_t)n_given), text);
    }
    result = PyTuple_Pack(2, table, new_virtual);
    Py_DECREF(new_virtual);
done:
    Py_XDECREF(table);
    PyMem_RawFree(joined);
    PyMem_RawFree(ahead);
    symbol_texts_free(&t);
    return result;
}
