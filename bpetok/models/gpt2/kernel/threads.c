/* A batch of texts on several threads (encode_texts(texts, threads=N)), for the byte-level BPE
 * kernel (bpetok/models/gpt2/kernel/kernel.h lists its files).
 *
 * The texts are cut into parts of about PART_CODE_POINTS code points (a text is never cut), and
 * the calling thread and N - 1 helper threads of the kernel's own take the next part in turn, each
 * encoding it (encode_utf8, text.c) into its own buffer. The calling thread reads the parts that
 * are done, in order, after each part of its own (a PartReader: encode_texts makes its lists
 * there, taking the GIL for it). The helpers touch no Python object (raw allocation, the
 * kernel's own lock), so the whole batch runs without the GIL: threads in Python, one group
 * each, spent a good part of a warm batch waiting for the GIL between groups. Every helper is
 * done before the call returns.
 */

#include "kernel.h"

#define PART_CODE_POINTS ((size_t)1 << 18)

void encoded_free(Encoded *e)
{
    for (size_t k = 0; e->part_ids != NULL && k < e->n_parts; k++)
        PyMem_RawFree(e->part_ids[k].ids);
    PyMem_RawFree(e->part_ids);
    PyMem_RawFree(e->part_start);
    e->part_ids = NULL;
    e->part_start = NULL;
    e->n_parts = 0;
}

typedef struct {
    PartReader read; /* NULL: nothing to do */
    void *context;
    PyThreadState **gil; /* where the calling thread's state is while it runs without the GIL (*gil NULL: it holds it) */
    size_t next;         /* the next part to read */
} Reading;

/* Read the parts that are encoded, from r->next on, in order. Needs no GIL (takes it to read). */
static void read_parts(Batch *b, Reading *r)
{
    while (r->read != NULL) {
        PyThread_acquire_lock(b->lock, WAIT_LOCK);
        int ready = r->next < b->parts->n_parts && b->part_done[r->next] && !b->failure;
        PyThread_release_lock(b->lock);
        if (!ready)
            return;
        if (*r->gil != NULL)
            PyEval_RestoreThread(*r->gil);
        int ok = r->read(r->context, b, r->next);
        if (*r->gil != NULL)
            *r->gil = PyEval_SaveThread();
        if (ok < 0) {
            PyThread_acquire_lock(b->lock, WAIT_LOCK);
            if (b->failure == 0)
                b->failure = FAIL_PYTHON;
            PyThread_release_lock(b->lock);
            return;
        }
        r->next++;
    }
}

/* Part k's texts made UTF-8 (here, by the thread that encodes them: in its cache, and in
 * parallel), looked through for specials and encoded. 0 or a FAIL_ code; needs no GIL. */
static int encode_part(Batch *b, size_t k)
{
    size_t first = b->parts->part_start[k], count = b->parts->part_start[k + 1] - first, room = count ? count : 1;
    const unsigned char **s = PyMem_RawMalloc(room * sizeof(*s));
    size_t *n = PyMem_RawMalloc(room * sizeof(size_t));
    unsigned char *utf8 = NULL;
    int failure = FAIL_NO_MEMORY;
    if (s != NULL && n != NULL && (failure = text_views_utf8(b->v + first, count, s, n, &utf8)) == 0) {
        for (size_t i = 0; b->specials != NULL && i < count; i++) {
            if (contains_needle(b->specials, s[i], n[i])) {
                b->refused[first + i] = 1;
                n[i] = 0; /* not encoded: the caller cuts it at its specials */
            }
        }
        failure = encode_utf8(b->self, s, n, count, &b->parts->part_ids[k], b->counts + first);
    }
    PyMem_RawFree(s);
    PyMem_RawFree(n);
    PyMem_RawFree(utf8);
    return failure;
}

/* Take parts until none is left (or one failed); the calling thread (r not NULL) reads the
 * parts done so far after each of its own. Needs no GIL. */
static void encode_parts(Batch *b, Reading *r)
{
    for (;;) {
        PyThread_acquire_lock(b->lock, WAIT_LOCK);
        size_t k = b->failure ? b->parts->n_parts : b->next_part;
        if (k < b->parts->n_parts)
            b->next_part++;
        PyThread_release_lock(b->lock);
        if (k >= b->parts->n_parts)
            return;
        int failure = encode_part(b, k);
        PyThread_acquire_lock(b->lock, WAIT_LOCK);
        if (failure < 0 && b->failure == 0)
            b->failure = failure;
        b->part_done[k] = failure == 0;
        PyThread_release_lock(b->lock);
        if (failure < 0)
            return;
        if (r != NULL)
            read_parts(b, r);
    }
}

typedef struct {
    Batch *batch;
    PyThread_type_lock done; /* held until the helper has taken its last part */
} Helper;

static void helper_main(void *arg)
{
    Helper *h = arg;
    encode_parts(h->batch, NULL);
    PyThread_release_lock(h->done); /* h and the batch may be gone after this */
}

/* The ids of text views v[0 .. count) (total code points) in *out, counts[i] of them for text i, on up to `threads`
 * threads; with specials, a text holding one is left out (refused[i] = 1, no ids); each part
 * read by r as soon as it and those before it are done. 0 or a FAIL_ code (*out freed); runs
 * without the GIL but while r reads. */
static int encode_views_on_threads(Kernel *self, const TextView *v, size_t count, size_t total,
                                   const Needles *specials, unsigned char *refused, int threads, Encoded *out,
                                   uint64_t *counts, Reading *r)
{
    size_t n_parts = 0;
    size_t most_parts = total / PART_CODE_POINTS + 1;
    if (most_parts > count)
        most_parts = count ? count : 1;
    out->part_start = PyMem_RawMalloc((most_parts + 1) * sizeof(size_t));
    out->part_ids = PyMem_RawCalloc(most_parts, sizeof(IdBuffer));
    out->n_parts = 0;
    Helper *helpers = PyMem_RawCalloc(threads > 1 ? (size_t)threads - 1 : 1, sizeof(Helper));
    Batch b = {self, v, count, counts, refused, specials, out, NULL, 0, NULL, 0};
    b.part_done = PyMem_RawCalloc(most_parts, 1);
    int started = 0, failure = FAIL_NO_MEMORY;
    if (out->part_start == NULL || out->part_ids == NULL || helpers == NULL || b.part_done == NULL ||
        (b.lock = PyThread_allocate_lock()) == NULL)
        goto done;
    /* Parts end at the text that brings them to PART_CODE_POINTS. */
    out->part_start[0] = 0;
    for (size_t i = 0, size = 0; i < count; i++) {
        size += v[i].length;
        if (i + 1 == count || (size >= PART_CODE_POINTS && n_parts + 2 <= most_parts)) {
            out->part_start[++n_parts] = i + 1;
            size = 0;
        }
    }
    if (count == 0)
        out->part_start[++n_parts] = 0;
    out->n_parts = n_parts;
    for (; started < threads - 1 && (size_t)started + 1 < n_parts; started++) {
        Helper *h = &helpers[started];
        h->batch = &b;
        if ((h->done = PyThread_allocate_lock()) == NULL)
            break;
        PyThread_acquire_lock(h->done, WAIT_LOCK);
        if (PyThread_start_new_thread(helper_main, h) == PYTHREAD_INVALID_THREAD_ID) {
            PyThread_release_lock(h->done);
            PyThread_free_lock(h->done);
            break; /* the threads started so far (and this one) do the work */
        }
    }
    encode_parts(&b, r);
    for (int t = 0; t < started; t++) {
        PyThread_acquire_lock(helpers[t].done, WAIT_LOCK);
        PyThread_free_lock(helpers[t].done);
    }
    read_parts(&b, r); /* the parts the helpers finished last */
    failure = b.failure;
done:
    if (b.lock != NULL)
        PyThread_free_lock(b.lock);
    PyMem_RawFree(helpers);
    PyMem_RawFree(b.part_done);
    if (failure < 0)
        encoded_free(out);
    return failure;
}

/* encode_views_on_threads with the GIL released when there are at least RELEASE_GIL_BYTES code
 * points (the views read the strs' own data: the caller holds the strs); read (or NULL) gets
 * each part as encode_views_on_threads says. 0, or -1 with an exception set. */
int encode_views(Kernel *self, const TextView *v, size_t count, const Needles *specials,
                        unsigned char *refused, int threads, Encoded *out, uint64_t *counts, PartReader read,
                        void *context)
{
    size_t total = 0;
    for (size_t i = 0; i < count; i++)
        total += v[i].length;
    PyThreadState *state = total >= RELEASE_GIL_BYTES ? PyEval_SaveThread() : NULL;
    Reading r = {read, context, &state, 0};
    int failure = encode_views_on_threads(self, v, count, total, specials, refused, state != NULL ? threads : 1, out,
                                          counts, &r);
    if (state != NULL)
        PyEval_RestoreThread(state);
    if (failure < 0) {
        set_error(failure);
        return -1;
    }
    return 0;
}
