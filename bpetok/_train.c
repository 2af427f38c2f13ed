/* The trainer's merge loop in C: PairCounts, the twin of _PairCounts in bpetok/_train_merge.py.
 *
 * The same algorithm and the same results (tests/test_train_twins.py holds them equal): every
 * unique word's symbols in one linked list over position arrays (int32: symbol, next, previous,
 * word), the weighted count of every adjacent pair, the positions where each pair was adjacent
 * when recorded (a superset: a stale one is skipped when met), and a max-heap of (count, pair)
 * with lazy deletion. best() is the pair with the highest count, ties to the smallest packed
 * pair (left id, then right id); merge() visits only the occurrences of its pair, in text order,
 * so overlapping ones ("a a a") merge left to right without overlap.
 *
 * A pair (left, right) is the integer left * STRIDE + right, ids below STRIDE = 2**24. Every input
 * is checked (ids, frequencies, sizes that fit int32 positions) and every allocation too: a failed
 * one raises MemoryError. A merge that fails half-way leaves the counts inconsistent: the trainer
 * then stops with the error and the object is not used again.
 *
 * The words come from a PieceCounts (bpetok/_train_pieces.h: the corpus's unique pieces, read in
 * place) or any iterable of bytes or id sequences; each pair's position list starts at its exact size.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_module.h"

#define STRIDE ((int64_t)1 << 24)
#define END (-1)

typedef struct {
    int64_t key, count;
    int32_t *pos; /* positions where the pair was adjacent when recorded */
    size_t len, cap;
    uint64_t stamp; /* the merge that last grew this pair (to push it once per merge) */
} Pair;

typedef struct {
    int64_t count, key;
    int32_t pair; /* index into pairs */
} Entry;

typedef struct {
    PyObject_HEAD
    int32_t *sym, *nxt, *prv, *word; /* per position */
    size_t npos, cappos;
    int64_t *freq;  /* per word */
    int32_t *start; /* per word: its first position, END for an empty word */
    size_t nwords;
    Pair *pairs;
    size_t npairs, cappairs;
    int32_t *slots; /* open addressing: index into pairs, or -1 */
    size_t nslots;  /* a power of two */
    Entry *heap;
    size_t nheap, capheap;
    int32_t *grown;
    size_t ngrown, capgrown;
    uint64_t stamp;
    int started; /* __init__ ran: it runs once */
} PairCounts;

/* Make room for `need` elements of `size` bytes in *buf (capacity *cap); 0, or -1 with MemoryError. */
static int reserve(void **buf, size_t *cap, size_t need, size_t size)
{
    if (grow_array(buf, cap, need, size, 8) < 0)
        return PyErr_NoMemory(), -1;
    return 0;
}

#define RESERVE(buf, cap, need) reserve((void **)&(buf), &(cap), (need), sizeof *(buf))

static size_t slot_of(int64_t key, size_t nslots)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & (nslots - 1);
}

/* The index of `key` in pairs, or -1. */
static int32_t lookup(const PairCounts *self, int64_t key)
{
    if (self->nslots == 0)
        return -1;
    for (size_t s = slot_of(key, self->nslots);; s = (s + 1) & (self->nslots - 1)) {
        int32_t i = self->slots[s];
        if (i < 0 || self->pairs[i].key == key)
            return i;
    }
}

static int rehash(PairCounts *self, size_t nslots)
{
    if (nslots > SIZE_MAX / sizeof(int32_t))
        return PyErr_NoMemory(), -1;
    int32_t *slots = malloc(nslots * sizeof(int32_t));
    if (slots == NULL)
        return PyErr_NoMemory(), -1;
    memset(slots, 0xff, nslots * sizeof(int32_t)); /* every slot -1 */
    for (size_t i = 0; i < self->npairs; i++) {
        size_t s = slot_of(self->pairs[i].key, nslots);
        while (slots[s] >= 0)
            s = (s + 1) & (nslots - 1);
        slots[s] = (int32_t)i;
    }
    free(self->slots);
    self->slots = slots;
    self->nslots = nslots;
    return 0;
}

/* The index of `key` in pairs, added with count 0 if absent; -1 with MemoryError. */
static int32_t find_or_add(PairCounts *self, int64_t key)
{
    int32_t i = lookup(self, key);
    if (i >= 0)
        return i;
    if (self->npairs >= INT32_MAX) {
        PyErr_SetString(PyExc_MemoryError, "PairCounts: more than 2**31 distinct pairs");
        return -1;
    }
    if (2 * (self->npairs + 1) > self->nslots) { /* keep the table at most half full */
        if (self->nslots > SIZE_MAX / 4 || rehash(self, self->nslots ? 2 * self->nslots : 1024) < 0)
            return -1;
    }
    if (RESERVE(self->pairs, self->cappairs, self->npairs + 1) < 0)
        return -1;
    i = (int32_t)self->npairs++;
    self->pairs[i] = (Pair){.key = key};
    size_t s = slot_of(key, self->nslots);
    while (self->slots[s] >= 0)
        s = (s + 1) & (self->nslots - 1);
    self->slots[s] = i;
    return i;
}

static int add_position(Pair *pair, int32_t p)
{
    if (RESERVE(pair->pos, pair->cap, pair->len + 1) < 0)
        return -1;
    pair->pos[pair->len++] = p;
    return 0;
}

/* Heap order: a higher count first, then a smaller pair. */
static int above(const Entry *x, const Entry *y)
{
    return x->count > y->count || (x->count == y->count && x->key < y->key);
}

static void sift_down(Entry *heap, size_t n, size_t i)
{
    Entry e = heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && above(&heap[c + 1], &heap[c]))
            c++;
        if (!above(&heap[c], &e))
            break;
        heap[i] = heap[c];
        i = c;
    }
    heap[i] = e;
}

static int push(PairCounts *self, int32_t pair)
{
    if (RESERVE(self->heap, self->capheap, self->nheap + 1) < 0)
        return -1;
    Entry e = {self->pairs[pair].count, self->pairs[pair].key, pair};
    size_t i = self->nheap++;
    while (i > 0 && above(&e, &self->heap[(i - 1) / 2])) {
        self->heap[i] = self->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    self->heap[i] = e;
    return 0;
}

static void pop(PairCounts *self)
{
    self->heap[0] = self->heap[--self->nheap];
    if (self->nheap)
        sift_down(self->heap, self->nheap, 0);
}

#include "_train_pieces.h"

/* -- building ---------------------------------------------------------------------------------- */

/* Make room for `need` positions in the four per-position arrays (they share one capacity). */
static int reserve_positions(PairCounts *self, size_t need)
{
    if (need <= self->cappos)
        return 0;
    size_t cap = self->cappos;
    if (RESERVE(self->sym, cap, need) < 0)
        return -1;
    int32_t **arrays[] = {&self->nxt, &self->prv, &self->word};
    for (int k = 0; k < 3; k++) {
        void *p = realloc(*arrays[k], cap * sizeof(int32_t));
        if (p == NULL)
            return PyErr_NoMemory(), -1;
        *arrays[k] = p;
    }
    self->cappos = cap; /* only once all four have it */
    return 0;
}

/* Append word w's n symbols: the bytes `bytes` (ids 0-255) or, when it is NULL, the ints of `seq`. */
static int add_symbols(PairCounts *self, const unsigned char *bytes, PyObject *seq, size_t n, int32_t w)
{
    if (n > (size_t)INT32_MAX - 1 - self->npos) {
        PyErr_SetString(PyExc_MemoryError, "PairCounts: the words have more than 2**31 symbols in all");
        return -1;
    }
    if (reserve_positions(self, self->npos + n) < 0)
        return -1;
    int32_t base = (int32_t)self->npos;
    for (size_t i = 0; i < n; i++) {
        long id;
        if (bytes != NULL) {
            id = bytes[i];
        } else {
            id = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i));
            if (id == -1 && PyErr_Occurred())
                return -1;
            if (id < 0 || id >= STRIDE) {
                PyErr_Format(PyExc_ValueError, "PairCounts: symbol id %ld is outside 0..2**24-1", id);
                return -1;
            }
        }
        int32_t at = base + (int32_t)i;
        self->sym[at] = (int32_t)id;
        self->nxt[at] = i + 1 < n ? at + 1 : END;
        self->prv[at] = i > 0 ? at - 1 : END;
        self->word[at] = w;
    }
    self->start[w] = n ? base : END;
    self->npos += n;
    return 0;
}

/* Append one word (a bytes object, or a sequence of ints below STRIDE). */
static int add_word(PairCounts *self, PyObject *word, int32_t w)
{
    if (PyBytes_Check(word))
        return add_symbols(self, (const unsigned char *)PyBytes_AS_STRING(word), NULL, (size_t)PyBytes_GET_SIZE(word), w);
    PyObject *seq = PySequence_Fast(word, "PairCounts: each word is bytes or a sequence of symbol ids");
    if (seq == NULL)
        return -1;
    int rc = add_symbols(self, NULL, seq, (size_t)PySequence_Fast_GET_SIZE(seq), w);
    Py_DECREF(seq);
    return rc;
}

/* Read the words' frequencies: an int64 buffer (what PieceCounts.freqs() gives) or a sequence of ints. */
static int read_freqs(PairCounts *self, PyObject *freqs)
{
    Py_buffer view;
    PyObject *fseq = NULL;
    size_t n;
    int buffered = PyObject_CheckBuffer(freqs) && PyObject_GetBuffer(freqs, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) == 0;
    if (buffered && (view.itemsize != 8 || view.format == NULL || strchr("qlQL", view.format[strlen(view.format) - 1]) == NULL ||
                     strlen(view.format) > 2)) {
        PyBuffer_Release(&view);
        buffered = 0;
    }
    PyErr_Clear();
    if (buffered) {
        n = (size_t)view.len / 8;
    } else {
        if ((fseq = PySequence_Fast(freqs, "PairCounts: freqs is a sequence of ints")) == NULL)
            return -1;
        n = (size_t)PySequence_Fast_GET_SIZE(fseq);
    }
    int rc = -1;
    if (n >= INT32_MAX) {
        PyErr_SetString(PyExc_MemoryError, "PairCounts: more than 2**31 words");
        goto done;
    }
    self->freq = malloc((n ? n : 1) * sizeof(int64_t));
    self->start = malloc((n ? n : 1) * sizeof(int32_t));
    if (self->freq == NULL || self->start == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t w = 0; w < n; w++) {
        long long f;
        if (buffered) {
            memcpy(&f, (const char *)view.buf + 8 * w, 8);
        } else if ((f = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fseq, (Py_ssize_t)w))) == -1 && PyErr_Occurred()) {
            goto done;
        }
        if (f < 0) {
            PyErr_Format(PyExc_ValueError, "PairCounts: frequency %lld is negative", f);
            goto done;
        }
        self->freq[w] = f;
    }
    self->nwords = n;
    rc = 0;
done:
    if (buffered)
        PyBuffer_Release(&view);
    Py_XDECREF(fseq);
    return rc;
}

/* Add the words: a PieceCounts is read in place (its live pieces, as iterating it gives them). */
static int read_words(PairCounts *self, PyObject *words)
{
    size_t w = 0;
    if (PyObject_TypeCheck(words, &PieceCountsType)) {
        const PieceCounts *c = (const PieceCounts *)words;
        size_t total = 0;
        for (size_t i = 0; i < c->npieces; i++)
            if (c->pieces[i].count > 0)
                total += c->pieces[i].len;
        if (total < (size_t)INT32_MAX && reserve_positions(self, total) < 0) /* exactly: no slack */
            return -1;
        for (size_t i = 0; i < c->npieces; i++) {
            const Piece *p = &c->pieces[i];
            if (p->count == 0)
                continue;
            if (w == self->nwords) {
                PyErr_SetString(PyExc_ValueError, "PairCounts: more words than freqs");
                return -1;
            }
            if (add_symbols(self, c->text + p->at, NULL, p->len, (int32_t)w++) < 0)
                return -1;
        }
    } else {
        PyObject *it = PyObject_GetIter(words), *word;
        if (it == NULL)
            return -1;
        while ((word = PyIter_Next(it)) != NULL) {
            int rc = w == self->nwords ? -2 : add_word(self, word, (int32_t)w++);
            Py_DECREF(word);
            if (rc < 0) {
                if (rc == -2)
                    PyErr_SetString(PyExc_ValueError, "PairCounts: more words than freqs");
                Py_DECREF(it);
                return -1;
            }
        }
        Py_DECREF(it);
        if (PyErr_Occurred())
            return -1;
    }
    if (w != self->nwords) {
        PyErr_SetString(PyExc_ValueError, "PairCounts: fewer words than freqs");
        return -1;
    }
    return 0;
}

static int PairCounts_init(PairCounts *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"words", "freqs", NULL};
    PyObject *words, *freqs;
    if (self->started) {
        PyErr_SetString(PyExc_TypeError, "PairCounts: already initialised");
        return -1;
    }
    self->started = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", kwlist, &words, &freqs))
        return -1;
    if (read_freqs(self, freqs) < 0 || read_words(self, words) < 0)
        return -1;
    /* Every count is a sum of these weights: if they fit in int64, no count overflows. */
    int64_t total = 0;
    for (size_t p = 0; p < self->npos; p++)
        if (self->nxt[p] != END && __builtin_add_overflow(total, self->freq[self->word[p]], &total)) {
            PyErr_SetString(PyExc_OverflowError, "PairCounts: the pair counts would pass 2**63");
            return -1;
        }
    /* Two passes, so that each pair's position list is allocated at its exact size: count, then fill. */
    for (size_t p = 0; p < self->npos; p++) {
        int32_t q = self->nxt[p];
        if (q == END)
            continue;
        int32_t i = find_or_add(self, self->sym[p] * STRIDE + self->sym[q]);
        if (i < 0)
            return -1;
        self->pairs[i].cap++;
    }
    for (size_t i = 0; i < self->npairs; i++)
        if ((self->pairs[i].pos = malloc(self->pairs[i].cap * sizeof(int32_t))) == NULL) {
            self->pairs[i].cap = 0;
            PyErr_NoMemory();
            return -1;
        }
    for (size_t p = 0; p < self->npos; p++) {
        int32_t q = self->nxt[p];
        if (q == END)
            continue;
        Pair *pair = &self->pairs[lookup(self, self->sym[p] * STRIDE + self->sym[q])];
        pair->pos[pair->len++] = (int32_t)p;
        pair->count += self->freq[self->word[p]];
    }
    if (RESERVE(self->heap, self->capheap, self->npairs) < 0)
        return -1;
    for (size_t i = 0; i < self->npairs; i++)
        self->heap[i] = (Entry){self->pairs[i].count, self->pairs[i].key, (int32_t)i};
    self->nheap = self->npairs;
    for (size_t i = self->nheap / 2; i-- > 0;)
        sift_down(self->heap, self->nheap, i);
    return 0;
}

static void PairCounts_dealloc(PairCounts *self)
{
    for (size_t i = 0; i < self->npairs; i++)
        free(self->pairs[i].pos);
    BPETOK_FREE_ALL(free, self->pairs, self->slots, self->heap, self->grown, self->sym, self->nxt, self->prv, self->word,
                    self->freq, self->start);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* -- the loop ---------------------------------------------------------------------------------- */

PyDoc_STRVAR(PairCounts_best_doc,
             "best(min_frequency) -> int | None: the most frequent pair (ties: smallest left id, then right id).");

static PyObject *PairCounts_best(PairCounts *self, PyObject *arg)
{
    long long min_frequency = PyLong_AsLongLong(arg);
    if (min_frequency == -1 && PyErr_Occurred())
        return NULL;
    while (self->nheap) {
        Entry top = self->heap[0];
        int64_t current = self->pairs[top.pair].count;
        if (current == top.count) {
            if (current >= min_frequency)
                return PyLong_FromLongLong(top.key);
            Py_RETURN_NONE;
        }
        pop(self);
        /* current > top.count means a newer, larger entry exists; only a shrunk count is re-pushed. */
        if (current < top.count && current >= min_frequency && push(self, top.pair) < 0)
            return NULL; /* cannot fail: pop made room */
    }
    Py_RETURN_NONE;
}

static int cmp_int32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* Add `f` to the pair (left, right) and record it at position p; remember it as grown. */
static int grow(PairCounts *self, int64_t key, int64_t f, int32_t p)
{
    int32_t i = find_or_add(self, key);
    if (i < 0 || add_position(&self->pairs[i], p) < 0)
        return -1;
    Pair *pair = &self->pairs[i];
    pair->count += f;
    if (pair->stamp != self->stamp) {
        pair->stamp = self->stamp;
        if (RESERVE(self->grown, self->capgrown, self->ngrown + 1) < 0)
            return -1;
        self->grown[self->ngrown++] = i;
    }
    return 0;
}

static int shrink(PairCounts *self, int64_t key, int64_t f)
{
    int32_t i = find_or_add(self, key); /* always present: the pair is adjacent */
    if (i < 0)
        return -1;
    self->pairs[i].count -= f;
    return 0;
}

PyDoc_STRVAR(PairCounts_merge_doc, "merge(pair, new): replace every occurrence of pair by new, left to right.");

static PyObject *PairCounts_merge(PairCounts *self, PyObject *args)
{
    long long pair_key, new_id;
    if (!PyArg_ParseTuple(args, "LL", &pair_key, &new_id))
        return NULL;
    if (pair_key < 0 || pair_key >= STRIDE * STRIDE || new_id < 0 || new_id >= STRIDE) {
        PyErr_SetString(PyExc_ValueError, "PairCounts.merge: the pair or the new id is outside 0..2**24-1");
        return NULL;
    }
    int32_t r = lookup(self, pair_key);
    if (r < 0)
        Py_RETURN_NONE;
    const int32_t a = (int32_t)(pair_key / STRIDE), b = (int32_t)(pair_key % STRIDE), new = (int32_t)new_id;
    /* Take the positions out first: recording others may move the pairs array. */
    int32_t *pos = self->pairs[r].pos;
    size_t n = self->pairs[r].len;
    self->pairs[r].pos = NULL;
    self->pairs[r].len = self->pairs[r].cap = 0;
    self->stamp++;
    self->ngrown = 0;
    if (n > 1)
        qsort(pos, n, sizeof *pos, cmp_int32);
    int32_t *sym = self->sym, *nxt = self->nxt, *prv = self->prv;
    for (size_t k = 0; k < n; k++) {
        int32_t p = pos[k];
        int32_t q = nxt[p];
        if (sym[p] != a || q == END || sym[q] != b)
            continue; /* stale: this occurrence was merged away since it was recorded */
        int64_t f = self->freq[self->word[p]];
        int32_t left = prv[p], right = nxt[q];
        if (left != END) {
            int64_t x = sym[left];
            if (shrink(self, x * STRIDE + a, f) < 0 || grow(self, x * STRIDE + new, f, left) < 0)
                goto fail;
        }
        if (right != END) {
            int64_t y = sym[right];
            if (shrink(self, b * STRIDE + y, f) < 0 || grow(self, new * STRIDE + y, f, p) < 0)
                goto fail;
            prv[right] = p;
        }
        sym[p] = new;
        sym[q] = -1;
        nxt[p] = right;
    }
    free(pos);
    self->pairs[r].count = 0;
    for (size_t k = 0; k < self->ngrown; k++)
        if (self->grown[k] != r && push(self, self->grown[k]) < 0)
            return NULL;
    Py_RETURN_NONE;
fail:
    free(pos);
    return NULL;
}

/* -- the counts, as a read-only mapping pair -> count (what _add_chain reads) ------------------- */

PyDoc_STRVAR(PairCounts_get_doc, "get(pair, default=None): the pair's current count.");

static PyObject *PairCounts_get(PairCounts *self, PyObject *args)
{
    long long key;
    PyObject *fallback = Py_None;
    if (!PyArg_ParseTuple(args, "L|O", &key, &fallback))
        return NULL;
    int32_t i = lookup(self, key);
    if (i < 0)
        return Py_NewRef(fallback);
    return PyLong_FromLongLong(self->pairs[i].count);
}

static PyObject *PairCounts_subscript(PairCounts *self, PyObject *arg)
{
    long long key = PyLong_AsLongLong(arg);
    if (key == -1 && PyErr_Occurred())
        return NULL;
    int32_t i = lookup(self, key);
    if (i < 0) {
        PyErr_SetObject(PyExc_KeyError, arg);
        return NULL;
    }
    return PyLong_FromLongLong(self->pairs[i].count);
}

static Py_ssize_t PairCounts_length(PairCounts *self)
{
    return (Py_ssize_t)self->npairs;
}

PyDoc_STRVAR(PairCounts_items_doc, "items() -> list of (pair, count) ever recorded.");

static PyObject *PairCounts_items(PairCounts *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New((Py_ssize_t)self->npairs);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < self->npairs; i++) {
        PyObject *item = Py_BuildValue("(LL)", (long long)self->pairs[i].key, (long long)self->pairs[i].count);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, item);
    }
    return out;
}

static PyObject *PairCounts_counts(PairCounts *self, void *Py_UNUSED(closure))
{
    return Py_NewRef((PyObject *)self);
}

static PyObject *PairCounts_words(PairCounts *self, void *Py_UNUSED(closure))
{
    PyObject *out = PyList_New((Py_ssize_t)self->nwords);
    if (out == NULL)
        return NULL;
    for (size_t w = 0; w < self->nwords; w++) {
        PyObject *word = PyList_New(0);
        if (word == NULL)
            goto fail;
        PyList_SET_ITEM(out, (Py_ssize_t)w, word);
        for (int32_t p = self->start[w]; p != END; p = self->nxt[p]) {
            PyObject *s = PyLong_FromLong(self->sym[p]);
            if (s == NULL || PyList_Append(word, s) < 0) {
                Py_XDECREF(s);
                goto fail;
            }
            Py_DECREF(s);
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef PairCounts_methods[] = {
    {"best", (PyCFunction)PairCounts_best, METH_O, PairCounts_best_doc},
    {"merge", (PyCFunction)PairCounts_merge, METH_VARARGS, PairCounts_merge_doc},
    {"get", (PyCFunction)PairCounts_get, METH_VARARGS, PairCounts_get_doc},
    {"items", (PyCFunction)PairCounts_items, METH_NOARGS, PairCounts_items_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef PairCounts_getset[] = {
    {"counts", (getter)PairCounts_counts, NULL, "the counts as a read-only mapping pair -> count (this object)", NULL},
    {"words", (getter)PairCounts_words, NULL, "the words' current symbols (for tests)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMappingMethods PairCounts_mapping = {
    .mp_length = (lenfunc)PairCounts_length,
    .mp_subscript = (binaryfunc)PairCounts_subscript,
};

static PyTypeObject PairCountsType = {
    BPETOK_TYPE(PairCounts, "bpetok._train.PairCounts", "PairCounts(words, freqs): the C twin of bpetok._train_merge._PairCounts."),
    .tp_as_mapping = &PairCounts_mapping,
    .tp_getset = PairCounts_getset,
};

static int train_exec(PyObject *m)
{
    PyTypeObject *types[] = {&PairCountsType, &PieceCountsType, NULL};
    /* PieceIter is made only by PieceCounts' __iter__: readied, not exported */
    return PyType_Ready(&PieceIterType) < 0 ? -1 : add_types(m, types);
}

BPETOK_MODULE_EXEC(_train, "bpetok's compiled merge loop for the trainer (see bpetok/_train_merge.py).", NULL, train_exec)
