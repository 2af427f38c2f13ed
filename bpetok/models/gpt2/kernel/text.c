/* Text -> ids for the byte-level BPE kernel (bpetok/models/gpt2/kernel/kernel.h lists its files).
 *
 * - UTF-8 of strs: a str's own cached UTF-8 (utf8_of, under the GIL), or read from CPython's storage
 *   of its code points without the GIL (TextView, text_views_utf8); a lone surrogate gets its three
 *   UTF-8-style bytes, as llama.cpp reads it. The special tokens' texts a batch is checked for
 *   (Needles).
 * - Pieces -> ids (resolve_pieces): each piece looked up in the piece cache, each distinct miss
 *   merged once (merge.c's bpe_piece) and remembered while the cache's budget lasts.
 * - Whole texts -> ids with the compiled splitter (encode_utf8): a text is cut into space chunks at
 *   the spaces that follow a non-space (as ByteLevelModel._encode_chunked cuts it); each chunk but a
 *   text's first is looked up in the chunk cache, the others split by bpetok/pretok/_split.c, their
 *   pieces resolved, and the new chunks remembered.
 *
 * Everything but utf8_of, text_view, needles_from and encode_pieces runs without the GIL: raw
 * allocation and FAIL_ codes instead of exceptions. The caches' lock is taken once per batch of
 * lookups and once per batch of additions.
 */

#include "kernel.h"
#include "../../../_module.h"

/* -- UTF-8 of strs ----------------------------------------------------------------------------- */

/* The UTF-8 of a str: its own cached buffer, or for a str with lone surrogates their three
 * UTF-8-style bytes (as llama.cpp gets them) in a bytes object kept alive in *keep. */
int utf8_of(PyObject *item, PyObject **keep, const unsigned char **text, size_t *len)
{
    if (!PyUnicode_Check(item)) {
        PyErr_Format(PyExc_TypeError, "pieces must be str, not %.100s", Py_TYPE(item)->tp_name);
        return -1;
    }
    Py_ssize_t size;
    const char *data;
    int status = str_utf8(item, &data, &size);
    if (status < 0)
        return -1;
    if (status > 0) {
        PyObject *encoded = PyUnicode_AsEncodedString(item, "utf-8", "surrogatepass");
        if (encoded == NULL)
            return -1;
        if (*keep == NULL && (*keep = PyList_New(0)) == NULL) {
            Py_DECREF(encoded);
            return -1;
        }
        int failed = PyList_Append(*keep, encoded);
        Py_DECREF(encoded);
        if (failed)
            return -1;
        data = PyBytes_AS_STRING(encoded);
        size = PyBytes_GET_SIZE(encoded);
    }
    *text = (const unsigned char *)data;
    *len = (size_t)size;
    return 0;
}

/* 0, or -1 with TypeError set (under the GIL). */
int text_view(PyObject *text, TextView *v)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "text must be a str, not %.100s", Py_TYPE(text)->tp_name);
        return -1;
    }
    v->data = PyUnicode_DATA(text);
    v->length = (size_t)PyUnicode_GET_LENGTH(text);
    v->kind = PyUnicode_KIND(text);
    v->ascii = PyUnicode_IS_ASCII(text);
    return 0;
}

/* The ASCII code points that start cp[0 .. n), taken 8 bytes of storage at a time: written to
 * out, their count returned (what is left of the run, under a word, goes one code point at a
 * time). Text that is mostly ASCII but not all of it (source code, English with a few symbols) is
 * then copied a word at a time. One per kind of str (1, 2 or 4 bytes per code point). */
#define DEFINE_ASCII_WORDS(NAME, TYPE, NON_ASCII)                                                   \
    static inline size_t NAME(const TYPE *cp, size_t n, unsigned char *out)                         \
    {                                                                                               \
        size_t i = 0, units = 8 / sizeof(TYPE);                                                     \
        for (uint64_t w; i + units <= n; i += units) {                                              \
            memcpy(&w, cp + i, 8);                                                                  \
            if (w & (NON_ASCII))                                                                    \
                break;                                                                              \
            for (size_t k = 0; k < units; k++)                                                      \
                out[i + k] = (unsigned char)cp[i + k];                                              \
        }                                                                                           \
        return i;                                                                                   \
    }

DEFINE_ASCII_WORDS(ascii_words_ucs1, Py_UCS1, 0x8080808080808080ULL)
DEFINE_ASCII_WORDS(ascii_words_ucs2, Py_UCS2, 0xFF80FF80FF80FF80ULL)
DEFINE_ASCII_WORDS(ascii_words_ucs4, Py_UCS4, 0xFFFFFF80FFFFFF80ULL)

/* A text view's code points of one kind (TYPE, COPY_ASCII its ascii_words_) as UTF-8 at out, which
 * moves to its end. A lone surrogate gets its three UTF-8-style bytes, as "surrogatepass" writes
 * it and llama.cpp reads it. */
#define UTF8_ENCODE_LOOP(TYPE, COPY_ASCII)                                                          \
    do {                                                                                            \
        const TYPE *cp = (const TYPE *)v->data;                                                     \
        for (size_t i = 0; i < v->length; i++) {                                                    \
            Py_UCS4 c = cp[i];                                                                      \
            if (c < 0x80) {                                                                         \
                *out++ = (unsigned char)c;                                                          \
                size_t run = COPY_ASCII(cp + i + 1, v->length - i - 1, out);                        \
                out += run;                                                                         \
                i += run;                                                                           \
            } else if (c < 0x800) {                                                                 \
                *out++ = (unsigned char)(0xC0 | (c >> 6));                                          \
                *out++ = (unsigned char)(0x80 | (c & 0x3F));                                        \
            } else if (c < 0x10000) {                                                               \
                *out++ = (unsigned char)(0xE0 | (c >> 12));                                         \
                *out++ = (unsigned char)(0x80 | ((c >> 6) & 0x3F));                                 \
                *out++ = (unsigned char)(0x80 | (c & 0x3F));                                        \
            } else {                                                                                \
                *out++ = (unsigned char)(0xF0 | (c >> 18));                                         \
                *out++ = (unsigned char)(0x80 | ((c >> 12) & 0x3F));                                \
                *out++ = (unsigned char)(0x80 | ((c >> 6) & 0x3F));                                 \
                *out++ = (unsigned char)(0x80 | (c & 0x3F));                                        \
            }                                                                                       \
        }                                                                                           \
    } while (0)

/* The number of bytes of a text view's UTF-8 (at most 4 per code point, so no overflow for a str). */
static size_t text_view_utf8_length(const TextView *v)
{
    if (v->ascii)
        return v->length;
    size_t bytes = v->length; /* one per code point, plus what each above 0x7F adds */
    if (v->kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *cp = v->data;
        for (size_t i = 0; i < v->length; i++)
            bytes += cp[i] >> 7;
    } else if (v->kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *cp = v->data;
        for (size_t i = 0; i < v->length; i++)
            bytes += (cp[i] >= 0x80) + (cp[i] >= 0x800);
    } else {
        const Py_UCS4 *cp = v->data;
        for (size_t i = 0; i < v->length; i++)
            bytes += (cp[i] >= 0x80) + (cp[i] >= 0x800) + (cp[i] >= 0x10000);
    }
    return bytes;
}

/* A text view's UTF-8 at out (text_view_utf8_length(v) bytes: the caller made room). Needs no GIL. */
static void text_view_encode(const TextView *v, unsigned char *out)
{
    if (v->ascii)
        memcpy(out, v->data, v->length);
    else if (v->kind == PyUnicode_1BYTE_KIND)
        UTF8_ENCODE_LOOP(Py_UCS1, ascii_words_ucs1);
    else if (v->kind == PyUnicode_2BYTE_KIND)
        UTF8_ENCODE_LOOP(Py_UCS2, ascii_words_ucs2);
    else
        UTF8_ENCODE_LOOP(Py_UCS4, ascii_words_ucs4);
}

/* The UTF-8 of text views v[0 .. count) at s[i], n[i] bytes: an ASCII str's own data, the others
 * encoded into one buffer, *owned (PyMem_RawFree it). Needs no GIL: 0 or FAIL_NO_MEMORY. */
int text_views_utf8(const TextView *v, size_t count, const unsigned char **s, size_t *n, unsigned char **owned)
{
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        n[i] = text_view_utf8_length(&v[i]);
        if (!v[i].ascii) {
            if (n[i] > SIZE_MAX - total)
                return FAIL_NO_MEMORY;
            total += n[i];
        }
    }
    *owned = total ? PyMem_RawMalloc(total) : NULL;
    if (total && *owned == NULL)
        return FAIL_NO_MEMORY;
    unsigned char *at = *owned;
    for (size_t i = 0; i < count; i++) {
        if (v[i].ascii) {
            s[i] = v[i].data;
        } else {
            text_view_encode(&v[i], at);
            s[i] = at;
            at += n[i];
        }
    }
    return 0;
}

void needles_free(Needles *needles)
{
    PyMem_Free(needles->s);
    PyMem_Free(needles->n);
    PyMem_RawFree(needles->owned);
    Py_XDECREF(needles->strs);
}

/* Whether one of the needles occurs in s[0 .. n). Needs no GIL. */
int contains_needle(const Needles *needles, const unsigned char *s, size_t n)
{
    if (needles->empty)
        return 1;
    for (size_t at = 0; at < n; at++) {
        if (needles->only_start >= 0) {
            const unsigned char *next = memchr(s + at, needles->only_start, n - at);
            if (next == NULL)
                return 0;
            at = (size_t)(next - s);
        } else if (!needles->starts[s[at]]) {
            continue;
        }
        for (size_t k = 0; k < needles->count; k++)
            if (needles->n[k] <= n - at && needles->s[k][0] == s[at] && memcmp(needles->s[k], s + at, needles->n[k]) == 0)
                return 1;
    }
    return 0;
}

/* The UTF-8 of a sequence of str (an error names it as `name`'s specials). 0, or -1 with an
 * exception set (needles freed). Under the GIL, as is needles_free. */
int needles_from(PyObject *strings, const char *name, Needles *needles)
{
    memset(needles, 0, sizeof(*needles));
    needles->only_start = -1;
    PyObject *list = needles->strs = PySequence_List(strings);
    if (list == NULL)
        return -1;
    size_t count = (size_t)PyList_GET_SIZE(list), room = count ? count : 1;
    TextView *views = PyMem_Calloc(room, sizeof(TextView));
    needles->s = PyMem_Calloc(room, sizeof(*needles->s));
    needles->n = PyMem_Calloc(room, sizeof(size_t));
    int ok = -1;
    if (views == NULL || needles->s == NULL || needles->n == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < count; i++) {
        if (!PyUnicode_Check(PyList_GET_ITEM(list, i))) {
            PyErr_Format(PyExc_TypeError, "%s: specials must be str, not %.100s", name,
                         Py_TYPE(PyList_GET_ITEM(list, i))->tp_name);
            goto done;
        }
        text_view(PyList_GET_ITEM(list, i), &views[i]);
    }
    if (text_views_utf8(views, count, needles->s, needles->n, &needles->owned) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    needles->count = count;
    int distinct = 0;
    for (size_t i = 0; i < count; i++) {
        if (needles->n[i] == 0) {
            needles->empty = 1;
        } else if (!needles->starts[needles->s[i][0]]) {
            needles->starts[needles->s[i][0]] = 1;
            needles->only_start = distinct++ ? -1 : needles->s[i][0];
        }
    }
    ok = 0;
done:
    PyMem_Free(views);
    if (ok < 0)
        needles_free(needles);
    return ok;
}

/* 0, or FAIL_NO_MEMORY (no exception set: it may run without the GIL). Freed with PyMem_RawFree. */
int seen_init(SeenSet *seen, size_t n)
{
    size_t size = 1;
    while (size < n * 2)
        size <<= 1;
    seen->slots = PyMem_RawMalloc(size * sizeof(Py_ssize_t));
    seen->mask = size - 1;
    if (seen->slots == NULL)
        return FAIL_NO_MEMORY;
    memset(seen->slots, 0xff, size * sizeof(Py_ssize_t));
    return 0;
}

/* The slot of the piece of p (a set's array) with key's text, or the free slot where it would go. */
static size_t seen_slot(const SeenSet *seen, const Piece *p, const Piece *key)
{
    size_t slot = key->hash & seen->mask;
    for (; seen->slots[slot] >= 0; slot = (slot + 1) & seen->mask) {
        const Piece *q = &p[seen->slots[slot]];
        if (q->hash == key->hash && q->len == key->len && bytes_equal(q->text, key->text, key->len))
            break;
    }
    return slot;
}

/* The index of the piece of p (the set's array) with key's text, else -1. */
Py_ssize_t seen_find(const SeenSet *seen, const Piece *p, const Piece *key)
{
    return seen->slots[seen_slot(seen, p, key)];
}

/* The index of an earlier piece of p with p[i]'s text (hash set), else -1 after adding i. */
Py_ssize_t seen_add(SeenSet *seen, const Piece *p, Py_ssize_t i)
{
    size_t slot = seen_slot(seen, p, &p[i]);
    if (seen->slots[slot] >= 0)
        return seen->slots[slot];
    seen->slots[slot] = i;
    return -1;
}

/* Look the pieces p[0 .. n) (text and len set) up in the cache; merge the misses, each distinct
 * text once, and cache them. On success (0) every p[i].ids/.n_ids is set; *buffer holds the
 * misses' ids and is the caller's to free (PyMem_RawFree). On failure a FAIL_ code, no exception
 * set. ``holding_gil``: the caller holds the GIL, which is then released around the merging when
 * there is enough of it; otherwise the caller has released it and nothing here needs it. */
int resolve_pieces(Kernel *self, Piece *p, Py_ssize_t n, uint32_t **buffer, int holding_gil)
{
    *buffer = NULL;
    size_t miss_capacity = 0, miss_bytes = 0, misses = 0;
    SeenSet seen;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char byte = p[i].len == 1 ? p[i].text[0] : 0;
        if (p[i].len == 1 && self->byte_piece_n[byte] != 0) { /* known without a lookup */
            p[i].ids = self->byte_piece_ids[byte];
            p[i].n_ids = self->byte_piece_n[byte];
            p[i].hash = 0;
        } else {
            p[i].ids = NULL;
            p[i].hash = hash_bytes(self->seed, p[i].text, p[i].len);
        }
    }
    lock_read_soon(&self->lock);
    for (Py_ssize_t i = 0; i < n; i++) {
        TABLE_PREFETCH_AHEAD(&self->cache, p, i, n);
        if (p[i].ids != NULL)
            continue;
        const Entry *e = table_find(&self->cache, p[i].hash, p[i].text, p[i].len);
        p[i].ids = e ? e->ids : NULL;
        p[i].n_ids = e ? e->n_ids : 0;
        misses += e == NULL;
    }
    unlock_read(&self->lock);
    if (seen_init(&seen, misses) < 0) /* sized for the misses: only they are looked for in it */
        return FAIL_NO_MEMORY;
    misses = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        p[i].first = -1;
        p[i].offset = SIZE_MAX; /* not merged by this call */
        if (p[i].ids != NULL)
            continue;
        if ((p[i].first = seen_add(&seen, p, i)) >= 0)
            continue;
        p[i].offset = miss_capacity;
        miss_capacity += ids_bound(self, p[i].len);
        miss_bytes += p[i].len;
        misses++;
    }
    PyMem_RawFree(seen.slots);
    if (misses == 0)
        return 0;
    uint32_t *ids = PyMem_RawMalloc((miss_capacity ? miss_capacity : 1) * sizeof(uint32_t));
    *buffer = ids;
    if (ids == NULL)
        return FAIL_NO_MEMORY;
    Py_ssize_t failure = 0;
    Scratch scratch = {0};
    /* The work below reads only this object's tables (never changed after init), the pieces'
     * UTF-8 (held alive by the caller) and writes to `ids`. */
    PyThreadState *state = holding_gil && miss_bytes >= RELEASE_GIL_BYTES ? PyEval_SaveThread() : NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i].ids != NULL || p[i].len == 0 || p[i].first >= 0)
            continue;
        size_t bound = ids_bound(self, p[i].len);
        Py_ssize_t got = bpe_piece(self, &scratch, p[i].text, p[i].len, ids + p[i].offset, bound);
        if (got < 0) {
            failure = got;
            break;
        }
        p[i].ids = ids + p[i].offset;
        p[i].n_ids = (size_t)got;
    }
    scratch_free(&scratch);
    if (state != NULL)
        PyEval_RestoreThread(state);
    if (failure < 0)
        return failure == -1 ? FAIL_NO_MEMORY : FAIL_BOUND;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i].first >= 0) { /* first < i: its ids are set */
            p[i].ids = p[p[i].first].ids;
            p[i].n_ids = p[p[i].first].n_ids;
        }
    }
    if (lock_write_soon(&self->lock)) {
        for (Py_ssize_t i = 0; i < n && failure == 0; i++) {
            if (i + LOOKUP_AHEAD < n && p[i + LOOKUP_AHEAD].offset != SIZE_MAX) /* its free slot, found again */
                table_prefetch(&self->cache, p[i + LOOKUP_AHEAD].hash);
            if (p[i].offset != SIZE_MAX && p[i].len <= CACHE_LONGEST && p[i].len > 0)
                failure = table_add(&self->cache, p[i].hash, p[i].text, p[i].len, p[i].ids, p[i].n_ids);
        }
        unlock_write(&self->lock);
    }
    return failure < 0 ? FAIL_NO_MEMORY : 0;
}
/* -- text -> ids, split in C ---------------------------------------------------------------- */

/* A text's space chunks are looked up, split and merged this many at a time (bounded scratch). */
#define TEXT_BATCH_CHUNKS 4096

/* The functions below run without the GIL: raw allocation, FAIL_ codes instead of exceptions. */

static int ids_reserve(IdBuffer *b, size_t more)
{
    if (more <= b->capacity - b->n)
        return 0;
    size_t capacity = b->capacity ? b->capacity : 256;
    while (capacity - b->n < more) {
        if (capacity > SIZE_MAX / 2 / sizeof(uint32_t))
            return FAIL_NO_MEMORY;
        capacity *= 2;
    }
    uint32_t *ids = PyMem_RawRealloc(b->ids, capacity * sizeof(uint32_t));
    if (ids == NULL)
        return FAIL_NO_MEMORY;
    b->ids = ids;
    b->capacity = capacity;
    return 0;
}

static inline int ids_append(IdBuffer *b, const uint32_t *ids, size_t n)
{
    if (n > b->capacity - b->n && ids_reserve(b, n) < 0) /* once per call and piece: inline */
        return FAIL_NO_MEMORY;
    if (n <= 4) { /* most pieces and chunks: a loop costs less than a memcpy call */
        for (size_t i = 0; i < n; i++)
            b->ids[b->n + i] = ids[i];
    } else {
        memcpy(b->ids + b->n, ids, n * sizeof(uint32_t));
    }
    b->n += n;
    return 0;
}

/* Where the space chunk that starts at byte `at` ends: at the next space after a non-space
 * (the tokenizer's cut, see Tokenizer._encode_chunked), or at n. */
/* The first space in [p, end), or NULL. Chunks are short (about 11 bytes in prose and in code):
 * their first 32 bytes are looked at here, eight at a time where words are little-endian (a
 * space's byte is the lowest zero byte of the word XOR "        ", which the test below finds
 * exactly), which costs less than a memchr call; longer gaps go to memchr. */
static inline const unsigned char *find_space(const unsigned char *p, const unsigned char *end)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL, spaces = ones * ' ';
    for (int k = 0; k < 4 && end - p >= 8; k++, p += 8) {
        uint64_t w;
        memcpy(&w, p, sizeof(w));
        uint64_t x = w ^ spaces, zero = (x - ones) & ~x & highs;
        if (zero)
            return p + (__builtin_ctzll(zero) >> 3);
    }
    if (end - p >= 8)
        return memchr(p, ' ', (size_t)(end - p));
#endif
    for (int k = 0; k < 32 && p < end; k++, p++)
        if (*p == ' ')
            return p;
    return p < end ? memchr(p, ' ', (size_t)(end - p)) : NULL;
}

static size_t chunk_end(const unsigned char *s, size_t n, size_t at)
{
    for (size_t i = at + 1; i < n; i++) {
        const unsigned char *space = find_space(s + i, s + n);
        if (space == NULL)
            return n;
        i = (size_t)(space - s);
        unsigned char before = s[i - 1]; /* i > at >= 0 */
        if (before < 0x80 ? !Py_UNICODE_ISSPACE(before) : split_space_after_nonspace(s, n, i))
            return i; /* an ASCII byte is a whole codepoint: the same answer, without the call */
        while (i + 1 < n && s[i + 1] == ' ')
            i++; /* an indent's spaces follow a space: none is a cut */
    }
    return n;
}

/* Append the pieces of s[begin .. end), split on its own, to *pieces (count *n, room *capacity;
 * freed with PyMem_RawFree). 0 or a FAIL_ code. */
int split_into(SplitKind kind, const unsigned char *s, size_t begin, size_t end, Piece **pieces, size_t *n,
                      size_t *capacity)
{
    const unsigned char *text = s + begin;
    size_t len = end - begin;
    for (size_t at = 0; at < len;) {
        size_t stop = split_next(kind, text, len, at);
        if (stop <= at || stop > len) /* a splitter must advance within the text */
            return FAIL_SPLITTER;
        if (*n == *capacity) {
            size_t grown = *capacity ? *capacity * 2 : 64; /* a short text's pieces: a few */
            Piece *more = grown < SIZE_MAX / sizeof(Piece) ? PyMem_RawRealloc(*pieces, grown * sizeof(Piece)) : NULL;
            if (more == NULL)
                return FAIL_NO_MEMORY;
            *pieces = more;
            *capacity = grown;
        }
        (*pieces)[*n].text = text + at;
        (*pieces)[*n].len = stop - at;
        (*n)++;
        at = stop;
    }
    return 0;
}

/* The ids of the texts s[0 .. count) (n[i] bytes of UTF-8 each), one text after the other in *out;
 * counts[i] gets text i's number of ids. A text is cut into chunks at spaces after a non-space;
 * each chunk but a text's first (its head, never cached) is looked up in the chunk cache by its
 * text after the space, and the others are split here, merged and remembered. The chunks of
 * consecutive texts go TEXT_BATCH_CHUNKS at a time, so the cache's lock is taken once per batch
 * of chunks, not once per short text. 0 or a FAIL_ code; needs no GIL (out->ids is freed with
 * PyMem_RawFree). */
int encode_utf8(Kernel *self, const unsigned char *const *s, const size_t *n, size_t count, IdBuffer *out,
                       uint64_t *counts)
{
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        counts[i] = 0;
        total += n[i];
    }
    if (total == 0)
        return 0;
    int failure = FAIL_NO_MEMORY;
    size_t most = total < TEXT_BATCH_CHUNKS ? total : TEXT_BATCH_CHUNKS; /* a chunk has at least one byte */
    uint32_t *buffer = NULL;
    SeenSet seen = {NULL, 0};
    /* One block (a short text's call then allocates once for them): the chunks, and per chunk
     * its text, its bytes [begin, end) and a new chunk's last piece + 1. */
    Piece *c = PyMem_RawMalloc(most * (sizeof(Piece) + 4 * sizeof(size_t))), *pieces = NULL;
    size_t pieces_capacity = 0;
    if (c == NULL)
        goto done;
    size_t *text = (size_t *)(c + most), *begin = text + most, *end = begin + most, *stop = end + most;
    for (size_t t = 0, at = 0; t < count;) { /* the next chunk: text t's from byte at */
        size_t m = 0, n_pieces = 0, chunk_misses = 0;
        while (m < most && t < count) {
            if (at >= n[t]) {
                t++;
                at = 0;
                continue;
            }
            text[m] = t;
            begin[m] = at;
            end[m] = at = chunk_end(s[t], n[t], at);
            m++;
        }
        if (m == 0)
            break;
        for (size_t k = 0; k < m; k++) {
            Piece *chunk = &c[k];
            chunk->ids = NULL;
            chunk->first = -1;
            chunk->text = s[text[k]] + begin[k] + 1; /* a text's head (begin 0) is never looked up */
            chunk->len = end[k] - begin[k] - 1;
            chunk->hash = begin[k] ? hash_bytes(self->seed, chunk->text, chunk->len) : 0;
        }
        lock_read_soon(&self->lock);
        for (size_t k = 0; k < m; k++) {
            TABLE_PREFETCH_AHEAD(&self->chunks, c, k, m);
            const Entry *e = begin[k] ? table_find(&self->chunks, c[k].hash, c[k].text, c[k].len) : NULL;
            if (e != NULL) {
                c[k].ids = e->ids;
                c[k].n_ids = e->n_ids;
            }
            chunk_misses += e == NULL && begin[k] != 0;
        }
        unlock_read(&self->lock);
        if ((failure = seen_init(&seen, chunk_misses)) < 0) /* only the misses are looked for in it */
            goto done;
        for (size_t k = 0; k < m; k++) {
            Piece *chunk = &c[k];
            if (chunk->ids != NULL || (begin[k] != 0 && (chunk->first = seen_add(&seen, c, (Py_ssize_t)k)) >= 0))
                continue; /* cached, or as an earlier chunk of this batch */
            if ((failure = split_into(self->split, s[text[k]], begin[k], end[k], &pieces, &n_pieces, &pieces_capacity)) < 0)
                goto done;
            stop[k] = n_pieces;
        }
        PyMem_RawFree(seen.slots);
        seen.slots = NULL;
        if ((failure = resolve_pieces(self, pieces, (Py_ssize_t)n_pieces, &buffer, 0)) < 0)
            goto done;
        size_t from = 0;
        failure = FAIL_NO_MEMORY;
        for (size_t k = 0; k < m; k++) {
            Piece *chunk = &c[k];
            size_t before = out->n;
            if (chunk->ids != NULL) { /* cached */
                if (ids_append(out, chunk->ids, chunk->n_ids) < 0)
                    goto done;
            } else if (chunk->first >= 0) { /* as an earlier chunk of this batch */
                const Piece *first = &c[chunk->first];
                if (ids_reserve(out, first->n_ids) < 0)
                    goto done;
                memcpy(out->ids + out->n, out->ids + first->offset, first->n_ids * sizeof(uint32_t));
                out->n += first->n_ids;
            } else { /* new: its pieces' ids */
                chunk->offset = out->n;
                for (; from < stop[k]; from++)
                    if (ids_append(out, pieces[from].ids, pieces[from].n_ids) < 0)
                        goto done;
                chunk->n_ids = out->n - chunk->offset;
            }
            counts[text[k]] += out->n - before;
        }
        /* The new chunks remembered (out->ids does not move again in this batch). The write lock
         * only when there are some: taken for nothing, it would stall the other threads' lookups. */
        int added = 0;
        size_t first_new = 0;
        while (first_new < m && !(c[first_new].ids == NULL && c[first_new].first < 0 && begin[first_new] != 0))
            first_new++;
        if (first_new < m && lock_write_soon(&self->lock)) {
            for (size_t k = first_new; k < m && added == 0; k++) {
                const Piece *chunk = &c[k];
                if (k + LOOKUP_AHEAD < m)
                    table_prefetch(&self->chunks, c[k + LOOKUP_AHEAD].hash);
                if (chunk->ids == NULL && chunk->first < 0 && begin[k] != 0)
                    added = table_add(&self->chunks, chunk->hash, chunk->text, chunk->len, out->ids + chunk->offset,
                                      chunk->n_ids);
            }
            unlock_write(&self->lock);
        }
        if (added < 0)
            goto done;
        PyMem_RawFree(buffer);
        buffer = NULL;
    }
    failure = 0;
done:
    PyMem_RawFree(c);
    PyMem_RawFree(pieces);
    PyMem_RawFree(seen.slots);
    PyMem_RawFree(buffer);
    return failure;
}

/* The pieces of a list of str: their UTF-8, then resolve_pieces. *out_pieces and *buffer must
 * be freed (PyMem_Free, PyMem_RawFree) and *keep released by the caller. -1 with an exception set. */
int encode_pieces(Kernel *self, PyObject *list, Piece **out_pieces, uint32_t **buffer, PyObject **keep)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    Piece *p = PyMem_Calloc(n ? n : 1, sizeof(Piece));
    *out_pieces = p;
    *buffer = NULL;
    *keep = NULL;
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (utf8_of(PyList_GET_ITEM(list, i), keep, &p[i].text, &p[i].len) < 0)
            return -1;
    int failure = resolve_pieces(self, p, n, buffer, 1);
    if (failure < 0) {
        set_error(failure);
        return -1;
    }
    return 0;
}

