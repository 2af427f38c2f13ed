/* The Python face of the byte-level BPE kernel, bpetok.models.gpt2._kernel (kernel.h lists its
 * files; bpetok/models/gpt2/bpe.py is the reference, bpetok/models/gpt2/model.py the caller).
 *
 * The type Kernel (built by BytePairModel.make_kernel) and its methods: encode (pre-tokenized
 * pieces -> ids), encode_chunks (a text's space chunks -> ids, the chunks it lacks split by the
 * caller in Python), encode_text, encode_texts and encode_texts_flat (whole texts, split by the
 * compiled splitter, without the GIL), encode_piece and cache_info; and the module's own split and
 * build_merges. Result lists take the kernel's own int object per token id (id_objects). The
 * module uses multi-phase initialisation (PEP 489).
 *
 * The kernel never calls a pre-tokenizer: splitting is the model's job (in Python, and
 * encode_chunks takes the pieces it made), or the compiled splitter's. The GIL is released only
 * around work on C data.
 */

#include "kernel.h"
#include "../../../_module.h"

void set_error(int failure)
{
    if (failure == FAIL_PYTHON)
        return;
    if (failure == FAIL_NO_MEMORY)
        PyErr_NoMemory();
    else if (failure == FAIL_BOUND)
        PyErr_SetString(PyExc_RuntimeError, "bpetok kernel: a piece gave more ids than its bound (a bug)");
    else
        PyErr_SetString(PyExc_RuntimeError, "bpetok kernel: the splitter did not advance (a bug)");
}

/* -- the type --------------------------------------------------------------------------------- */

static void Kernel_dealloc(Kernel *self)
{
    kernel_tables_free(self);
    if (self->lock_ready)
        lock_destroy(&self->lock);
    for (uint32_t i = 0; self->id_objects != NULL && i < self->n_id_objects; i++)
        Py_XDECREF(self->id_objects[i]);
    PyMem_Free(self->id_objects);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Kernel_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Kernel *self = (Kernel *)PyType_GenericNew(type, args, kwds);
    if (self == NULL)
        return NULL;
    if (lock_init(&self->lock) != 0) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_RuntimeError, "bpetok kernel: could not create the cache lock");
        return NULL;
    }
    self->lock_ready = 1;
    return (PyObject *)self;
}

/* The id objects' table, made on the first result list when the budget reserved it (see
 * Kernel.id_objects). 0, or -1 with an exception set. */
static int id_objects_ready(Kernel *k)
{
    if (k->id_objects == NULL && k->id_reserved > 0) {
        k->id_objects = PyMem_Calloc(k->n_tokens, sizeof(PyObject *));
        if (k->id_objects == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        k->n_id_objects = k->n_tokens;
        k->id_bytes = k->n_tokens * sizeof(PyObject *);
    }
    return 0;
}

/* An id as a Python int: the kernel's own object once it has a table (made on the id's first
 * use), else a new int. */
static inline PyObject *id_object(Kernel *k, uint32_t id)
{
    if (id >= k->n_id_objects)
        return PyLong_FromUnsignedLong(id);
    PyObject *object = k->id_objects[id];
    if (object == NULL) {
        if ((object = k->id_objects[id] = PyLong_FromUnsignedLong(id)) == NULL)
            return NULL;
        k->id_bytes += ID_OBJECT_BYTES;
    }
    Py_INCREF(object);
    return object;
}

PyObject *list_of_ids(Kernel *k, const uint32_t *ids, size_t n)
{
    if (id_objects_ready(k) < 0)
        return NULL;
    PyObject *result = PyList_New((Py_ssize_t)n);
    for (size_t j = 0; result != NULL && j < n; j++) {
        PyObject *id = id_object(k, ids[j]);
        if (id == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)j, id);
    }
    return result;
}

/* The ids of ``n`` pieces, in order, as one list (NULL with an exception set on failure). */
static PyObject *list_of_piece_ids(Kernel *k, const Piece *p, Py_ssize_t n)
{
    if (id_objects_ready(k) < 0)
        return NULL;
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        total += p[i].n_ids;
    PyObject *result = PyList_New((Py_ssize_t)total);
    size_t at = 0;
    for (Py_ssize_t i = 0; result != NULL && i < n; i++) {
        for (size_t j = 0; j < p[i].n_ids; j++) {
            PyObject *id = id_object(k, p[i].ids[j]);
            if (id == NULL) {
                Py_CLEAR(result);
                break;
            }
            PyList_SET_ITEM(result, (Py_ssize_t)at++, id);
        }
    }
    return result;
}

static PyObject *as_list(PyObject *pieces)
{
    /* A list of our own: the caller's list may change while the GIL is released. */
    if (PyList_Check(pieces))
        return PyList_GetSlice(pieces, 0, PyList_GET_SIZE(pieces));
    return PySequence_List(pieces);
}

PyDoc_STRVAR(Kernel_encode_doc, "encode(pieces) -> list[int]: the ids of pre-tokenized pieces (str), in order.");

static PyObject *Kernel_encode(Kernel *self, PyObject *pieces)
{
    PyObject *list = as_list(pieces);
    if (list == NULL)
        return NULL;
    Piece *p;
    uint32_t *buffer;
    PyObject *keep, *result = NULL;
    if (encode_pieces(self, list, &p, &buffer, &keep) == 0) {
        result = list_of_piece_ids(self, p, PyList_GET_SIZE(list));
    }
    PyMem_Free(p);
    PyMem_RawFree(buffer);
    Py_XDECREF(keep);
    Py_DECREF(list);
    return result;
}

PyDoc_STRVAR(Kernel_encode_chunks_doc,
             "encode_chunks(parts, start, chunks=(), pieces=(), stops=None) -> (list[int] | None, list[str])\n\n"
             "The ids of \" \" + part for each of parts[start:] (a text cut at its safe spaces, see\n"
             "ByteLevelModel._encode_chunked), from the chunk cache and the chunks given: chunks (distinct\n"
             "parts) and the pre-tokenizer's pieces of them, one chunk's after the other, chunk k's ending\n"
             "before pieces[stops[k]]. Without stops, pieces are those of \" \" + \" \".join(chunks), cut at the\n"
             "chunks' ends by their lengths (in characters); if a piece crosses one, the chunks count as not\n"
             "given. The given chunks' pieces are merged (through the piece cache) and the chunks remembered\n"
             "while the chunk budget lasts. Returns (ids, []) when every part is cached or given; else (None,\n"
             "the distinct parts that are neither, in order of first appearance), for the caller to split.");

static char *chunks_keywords[] = {"parts", "start", "chunks", "pieces", "stops", NULL};

/* stops (a sequence of ints) into out[0 .. count): each at least the one before, the last n_pieces.
 * 0, or -1 with an exception set. */
static int read_stops(PyObject *stops, Py_ssize_t count, Py_ssize_t n_pieces, Py_ssize_t *out)
{
    PyObject *fast = PySequence_Fast(stops, "encode_chunks: stops must be a sequence of ints");
    if (fast == NULL)
        return -1;
    int ok = PySequence_Fast_GET_SIZE(fast) == count ? 0 : -1;
    if (ok < 0)
        PyErr_Format(PyExc_ValueError, "encode_chunks: %zd stops for %zd chunks", PySequence_Fast_GET_SIZE(fast), count);
    for (Py_ssize_t k = 0; ok == 0 && k < count; k++) {
        out[k] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, k));
        if (out[k] == -1 && PyErr_Occurred()) {
            ok = -1;
        } else if (out[k] < (k ? out[k - 1] : 0) || out[k] > n_pieces || (k == count - 1 && out[k] != n_pieces)) {
            PyErr_Format(PyExc_ValueError, "encode_chunks: stop %zd (%zd) is out of order or past the %zd pieces", k,
                         out[k], n_pieces);
            ok = -1;
        }
    }
    Py_DECREF(fast);
    return ok;
}

/* Where each chunk's pieces stop (into out) when pieces are those of " " + " ".join(chunks): chunk
 * k ends 1 + its length (in code points) after the one before. 1, or 0 if a piece crosses a
 * chunk's end (or the pieces do not cover the chunks), or -1 with an exception set. */
static int find_stops(PyObject *chunks, PyObject *pieces, Py_ssize_t *out)
{
    Py_ssize_t n_pieces = PyList_GET_SIZE(pieces), i = 0, at = 0, end = 0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(chunks); k++) {
        PyObject *chunk = PyList_GET_ITEM(chunks, k);
        if (!PyUnicode_Check(chunk)) {
            PyErr_Format(PyExc_TypeError, "encode_chunks: chunks must be str, not %.100s", Py_TYPE(chunk)->tp_name);
            return -1;
        }
        end += 1 + PyUnicode_GET_LENGTH(chunk);
        for (; at < end && i < n_pieces; i++) {
            PyObject *piece = PyList_GET_ITEM(pieces, i);
            if (!PyUnicode_Check(piece)) {
                PyErr_Format(PyExc_TypeError, "pieces must be str, not %.100s", Py_TYPE(piece)->tp_name);
                return -1;
            }
            at += PyUnicode_GET_LENGTH(piece);
        }
        if (at != end)
            return 0;
        out[k] = i;
    }
    return i == n_pieces;
}

/* The given chunks (g[0 .. count): text, len and hash set) with their ids: `pieces` merged, chunk
 * k's ids those of pieces[stops[k - 1] .. stops[k]) copied to *ids (PyMem_Free it), and the chunks
 * added to the chunk cache. 0, or -1 with an exception set. */
static int merge_given(Kernel *self, Piece *g, Py_ssize_t count, PyObject *pieces, const Py_ssize_t *stops,
                       uint32_t **ids)
{
    Piece *p;
    uint32_t *buffer;
    PyObject *keep;
    int ok = encode_pieces(self, pieces, &p, &buffer, &keep);
    size_t total = 0;
    for (Py_ssize_t i = 0; ok == 0 && i < PyList_GET_SIZE(pieces); i++)
        total += p[i].n_ids;
    *ids = ok == 0 ? PyMem_Malloc((total ? total : 1) * sizeof(uint32_t)) : NULL;
    if (ok == 0 && *ids == NULL) {
        PyErr_NoMemory();
        ok = -1;
    }
    size_t at = 0;
    for (Py_ssize_t k = 0, i = 0; ok == 0 && k < count; k++) {
        g[k].ids = *ids + at;
        for (; i < stops[k]; i++) { /* at + n_ids <= total: counted above */
            if (p[i].n_ids)
                memcpy(*ids + at, p[i].ids, p[i].n_ids * sizeof(uint32_t));
            at += p[i].n_ids;
        }
        g[k].n_ids = (size_t)(*ids + at - g[k].ids);
    }
    int failure = 0;
    if (ok == 0 && lock_write_soon(&self->lock)) {
        for (Py_ssize_t k = 0; k < count && failure == 0; k++)
            failure = table_add(&self->chunks, g[k].hash, g[k].text, g[k].len, g[k].ids, g[k].n_ids);
        unlock_write(&self->lock);
    }
    if (failure < 0) {
        PyErr_NoMemory();
        ok = -1;
    }
    PyMem_Free(p);
    PyMem_RawFree(buffer);
    Py_XDECREF(keep);
    return ok;
}

/* The UTF-8 and hash of each str of list[from ..] into c[0 ..]. 0, or -1 with an exception set. */
static int chunk_texts(Kernel *self, PyObject *list, Py_ssize_t from, Piece *c, PyObject **keep)
{
    for (Py_ssize_t i = from; i < PyList_GET_SIZE(list); i++) {
        Piece *chunk = &c[i - from];
        if (utf8_of(PyList_GET_ITEM(list, i), keep, &chunk->text, &chunk->len) < 0)
            return -1;
        chunk->hash = hash_bytes(self->seed, chunk->text, chunk->len);
    }
    return 0;
}

static PyObject *Kernel_encode_chunks(Kernel *self, PyObject *args, PyObject *kwargs)
{
    PyObject *parts, *given = NULL, *given_pieces = NULL, *given_stops = NULL;
    Py_ssize_t start;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "On|OOO:encode_chunks", chunks_keywords, &parts, &start, &given,
                                     &given_pieces, &given_stops))
        return NULL;
    PyObject *list = as_list(parts), *chunks = NULL, *pieces = NULL, *keep = NULL, *lacking = NULL, *result = NULL;
    Piece *c = NULL, *g = NULL;
    Py_ssize_t *stops = NULL, n_given = 0;
    uint32_t *given_ids = NULL;
    SeenSet given_set = {NULL, 0}, seen = {NULL, 0};
    if (list == NULL)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list), m = n - start;
    if (start < 0 || start > n) {
        PyErr_Format(PyExc_ValueError, "start %zd is outside 0..%zd", start, n);
        goto done;
    }
    if (given != NULL && (chunks = as_list(given)) == NULL)
        goto done;
    n_given = chunks ? PyList_GET_SIZE(chunks) : 0;
    if (n_given > 0) { /* the chunks the caller split: merged, remembered, and found by text below */
        if ((pieces = given_pieces ? as_list(given_pieces) : PyList_New(0)) == NULL)
            goto done;
        stops = PyMem_Malloc((size_t)n_given * sizeof(Py_ssize_t));
        g = PyMem_Calloc((size_t)n_given, sizeof(Piece));
        if (stops == NULL || g == NULL || seen_init(&given_set, (size_t)n_given) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        int aligned = 1;
        if (given_stops != NULL && given_stops != Py_None) {
            if (read_stops(given_stops, n_given, PyList_GET_SIZE(pieces), stops) < 0)
                goto done;
        } else if ((aligned = find_stops(chunks, pieces, stops)) < 0) {
            goto done;
        }
        if (!aligned) {
            n_given = 0; /* as if none were given: the caller splits them on their own */
        } else if (chunk_texts(self, chunks, 0, g, &keep) < 0 ||
                   merge_given(self, g, n_given, pieces, stops, &given_ids) < 0) {
            goto done;
        }
        for (Py_ssize_t k = 0; k < n_given; k++)
            seen_add(&given_set, g, k); /* a repeated chunk: its first is found */
    }
    c = PyMem_Calloc(m ? (size_t)m : 1, sizeof(Piece));
    if (c == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (chunk_texts(self, list, start, c, &keep) < 0)
        goto done;
    lock_read_soon(&self->lock);
    for (Py_ssize_t i = 0; i < m; i++) {
        TABLE_PREFETCH_AHEAD(&self->chunks, c, i, m);
        const Entry *e = table_find(&self->chunks, c[i].hash, c[i].text, c[i].len);
        if (e != NULL) {
            c[i].ids = e->ids;
            c[i].n_ids = e->n_ids;
        }
    }
    unlock_read(&self->lock);
    size_t misses = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_ssize_t k = c[i].ids == NULL && n_given > 0 ? seen_find(&given_set, g, &c[i]) : -1;
        if (k >= 0) {
            c[i].ids = g[k].ids;
            c[i].n_ids = g[k].n_ids;
        }
        misses += c[i].ids == NULL;
    }
    if ((lacking = PyList_New(0)) == NULL)
        goto done;
    if (misses > 0) {
        if (seen_init(&seen, misses) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < m; i++)
            if (c[i].ids == NULL && seen_add(&seen, c, i) < 0 && PyList_Append(lacking, PyList_GET_ITEM(list, start + i)) < 0)
                goto done;
        result = PyTuple_Pack(2, Py_None, lacking);
    } else {
        PyObject *ids = list_of_piece_ids(self, c, m);
        if (ids != NULL) {
            result = PyTuple_Pack(2, ids, lacking);
            Py_DECREF(ids);
        }
    }
done:
    PyMem_Free(c);
    PyMem_Free(g);
    PyMem_Free(stops);
    PyMem_Free(given_ids);
    PyMem_RawFree(given_set.slots);
    PyMem_RawFree(seen.slots);
    Py_XDECREF(keep);
    Py_XDECREF(lacking);
    Py_XDECREF(pieces);
    Py_XDECREF(chunks);
    Py_DECREF(list);
    return result;
}

PyDoc_STRVAR(Kernel_encode_text_doc,
             "encode_text(text) -> list[int]: the ids of text (no special tokens), pre-tokenized by the\n"
             "kernel's own splitter (Kernel(split=...)) and cut into space chunks as Tokenizer._encode_chunked\n"
             "cuts them; with the chunk and piece caches. The GIL is released\n"
             "while it works, so threads encoding texts on one kernel run in parallel.");

static PyObject *Kernel_encode_text(Kernel *self, PyObject *text)
{
    if (self->split == SPLIT_NONE) {
        PyErr_SetString(PyExc_ValueError, "encode_text needs a kernel built with split=NAME");
        return NULL;
    }
    TextView view;
    uint64_t count;
    Encoded out = {0, NULL, NULL};
    PyObject *result = NULL;
    if (text_view(text, &view) == 0 && encode_views(self, &view, 1, NULL, NULL, 1, &out, &count, NULL, NULL) == 0)
        result = list_of_ids(self, out.part_ids[0].ids, out.part_ids[0].n);
    encoded_free(&out);
    return result;
}

/* encode_texts' and encode_texts_flat's arguments: the texts, the special tokens' texts that send
 * a text back (Py_None: none) and the threads. */
typedef struct {
    PyObject *texts, *specials;
    int threads;
} BatchArgs;

static char *batch_keywords[] = {"texts", "specials", "threads", NULL};

static int batch_args(PyObject *args, PyObject *kwargs, const char *format, BatchArgs *a)
{
    a->specials = Py_None;
    a->threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, batch_keywords, &a->texts, &a->specials, &a->threads))
        return -1;
    if (a->threads < 1) {
        PyErr_Format(PyExc_ValueError, "threads must be at least 1, not %d", a->threads);
        return -1;
    }
    if (a->threads > MOST_THREADS)
        a->threads = MOST_THREADS;
    return 0;
}

/* The ids of every text of a.texts in *out, each text's number of ids in *counts (count of texts
 * in *count), and the list of the indices of the texts that hold one of a.specials in *refused
 * (those have no ids): the GIL released once for all of them; read (or NULL) gets each part as
 * soon as it is encoded (see encode_views_on_threads). 0, or -1 with an exception set.
 * The caller frees *out (encoded_free) and *counts (PyMem_Free). */
static int encode_all(Kernel *self, const BatchArgs *a, const char *name, Encoded *out, uint64_t **counts,
                      Py_ssize_t *count, PyObject **refused, PartReader read, void *context)
{
    *counts = NULL;
    *refused = NULL;
    if (self->split == SPLIT_NONE) {
        PyErr_Format(PyExc_ValueError, "%s needs a kernel built with split=NAME", name);
        return -1;
    }
    Needles needles;
    int with_specials = a->specials != Py_None;
    if (with_specials && needles_from(a->specials, name, &needles) < 0)
        return -1;
    PyObject *list = as_list(a->texts); /* our own list: it holds the strs the views read */
    if (list == NULL) {
        if (with_specials)
            needles_free(&needles);
        return -1;
    }
    *count = PyList_GET_SIZE(list);
    size_t room = *count ? (size_t)*count : 1;
    TextView *views = PyMem_Calloc(room, sizeof(TextView));
    unsigned char *held = PyMem_Calloc(room, 1);
    *counts = PyMem_Calloc(room, sizeof(uint64_t));
    int ok = -1;
    if (views == NULL || held == NULL || *counts == NULL) {
        PyErr_NoMemory();
    } else {
        Py_ssize_t i = 0;
        while (i < *count && text_view(PyList_GET_ITEM(list, i), &views[i]) == 0)
            i++;
        if (i == *count)
            ok = encode_views(self, views, (size_t)*count, with_specials ? &needles : NULL, held, a->threads, out,
                              *counts, read, context);
    }
    if (ok == 0 && (*refused = PyList_New(0)) == NULL)
        ok = -1;
    for (Py_ssize_t i = 0; ok == 0 && with_specials && i < *count; i++) {
        if (held[i]) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(*refused, index) < 0)
                ok = -1;
            Py_XDECREF(index);
        }
    }
    if (ok < 0)
        Py_CLEAR(*refused);
    PyMem_Free(views);
    PyMem_Free(held);
    Py_DECREF(list);
    if (with_specials)
        needles_free(&needles);
    return ok;
}

PyDoc_STRVAR(Kernel_encode_texts_doc,
             "encode_texts(texts, specials=None, threads=1) -> (list[list[int] | None], list[int]):\n"
             "[encode_text(t) for t in texts], with the GIL released once for all of them, on up to `threads`\n"
             "threads of the kernel's own (at most 256); and the indices of the texts that hold one of the strs of specials\n"
             "(special tokens' texts), which are not encoded (None in the list).\n"
             "The lists, like encode_text's, take the kernel's int object per token id (see id_objects), and\n"
             "are not tracked by the cycle collector (they hold only ints).");

/* encode_texts' PartReader: part k's texts' lists (None for one left out) into context, a list of
 * as many items as texts (made on the first part). */
static int lists_of_part(void *context, const Batch *b, size_t k)
{
    PyObject **lists = context;
    if (*lists == NULL && (*lists = PyList_New((Py_ssize_t)b->count)) == NULL)
        return -1;
    const uint32_t *ids = b->parts->part_ids[k].ids; /* NULL: no ids at all */
    for (size_t i = b->parts->part_start[k]; i < b->parts->part_start[k + 1]; i++) {
        PyObject *text_ids = b->refused != NULL && b->refused[i] ? Py_NewRef(Py_None) : list_of_ids(b->self, ids, b->counts[i]);
        if (text_ids == NULL)
            return -1;
        /* A list of ints cannot be part of a reference cycle, so the cycle collector need not
         * scan it (as it stops scanning a tuple of atoms): a batch's lists were one collection
         * of all their ids, at the end of the call, under the GIL. */
        if (text_ids != Py_None)
            PyObject_GC_UnTrack(text_ids);
        PyList_SET_ITEM(*lists, (Py_ssize_t)i, text_ids);
        ids = ids ? ids + b->counts[i] : NULL;
    }
    return 0;
}

/* What a batch method makes of its encoded texts: out's parts, each text's number of ids (count
 * texts), the indices of those left out, and what its PartReader made (NULL without one). A new
 * reference, or NULL with the error set. */
typedef PyObject *(*BatchResult)(const Encoded *out, const uint64_t *counts, Py_ssize_t count, PyObject *refused, PyObject *read);

/* What encode_texts and encode_texts_flat share: their arguments (``format``, for
 * PyArg_ParseTupleAndKeywords, ends in ":name"), the texts encoded (encode_all, with ``read``
 * reading each part, or NULL), ``make``'s result of them, and the freeing of the rest. */
static PyObject *encode_batch(Kernel *self, PyObject *args, PyObject *kwargs, const char *format, PartReader read, BatchResult make)
{
    BatchArgs a;
    if (batch_args(args, kwargs, format, &a) < 0)
        return NULL;
    Encoded out = {0, NULL, NULL};
    uint64_t *counts;
    Py_ssize_t count;
    PyObject *refused, *made = NULL, *result = NULL;
    if (encode_all(self, &a, strchr(format, ':') + 1, &out, &counts, &count, &refused, read, &made) == 0)
        result = make(&out, counts, count, refused, made);
    Py_XDECREF(made); /* on failure, with the items of the parts not read yet NULL */
    Py_XDECREF(refused);
    PyMem_Free(counts);
    encoded_free(&out);
    return result;
}

/* encode_texts' BatchResult: the lists lists_of_part made, and the indices left out. */
static PyObject *lists_and_refused(const Encoded *Py_UNUSED(out), const uint64_t *Py_UNUSED(counts), Py_ssize_t Py_UNUSED(count),
                                   PyObject *refused, PyObject *lists)
{
    return PyTuple_Pack(2, lists, refused);
}

static PyObject *Kernel_encode_texts(Kernel *self, PyObject *args, PyObject *kwargs)
{
    return encode_batch(self, args, kwargs, "O|Oi:encode_texts", lists_of_part, lists_and_refused);
}

PyDoc_STRVAR(Kernel_encode_texts_flat_doc,
             "encode_texts_flat(texts, specials=None, threads=1) -> (bytearray, bytearray, list[int]): what\n"
             "encode_texts gives, as machine words and no int objects: every text's ids one after the other\n"
             "(uint32) and each text's number of ids (uint64, 0 for a text left out), for numpy.frombuffer;\n"
             "and the indices of the texts left out. The whole call but its copy of the two buffers runs\n"
             "without the GIL.");

/* encode_texts_flat's BatchResult: the parts' ids copied straight into one bytearray, in order;
 * the texts' counts into another; and the indices left out. */
static PyObject *words_and_refused(const Encoded *out, const uint64_t *counts, Py_ssize_t count, PyObject *refused,
                                   PyObject *Py_UNUSED(read))
{
    size_t n_ids = 0;
    for (size_t k = 0; k < out->n_parts; k++)
        n_ids += out->part_ids[k].n;
    PyObject *result = NULL;
    PyObject *ids = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n_ids * sizeof(uint32_t)));
    PyObject *lengths = PyByteArray_FromStringAndSize((const char *)counts, (Py_ssize_t)((size_t)count * sizeof(uint64_t)));
    if (ids != NULL && lengths != NULL) {
        char *at = PyByteArray_AS_STRING(ids);
        for (size_t k = 0; k < out->n_parts; k++) {
            if (out->part_ids[k].n) {
                memcpy(at, out->part_ids[k].ids, out->part_ids[k].n * sizeof(uint32_t));
                at += out->part_ids[k].n * sizeof(uint32_t);
            }
        }
        result = PyTuple_Pack(3, ids, lengths, refused);
    }
    Py_XDECREF(ids);
    Py_XDECREF(lengths);
    return result;
}

static PyObject *Kernel_encode_texts_flat(Kernel *self, PyObject *args, PyObject *kwargs)
{
    return encode_batch(self, args, kwargs, "O|Oi:encode_texts_flat", NULL, words_and_refused);
}

PyDoc_STRVAR(split_doc, "split(name, text) -> list[str]: text's pieces by the compiled splitter name (see SPLITTERS).");

static PyObject *module_split(PyObject *Py_UNUSED(module), PyObject *args)
{
    const char *name;
    PyObject *text, *result = NULL;
    if (!PyArg_ParseTuple(args, "sU", &name, &text))
        return NULL;
    SplitKind kind = split_kind_of(name);
    if (kind == SPLIT_NONE) {
        PyErr_Format(PyExc_ValueError, "no compiled splitter named '%.100s' (see bpetok.models.gpt2._kernel.SPLITTERS)", name);
        return NULL;
    }
    TextView view;
    const unsigned char *s;
    unsigned char *utf8 = NULL;
    size_t n, n_pieces = 0, capacity = 0;
    Piece *pieces = NULL;
    if (text_view(text, &view) == 0) {
        int failure = text_views_utf8(&view, 1, &s, &n, &utf8);
        if (failure == 0)
            failure = split_into(kind, s, 0, n, &pieces, &n_pieces, &capacity);
        if (failure < 0)
            set_error(failure);
        else
            result = PyList_New((Py_ssize_t)n_pieces);
        for (size_t i = 0; result != NULL && i < n_pieces; i++) {
            PyObject *piece = PyUnicode_DecodeUTF8((const char *)pieces[i].text, (Py_ssize_t)pieces[i].len,
                                                   "surrogatepass");
            if (piece == NULL)
                Py_CLEAR(result);
            else
                PyList_SET_ITEM(result, (Py_ssize_t)i, piece);
        }
    }
    PyMem_RawFree(pieces);
    PyMem_RawFree(utf8);
    return result;
}

PyDoc_STRVAR(Kernel_encode_piece_doc, "encode_piece(data: bytes) -> list[int]: BPE one piece's bytes (no cache).");

static PyObject *Kernel_encode_piece(Kernel *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    size_t n = (size_t)view.len, bound = ids_bound(self, n);
    uint32_t *ids = PyMem_Malloc((bound ? bound : 1) * sizeof(uint32_t));
    Scratch scratch = {0};
    PyObject *result = NULL;
    if (ids == NULL) {
        PyErr_NoMemory();
    } else {
        Py_ssize_t got;
        if (n >= RELEASE_GIL_BYTES) { /* the buffer stays exported (unresizable) until released */
            Py_BEGIN_ALLOW_THREADS
            got = bpe_piece(self, &scratch, view.buf, n, ids, bound);
            Py_END_ALLOW_THREADS
        } else {
            got = bpe_piece(self, &scratch, view.buf, n, ids, bound);
        }
        if (got == -1) {
            PyErr_NoMemory();
        } else if (got < 0) {
            PyErr_SetString(PyExc_RuntimeError, "bpetok kernel: a piece gave more ids than its bound (a bug)");
        } else {
            result = list_of_ids(self, ids, (size_t)got);
        }
    }
    scratch_free(&scratch);
    PyMem_Free(ids);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(Kernel_cache_info_doc, "cache_info() -> dict: the piece and chunk caches' entries, bytes and budgets.");

static PyObject *Kernel_cache_info(Kernel *self, PyObject *Py_UNUSED(ignored))
{
    lock_read(&self->lock);
    BytesTable cache = self->cache, chunks = self->chunks; /* a consistent copy of the counts */
    unlock_read(&self->lock);
    /* The id objects are counted with the piece cache, whose budget they share (see Kernel.id_objects). */
    return Py_BuildValue("{s:{s:n,s:n,s:n},s:{s:n,s:n,s:n}}", "pieces", "entries", (Py_ssize_t)cache.count,
                         "bytes", (Py_ssize_t)(cache.used + self->id_bytes), "budget",
                         (Py_ssize_t)(cache.budget + self->id_reserved), "chunks", "entries",
                         (Py_ssize_t)chunks.count, "bytes", (Py_ssize_t)chunks.used, "budget", (Py_ssize_t)chunks.budget);
}

static PyObject *Kernel_get_split(Kernel *self, void *Py_UNUSED(closure))
{
    if (self->split == SPLIT_NONE)
        Py_RETURN_NONE;
    return PyUnicode_FromString(SPLIT_NAMES[self->split - 1]);
}

static PyGetSetDef Kernel_getset[] = {
    {"split", (getter)Kernel_get_split, NULL, "the compiled splitter encode_text runs, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Kernel_methods[] = {
    {"encode", (PyCFunction)Kernel_encode, METH_O, Kernel_encode_doc},
    {"encode_chunks", (PyCFunction)(void (*)(void))Kernel_encode_chunks, METH_VARARGS | METH_KEYWORDS,
     Kernel_encode_chunks_doc},
    {"encode_text", (PyCFunction)Kernel_encode_text, METH_O, Kernel_encode_text_doc},
    {"encode_texts", (PyCFunction)(void (*)(void))Kernel_encode_texts, METH_VARARGS | METH_KEYWORDS,
     Kernel_encode_texts_doc},
    {"encode_texts_flat", (PyCFunction)(void (*)(void))Kernel_encode_texts_flat, METH_VARARGS | METH_KEYWORDS,
     Kernel_encode_texts_flat_doc},
    {"encode_piece", (PyCFunction)Kernel_encode_piece, METH_O, Kernel_encode_piece_doc},
    {"cache_info", (PyCFunction)Kernel_cache_info, METH_NOARGS, Kernel_cache_info_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(Kernel_doc,
             "Kernel(byte_ids, ranks, stride, shift, n_tokens, virtual_emit, whole, byte_chars, cache_bytes, seed,\n"
             "       chunk_bytes=0, split=None)\n\n"
             "BytePairModel's tables in C (BytePairModel.make_kernel builds one):\n"
             "byte_ids: each byte's initial symbol (256); ranks: BytePairModel.ranks (left * stride + right ->\n"
             "rank << shift | merged), or the table of build_merges (stride and shift then unused); n_tokens;\n"
             "virtual_emit: each virtual symbol's fallback ids; whole: ignore_merges' token text -> id, or None;\n"
             "byte_chars: each byte's GPT-2 character, UTF-8 (256); cache_bytes: the piece cache's byte budget;\n"
             "seed: the caches' hash seed; chunk_bytes: the chunk cache's byte budget; split: the name of a\n"
             "compiled splitter (SPLITTERS) for encode_text and encode_texts, or None.");

static PyTypeObject KernelType = {
    BPETOK_TYPE_CORE(Kernel, "bpetok.models.gpt2._kernel.Kernel"),
    .tp_doc = Kernel_doc,
    .tp_methods = Kernel_methods,
    .tp_getset = Kernel_getset,
    .tp_init = (initproc)kernel_tables_init,
    .tp_new = Kernel_new,
};

static PyMethodDef module_methods[] = {
    {"split", (PyCFunction)module_split, METH_VARARGS, split_doc},
    {"build_merges", (PyCFunction)module_build_merges, METH_VARARGS, build_merges_doc},
    {NULL, NULL, 0, NULL},
};

/* The module's contents: the Kernel type and SPLITTERS, the compiled splitters' names. */
static int module_exec(PyObject *m)
{
    if (PyModule_AddType(m, &KernelType) < 0)
        return -1;
    Py_ssize_t count = 0;
    while (SPLIT_NAMES[count] != NULL)
        count++;
    PyObject *names = PyTuple_New(count);
    for (Py_ssize_t i = 0; names != NULL && i < count; i++) {
        PyObject *name = PyUnicode_FromString(SPLIT_NAMES[i]);
        if (name == NULL) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SET_ITEM(names, i, name);
    }
    if (names == NULL || PyModule_AddObject(m, "SPLITTERS", names) < 0) {
        Py_XDECREF(names);
        return -1;
    }
    return 0;
}

BPETOK_MODULE_EXEC(_kernel, "bpetok's compiled byte-level BPE kernel (see bpetok/models/gpt2/model.py).", module_methods,
              module_exec)
