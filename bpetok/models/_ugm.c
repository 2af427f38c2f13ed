/* The compiled Viterbi of bpetok's ``t5`` (Unigram) model; ``UnigramModel.viterbi`` in
 * bpetok/models/ugm.py is the readable twin, and tests/test_model_ugm.py holds the two equal.
 *
 * The tokens llama.cpp's token_matcher holds (NORMAL, USER_DEFINED, UNUSED) form a byte trie:
 * node 0 is the root, an edge (node, byte) -> child lives in an open-addressing table, and each
 * node that ends a token keeps its id and score. Over the normalized text, for each codepoint
 * start in order, every token the trie finds from there is a candidate ending where it ends; a
 * candidate replaces the best one so far only if its score (a double sum) is strictly higher,
 * then the unknown token for the codepoint if no token covers exactly that codepoint. The
 * best path is read back from the end, consecutive unknown tokens merged. All as llama.cpp.
 *
 * Memory safety: every node and slot index is within its allocation (the table is at most half
 * full, so a probe always meets a free slot); reads of the input are within its length; every
 * allocation is checked. The GIL is released during the Viterbi: the trie is read-only once
 * built and the input is an immutable bytes object the call holds a reference to.
 *
 * ``viterbi_words`` is the Viterbi word by word (each ``▁`` and what follows up to the next; the
 * text before the first), for vocabularies where no token holds a ``▁`` past its first byte, so
 * no best path crosses a word start (UnigramModel.per_word); a word's ids are kept in a word cache
 * (_word_cache.h, bounded by its budget) and the call holds the GIL, which guards the cache.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_word_cache.h"

#define NO_TOKEN (-1)
#define RELEASE_GIL_BYTES 256

/* Node numbers fit 24 bits, so an edge's key (parent + 1) << 8 | byte fits 32: 8 bytes a slot. */
#define MAX_NODES ((1u << 24) - 1)

typedef struct {
    uint32_t key; /* (parent node + 1) << 8 | byte; 0 marks a free slot */
    uint32_t child;
} Edge;

typedef struct {
    PyObject_HEAD
    Edge *edges;
    uint64_t mask;
    size_t n_edges;
    int32_t *token_of; /* per node: the token it ends, or NO_TOKEN */
    double *score_of;
    size_t n_nodes, cap_nodes;
    int32_t unk;
    double unknown_score;
    WordCache cache;
    PyObject **id_objects; /* each id's int, made when first returned (ids past 256 are not interned) */
    size_t n_id_objects;
} Lattice;

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline int64_t find_child(const Lattice *t, uint32_t node, unsigned char c)
{
    uint32_t key = (node + 1) << 8 | c;
    uint64_t i = mix64(key) & t->mask;
    for (;;) {
        const Edge *e = &t->edges[i];
        if (e->key == key)
            return e->child;
        if (e->key == 0)
            return -1;
        i = (i + 1) & t->mask;
    }
}

static int grow_edges(Lattice *t)
{
    uint64_t size = (t->mask + 1) * 2;
    if (size > SIZE_MAX / sizeof(Edge))
        return -1;
    Edge *edges = calloc((size_t)size, sizeof(Edge));
    if (!edges)
        return -1;
    for (uint64_t i = 0; i <= t->mask; i++) {
        Edge e = t->edges[i];
        if (!e.key)
            continue;
        uint64_t j = mix64(e.key) & (size - 1);
        while (edges[j].key)
            j = (j + 1) & (size - 1);
        edges[j] = e;
    }
    free(t->edges);
    t->edges = edges;
    t->mask = size - 1;
    return 0;
}

static int64_t new_node(Lattice *t)
{
    if (t->n_nodes >= MAX_NODES)
        return -2;
    if (t->n_nodes == t->cap_nodes) {
        size_t cap = t->cap_nodes * 2;
        if (cap > SIZE_MAX / sizeof(double))
            return -1;
        int32_t *tokens = realloc(t->token_of, cap * sizeof(int32_t));
        if (!tokens)
            return -1;
        t->token_of = tokens;
        double *scores = realloc(t->score_of, cap * sizeof(double));
        if (!scores)
            return -1;
        t->score_of = scores;
        t->cap_nodes = cap;
    }
    t->token_of[t->n_nodes] = NO_TOKEN;
    t->score_of[t->n_nodes] = 0.0;
    return (int64_t)t->n_nodes++;
}

/* The node for ``text`` (created along the way). -1 when out of memory, -2 past MAX_NODES. */
static int64_t insert(Lattice *t, const unsigned char *text, Py_ssize_t size)
{
    uint32_t node = 0;
    for (Py_ssize_t k = 0; k < size; k++) {
        int64_t child = find_child(t, node, text[k]);
        if (child < 0) {
            if ((t->n_edges + 1) * 2 > t->mask + 1 && grow_edges(t) < 0)
                return -1;
            child = new_node(t);
            if (child < 0)
                return child;
            uint32_t key = (node + 1) << 8 | text[k];
            uint64_t i = mix64(key) & t->mask;
            while (t->edges[i].key)
                i = (i + 1) & t->mask;
            t->edges[i].key = key;
            t->edges[i].child = (uint32_t)child;
            t->n_edges++;
        }
        node = (uint32_t)child;
    }
    return node;
}

static void Lattice_dealloc(Lattice *self)
{
    free(self->edges);
    free(self->token_of);
    free(self->score_of);
    word_cache_free(&self->cache);
    for (size_t k = 0; k < self->n_id_objects; k++)
        Py_XDECREF(self->id_objects[k]);
    free(self->id_objects);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Lattice(texts, ids, scores, unk, unknown_score): texts a list of bytes, ids and scores lists
 * of the same length. A later text that repeats an earlier one wins, as in the Python dict. */
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
    if (self->edges) {
        PyErr_SetString(PyExc_RuntimeError, "Lattice is already initialised");
        return -1;
    }
    self->unk = unk;
    self->unknown_score = unknown_score;
    self->mask = 1023;
    self->edges = calloc(1024, sizeof(Edge));
    self->cap_nodes = 1024;
    self->token_of = malloc(self->cap_nodes * sizeof(int32_t));
    self->score_of = malloc(self->cap_nodes * sizeof(double));
    if (!self->edges || !self->token_of || !self->score_of) {
        PyErr_NoMemory();
        return -1;
    }
    if (new_node(self) < 0) { /* the root */
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *text = PyList_GET_ITEM(texts, k);
        if (!PyBytes_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "token texts must be bytes");
            return -1;
        }
        long id = PyLong_AsLong(PyList_GET_ITEM(ids, k));
        double score = PyFloat_AsDouble(PyList_GET_ITEM(scores, k));
        if (PyErr_Occurred())
            return -1;
        if (id < 0 || id > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "token id out of range");
            return -1;
        }
        int64_t node = insert(self, (const unsigned char *)PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text));
        if (node == -2) {
            PyErr_SetString(PyExc_OverflowError, "the tokens' trie needs more than 2**24 nodes");
            return -1;
        }
        if (node < 0) {
            PyErr_NoMemory();
            return -1;
        }
        if (node == 0)
            continue; /* an empty text matches nothing (llama.cpp renames empty tokens anyway) */
        self->token_of[node] = (int32_t)id;
        self->score_of[node] = score;
        if ((size_t)id >= self->n_id_objects)
            self->n_id_objects = (size_t)id + 1;
    }
    if ((size_t)unk >= self->n_id_objects)
        self->n_id_objects = (size_t)unk + 1;
    if (self->n_id_objects > (1u << 26)) /* an absurd id: no int objects kept */
        self->n_id_objects = 0;
    if (self->n_id_objects && !(self->id_objects = calloc(self->n_id_objects, sizeof(PyObject *)))) {
        self->n_id_objects = 0;
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static const unsigned char LENGTH_OF_NIBBLE[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};

typedef struct {
    double score;
    int32_t id;
    size_t start;
} Best;

/* The Viterbi over data[0..n); writes ids to out (room for n ids) and returns how many. */
static size_t viterbi(const Lattice *t, const unsigned char *data, size_t n, Best *best, int32_t *out)
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
        uint32_t node = 0;
        for (size_t end = i + 1; end <= n; end++) {
            int64_t child = find_child(t, node, data[end - 1]);
            if (child < 0)
                break;
            node = (uint32_t)child;
            int32_t id = t->token_of[node];
            if (id == NO_TOKEN)
                continue;
            if (end - i == units)
                whole_found = 1;
            double score = base + t->score_of[node];
            if (score > best[end].score) {
                best[end].score = score;
                best[end].id = id;
                best[end].start = i;
            }
        }
        if (!whole_found) {
            double score = base + t->unknown_score;
            Best *b = &best[i + units];
            if (score > b->score) {
                b->score = score;
                b->id = t->unk;
                b->start = i;
            }
        }
        i += units;
    }
    size_t count = 0, at = n;
    int previous_unknown = 0;
    for (;;) {
        int32_t id = best[at].id;
        int is_unknown = id == t->unk;
        if (!(previous_unknown && is_unknown))
            out[count++] = id;
        if (best[at].start == 0)
            break;
        previous_unknown = is_unknown;
        at = best[at].start;
    }
    for (size_t a = 0, b = count ? count - 1 : 0; a < b; a++, b--) {
        int32_t x = out[a];
        out[a] = out[b];
        out[b] = x;
    }
    return count;
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
    for (size_t k = from; k + 2 < n; k++)
        if (data[k] == 0xE2 && data[k + 1] == 0x96 && data[k + 2] == 0x81)
            return k;
    return n;
}

static PyObject *Lattice_viterbi_words(Lattice *self, PyObject *arg)
{
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "viterbi_words() takes bytes");
        return NULL;
    }
    size_t n = (size_t)PyBytes_GET_SIZE(arg);
    if (n == 0)
        return PyList_New(0);
    if (n >= SIZE_MAX / sizeof(Best) - 1 || n > UINT32_MAX)
        return PyErr_NoMemory();
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(arg);
    /* at most one id per byte, over all the words together; the Viterbi's table per word */
    int32_t *out = malloc(n * sizeof(int32_t) + sizeof(int32_t));
    Best *best = NULL;
    size_t best_cap = 0, count = 0;
    if (!out)
        return PyErr_NoMemory();
    for (size_t start = 0; start < n;) {
        int spaced = n - start >= 3 && data[start] == 0xE2 && data[start + 1] == 0x96 && data[start + 2] == 0x81;
        size_t end = next_word(data, n, spaced ? start + 3 : start);
        const unsigned char *word = data + start;
        uint32_t len = (uint32_t)(end - start);
        int32_t *at = out + count;
        int cached = self->cache.budget && len <= WORD_CACHE_LONGEST;
        uint64_t h = cached ? word_hash(word, len) : 0;
        Py_ssize_t found = cached ? word_cache_get(&self->cache, h, word, len, at) : -1;
        if (found < 0) {
            if (len + 1 > best_cap) {
                Best *grown = realloc(best, ((size_t)len + 1) * sizeof(Best));
                if (!grown) {
                    free(best);
                    free(out);
                    return PyErr_NoMemory();
                }
                best = grown, best_cap = (size_t)len + 1;
            }
            found = (Py_ssize_t)viterbi(self, word, len, best, at);
            if (cached) /* when full or out of memory: not remembered */
                word_cache_put(&self->cache, h, word, len, at, (uint32_t)found);
        }
        if (found > 0 && count > 0 && out[count - 1] == self->unk && at[0] == self->unk) {
            memmove(at, at + 1, (size_t)(found - 1) * sizeof(int32_t)); /* consecutive unknowns merge across words */
            found--;
        }
        count += (size_t)found;
        start = end;
    }
    free(best);
    PyObject *list = ids_to_list(self, out, count);
    free(out);
    return list;
}

static PyObject *Lattice_set_cache_budget(Lattice *self, PyObject *arg)
{
    Py_ssize_t budget = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (budget == -1 && PyErr_Occurred())
        return NULL;
    if (budget < 0) {
        PyErr_SetString(PyExc_ValueError, "the cache budget is a number of bytes >= 0");
        return NULL;
    }
    word_cache_free(&self->cache);
    self->cache.budget = (size_t)budget;
    Py_RETURN_NONE;
}

static PyObject *Lattice_cache_stats(Lattice *self, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("(nnn)", (Py_ssize_t)self->cache.count, (Py_ssize_t)self->cache.used, (Py_ssize_t)self->cache.budget);
}

static PyObject *Lattice_viterbi(Lattice *self, PyObject *arg)
{
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "viterbi() takes bytes");
        return NULL;
    }
    size_t n = (size_t)PyBytes_GET_SIZE(arg);
    if (n == 0)
        return PyList_New(0);
    if (n >= SIZE_MAX / sizeof(Best) - 1)
        return PyErr_NoMemory();
    Best *best = malloc((n + 1) * sizeof(Best));
    int32_t *out = malloc(n * sizeof(int32_t) + sizeof(int32_t));
    if (!best || !out) {
        free(best);
        free(out);
        return PyErr_NoMemory();
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(arg);
    size_t count;
    if (n >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        count = viterbi(self, data, n, best, out);
        Py_END_ALLOW_THREADS
    } else {
        count = viterbi(self, data, n, best, out);
    }
    free(best);
    PyObject *list = ids_to_list(self, out, count);
    free(out);
    return list;
}

static PyMethodDef Lattice_methods[] = {
    {"viterbi", (PyCFunction)Lattice_viterbi, METH_O, "The best-scoring ids of normalized bytes (llama.cpp's UGM Viterbi)."},
    {"viterbi_words", (PyCFunction)Lattice_viterbi_words, METH_O,
     "viterbi() word by word, with the word cache (only where no token holds a U+2581 past its start)."},
    {"set_cache_budget", (PyCFunction)Lattice_set_cache_budget, METH_O,
     "set_cache_budget(bytes: int): empty the word cache and let it grow to that many bytes (0: no cache)"},
    {"cache_stats", (PyCFunction)Lattice_cache_stats, METH_NOARGS, "cache_stats() -> (entries, bytes used, budget)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LatticeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpetok.models._ugm.Lattice",
    .tp_basicsize = sizeof(Lattice),
    .tp_dealloc = (destructor)Lattice_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A unigram vocabulary's token trie and its Viterbi.",
    .tp_methods = Lattice_methods,
    .tp_init = (initproc)Lattice_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "bpetok.models._ugm", "The compiled Viterbi of bpetok's t5 (Unigram) model.", -1, NULL,
};

PyMODINIT_FUNC PyInit__ugm(void)
{
    if (PyType_Ready(&LatticeType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&LatticeType);
    if (PyModule_AddObject(m, "Lattice", (PyObject *)&LatticeType) < 0) {
        Py_DECREF(&LatticeType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
