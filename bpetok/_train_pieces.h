/* PieceCounts (bpetok._train.PieceCounts): the trainer's unique pieces and their counts, in C.
 *
 * Included by bpetok/_train.c (after its reserve()/RESERVE helpers); PairCounts reads a
 * PieceCounts in place. The readable twin is a collections.Counter of str (bpetok/train.py).
 */

#ifndef BPETOK_TRAIN_PIECES_H
#define BPETOK_TRAIN_PIECES_H

/* Each unique piece's UTF-8 bytes lie back to back in one buffer; an entry per piece holds where,
 * its hash and its count (0 once popped), and an open-addressing table of entry indices finds it.
 * About 30 bytes per unique piece besides its text, where a Counter of str spends over 100, and it
 * pickles as one flat bytes object, so workers' counts travel and merge cheaply. Iterating gives
 * the live pieces as bytes, in the order they were first counted. */

typedef struct {
    int64_t count; /* 0: popped */
    uint64_t at;   /* offset of its bytes in text */
    uint32_t len, hash;
} Piece;

typedef struct {
    PyObject_HEAD
    Piece *pieces;
    size_t npieces, cappieces;
    unsigned char *text;
    size_t ntext, captext;
    uint32_t *slots; /* index + 1 into pieces, 0 = empty */
    size_t nslots;   /* a power of two, or 0 */
    size_t nlive;    /* pieces with a count above 0 */
} PieceCounts;

static PyTypeObject PieceCountsType;

static uint32_t hash_bytes(const unsigned char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    w = 0;
    if (n)
        memcpy(&w, s, n);
    h = (h ^ w) * 0x94D049BB133111EBull;
    return (uint32_t)(h ^ (h >> 32));
}

/* The entry index of the piece s[0..n), or -1; *slot is where it is or would go. */
static Py_ssize_t find_piece(const PieceCounts *self, const unsigned char *s, size_t n, uint32_t h, size_t *slot)
{
    if (self->nslots == 0)
        return -1;
    for (size_t k = h & (self->nslots - 1);; k = (k + 1) & (self->nslots - 1)) {
        uint32_t i = self->slots[k];
        *slot = k;
        if (i == 0)
            return -1;
        const Piece *p = &self->pieces[i - 1];
        if (p->hash == h && p->len == n && (n == 0 || memcmp(self->text + p->at, s, n) == 0))
            return (Py_ssize_t)i - 1;
    }
}

static int grow_slots(PieceCounts *self)
{
    size_t nslots = self->nslots ? 2 * self->nslots : 1024;
    if (nslots > SIZE_MAX / sizeof(uint32_t))
        return PyErr_NoMemory(), -1;
    uint32_t *slots = calloc(nslots, sizeof(uint32_t));
    if (slots == NULL)
        return PyErr_NoMemory(), -1;
    for (size_t i = 0; i < self->npieces; i++) {
        size_t k = self->pieces[i].hash & (nslots - 1);
        while (slots[k])
            k = (k + 1) & (nslots - 1);
        slots[k] = (uint32_t)(i + 1);
    }
    free(self->slots);
    self->slots = slots;
    self->nslots = nslots;
    return 0;
}

/* Count the piece s[0..n) f more times (f >= 1); 0, or -1 with an exception. */
static int count_piece(PieceCounts *self, const unsigned char *s, size_t n, int64_t f)
{
    uint32_t h = hash_bytes(s, n);
    size_t slot = 0;
    Py_ssize_t i = find_piece(self, s, n, h, &slot);
    if (i >= 0) {
        Piece *p = &self->pieces[i];
        if (p->count == 0)
            self->nlive++;
        if (__builtin_add_overflow(p->count, f, &p->count)) {
            PyErr_SetString(PyExc_OverflowError, "PieceCounts: a count would pass 2**63");
            return -1;
        }
        return 0;
    }
    if (n > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "PieceCounts: a piece of 4 GiB or more");
        return -1;
    }
    if (self->npieces >= UINT32_MAX - 1) {
        PyErr_SetString(PyExc_MemoryError, "PieceCounts: more than 2**32 unique pieces");
        return -1;
    }
    if (2 * (self->npieces + 1) > self->nslots) { /* keep the table at most half full */
        if (grow_slots(self) < 0)
            return -1;
        find_piece(self, s, n, h, &slot);
    }
    if (self->ntext > SIZE_MAX - n || RESERVE(self->text, self->captext, self->ntext + n) < 0 ||
        RESERVE(self->pieces, self->cappieces, self->npieces + 1) < 0)
        return PyErr_Occurred() ? -1 : (PyErr_NoMemory(), -1);
    if (n)
        memcpy(self->text + self->ntext, s, n);
    self->pieces[self->npieces] = (Piece){.count = f, .at = self->ntext, .len = (uint32_t)n, .hash = h};
    self->ntext += n;
    self->slots[slot] = (uint32_t)(++self->npieces);
    self->nlive++;
    return 0;
}

/* The UTF-8 bytes of str `s` (lone surrogates kept, as "surrogatepass" does); *tmp owns them if set. */
static const unsigned char *utf8_of(PyObject *s, Py_ssize_t *n, PyObject **tmp)
{
    *tmp = NULL;
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "PieceCounts: a piece is a str, not %.100s", Py_TYPE(s)->tp_name);
        return NULL;
    }
    const char *data = PyUnicode_AsUTF8AndSize(s, n);
    if (data != NULL)
        return (const unsigned char *)data;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
        return NULL;
    PyErr_Clear();
    if ((*tmp = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass")) == NULL)
        return NULL;
    *n = PyBytes_GET_SIZE(*tmp);
    return (const unsigned char *)PyBytes_AS_STRING(*tmp);
}

static int count_str(PieceCounts *self, PyObject *s, int64_t f)
{
    Py_ssize_t n;
    PyObject *tmp;
    const unsigned char *data = utf8_of(s, &n, &tmp);
    int rc = data == NULL ? -1 : count_piece(self, data, (size_t)n, f);
    Py_XDECREF(tmp);
    return rc;
}

PyDoc_STRVAR(PieceCounts_update_doc,
             "update(pieces): count a list of str pieces once each, or add a PieceCounts' or a Counter's counts.");

static PyObject *PieceCounts_update(PieceCounts *self, PyObject *arg)
{
    if (PyObject_TypeCheck(arg, &PieceCountsType)) {
        PieceCounts *other = (PieceCounts *)arg;
        size_t n = other->npieces; /* other may be self: its new pieces need not be added again */
        for (size_t i = 0; i < n; i++) {
            Piece p = other->pieces[i];
            if (p.count > 0 && count_piece(self, other->text + p.at, p.len, p.count) < 0)
                return NULL;
        }
        Py_RETURN_NONE;
    }
    if (PyDict_Check(arg)) { /* a Counter */
        Py_ssize_t at = 0;
        PyObject *key, *value;
        while (PyDict_Next(arg, &at, &key, &value)) {
            long long f = PyLong_AsLongLong(value);
            if (f == -1 && PyErr_Occurred())
                return NULL;
            if (f < 0) {
                PyErr_Format(PyExc_ValueError, "PieceCounts: count %lld is negative", f);
                return NULL;
            }
            if (f > 0 && count_str(self, key, f) < 0)
                return NULL;
        }
        Py_RETURN_NONE;
    }
    PyObject *seq = PySequence_Fast(arg, "PieceCounts.update takes a list of str pieces, a PieceCounts or a Counter");
    if (seq == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++)
        if (count_str(self, PySequence_Fast_GET_ITEM(seq, i), 1) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

/* The entry of str `key` if counted (count above 0), else NULL; -1 in *error on an exception. */
static Piece *live_piece(PieceCounts *self, PyObject *key, int *error)
{
    Py_ssize_t n;
    PyObject *tmp;
    size_t slot;
    *error = 0;
    const unsigned char *data = utf8_of(key, &n, &tmp);
    if (data == NULL) {
        *error = -1;
        return NULL;
    }
    Py_ssize_t i = find_piece(self, data, (size_t)n, hash_bytes(data, (size_t)n), &slot);
    Py_XDECREF(tmp);
    return i >= 0 && self->pieces[i].count > 0 ? &self->pieces[i] : NULL;
}

PyDoc_STRVAR(PieceCounts_pop_doc, "pop(piece[, default]): remove a piece, return its count.");

static PyObject *PieceCounts_pop(PieceCounts *self, PyObject *args)
{
    PyObject *key, *fallback = NULL;
    int error;
    if (!PyArg_ParseTuple(args, "O|O", &key, &fallback))
        return NULL;
    Piece *p = live_piece(self, key, &error);
    if (error)
        return NULL;
    if (p == NULL) {
        if (fallback == NULL)
            PyErr_SetObject(PyExc_KeyError, key);
        return fallback == NULL ? NULL : Py_NewRef(fallback);
    }
    int64_t count = p->count;
    p->count = 0;
    self->nlive--;
    return PyLong_FromLongLong(count);
}

static PyObject *PieceCounts_subscript(PieceCounts *self, PyObject *key)
{
    int error;
    Piece *p = live_piece(self, key, &error);
    return error ? NULL : PyLong_FromLongLong(p == NULL ? 0 : p->count); /* 0 when absent, as a Counter */
}

static Py_ssize_t PieceCounts_length(PieceCounts *self)
{
    return (Py_ssize_t)self->nlive;
}

PyDoc_STRVAR(PieceCounts_total_doc, "total(): the sum of the counts.");

static PyObject *PieceCounts_total(PieceCounts *self, PyObject *Py_UNUSED(ignored))
{
    int64_t total = 0;
    for (size_t i = 0; i < self->npieces; i++)
        if (__builtin_add_overflow(total, self->pieces[i].count, &total)) {
            PyErr_SetString(PyExc_OverflowError, "PieceCounts: the total passes 2**63");
            return NULL;
        }
    return PyLong_FromLongLong(total);
}

PyDoc_STRVAR(PieceCounts_items_doc, "items() -> list of (piece, count), in counting order.");

static PyObject *PieceCounts_items(PieceCounts *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0);
    for (size_t i = 0; out != NULL && i < self->npieces; i++) {
        const Piece *p = &self->pieces[i];
        if (p->count == 0)
            continue;
        PyObject *item = Py_BuildValue("(NL)",
            PyUnicode_DecodeUTF8((const char *)self->text + p->at, p->len, "surrogatepass"), (long long)p->count);
        if (item == NULL || PyList_Append(out, item) < 0)
            Py_CLEAR(out);
        Py_XDECREF(item);
    }
    return out;
}

PyDoc_STRVAR(PieceCounts_freqs_doc, "freqs() -> bytes: the counts as int64, in iteration order.");

static PyObject *PieceCounts_freqs(PieceCounts *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(self->nlive * sizeof(int64_t)));
    if (out == NULL)
        return NULL;
    int64_t *f = (int64_t *)PyBytes_AS_STRING(out);
    for (size_t i = 0; i < self->npieces; i++)
        if (self->pieces[i].count > 0)
            *f++ = self->pieces[i].count;
    return out;
}

/* Pickling: the state is one bytes object, [n][text bytes] as uint64, n uint32 lengths, n int64 counts, the text. */
static PyObject *PieceCounts_reduce(PieceCounts *self, PyObject *Py_UNUSED(ignored))
{
    size_t n = self->nlive, text = 0;
    for (size_t i = 0; i < self->npieces; i++)
        if (self->pieces[i].count > 0)
            text += self->pieces[i].len;
    PyObject *state = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(16 + 12 * n + text));
    if (state == NULL)
        return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(state);
    uint64_t head[2] = {n, text};
    memcpy(out, head, 16);
    unsigned char *lens = out + 16, *counts = lens + 4 * n, *bytes = counts + 8 * n;
    for (size_t i = 0; i < self->npieces; i++) {
        const Piece *p = &self->pieces[i];
        if (p->count == 0)
            continue;
        memcpy(lens, &p->len, 4), memcpy(counts, &p->count, 8);
        if (p->len)
            memcpy(bytes, self->text + p->at, p->len);
        lens += 4, counts += 8, bytes += p->len;
    }
    return Py_BuildValue("(O()N)", (PyObject *)Py_TYPE(self), state);
}

static PyObject *PieceCounts_setstate(PieceCounts *self, PyObject *state)
{
    if (!PyBytes_Check(state) || self->npieces) {
        PyErr_SetString(PyExc_ValueError, "PieceCounts.__setstate__: bytes from __reduce__, into an empty PieceCounts");
        return NULL;
    }
    size_t size = (size_t)PyBytes_GET_SIZE(state);
    const unsigned char *in = (const unsigned char *)PyBytes_AS_STRING(state);
    uint64_t head[2];
    if (size < 16 || (memcpy(head, in, 16), head[0] > (size - 16) / 12 || head[1] != size - 16 - 12 * head[0]))
        goto bad;
    const unsigned char *lens = in + 16, *counts = lens + 4 * head[0], *bytes = counts + 8 * head[0];
    for (uint64_t i = 0, at = 0; i < head[0]; i++) {
        uint32_t len;
        int64_t count;
        memcpy(&len, lens + 4 * i, 4), memcpy(&count, counts + 8 * i, 8);
        if (len > head[1] - at || count <= 0)
            goto bad;
        if (count_piece(self, bytes + at, len, count) < 0)
            return NULL;
        at += len;
    }
    Py_RETURN_NONE;
bad:
    PyErr_SetString(PyExc_ValueError, "PieceCounts.__setstate__: the state is not one __reduce__ made");
    return NULL;
}

static void PieceCounts_dealloc(PieceCounts *self)
{
    BPETOK_FREE_ALL(free, self->pieces, self->text, self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Iterating: the live pieces as bytes, in the order they were first counted. */
typedef struct {
    PyObject_HEAD
    PieceCounts *counts;
    size_t next;
} PieceIter;

static PyTypeObject PieceIterType;

static PyObject *PieceCounts_iter(PieceCounts *self)
{
    PieceIter *it = PyObject_New(PieceIter, &PieceIterType);
    if (it == NULL)
        return NULL;
    it->counts = (PieceCounts *)Py_NewRef((PyObject *)self);
    it->next = 0;
    return (PyObject *)it;
}

static PyObject *PieceIter_next(PieceIter *it)
{
    const PieceCounts *c = it->counts;
    while (it->next < c->npieces) {
        const Piece *p = &c->pieces[it->next++];
        if (p->count > 0)
            return PyBytes_FromStringAndSize((const char *)c->text + p->at, p->len);
    }
    return NULL;
}

static void PieceIter_dealloc(PieceIter *it)
{
    Py_DECREF(it->counts);
    PyObject_Free(it);
}

static PyTypeObject PieceIterType = {
    BPETOK_TYPE_CORE(PieceIter, "bpetok._train.PieceIter"),
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)PieceIter_next,
};

static PyMethodDef PieceCounts_methods[] = {
    {"update", (PyCFunction)PieceCounts_update, METH_O, PieceCounts_update_doc},
    {"pop", (PyCFunction)PieceCounts_pop, METH_VARARGS, PieceCounts_pop_doc},
    {"total", (PyCFunction)PieceCounts_total, METH_NOARGS, PieceCounts_total_doc},
    {"items", (PyCFunction)PieceCounts_items, METH_NOARGS, PieceCounts_items_doc},
    {"freqs", (PyCFunction)PieceCounts_freqs, METH_NOARGS, PieceCounts_freqs_doc},
    {"__reduce__", (PyCFunction)PieceCounts_reduce, METH_NOARGS, NULL},
    {"__setstate__", (PyCFunction)PieceCounts_setstate, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMappingMethods PieceCounts_mapping = {
    .mp_length = (lenfunc)PieceCounts_length,
    .mp_subscript = (binaryfunc)PieceCounts_subscript,
};

static PyTypeObject PieceCountsType = {
    BPETOK_TYPE_CORE(PieceCounts, "bpetok._train.PieceCounts"),
    .tp_as_mapping = &PieceCounts_mapping,
    .tp_doc = "PieceCounts(): how often each piece occurs, in compact arrays (the C twin of a Counter of str).",
    .tp_iter = (getiterfunc)PieceCounts_iter,
    .tp_methods = PieceCounts_methods,
    .tp_new = PyType_GenericNew,
};

#endif
