/* The compiled merge loop of bpetok's whole-fragment models, ``llama`` (SentencePiece-style) and
 * ``gemma4`` (bpetok/models/llama.py's ``merge_symbols`` is the readable twin).
 *
 * Both models split their input into UTF-8 characters (llama.cpp's ``unicode_len_utf8`` rule:
 * a symbol is as long as its first byte says, cut short at the end of the input) and merge
 * adjacent symbols, the pair of lowest priority first, the leftmost on ties, until no pair
 * merges; SPM's priority is the merged token's score order, gemma4's the merge rank. Here
 * symbols are ids: the Python model builds, once per vocabulary, the ids of the single
 * characters that can take part in a merge or are tokens, and the table (left id, right id) ->
 * (priority, merged id). Ids below ``n_tokens`` are tokens; the others ("virtual") are texts that
 * are not tokens, which fall back to their bytes' tokens when they end up as a final symbol.
 *
 * Memory safety: every id and priority in the tables is checked when they are built, every read
 * of the input is within its length and every write within a buffer sized for the worst case.
 * The GIL is released while merging: the tables are read-only once built and the input is a
 * bytes object (immutable) the call holds a reference to.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NO_SYMBOL UINT32_MAX /* a character that is no token and takes part in no merge */
#define EMPTY_KEY UINT64_MAX
/* Indices into the input are uint32; longer inputs go to the Python twin. */
#define LONGEST_INPUT ((Py_ssize_t)INT32_MAX)
/* Release the GIL for inputs of at least this many bytes. */
#define RELEASE_GIL_BYTES 256

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* -- open-addressing table: uint64 key -> two uint32 values -------------------------------------- */

typedef struct {
    uint64_t key; /* EMPTY_KEY for a free slot */
    uint32_t priority;
    uint32_t value;
} Slot;

typedef struct {
    Slot *slots;
    uint64_t mask;
} Table;

static int table_init(Table *t, size_t entries)
{
    size_t size = 16;
    while (size < entries * 2 + 1) { /* at most half full */
        if (size > (SIZE_MAX / sizeof(Slot)) / 2)
            return -1;
        size *= 2;
    }
    t->slots = (Slot *)malloc(size * sizeof(Slot));
    if (!t->slots)
        return -1;
    for (size_t i = 0; i < size; i++)
        t->slots[i].key = EMPTY_KEY;
    t->mask = size - 1;
    return 0;
}

static inline const Slot *table_find(const Table *t, uint64_t key)
{
    uint64_t i = mix64(key) & t->mask;
    for (;;) {
        const Slot *s = &t->slots[i];
        if (s->key == key)
            return s;
        if (s->key == EMPTY_KEY)
            return NULL;
        i = (i + 1) & t->mask;
    }
}

/* Insert ``key`` unless present (the first value stays, as the Python tables keep one per key). */
static void table_put(Table *t, uint64_t key, uint32_t priority, uint32_t value)
{
    uint64_t i = mix64(key) & t->mask;
    while (t->slots[i].key != EMPTY_KEY) {
        if (t->slots[i].key == key)
            return;
        i = (i + 1) & t->mask;
    }
    t->slots[i].key = key;
    t->slots[i].priority = priority;
    t->slots[i].value = value;
}

/* -- symbols ---------------------------------------------------------------------------------------- */

/* unicode_len_utf8: a sequence's length from its first byte's high nibble (continuation bytes: 1). */
static const uint8_t LENGTH_OF_NIBBLE[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};

/* A character of 1-4 bytes as a key: its length above its bytes (never EMPTY_KEY). */
static inline uint64_t unit_key(const unsigned char *p, uint32_t length)
{
    uint64_t key = (uint64_t)length << 32;
    for (uint32_t i = 0; i < length; i++)
        key |= (uint64_t)p[i] << (8 * i);
    return key;
}

typedef struct {
    uint32_t priority, left, right, size; /* compared in this order, as Python compares its tuples */
    uint32_t merged;                      /* the id the pair merges into */
} Pair;

static inline int pair_before(const Pair *a, const Pair *b)
{
    if (a->priority != b->priority)
        return a->priority < b->priority;
    if (a->left != b->left)
        return a->left < b->left;
    if (a->right != b->right)
        return a->right < b->right;
    return a->size < b->size;
}

typedef struct {
    Pair *items;
    size_t count, capacity;
} Heap;

static int heap_push(Heap *h, Pair p)
{
    if (h->count == h->capacity) {
        size_t capacity = h->capacity ? h->capacity * 2 : 64;
        if (capacity > SIZE_MAX / sizeof(Pair))
            return -1;
        Pair *items = (Pair *)realloc(h->items, capacity * sizeof(Pair));
        if (!items)
            return -1;
        h->items = items;
        h->capacity = capacity;
    }
    size_t i = h->count++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &h->items[parent]))
            break;
        h->items[i] = h->items[parent];
        i = parent;
    }
    h->items[i] = p;
    return 0;
}

static Pair heap_pop(Heap *h)
{
    Pair top = h->items[0];
    Pair last = h->items[--h->count];
    size_t n = h->count, i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && pair_before(&h->items[child + 1], &h->items[child]))
            child++;
        if (!pair_before(&h->items[child], &last))
            break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (n)
        h->items[i] = last;
    return top;
}

typedef struct {
    PyObject_HEAD
    Table units;  /* character -> symbol id */
    uint32_t ascii[128]; /* the same for one-byte characters, without hashing */
    Table merges; /* left << 32 | right -> (priority, merged id) */
    uint32_t n_symbols, n_tokens;
    int32_t byte_ids[256]; /* each byte's fallback token, -1 for none */
    int missing_byte_fails;
} Merger;

/* The merge state of one input: symbol i starts at start[i], is size[i] bytes long (0 once
 * merged into its left neighbour) and has the id id[i]; next/prev link the live symbols. */
typedef struct {
    uint32_t count;
    uint32_t *start, *size, *id, *next, *prev; /* five arrays in one allocation, at start */
    Heap heap;
} Work;

static void work_free(Work *w)
{
    free(w->start);
    free(w->heap.items);
}

static inline int queue_pair(const Merger *m, Work *w, uint32_t left, uint32_t right)
{
    if (w->id[left] == NO_SYMBOL || w->id[right] == NO_SYMBOL)
        return 0;
    const Slot *s = table_find(&m->merges, (uint64_t)w->id[left] << 32 | w->id[right]);
    if (!s)
        return 0;
    Pair p = {s->priority, left, right, w->size[left] + w->size[right], s->value};
    return heap_push(&w->heap, p);
}

/* Merge ``data``'s symbols; returns 0, or -1 when out of memory. Runs without the GIL. */
static int merge(const Merger *m, const unsigned char *data, uint32_t n, Work *w)
{
    memset(w, 0, sizeof(*w));
    if (n == 0)
        return 0;
    size_t cells = (size_t)n + 1; /* n < 2**31: no overflow below */
    w->start = (uint32_t *)malloc(5 * cells * sizeof(uint32_t));
    if (!w->start)
        return -1;
    w->size = w->start + cells;
    w->id = w->size + cells;
    w->next = w->id + cells;
    w->prev = w->next + cells;
    uint32_t count = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t length = LENGTH_OF_NIBBLE[data[i] >> 4];
        if (length > n - i)
            length = n - i; /* cut short at the end, as llama.cpp's substr does */
        w->start[count] = i;
        w->size[count] = length;
        if (data[i] < 0x80) {
            w->id[count] = m->ascii[data[i]];
        } else {
            const Slot *s = table_find(&m->units, unit_key(data + i, length));
            w->id[count] = s ? s->value : NO_SYMBOL;
        }
        count++;
        i += length;
    }
    w->count = count;
    for (uint32_t i = 0; i < count; i++) {
        w->next[i] = i + 1;
        w->prev[i] = i - 1; /* UINT32_MAX for the first: no symbol before it */
    }
    for (uint32_t i = 0; i + 1 < count; i++)
        if (queue_pair(m, w, i, i + 1) < 0)
            return -1;
    while (w->heap.count) {
        Pair p = heap_pop(&w->heap);
        uint32_t left = p.left, right = p.right;
        /* Stale: one side was merged away, or a side grew since this pair was queued. */
        if (!w->size[left] || !w->size[right] || w->size[left] + w->size[right] != p.size)
            continue;
        w->id[left] = p.merged;
        w->size[left] = p.size;
        w->size[right] = 0;
        uint32_t after = w->next[left] = w->next[right];
        if (after < count)
            w->prev[after] = left;
        uint32_t before = w->prev[left];
        if (before != UINT32_MAX && queue_pair(m, w, before, left) < 0)
            return -1;
        if (after < count && queue_pair(m, w, left, after) < 0)
            return -1;
    }
    return 0;
}

/* The final symbols' ids into ``out`` (room for n ids: a symbol gives at most one id a byte).
 * Returns how many, or -1 when a byte has no token and missing_byte_fails is set. */
static Py_ssize_t emit(const Merger *m, const unsigned char *data, const Work *w, int32_t *out)
{
    Py_ssize_t k = 0;
    for (uint32_t i = 0; i < w->count; i = w->next[i]) {
        uint32_t id = w->id[i];
        if (id < m->n_tokens) {
            out[k++] = (int32_t)id;
            continue;
        }
        for (uint32_t j = w->start[i]; j < w->start[i] + w->size[i]; j++) {
            int32_t fallback = m->byte_ids[data[j]];
            if (fallback >= 0)
                out[k++] = fallback;
            else if (m->missing_byte_fails)
                return -1;
        }
    }
    return k;
}

/* -- the Python type ------------------------------------------------------------------------------ */

static void Merger_dealloc(Merger *self)
{
    free(self->units.slots);
    free(self->merges.slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int read_u32(PyObject *seq, Py_ssize_t i, uint32_t below, const char *what, uint32_t *out)
{
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    unsigned long long v = PyLong_AsUnsignedLongLong(item);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (v >= below) {
        PyErr_Format(PyExc_ValueError, "%s %llu at index %zd is out of range (below %lu)", what, v, i, (unsigned long)below);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int Merger_init(Merger *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"units", "left", "right", "priority", "merged", "n_symbols", "n_tokens", "byte_ids",
                             "missing_byte_fails", NULL};
    PyObject *units, *left, *right, *priority, *merged, *byte_ids;
    unsigned long n_symbols, n_tokens;
    int missing_byte_fails;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOOOkkOp", kwlist, &PyDict_Type, &units, &left, &right, &priority,
                                     &merged, &n_symbols, &n_tokens, &byte_ids, &missing_byte_fails))
        return -1;
    if (self->units.slots || self->merges.slots) {
        PyErr_SetString(PyExc_TypeError, "Merger is already initialised");
        return -1;
    }
    if (n_symbols >= (unsigned long)INT32_MAX || n_tokens > n_symbols) {
        PyErr_SetString(PyExc_ValueError, "n_tokens <= n_symbols < 2**31 - 1 is required");
        return -1;
    }
    self->n_symbols = (uint32_t)n_symbols;
    self->n_tokens = (uint32_t)n_tokens;
    self->missing_byte_fails = missing_byte_fails;

    PyObject *bytes_seq = PySequence_Fast(byte_ids, "byte_ids must be a sequence");
    if (!bytes_seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(bytes_seq) != 256) {
        Py_DECREF(bytes_seq);
        PyErr_SetString(PyExc_ValueError, "byte_ids must have 256 entries");
        return -1;
    }
    for (Py_ssize_t b = 0; b < 256; b++) {
        uint32_t v;
        if (PySequence_Fast_GET_ITEM(bytes_seq, b) == Py_None) {
            self->byte_ids[b] = -1;
        } else if (read_u32(bytes_seq, b, self->n_tokens, "byte id", &v) < 0) {
            Py_DECREF(bytes_seq);
            return -1;
        } else {
            self->byte_ids[b] = (int32_t)v;
        }
    }
    Py_DECREF(bytes_seq);

    if (table_init(&self->units, (size_t)PyDict_Size(units)) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(units, &pos, &key, &value)) {
        if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) < 1 || PyBytes_GET_SIZE(key) > 4) {
            PyErr_SetString(PyExc_ValueError, "units must be keyed by bytes of 1 to 4 bytes");
            return -1;
        }
        unsigned long long v = PyLong_AsUnsignedLongLong(value);
        if (v == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        if (v >= self->n_symbols) {
            PyErr_Format(PyExc_ValueError, "unit id %llu is out of range (below %lu)", v, (unsigned long)self->n_symbols);
            return -1;
        }
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(key);
        table_put(&self->units, unit_key(p, (uint32_t)PyBytes_GET_SIZE(key)), 0, (uint32_t)v);
    }
    for (unsigned b = 0; b < 128; b++) {
        unsigned char c = (unsigned char)b;
        const Slot *s = table_find(&self->units, unit_key(&c, 1));
        self->ascii[b] = s ? s->value : NO_SYMBOL;
    }

    PyObject *seqs[4] = {NULL, NULL, NULL, NULL};
    PyObject *given[4] = {left, right, priority, merged};
    int status = -1;
    for (int k = 0; k < 4; k++)
        if (!(seqs[k] = PySequence_Fast(given[k], "left, right, priority and merged must be sequences")))
            goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seqs[0]);
    for (int k = 1; k < 4; k++)
        if (PySequence_Fast_GET_SIZE(seqs[k]) != n) {
            PyErr_SetString(PyExc_ValueError, "left, right, priority and merged must have the same length");
            goto done;
        }
    if (table_init(&self->merges, (size_t)n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t l, r, pr, mg;
        if (read_u32(seqs[0], i, self->n_symbols, "left id", &l) < 0 ||
            read_u32(seqs[1], i, self->n_symbols, "right id", &r) < 0 ||
            read_u32(seqs[2], i, UINT32_MAX, "priority", &pr) < 0 ||
            read_u32(seqs[3], i, self->n_symbols, "merged id", &mg) < 0)
            goto done;
        table_put(&self->merges, (uint64_t)l << 32 | r, pr, mg);
    }
    status = 0;
done:
    for (int k = 0; k < 4; k++)
        Py_XDECREF(seqs[k]);
    return status;
}

/* Take ``arg`` (bytes) into ``view``: 0 with the view held, 1 when the input is too long for
 * the C loop (view released: the caller returns None), -1 with an exception set. */
static int take_input(Merger *self, PyObject *arg, const char *method, Py_buffer *view)
{
    if (!PyBytes_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s() takes bytes, not %.100s", method, Py_TYPE(arg)->tp_name);
        return -1;
    }
    if (!self->units.slots || !self->merges.slots) {
        PyErr_SetString(PyExc_TypeError, "Merger is not initialised");
        return -1;
    }
    if (PyObject_GetBuffer(arg, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len > LONGEST_INPUT) {
        PyBuffer_Release(view);
        return 1;
    }
    return 0;
}

/* Merge ``view`` with the GIL released when it is long; -1 (MemoryError set) on failure. */
static int run_merge(Merger *self, Py_buffer *view, Work *w)
{
    int failed;
    const unsigned char *data = (const unsigned char *)view->buf;
    uint32_t n = (uint32_t)view->len;
    if (n >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS failed = merge(self, data, n, w);
        Py_END_ALLOW_THREADS
    } else {
        failed = merge(self, data, n, w);
    }
    if (failed) {
        work_free(w);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(encode_doc, "encode(data: bytes) -> list[int] | None\n\n"
                         "The ids of ``data`` after merging; None when a byte has no token and missing_byte_fails\n"
                         "is set, or the input is too long (2 GiB): the Python twin then says what happened.");

static PyObject *Merger_encode(Merger *self, PyObject *arg)
{
    Py_buffer view;
    int ready = take_input(self, arg, "encode", &view);
    if (ready < 0)
        return NULL;
    if (ready > 0)
        Py_RETURN_NONE;
    PyObject *result = NULL;
    Work w;
    if (run_merge(self, &view, &w) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int32_t *out = (int32_t *)malloc(((size_t)view.len + 1) * sizeof(int32_t));
    if (!out) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t k = emit(self, (const unsigned char *)view.buf, &w, out);
    if (k < 0) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    result = PyList_New(k);
    if (!result)
        goto done;
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *id = PyLong_FromLong(out[i]);
        if (!id) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, id);
    }
done:
    free(out);
    work_free(&w);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(spans_doc, "spans(data: bytes) -> list[tuple[int, int]] | None\n\n"
                        "The final symbols as (start, length) byte spans, as merge_symbols gives them\n"
                        "(None for an input of 2 GiB or more).");

static PyObject *Merger_spans(Merger *self, PyObject *arg)
{
    Py_buffer view;
    int ready = take_input(self, arg, "spans", &view);
    if (ready < 0)
        return NULL;
    if (ready > 0)
        Py_RETURN_NONE;
    Work w;
    if (run_merge(self, &view, &w) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *result = PyList_New(0);
    for (uint32_t i = 0; result && i < w.count; i = w.next[i]) {
        PyObject *span = Py_BuildValue("(kk)", (unsigned long)w.start[i], (unsigned long)w.size[i]);
        if (!span || PyList_Append(result, span) < 0)
            Py_CLEAR(result);
        Py_XDECREF(span);
    }
    work_free(&w);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef Merger_methods[] = {
    {"encode", (PyCFunction)Merger_encode, METH_O, encode_doc},
    {"spans", (PyCFunction)Merger_spans, METH_O, spans_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(Merger_doc, "Merger(units, left, right, priority, merged, n_symbols, n_tokens, byte_ids, missing_byte_fails)\n\n"
                         "One vocabulary's merge tables: ``units`` maps each character (1-4 bytes) that is a token\n"
                         "or takes part in a merge to its symbol id; pair i merges symbols left[i], right[i] into\n"
                         "merged[i] at priority[i] (lowest first). Ids below n_tokens are tokens; ``byte_ids``\n"
                         "gives each byte's fallback token or None (a byte without one is dropped, or makes\n"
                         "encode() return None when missing_byte_fails is true).");

static PyTypeObject MergerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bpetok.models._symbols.Merger",
    .tp_basicsize = sizeof(Merger),
    .tp_dealloc = (destructor)Merger_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Merger_doc,
    .tp_methods = Merger_methods,
    .tp_init = (initproc)Merger_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef symbols_module = {
    PyModuleDef_HEAD_INIT, "_symbols", "The compiled merge loop of the llama (SPM) and gemma4 models (see bpetok/models/llama.py).",
    -1, NULL,
};

PyMODINIT_FUNC PyInit__symbols(void)
{
    if (PyType_Ready(&MergerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&symbols_module);
    if (!m)
        return NULL;
    Py_INCREF(&MergerType);
    if (PyModule_AddObject(m, "Merger", (PyObject *)&MergerType) < 0) {
        Py_DECREF(&MergerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
