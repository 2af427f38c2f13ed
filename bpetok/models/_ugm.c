/* The compiled Viterbi of bpetok's ``t5`` (Unigram) model; ``UnigramModel.viterbi`` in
 * bpetok/models/ugm.py is the readable twin, and tests/test_model_ugm.py holds the two equal.
 *
 * The tokens llama.cpp's token_matcher holds (NORMAL, USER_DEFINED, UNUSED) form a byte trie
 * (_sorted_trie.h builds it from their sorted distinct texts, _double_array.h lays it out for
 * the walk: one 4-byte slot a step); each node that ends a token indexes its id
 * and score. Over the normalized text, for each codepoint
 * start in order, every token the trie finds from there is a candidate ending where it ends; a
 * candidate replaces the best one so far only if its score (a double sum) is strictly higher,
 * then the unknown token for the codepoint if no token covers exactly that codepoint. The
 * best path is read back from the end, consecutive unknown tokens merged. All as llama.cpp.
 *
 * Memory safety: every node index is within the trie (_sorted_trie.h checks the texts it is
 * built from); reads of the input are within its length; every allocation is checked. The GIL is released during the Viterbi: the trie is read-only once
 * built and the input is an immutable bytes object the call holds a reference to.
 *
 * ``viterbi_words`` is the Viterbi word by word (each ``▁`` and what follows up to the next; the
 * text before the first), for vocabularies where no token holds a ``▁`` past its first byte, so
 * no best path crosses a word start (UnigramModel.per_word); a word's ids are kept in a word cache
 * (_word_cache.h, bounded by its budget) and the call holds the GIL, which guards the cache.
 *
 * ``encode_with_spans`` is ``encode`` with each token's span in the input: the normalizer keeps,
 * for each normalized byte, the input bytes it came from (UnigramModel.normalize_with_sources),
 * the Viterbi where each token ends (a cached word's ends from its ids' text lengths), and a
 * token spans from the source of its first byte to the end of the source of its last
 * (UnigramModel.fragment_spans, the twin tests/test_offsets_models.py holds it equal to). It
 * holds the GIL throughout (its word cache is the one viterbi_words guards with it).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_module.h"
#include "_cut_text.h"
#include "_double_array.h"
#include "_sorted_trie.h"
#include "_sourced_bytes.h"
#include "_word_cache.h"

#define RELEASE_GIL_BYTES 256

typedef struct {
    double score;
    int32_t id;
} Scored;

typedef struct {
    PyObject_HEAD
    DoubleArray trie; /* the tokens' byte trie (_double_array.h); its values index scored */
    Scored *scored;   /* per distinct text: its score and id side by side (one cache line a candidate) */
    int ready;
    int32_t unk;
    double unknown_score;
    WordCache cache;
    PyObject **id_objects; /* each id's int, made when first returned (ids past 256 are not interned) */
    size_t n_id_objects;
    uint8_t *id_len; /* each id's text length in bytes (0: not in the trie, or past 255), for the spans of
                        cached words (a byte each: the table a quarter the size, fewer cache misses) */
    size_t n_id_len;
    /* the normalizer (set_normalizer): the charsmap's XCDA nodes and replacement strings */
    int has_normalizer, remove_extra_whitespaces, add_space_prefix;
    uint32_t *cm_nodes;
    size_t cm_n_nodes;
    unsigned char *cm_strings;
    size_t cm_strings_len;
    uint8_t starts_key[128]; /* per ASCII byte: 1 if some charsmap key starts with it */
    /* per ASCII byte c that starts a key: bit b of kept_before[c] set when c then byte b is no key's
     * start (c alone no key, b no step on): c is itself there, as where no key starts with it */
    uint8_t kept_before[128][32];
    uint8_t kept_at_end[128]; /* the same for c as the input's last byte: c alone no key */
} Lattice;

static void Lattice_dealloc(Lattice *self)
{
    da_free(&self->trie);
    BPETOK_FREE_ALL(free, self->cm_nodes, self->cm_strings, self->scored, self->id_len);
    word_cache_free(&self->cache);
    for (size_t k = 0; k < self->n_id_objects; k++)
        Py_XDECREF(self->id_objects[k]);
    free(self->id_objects);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

typedef struct {
    const unsigned char *text;
    uint32_t len, k;
} Entry;

/* By text, then by position in the list. */
static int compare_entries(const void *a, const void *b)
{
    const Entry *x = a, *y = b;
    int cmp = memcmp(x->text, y->text, x->len < y->len ? x->len : y->len);
    if (cmp == 0)
        cmp = x->len < y->len ? -1 : x->len > y->len ? 1 : 0;
    if (cmp == 0)
        cmp = x->k < y->k ? -1 : x->k > y->k ? 1 : 0;
    return cmp;
}

/* Lattice(texts, ids, scores, unk, unknown_score): texts a list of bytes, ids and scores lists
 * of the same length. A later text that repeats an earlier one wins, as in the Python dict; an
 * empty text matches nothing (llama.cpp renames empty tokens anyway). */
static int Lattice_init(Lattice *self, PyObject *args, PyObject *kwds)
{
    PyObject *texts, *ids, *scores;
    int unk;
    double unknown_score;
    if (!PyArg_ParseTuple(args, "O!O!O!id", &PyList_Type, &texts, &PyList_Type, &ids, &PyList_Type, &scores, &unk, &unknown_score))
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(texts);
    if (PyList_GET_SIZE(ids) != n || PyList_GET_SIZE(scores) != n) {
        PyErr_SetString(PyExc_ValueError, "texts, ids and scores must have the same length");
        return -1;
    }
    if (self->ready || self->scored) {
        PyErr_SetString(PyExc_RuntimeError, "Lattice is already initialised");
        return -1;
    }
    if ((uint64_t)n >= UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many tokens");
        return -1;
    }
    self->unk = unk;
    self->unknown_score = unknown_score;
    Entry *entries = malloc(((size_t)n + 1) * sizeof(Entry));
    self->scored = malloc(((size_t)n + 1) * sizeof(Scored));
    int32_t *values = malloc(((size_t)n + 1) * sizeof(int32_t));
    uint32_t *offsets = malloc(((size_t)n + 2) * sizeof(uint32_t));
    unsigned char *blob = NULL;
    int rc = -1;
    if (!entries || !self->scored || !values || !offsets) {
        PyErr_NoMemory();
        goto done;
    }
    size_t count = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *text = PyList_GET_ITEM(texts, k);
        if (!PyBytes_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "token texts must be bytes");
            goto done;
        }
        if (PyBytes_GET_SIZE(text) == 0)
            continue;
        if ((uint64_t)PyBytes_GET_SIZE(text) >= UINT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a token text past 4 GiB");
            goto done;
        }
        entries[count++] = (Entry){(const unsigned char *)PyBytes_AS_STRING(text), (uint32_t)PyBytes_GET_SIZE(text), (uint32_t)k};
    }
    qsort(entries, count, sizeof(Entry), compare_entries);
    size_t unique = 0;
    uint64_t total = 0;
    for (size_t e = 0; e < count; e++) {
        if (e + 1 < count && entries[e + 1].len == entries[e].len && memcmp(entries[e + 1].text, entries[e].text, entries[e].len) == 0)
            continue; /* a later repeat wins */
        Py_ssize_t k = entries[e].k;
        long id = PyLong_AsLong(PyList_GET_ITEM(ids, k));
        double score = PyFloat_AsDouble(PyList_GET_ITEM(scores, k));
        if (PyErr_Occurred())
            goto done;
        if (id < 0 || id > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "token id out of range");
            goto done;
        }
        if ((size_t)id >= self->n_id_objects)
            self->n_id_objects = (size_t)id + 1;
        self->scored[unique] = (Scored){score, (int32_t)id};
        values[unique] = (int32_t)unique;
        entries[unique++] = entries[e];
        total += entries[e].len;
    }
    if (total >= UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the token texts pass 4 GiB");
        goto done;
    }
    if (!(blob = malloc(total ? (size_t)total : 1))) {
        PyErr_NoMemory();
        goto done;
    }
    offsets[0] = 0;
    for (size_t u = 0; u < unique; u++) {
        memcpy(blob + offsets[u], entries[u].text, entries[u].len);
        offsets[u + 1] = offsets[u] + entries[u].len;
    }
    SortedTrie sorted = {0};
    int built = sorted_trie_build(&sorted, blob, (size_t)total, offsets, unique, values);
    if (built == 0)
        built = da_build(&self->trie, &sorted);
    sorted_trie_free(&sorted);
    if (built < 0)
        goto done;
    if ((size_t)unk >= self->n_id_objects)
        self->n_id_objects = (size_t)unk + 1;
    if (unk < 0 || self->n_id_objects > (1u << 26)) /* an absurd id: no int objects kept */
        self->n_id_objects = 0;
    if (self->n_id_objects && !(self->id_objects = calloc(self->n_id_objects, sizeof(PyObject *)))) {
        self->n_id_objects = 0;
        PyErr_NoMemory();
        goto done;
    }
    /* the same bound: past it (an absurd id) the spans of a cached word come from its Viterbi again */
    if (self->n_id_objects && !(self->id_len = calloc(self->n_id_objects, 1))) {
        PyErr_NoMemory();
        goto done;
    }
    self->n_id_len = self->id_len ? self->n_id_objects : 0;
    for (size_t u = 0; u < unique; u++)
        if ((size_t)self->scored[u].id < self->n_id_len && entries[u].len <= UINT8_MAX)
            self->id_len[self->scored[u].id] = (uint8_t)entries[u].len;
    self->ready = 1;
    rc = 0;
done:
    free(entries);
    free(values);
    free(offsets);
    free(blob);
    return rc;
}

static const unsigned char LENGTH_OF_NIBBLE[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};

typedef struct {
    double score;
    int32_t id;
    uint32_t start; /* the Viterbi's inputs are at most UINT32_MAX bytes: 16 bytes a position */
} Best;

/* The best path read back from the end (consecutive unknowns merged) into out, and where each
 * id's bytes end into ends unless NULL (a merged unknown: where its last part ends); how many ids. */
static size_t read_back(const Lattice *t, size_t n, const Best *best, int32_t *out, uint32_t *ends)
{
    size_t count = 0, at = n;
    int previous_unknown = 0;
    for (;;) {
        int32_t id = best[at].id;
        int is_unknown = id == t->unk;
        if (!(previous_unknown && is_unknown)) {
            if (ends)
                ends[count] = (uint32_t)at;
            out[count++] = id;
        }
        if (best[at].start == 0)
            break;
        previous_unknown = is_unknown;
        at = best[at].start;
    }
    for (size_t a = 0, b = count ? count - 1 : 0; a < b; a++, b--) {
        int32_t x = out[a];
        out[a] = out[b];
        out[b] = x;
        if (ends) {
            uint32_t e = ends[a];
            ends[a] = ends[b];
            ends[b] = e;
        }
    }
    return count;
}

/* The Viterbi over data[0..n) (n <= UINT32_MAX, as every caller checks); writes ids to out (room
 * for n ids), and their ends to ends unless NULL (read_back), and returns how many. */
static size_t viterbi(const Lattice *t, const unsigned char *data, size_t n, Best *best, int32_t *out, uint32_t *ends)
{
    best[0].score = 0.0;
    best[0].id = t->unk;
    best[0].start = 0;
    for (size_t k = 1; k <= n; k++) {
        best[k].score = -DBL_MAX;
        best[k].id = t->unk;
        best[k].start = 0;
    }
    for (size_t i = 0; i < n;) {
        size_t units = LENGTH_OF_NIBBLE[data[i] >> 4];
        if (units > n - i)
            units = n - i;
        double base = best[i].score;
        int whole_found = 0;
        const uint32_t *slots = t->trie.slots;
        uint32_t word = slots[0]; /* the root */
        for (size_t end = i; end < n;) { /* one double-array slot a byte */
            uint32_t at = da_base(word) + data[end], next = slots[at];
            if (!da_is_child(next, data[end]))
                break;
            word = next;
            end++;
            if (!(word & DA_HAS_VALUE))
                continue;
            if (end - i == units)
                whole_found = 1;
            const Scored *candidate = &t->scored[t->trie.values[at]];
            double score = base + candidate->score;
            if (score > best[end].score) {
                best[end].score = score;
                best[end].id = candidate->id;
                best[end].start = (uint32_t)i;
            }
        }
        if (!whole_found) {
            double score = base + t->unknown_score;
            Best *b = &best[i + units];
            if (score > b->score) {
                b->score = score;
                b->id = t->unk;
                b->start = (uint32_t)i;
            }
        }
        i += units;
    }
    return read_back(t, n, best, out, ends);
}

/* ``count`` ids as a list of ints (the kept int objects where there are). */
static PyObject *ids_to_list(Lattice *self, const int32_t *ids, size_t count)
{
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (!list)
        return NULL;
    for (size_t k = 0; k < count; k++) {
        int32_t id = ids[k];
        PyObject *v;
        if (id >= 0 && (size_t)id < self->n_id_objects) {
            if (!(v = self->id_objects[id]))
                v = self->id_objects[id] = PyLong_FromLong(id);
            Py_XINCREF(v);
        } else {
            v = PyLong_FromLong(id);
        }
        if (!v) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, v);
    }
    return list;
}

/* Where the next word starts at or after ``from`` (at a U+2581), or n. */
static size_t next_word(const unsigned char *data, size_t n, size_t from)
{
    for (size_t k = from; k + 2 < n; k++) {
        const unsigned char *lead = memchr(data + k, 0xE2, n - 2 - k);
        if (!lead)
            break;
        k = (size_t)(lead - data);
        if (data[k + 1] == 0x96 && data[k + 2] == 0x81)
            return k;
    }
    return n;
}

/* Where each of a cached word's ``count`` ids ends in it: the last at the word's end, each other
 * where its text's length says. -1 where the lengths do not say (an unknown token before the
 * last, which stands for bytes no text names; an id of no known length; lengths that reach the
 * word's end early): then the word's Viterbi says. */
static int ends_of_ids(const Lattice *t, const int32_t *ids, size_t count, uint32_t len, uint32_t *ends)
{
    uint32_t at = 0;
    for (size_t k = 0; k + 1 < count; k++) {
        int32_t id = ids[k];
        if (id == t->unk || id < 0 || (size_t)id >= t->n_id_len || t->id_len[id] == 0 || t->id_len[id] >= len - at)
            return -1;
        at += t->id_len[id];
        ends[k] = at;
    }
    if (count)
        ends[count - 1] = len;
    return 0;
}

/* The Viterbi word by word over data[0..n) (n <= UINT32_MAX) with the word cache: the ids to out
 * (room for n), and where each ends in data to ends unless NULL; how many ids, -1: out of memory. */
static Py_ssize_t viterbi_words(Lattice *self, const unsigned char *data, size_t n, int32_t *out, uint32_t *ends)
{
    Best *best = NULL;
    size_t best_cap = 0, count = 0;
    for (size_t start = 0; start < n;) {
        int spaced = n - start >= 3 && data[start] == 0xE2 && data[start + 1] == 0x96 && data[start + 2] == 0x81;
        size_t end = next_word(data, n, spaced ? start + 3 : start);
        const unsigned char *word = data + start;
        uint32_t len = (uint32_t)(end - start);
        int32_t *at = out + count;
        uint32_t *at_ends = ends ? ends + count : NULL;
        int cached = self->cache.budget && len <= WORD_CACHE_LONGEST;
        uint64_t h = cached ? word_hash(word, len) : 0;
        Py_ssize_t found = cached ? word_cache_get(&self->cache, h, word, len, at) : -1;
        if (found >= 0 && at_ends && ends_of_ids(self, at, (size_t)found, len, at_ends) < 0)
            found = -1, cached = 0; /* remembered already: only the ends are wanted */
        if (found < 0) {
            if (len + 1 > best_cap) {
                Best *grown = realloc(best, ((size_t)len + 1) * sizeof(Best));
                if (!grown) {
                    free(best);
                    return -1;
                }
                best = grown, best_cap = (size_t)len + 1;
            }
            found = (Py_ssize_t)viterbi(self, word, len, best, at, at_ends);
            if (cached) /* when full or out of memory: not remembered */
                word_cache_put(&self->cache, h, word, len, at, (uint32_t)found);
        }
        if (at_ends)
            for (Py_ssize_t k = 0; k < found; k++)
                at_ends[k] += (uint32_t)start;
        if (found > 0 && count > 0 && out[count - 1] == self->unk && at[0] == self->unk) {
            memmove(at, at + 1, (size_t)(found - 1) * sizeof(int32_t)); /* consecutive unknowns merge across words */
            if (at_ends) { /* the merged one ends where this word's first ends */
                ends[count - 1] = at_ends[0];
                memmove(at_ends, at_ends + 1, (size_t)(found - 1) * sizeof(uint32_t));
            }
            found--;
        }
        count += (size_t)found;
        start = end;
    }
    free(best);
    return (Py_ssize_t)count;
}

/* viterbi()'s and viterbi_words()' argument: normalized bytes, their length in *n (at most 4 GiB,
 * which the Viterbi's tables hold); -1 with the error set. */
static int viterbi_input(Lattice *self, PyObject *arg, const char *name, size_t *n)
{
    if (!PyBytes_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s() takes bytes", name);
        return -1;
    }
    if (!self->ready) {
        PyErr_SetString(PyExc_TypeError, "Lattice is not initialised");
        return -1;
    }
    *n = (size_t)PyBytes_GET_SIZE(arg);
    if (*n >= SIZE_MAX / sizeof(Best) - 1 || *n > UINT32_MAX) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* A Viterbi over data[0..n) (0 < n <= UINT32_MAX), its ids to out (room for n): how many, or -1
 * when the memory runs out. */
typedef Py_ssize_t (*ViterbiRun)(Lattice *self, const unsigned char *data, size_t n, int32_t *out);

/* What viterbi() and viterbi_words() share: the bytes ``arg`` checked, room for their ids (at most
 * one a byte), ``run`` over them and its ids as a list; NULL with the error set. */
static PyObject *viterbi_method(Lattice *self, PyObject *arg, const char *name, ViterbiRun run)
{
    size_t n;
    if (viterbi_input(self, arg, name, &n) < 0)
        return NULL;
    if (n == 0)
        return PyList_New(0);
    int32_t *out = malloc(n * sizeof(int32_t) + sizeof(int32_t));
    if (!out)
        return PyErr_NoMemory();
    Py_ssize_t count = run(self, (const unsigned char *)PyBytes_AS_STRING(arg), n, out);
    PyObject *list = count < 0 ? PyErr_NoMemory() : ids_to_list(self, out, (size_t)count);
    free(out);
    return list;
}

/* The word by word Viterbi with the word cache (which the GIL guards). */
static Py_ssize_t run_words(Lattice *self, const unsigned char *data, size_t n, int32_t *out)
{
    return viterbi_words(self, data, n, out, NULL);
}

PyDoc_STRVAR(Lattice_viterbi_words_doc,
             "viterbi() word by word, with the word cache (only where no token holds a U+2581 past its start).");

static PyObject *Lattice_viterbi_words(Lattice *self, PyObject *arg)
{
    return viterbi_method(self, arg, "viterbi_words", run_words);
}

WORD_CACHE_METHODS(Lattice)

/* One Viterbi over the whole text, without the GIL when the text is long. */
static Py_ssize_t run_whole(Lattice *self, const unsigned char *data, size_t n, int32_t *out)
{
    Best *best = malloc((n + 1) * sizeof(Best));
    if (!best)
        return -1;
    size_t count;
    if (n >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        count = viterbi(self, data, n, best, out, NULL);
        Py_END_ALLOW_THREADS
    } else {
        count = viterbi(self, data, n, best, out, NULL);
    }
    free(best);
    return (Py_ssize_t)count;
}

PyDoc_STRVAR(Lattice_viterbi_doc, "The best-scoring ids of normalized bytes (llama.cpp's UGM Viterbi).");

static PyObject *Lattice_viterbi(Lattice *self, PyObject *arg)
{
    return viterbi_method(self, arg, "viterbi", run_whole);
}

/* -- the normalizer (bpetok/models/charsmap.py's CharsMap.prefix and UnigramModel._spaces) ------ */

/* It writes to a Buffer (_sourced_bytes.h): the normalized bytes and, for the spans, where each came from. */

#define CORRUPT (-2)

static inline uint32_t xcda_base(uint32_t packed)
{
    return (packed >> 10) << ((packed & (1u << 9)) >> 6);
}

/* The charsmap's longest key at data[i]: its length (0: none) and value node; CORRUPT where a
 * node index or string is outside the map (the Python twin says so). */
static int longest_key(const Lattice *t, const unsigned char *data, size_t n, size_t i, size_t *length, uint32_t *value_at)
{
    *length = 0;
    if (!t->cm_n_nodes)
        return 0;
    uint32_t state = xcda_base(t->cm_nodes[0]);
    for (size_t k = i; k < n; k++) {
        unsigned char c = data[k];
        if (c == 0)
            break;
        state ^= c;
        if (state >= t->cm_n_nodes)
            return CORRUPT;
        uint32_t packed = t->cm_nodes[state];
        if ((packed & 0x800000FFu) != c)
            break;
        state ^= xcda_base(packed);
        if (packed >> 8 & 1)
            *length = k - i + 1, *value_at = state;
    }
    return 0;
}

static const unsigned char SEQUENCE_LENGTH[16] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 0};

/* llama.cpp's normalize of data (no user-defined tokens): the charsmap, then spaces as U+2581.
 * With out->with_sources (n < UINT32_MAX), each byte of out keeps the input bytes it came from,
 * as UnigramModel.normalize_with_sources does: a replacement's bytes, the whole key it replaced;
 * a character kept, itself; a U+2581 for a space, that space; one the options add, nothing, at
 * the start of the word it precedes. */
static int normalize(const Lattice *t, const unsigned char *data, size_t n, Buffer *out)
{
    static const unsigned char SPACE[3] = {0xE2, 0x96, 0x81}, FFFD[3] = {0xEF, 0xBF, 0xBD};
    Buffer mapped = {0};
    mapped.with_sources = out->with_sources;
    /* room for the usual case at once (text mostly kept, a U+2581 for about every fifth byte) */
    int rc = n < SIZE_MAX / 4 ? (reserve(&mapped, n + 16) | reserve(out, n + n / 2 + 16)) : 0;
    for (size_t i = 0; i < n && rc == 0;) {
        size_t run = i; /* ASCII that starts no key is itself: copied a run at a time */
        while (run < n && data[run] < 0x80) {
            unsigned char c = data[run];
            if (t->starts_key[c] && !(run + 1 < n ? t->kept_before[c][data[run + 1] >> 3] >> (data[run + 1] & 7) & 1 : t->kept_at_end[c]))
                break;
            run++;
        }
        if (run > i) {
            rc = put_input(&mapped, data + i, run - i, i);
            i = run;
            continue;
        }
        size_t length;
        uint32_t value_at;
        if ((rc = longest_key(t, data, n, i, &length, &value_at)) < 0)
            break;
        if (length) {
            if (value_at >= t->cm_n_nodes) {
                rc = CORRUPT;
                break;
            }
            size_t offset = t->cm_nodes[value_at] & 0x7FFFFFFFu;
            const unsigned char *nul = offset < t->cm_strings_len ? memchr(t->cm_strings + offset, 0, t->cm_strings_len - offset) : NULL;
            if (!nul) {
                rc = CORRUPT;
                break;
            }
            rc = put_bytes(&mapped, t->cm_strings + offset, (size_t)(nul - (t->cm_strings + offset)), i, i + length);
            i += length;
            continue;
        }
        size_t units = data[i] < 0xF8 ? (data[i] >= 0xF0 ? 4 : SEQUENCE_LENGTH[data[i] >> 4]) : 0;
        int valid = units && i + units <= n;
        for (size_t k = 1; valid && k < units; k++)
            valid = (data[i + k] & 0xC0) == 0x80;
        if (valid) {
            rc = put_bytes(&mapped, data + i, units, i, i + units);
            i += units;
        } else {
            rc = put_bytes(&mapped, FFFD, 3, i, i + 1);
            i += 1;
        }
    }
    const unsigned char *m = mapped.p;
    size_t len = mapped.len;
#define FROM(i) (mapped.with_sources ? mapped.src[i].from : 0)
#define TO(i) (mapped.with_sources ? mapped.src[i].to : 0)
    if (rc == 0 && t->remove_extra_whitespaces) { /* each run of non-spaces: U+2581 and the run */
        for (size_t i = 0; i < len && rc == 0;) {
            if (m[i] == ' ') {
                i++;
                continue;
            }
            const unsigned char *space = memchr(m + i, ' ', len - i);
            size_t j = space ? (size_t)(space - m) : len;
            if ((rc = put_bytes(out, SPACE, 3, FROM(i), FROM(i))) == 0)
                rc = put_from(out, &mapped, i, j);
            i = j;
        }
    } else if (rc == 0) { /* each space a U+2581; with add_space_prefix one more before the first non-space */
        size_t lead = 0;
        while (lead < len && m[lead] == ' ')
            lead++;
        for (size_t i = 0; i < len && rc == 0; i++) {
            if (i == lead && t->add_space_prefix)
                rc = put_bytes(out, SPACE, 3, FROM(i), FROM(i));
            if (rc == 0)
                rc = m[i] == ' ' ? put_bytes(out, SPACE, 3, FROM(i), TO(i)) : put_from(out, &mapped, i, i + 1);
        }
    }
#undef FROM
#undef TO
    free_buffer(&mapped);
    return rc;
}

PyDoc_STRVAR(Lattice_set_normalizer_doc,
             "set_normalizer(nodes: bytes, strings: bytes, remove_extra_whitespaces: bool, add_space_prefix: bool)");

static PyObject *Lattice_set_normalizer(Lattice *self, PyObject *args)
{
    Py_buffer nodes, strings;
    int remove_extra, add_prefix;
    if (!PyArg_ParseTuple(args, "y*y*pp", &nodes, &strings, &remove_extra, &add_prefix))
        return NULL;
    PyObject *result = NULL;
    if (nodes.len % 4) {
        PyErr_SetString(PyExc_ValueError, "charsmap nodes: not a whole number of uint32");
        goto done;
    }
    uint32_t *copy_nodes = malloc(nodes.len ? (size_t)nodes.len : 1);
    unsigned char *copy_strings = malloc(strings.len ? (size_t)strings.len : 1);
    if (!copy_nodes || !copy_strings) {
        free(copy_nodes);
        free(copy_strings);
        PyErr_NoMemory();
        goto done;
    }
    memcpy(copy_nodes, nodes.buf, (size_t)nodes.len); /* native uint32s: an array('I') */
    memcpy(copy_strings, strings.buf, (size_t)strings.len);
    free(self->cm_nodes);
    free(self->cm_strings);
    self->cm_nodes = copy_nodes, self->cm_n_nodes = (size_t)nodes.len / 4;
    self->cm_strings = copy_strings, self->cm_strings_len = (size_t)strings.len;
    self->remove_extra_whitespaces = remove_extra, self->add_space_prefix = add_prefix;
    for (unsigned c = 0; c < 128; c++) { /* longest_key's first step: whether c leads anywhere */
        uint32_t state = self->cm_n_nodes ? xcda_base(self->cm_nodes[0]) ^ c : 0;
        /* NUL ends longest_key's walk and is copied as it is; a node past the map must still
         * reach longest_key, which reports it */
        self->starts_key[c] = c != 0 && self->cm_n_nodes && (state >= self->cm_n_nodes || (self->cm_nodes[state] & 0x800000FFu) == c);
        memset(self->kept_before[c], 0, sizeof self->kept_before[c]);
        self->kept_at_end[c] = 0;
        /* longest_key's second step from c, where c alone is no key: a byte that ends the walk
         * there (NUL, or no child along it) leaves c itself; one that steps on, or past the map
         * (corrupt), is longest_key's to follow */
        if (!self->starts_key[c] || state >= self->cm_n_nodes || (self->cm_nodes[state] >> 8 & 1))
            continue;
        uint32_t after = state ^ xcda_base(self->cm_nodes[state]);
        self->kept_at_end[c] = 1;
        for (unsigned b = 0; b < 256; b++) {
            uint32_t second = after ^ b;
            int ends = b == 0 || (second < self->cm_n_nodes && (self->cm_nodes[second] & 0x800000FFu) != b);
            self->kept_before[c][b >> 3] |= (uint8_t)(ends << (b & 7));
        }
    }
    self->has_normalizer = 1;
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&nodes);
    PyBuffer_Release(&strings);
    return result;
}

/* encode()'s and encode_with_spans()' arguments (data: bytes, per_word: bool), on a lattice with
 * the normalizer they need: 0 with ``data`` held (the caller releases it), or -1 with an
 * exception set. */
static int encode_arguments(Lattice *self, PyObject *args, Py_buffer *data, int *per_word)
{
    if (!PyArg_ParseTuple(args, "y*p", data, per_word))
        return -1;
    if (!self->ready || !self->has_normalizer) {
        PyBuffer_Release(data);
        PyErr_SetString(PyExc_TypeError, "Lattice is not initialised or has no normalizer");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(Lattice_encode_doc,
             "encode(data: bytes, per_word: bool) -> list[int] | None: normalized, then the Viterbi; None: a corrupt charsmap");

static PyObject *Lattice_encode(Lattice *self, PyObject *args)
{
    Py_buffer data;
    int per_word;
    Buffer out = {0};
    if (encode_arguments(self, args, &data, &per_word) < 0)
        return NULL;
    int rc = normalize(self, data.buf, (size_t)data.len, &out);
    PyBuffer_Release(&data);
    if (rc < 0) {
        free_buffer(&out);
        if (rc == CORRUPT)
            Py_RETURN_NONE;
        return PyErr_NoMemory();
    }
    PyObject *normalized = PyBytes_FromStringAndSize((const char *)out.p, (Py_ssize_t)out.len);
    free(out.p);
    if (!normalized)
        return NULL;
    PyObject *result = per_word ? Lattice_viterbi_words(self, normalized) : Lattice_viterbi(self, normalized);
    Py_DECREF(normalized);
    return result;
}

/* encode() of each piece of a cut text (_cut_text.h) into *ids (grown as it goes), each special's
 * id after its piece; 0, -1 out of memory, 1 for None (a special id past int32), CORRUPT. */
static int encode_pieces(Lattice *self, const CutText *cut, int per_word, int32_t **ids, size_t *count)
{
    Buffer normalized = {0};
    Best *best = NULL;
    int rc = 0;
    for (size_t k = 0; k < cut->count && rc == 0; k++) {
        const TextPiece *piece = &cut->pieces[k];
        normalized.len = 0;
        if ((rc = normalize(self, cut->utf8 + piece->begin, piece->end - piece->begin, &normalized)) < 0)
            break;
        size_t n = normalized.len;
        int32_t *grown = n <= UINT32_MAX ? realloc(*ids, (*count + n + 1) * sizeof(int32_t)) : NULL;
        if (grown)
            *ids = grown;
        Best *room = grown && !per_word ? realloc(best, (n + 1) * sizeof(Best)) : best;
        if (room)
            best = room;
        if (!grown || (!per_word && !room)) {
            rc = -1;
            break;
        }
        Py_ssize_t got = !n ? 0 : per_word ? viterbi_words(self, normalized.p, n, *ids + *count, NULL)
                                         : (Py_ssize_t)viterbi(self, normalized.p, n, best, *ids + *count, NULL);
        if (got < 0)
            rc = -1;
        else
            *count += (size_t)got;
        if (rc == 0 && piece->special != UINT32_MAX) {
            if (piece->special > INT32_MAX)
                rc = 1;
            else
                (*ids)[(*count)++] = (int32_t)piece->special;
        }
    }
    free_buffer(&normalized);
    free(best);
    return rc;
}

PyDoc_STRVAR(Lattice_encode_cut_doc,
             "encode_cut(per_word: bool, plain, special, text: str, parse_special: bool) -> list[int] | None: a whole\n"
             "text's ids, cut at the specials by the Automaton of that mode (None: none); None where the Tokenizer must partition");

/* encode_cut(per_word, plain, special, text, parse_special): a whole text's ids in one call, the
 * text cut at its special tokens by the automaton of that mode, each fragment normalized from
 * the text's own UTF-8 and encoded as encode() does, each special's id kept; None where the
 * Tokenizer must partition and encode fragment by fragment (which is what this equals): no
 * UTF-8 (lone surrogates), no cuts, a corrupt charsmap. */
static PyObject *Lattice_encode_cut(Lattice *self, PyObject *const *args, Py_ssize_t nargs)
{
    CutText cut;
    int per_word;
    int rc = cut_arguments_with_flag(args, nargs, self->ready && self->has_normalizer, "Lattice (or its normalizer)", &cut,
                                     &per_word);
    if (rc != 0)
        return rc < 0 ? NULL : Py_NewRef(Py_None);
    int32_t *ids = NULL;
    size_t count = 0;
    rc = encode_pieces(self, &cut, per_word, &ids, &count);
    cut_text_free(&cut);
    PyObject *result = rc == -1 ? PyErr_NoMemory() : rc != 0 ? Py_NewRef(Py_None) : ids_to_list(self, ids, count);
    free(ids);
    return result;
}

/* Counts UTF-8 lead bytes (characters) of data up to a byte, moving forward from where it was. */
typedef struct {
    size_t at, chars;
} Cursor;

static size_t chars_before(Cursor *c, const unsigned char *data, size_t to)
{
    if (!data) /* ASCII: a character a byte */
        return to;
    if (to < c->at) /* not met: the sources only grow */
        c->at = 0, c->chars = 0;
    for (; c->at < to; c->at++)
        c->chars += (data[c->at] & 0xC0) != 0x80;
    return c->chars;
}

PyDoc_STRVAR(Lattice_encode_with_spans_doc,
             "encode_with_spans(data: bytes, per_word: bool) -> bytes | None: encode's tokens as int64 rows (id, char start, "
             "char end, byte start, byte end): each one's span in data; None: a corrupt charsmap or a span inside a character");

/* encode_with_spans(data, per_word): encode's ids, each with its span in data (ugm.py's
 * ``fragment_spans``: from the source of its first normalized byte to the end of the source of
 * its last) as int64 rows of id, character start and end, byte start and end; None where the
 * charsmap is corrupt or a span would start or end inside a character (the Python twin says
 * which). The same normalizer and Viterbi as encode, in one pass. */
static PyObject *Lattice_encode_with_spans(Lattice *self, PyObject *args)
{
    Py_buffer data;
    int per_word;
    if (encode_arguments(self, args, &data, &per_word) < 0)
        return NULL;
    PyObject *result = NULL;
    Buffer norm = {0};
    norm.with_sources = 1;
    int32_t *ids = NULL;
    uint32_t *ends = NULL;
    PyObject *rows_bytes = NULL;
    int64_t *rows = NULL; /* rows_bytes' contents */
    Best *best = NULL;
    const unsigned char *in = data.buf;
    size_t n = (size_t)data.len, count = 0;
    if (n >= UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "encode_with_spans(): a text past 4 GiB");
        goto done;
    }
    int rc = normalize(self, in, n, &norm);
    if (rc == CORRUPT) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    size_t m = norm.len;
    if (rc < 0 || m > UINT32_MAX || m >= SIZE_MAX / sizeof(Best) - 1) {
        PyErr_NoMemory();
        goto done;
    }
    ids = malloc((m + 1) * sizeof(int32_t));
    ends = malloc((m + 1) * sizeof(uint32_t));
    if (!ids || !ends) {
        PyErr_NoMemory();
        goto done;
    }
    if (m && per_word) {
        Py_ssize_t found = viterbi_words(self, norm.p, m, ids, ends);
        if (found < 0) {
            PyErr_NoMemory();
            goto done;
        }
        count = (size_t)found;
    } else if (m) {
        if (!(best = malloc((m + 1) * sizeof(Best)))) {
            PyErr_NoMemory();
            goto done;
        }
        count = viterbi(self, norm.p, m, best, ids, ends);
    }
    if (count > (size_t)PY_SSIZE_T_MAX / (5 * sizeof(int64_t))) {
        PyErr_NoMemory();
        goto done;
    }
    if (!(rows_bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * 5 * sizeof(int64_t)))))
        goto done;
    rows = (int64_t *)PyBytes_AS_STRING(rows_bytes);
    Cursor starts = {0, 0}, stops = {0, 0};
    size_t continuations = 0;
    for (size_t k = 0; k < n; k++)
        continuations += (in[k] & 0xC0) == 0x80;
    const unsigned char *counted = continuations ? in : NULL; /* none: the byte offsets are the character offsets */
    size_t a = 0;
    for (size_t k = 0; k < count; k++) {
        size_t b = ends[k];
        if (b <= a || b > m || norm.src[a].from > norm.src[b - 1].to || norm.src[b - 1].to > n) {
            PyErr_SetString(PyExc_ValueError, "Lattice: a token's bytes outside its text");
            goto done;
        }
        size_t first = norm.src[a].from, last = norm.src[b - 1].to;
        if ((first < n && (in[first] & 0xC0) == 0x80) || (last < n && (in[last] & 0xC0) == 0x80)) {
            result = Py_None; /* inside a character (a charsmap key that ends there): the twin marks it */
            Py_INCREF(result);
            goto done;
        }
        int64_t *row = rows + 5 * k;
        row[0] = ids[k];
        row[1] = (int64_t)chars_before(&starts, counted, first);
        row[2] = (int64_t)chars_before(&stops, counted, last);
        row[3] = (int64_t)first;
        row[4] = (int64_t)last;
        a = b;
    }
    if (a != m) {
        PyErr_SetString(PyExc_ValueError, "Lattice: the tokens do not cover the text");
        goto done;
    }
    result = rows_bytes;
    rows_bytes = NULL;
done:
    PyBuffer_Release(&data);
    free_buffer(&norm);
    free(ids);
    free(ends);
    Py_XDECREF(rows_bytes);
    free(best);
    return result;
}

static PyMethodDef Lattice_methods[] = {
    {"viterbi_words", (PyCFunction)Lattice_viterbi_words, METH_O, Lattice_viterbi_words_doc},
    WORD_CACHE_METHODDEFS(Lattice),
    {"viterbi", (PyCFunction)Lattice_viterbi, METH_O, Lattice_viterbi_doc},
    {"set_normalizer", (PyCFunction)Lattice_set_normalizer, METH_VARARGS, Lattice_set_normalizer_doc},
    {"encode", (PyCFunction)Lattice_encode, METH_VARARGS, Lattice_encode_doc},
    {"encode_cut", (PyCFunction)(void (*)(void))Lattice_encode_cut, METH_FASTCALL, Lattice_encode_cut_doc},
    {"encode_with_spans", (PyCFunction)Lattice_encode_with_spans, METH_VARARGS, Lattice_encode_with_spans_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LatticeType = {
    BPETOK_TYPE(Lattice, "bpetok.models._ugm.Lattice", "A unigram vocabulary's token trie and its Viterbi.")};

BPETOK_MODULE(_ugm, "The compiled Viterbi of bpetok's t5 (Unigram) model.", NULL, &LatticeType)
