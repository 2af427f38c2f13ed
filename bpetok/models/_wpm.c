/* The compiled ``bert`` model: llama.cpp's WPM word split and longest-match-first WordPiece in one
 * pass over a str (bpetok/models/wpm.py's ``preprocess`` and ``WordPieceModel.encode_word`` are the
 * readable twin; tests/test_model_wpm.py holds them equal).
 *
 * ``Wpm(...)`` is given llama.cpp's codepoint tables as bpetok/models/wpm_data.py holds them (class
 * runs, NFD first codepoints, lowercase pairs), the whitespace codepoints, the two normalizer flags
 * and the vocabulary as sorted distinct byte strings with their ids. From the tables it makes one
 * entry per BMP codepoint (what the word split does with it: join the word, end it, drop it, or be
 * a word of its own, and the codepoint it becomes); astral codepoints are looked up as they come.
 * From the tokens it builds a byte trie (_sorted_trie.h). Words seen
 * before come from a word cache (word -> ids, bounded by the budget the Tokenizer gives).
 *
 * ``encode(text, unk)`` splits the text into words, puts U+2581 in front of each and cuts it from
 * the left into the longest tokens; a word with a position no token starts at is ``unk``; where
 * there is no unknown token (``unk`` < 0) it returns None and the Python twin raises.
 *
 * Memory safety: every table and token offset is checked when built; the walk reads the text within
 * its length; the word and id buffers grow with checked sizes. The walk holds the GIL: it writes
 * to the word cache, which callers on other threads share.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_glue.h"
#include "../_module.h"
#include "_sorted_trie.h"
#include "_word_cache.h"

#define MAX_CPT 0x10FFFFu

/* What the word split does with a codepoint (the top bits of a table entry; the low 21 bits are
 * the codepoint it becomes). */
enum { JOIN = 0, BOUNDARY = 1, DROP = 2, OWN = 3 };
/* The classes of wpm_data.CLASS_CODES. */
enum { CLS_OTHER = 0, CLS_CONTROL = 1, CLS_MARK = 2, CLS_PUNCT = 3, CLS_SYMBOL = 4 };

typedef struct {
    PyObject_HEAD
    int ready;
    int lowercase, strip_accents;
    /* the codepoint tables (kept for astral lookups) */
    Py_ssize_t n_class, n_nfd, n_lower, n_space;
    uint32_t *class_starts;
    uint8_t *class_codes;
    uint32_t *nfd; /* triples: first, last, target */
    uint32_t *lower_from, *lower_to;
    uint32_t *spaces;
    uint32_t bmp[0x10000]; /* action << 24 | codepoint */
    SortedTrie trie; /* the tokens */
    WordCache cache; /* word (without U+2581) -> ids */
    IdInts ints; /* each token id's int object */
    uint32_t *id_len; /* each id's text length in bytes (0: no text in the trie), for the spans */
    int32_t ascii_word[128]; /* U+2581 + one ASCII byte as one whole token (punctuation in code), or -1 */
} Wpm;

static void Wpm_dealloc(Wpm *self)
{
    BPETOK_FREE_ALL(free, self->class_starts, self->class_codes, self->nfd, self->lower_from, self->lower_to, self->spaces,
                    self->id_len);
    sorted_trie_free(&self->trie);
    word_cache_free(&self->cache);
    id_ints_free(&self->ints);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* -- the word split ------------------------------------------------------------------------------ */

static int is_chinese(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF)
        || (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF)
        || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* The index of the last of ``n`` sorted values <= ``c``, or -1. */
static Py_ssize_t last_at_most(const uint32_t *sorted, Py_ssize_t n, Py_ssize_t stride, uint32_t c)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (sorted[mid * stride] <= c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

/* What the word split makes of codepoint ``cpt`` (wpm.py's ``_map_one``): action << 24 | codepoint. */
static uint32_t map_codepoint(const Wpm *w, uint32_t cpt)
{
    uint32_t base = cpt;
    if (w->strip_accents) {
        Py_ssize_t k = last_at_most(w->nfd, w->n_nfd, 3, cpt);
        if (k >= 0 && cpt <= w->nfd[3 * k + 1])
            base = w->nfd[3 * k + 2];
    }
    for (Py_ssize_t k = 0; k < w->n_space; k++)
        if (w->spaces[k] == base)
            return (uint32_t)BOUNDARY << 24;
    Py_ssize_t k = last_at_most(w->class_starts, w->n_class, 1, base);
    int cls = k >= 0 ? w->class_codes[k] : CLS_OTHER;
    if (base == 0 || base == 0xFFFD || cls == CLS_CONTROL || (w->strip_accents && cls == CLS_MARK))
        return (uint32_t)DROP << 24;
    uint32_t out = base;
    if (w->lowercase) {
        Py_ssize_t j = last_at_most(w->lower_from, w->n_lower, 1, base);
        if (j >= 0 && w->lower_from[j] == base)
            out = w->lower_to[j];
    }
    if (cls == CLS_PUNCT || (base < 0x7F && cls == CLS_SYMBOL) || is_chinese(base))
        return (uint32_t)OWN << 24 | out;
    return (uint32_t)JOIN << 24 | out;
}

static int check_sorted(const uint32_t *values, Py_ssize_t n, Py_ssize_t stride, const char *name)
{
    for (Py_ssize_t k = 1; k < n; k++)
        if (values[k * stride] <= values[(k - 1) * stride]) {
            PyErr_Format(PyExc_ValueError, "%s: not strictly increasing at item %zd", name, k);
            return -1;
        }
    return 0;
}

static int init_tables(Wpm *self, PyObject *class_starts, PyObject *class_codes, PyObject *nfd, PyObject *lower_from,
                       PyObject *lower_to, PyObject *spaces)
{
    Py_ssize_t n_codes, n_nfd_words, n_lower_to;
    const BufferArg tables[] = {
        {"class_starts", 4, (void **)&self->class_starts, &self->n_class, class_starts},
        {"class_codes", 1, (void **)&self->class_codes, &n_codes, class_codes},
        {"nfd", 4, (void **)&self->nfd, &n_nfd_words, nfd},
        {"lower_from", 4, (void **)&self->lower_from, &self->n_lower, lower_from},
        {"lower_to", 4, (void **)&self->lower_to, &n_lower_to, lower_to},
        {"spaces", 4, (void **)&self->spaces, &self->n_space, spaces},
    };
    if (copy_buffers(tables, sizeof tables / sizeof tables[0]) < 0)
        return -1;
    if (n_codes != self->n_class || n_nfd_words % 3 || n_lower_to != self->n_lower) {
        PyErr_SetString(PyExc_ValueError, "codepoint tables: class_starts/class_codes, lower_from/lower_to differ in length, or nfd is not triples");
        return -1;
    }
    self->n_nfd = n_nfd_words / 3;
    if (check_sorted(self->class_starts, self->n_class, 1, "class_starts") < 0 || check_sorted(self->nfd, self->n_nfd, 3, "nfd") < 0
        || check_sorted(self->lower_from, self->n_lower, 1, "lower_from") < 0)
        return -1;
    for (Py_ssize_t k = 0; k < self->n_nfd; k++)
        if (self->nfd[3 * k + 1] < self->nfd[3 * k] || self->nfd[3 * k + 2] > MAX_CPT
            || (k + 1 < self->n_nfd && self->nfd[3 * k + 1] >= self->nfd[3 * k + 3])) {
            PyErr_Format(PyExc_ValueError, "nfd: range %zd is empty, overlaps the next or maps past U+10FFFF", k);
            return -1;
        }
    for (Py_ssize_t k = 0; k < self->n_lower; k++)
        if (self->lower_to[k] > MAX_CPT) {
            PyErr_Format(PyExc_ValueError, "lower_to: item %zd is past U+10FFFF", k);
            return -1;
        }
    for (uint32_t c = 0; c < 0x10000; c++)
        self->bmp[c] = map_codepoint(self, c);
    return 0;
}

/* -- the trie ------------------------------------------------------------------------------------ */

/* The trie of the vocabulary's sorted distinct texts, and an int object slot per id. */
static int build_trie(Wpm *self, const uint8_t *blob, Py_ssize_t blob_len, const uint32_t *offsets, Py_ssize_t n,
                      const int32_t *ids)
{
    if (sorted_trie_build(&self->trie, blob, (size_t)blob_len, offsets, (size_t)n, ids) < 0)
        return -1;
    uint32_t max_id = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        max_id = (uint32_t)ids[k] > max_id ? (uint32_t)ids[k] : max_id;
    if (max_id >= (1u << 26)) {
        PyErr_Format(PyExc_ValueError, "token ids: %u is past the largest vocabulary this model takes", max_id);
        return -1;
    }
    if (id_ints_alloc(&self->ints, (size_t)max_id + 1) < 0)
        return -1;
    if ((self->id_len = calloc(self->ints.n, sizeof(uint32_t))) == NULL) {
        id_ints_free(&self->ints);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        self->id_len[ids[k]] = offsets[k + 1] - offsets[k];
    for (int c = 0; c < 128; c++) { /* the longest match of the 4-byte word, when it is all of it */
        uint32_t node = self->trie.root[0xE2];
        node = node == TRIE_NO_NODE ? node : sorted_trie_child(&self->trie, node, 0x96);
        node = node == TRIE_NO_NODE ? node : sorted_trie_child(&self->trie, node, 0x81);
        node = node == TRIE_NO_NODE ? node : sorted_trie_child(&self->trie, node, (uint8_t)c);
        self->ascii_word[c] = node == TRIE_NO_NODE ? -1 : self->trie.nodes[node].value;
    }
    return 0;
}

static int Wpm_init(Wpm *self, PyObject *args, PyObject *kwds)
{
    PyObject *class_starts, *class_codes, *nfd, *lower_from, *lower_to, *spaces, *blob_obj, *offsets_obj, *ids_obj;
    int lowercase, strip_accents;
    static char *kwlist[] = {"class_starts", "class_codes", "nfd", "lower_from", "lower_to", "spaces",
                             "lowercase", "strip_accents", "blob", "offsets", "ids", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOppOOO", kwlist, &class_starts, &class_codes, &nfd, &lower_from,
                                     &lower_to, &spaces, &lowercase, &strip_accents, &blob_obj, &offsets_obj, &ids_obj))
        return -1;
    if (self->ready || self->class_starts != NULL) {
        PyErr_SetString(PyExc_TypeError, "Wpm is already initialised");
        return -1;
    }
    self->lowercase = lowercase, self->strip_accents = strip_accents;
    if (init_tables(self, class_starts, class_codes, nfd, lower_from, lower_to, spaces) < 0)
        return -1;
    Py_ssize_t blob_len, n_offsets, n_ids;
    uint8_t *blob = NULL;
    uint32_t *offsets = NULL;
    int32_t *ids = NULL;
    const BufferArg vocab[] = {
        {"blob", 1, (void **)&blob, &blob_len, blob_obj},
        {"offsets", 4, (void **)&offsets, &n_offsets, offsets_obj},
        {"ids", 4, (void **)&ids, &n_ids, ids_obj},
    };
    int rc = -1;
    if (copy_buffers(vocab, sizeof vocab / sizeof vocab[0]) == 0) {
        if (n_offsets != n_ids + 1)
            PyErr_SetString(PyExc_ValueError, "offsets: need one more than ids");
        else
            rc = build_trie(self, blob, blob_len, offsets, n_ids, ids);
    }
    free(blob);
    free(offsets);
    free(ids);
    if (rc == 0)
        self->ready = 1;
    return rc;
}

/* -- the walk ------------------------------------------------------------------------------------ */

/* A text codepoint: its index, and its UTF-8 bytes' start and end in the text. */
typedef struct {
    int64_t at, byte_start, byte_end;
} Source;

typedef struct {
    uint8_t *word; /* U+2581 then the word's UTF-8 */
    size_t word_len, word_cap;
    uint32_t *ids;
    size_t n_ids, ids_cap;
    /* with spans: where in the text each byte of word comes from, and a row per token */
    int with_spans;
    Source *source;
    size_t source_cap;
    int64_t *rows; /* id, char start, char end, byte start, byte end */
    size_t n_rows, rows_cap;
} Out;

/* Room for ``need`` items in one of Out's arrays (grow_array; no GIL needed). 0, or -1 out of memory. */
static int grow(void **buf, size_t *cap, size_t need, size_t itemsize)
{
    return grow_array(buf, cap, need, itemsize, 64);
}

/* Appends ``c`` as UTF-8 (surrogates too, as Python's surrogatepass writes them). */
static inline int put_utf8(Out *o, uint32_t c)
{
    if (c < 0x80 && o->word_len < o->word_cap) { /* most characters: no size check to grow */
        o->word[o->word_len++] = (uint8_t)c;
        return 0;
    }
    if (grow((void **)&o->word, &o->word_cap, o->word_len + 4, 1) < 0)
        return -1;
    uint8_t *p = o->word + o->word_len;
    if (c < 0x80) {
        p[0] = (uint8_t)c;
        o->word_len += 1;
    } else if (c < 0x800) {
        p[0] = (uint8_t)(0xC0 | c >> 6), p[1] = (uint8_t)(0x80 | (c & 0x3F));
        o->word_len += 2;
    } else if (c < 0x10000) {
        p[0] = (uint8_t)(0xE0 | c >> 12), p[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), p[2] = (uint8_t)(0x80 | (c & 0x3F));
        o->word_len += 3;
    } else {
        p[0] = (uint8_t)(0xF0 | c >> 18), p[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
        p[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), p[3] = (uint8_t)(0x80 | (c & 0x3F));
        o->word_len += 4;
    }
    return 0;
}

static int push_id(Out *o, uint32_t id)
{
    if (grow((void **)&o->ids, &o->ids_cap, o->n_ids + 1, sizeof(uint32_t)) < 0)
        return -1;
    o->ids[o->n_ids++] = id;
    return 0;
}

/* The word's tokens (or unk), then an empty word. 0, -1 out of memory, -2 no unknown token. */
static int flush_word(Wpm *w, Out *o, int64_t unk)
{
    size_t n = o->word_len;
    if (n <= 3) /* U+2581 alone: no word */
        return 0;
    size_t start_ids = o->n_ids, pos = 0;
    const uint8_t *data = o->word;
    if (n == 4 && data[3] < 128 && w->ascii_word[data[3]] >= 0) {
        o->word_len = 3;
        return push_id(o, (uint32_t)w->ascii_word[data[3]]);
    }
    int cached = w->cache.budget && n - 3 <= WORD_CACHE_LONGEST;
    uint64_t h = cached ? word_hash(data + 3, (uint32_t)(n - 3)) : 0;
    if (cached) { /* a word's ids are at most its bytes: room for them first */
        if (grow((void **)&o->ids, &o->ids_cap, o->n_ids + n, sizeof(uint32_t)) < 0)
            return -1;
        Py_ssize_t found = word_cache_get(&w->cache, h, data + 3, (uint32_t)(n - 3), (int32_t *)(o->ids + o->n_ids));
        if (found >= 0) {
            o->n_ids += (size_t)found;
            o->word_len = 3;
            return 0;
        }
    }
    while (pos < n) {
        uint32_t node = w->trie.root[data[pos]];
        int32_t token = -1;
        size_t end = pos, at = pos;
        while (node != TRIE_NO_NODE) {
            if (w->trie.nodes[node].value >= 0)
                token = w->trie.nodes[node].value, end = at + 1;
            if (++at >= n)
                break;
            node = sorted_trie_child(&w->trie, node, data[at]);
        }
        if (token < 0) {
            o->n_ids = start_ids;
            if (unk < 0)
                return -2;
            if (push_id(o, (uint32_t)unk) < 0)
                return -1;
            break;
        }
        if (push_id(o, (uint32_t)token) < 0)
            return -1;
        pos = end;
    }
    if (cached) /* when full or out of memory: not remembered */
        word_cache_put(&w->cache, h, data + 3, (uint32_t)(n - 3), (const int32_t *)(o->ids + start_ids), (uint32_t)(o->n_ids - start_ids));
    o->word_len = 3;
    return 0;
}

/* The source of the word's bytes from ``from`` on. */
static int note_source(Out *o, size_t from, Source src)
{
    if (grow((void **)&o->source, &o->source_cap, o->word_len, sizeof(Source)) < 0)
        return -1;
    for (size_t b = from; b < o->word_len; b++)
        o->source[b] = src;
    return 0;
}

static int push_row(Out *o, uint32_t id, const Source *first, const Source *last, int empty)
{
    if (grow((void **)&o->rows, &o->rows_cap, 5 * (o->n_rows + 1), sizeof(int64_t)) < 0)
        return -1;
    int64_t *r = o->rows + 5 * o->n_rows++;
    r[0] = id;
    r[1] = first->at, r[2] = empty ? first->at : last->at + 1;
    r[3] = first->byte_start, r[4] = empty ? first->byte_start : last->byte_end;
    return 0;
}

/* flush_word, and with spans each new token's row (wpm.py's ``fragment_spans``): from the source
 * of its first byte past the U+2581 to the end of the source of its last; a token that is the
 * U+2581 alone is empty at the word's start; the unknown token alone spans the whole word.
 * -3: an id with no known length or past the word (a broken table). */
static int end_word(Wpm *w, Out *o, int64_t unk)
{
    size_t n = o->word_len, first_id = o->n_ids;
    int rc = flush_word(w, o, unk);
    if (rc < 0 || !o->with_spans || n <= 3)
        return rc;
    const Source *src = o->source;
    if (o->n_ids - first_id == 1 && unk >= 0 && o->ids[first_id] == (uint32_t)unk)
        return push_row(o, o->ids[first_id], &src[3], &src[n - 1], 0);
    size_t at = 0;
    for (size_t k = first_id; k < o->n_ids; k++) {
        uint32_t id = o->ids[k];
        size_t len = id < w->ints.n ? w->id_len[id] : 0;
        if (len == 0 || len > n - at)
            return -3;
        size_t end = at + len, first = at > 3 ? at : 3;
        if (push_row(o, id, &src[first], &src[end > first ? end - 1 : first], end <= first) < 0)
            return -1;
        at = end;
    }
    return at == n ? 0 : -3;
}

static int walk(Wpm *w, int kind, const void *text, Py_ssize_t n, int64_t unk, Out *o)
{
    if (grow((void **)&o->word, &o->word_cap, 64, 1) < 0)
        return -1;
    memcpy(o->word, "\xe2\x96\x81", 3);
    o->word_len = 3;
    int64_t byte_at = 0; /* of codepoint i in the text's UTF-8 */
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t c = PyUnicode_READ(kind, text, i);
        Source here = {i, byte_at, byte_at + (c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4)};
        byte_at = here.byte_end;
        uint32_t entry = c < 0x10000 ? w->bmp[c] : map_codepoint(w, c);
        int rc = 0;
        size_t before = o->word_len;
        switch (entry >> 24) {
        case JOIN:
            if ((rc = put_utf8(o, entry & 0x1FFFFF)) == 0 && o->with_spans)
                rc = note_source(o, before, here);
            break;
        case BOUNDARY:
            rc = end_word(w, o, unk);
            break;
        case OWN:
            if ((rc = end_word(w, o, unk)) == 0 && (rc = put_utf8(o, entry & 0x1FFFFF)) == 0
                && (!o->with_spans || (rc = note_source(o, 3, here)) == 0))
                rc = end_word(w, o, unk);
            break;
        default: /* DROP */
            break;
        }
        if (rc < 0)
            return rc;
    }
    return end_word(w, o, unk);
}

/* encode's and encode_with_spans' arguments (text: str, unk: int), walked into ``o``: walk's
 * result, or ARGS_REFUSED with an exception set. */
#define ARGS_REFUSED (-4)
static int walk_args(Wpm *self, PyObject *args, Out *o)
{
    PyObject *text;
    long long unk;
    if (!PyArg_ParseTuple(args, "UL", &text, &unk))
        return ARGS_REFUSED;
    if (!self->ready) {
        PyErr_SetString(PyExc_TypeError, "Wpm is not initialised");
        return ARGS_REFUSED;
    }
    if (PyUnicode_READY(text) < 0)
        return ARGS_REFUSED;
    return walk(self, PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), unk, o);
}

PyDoc_STRVAR(Wpm_encode_doc,
             "encode(text: str, unk: int) -> list[int] | None: WordPiece ids; None: a word has no tokens and unk < 0");

static PyObject *Wpm_encode(Wpm *self, PyObject *args)
{
    Out o = {0};
    int rc = walk_args(self, args, &o);
    free(o.word);
    PyObject *result = NULL;
    if (rc == 0)
        result = id_ints_list(&self->ints, o.ids, o.n_ids);
    else if (rc == -2)
        result = Py_NewRef(Py_None);
    else if (rc != ARGS_REFUSED)
        PyErr_NoMemory();
    free(o.ids);
    return result;
}

PyDoc_STRVAR(Wpm_encode_cut_doc,
             "encode_cut(unk: int, plain, special, text: str, parse_special: bool) -> list[int] | None\n\n"
             "encode() of each fragment of text's partition, each special's id after its fragment, in one\n"
             "call: ``special`` where parse_special else ``plain`` is the bpetok._specials.Automaton of\n"
             "that mode (None: the mode has no specials), whose cuts(text) give the fragments in\n"
             "characters. None where encode would give None or there are no cuts to be had: the\n"
             "Tokenizer then partitions and encodes as usual, which is what this equals.");

static PyObject *Wpm_encode_cut(Wpm *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!self->ready) {
        PyErr_SetString(PyExc_TypeError, "Wpm is not initialised");
        return NULL;
    }
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "encode_cut() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *text = args[3];
    int parse_special = PyObject_IsTrue(args[4]);
    long long unk = PyLong_AsLongLong(args[0]);
    if (parse_special < 0 || (unk == -1 && PyErr_Occurred()))
        return NULL;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "encode_cut() takes a str, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    if (PyUnicode_READY(text) < 0)
        return NULL;
    PyObject *cuts;
    int found = automaton_cuts(parse_special ? args[2] : args[1], text, &cuts);
    if (found != 0)
        return found < 0 ? NULL : Py_NewRef(Py_None);
    Py_ssize_t parts = cuts && PyBytes_GET_SIZE(cuts) ? PyBytes_GET_SIZE(cuts) / 12 : 1;
    const unsigned char *triples = cuts && PyBytes_GET_SIZE(cuts) ? (const unsigned char *)PyBytes_AS_STRING(cuts) : NULL;
    int kind = PyUnicode_KIND(text);
    const char *data = PyUnicode_DATA(text);
    uint32_t n_chars = (uint32_t)PyUnicode_GET_LENGTH(text), done = 0;
    Out o = {0};
    int rc = PyUnicode_GET_LENGTH(text) > (Py_ssize_t)UINT32_MAX - 1 ? 1 : 0; /* 1: answer None */
    for (Py_ssize_t part = 0; rc == 0 && part < parts; part++) {
        uint32_t triple[3] = {0, n_chars, UINT32_MAX}; /* start, end in characters; the special after */
        if (triples)
            memcpy(triple, triples + 12 * part, sizeof triple);
        if (triple[0] > triple[1] || triple[1] > n_chars || triple[0] < done) {
            rc = 1; /* not cuts of this text */
            break;
        }
        rc = walk(self, kind, data + (size_t)triple[0] * (size_t)kind, triple[1] - triple[0], unk, &o);
        if (rc == 0 && triple[2] != UINT32_MAX)
            rc = push_id(&o, triple[2]);
        done = triple[1];
    }
    Py_XDECREF(cuts);
    free(o.word);
    PyObject *result = NULL;
    if (rc == 0)
        result = id_ints_list(&self->ints, o.ids, o.n_ids);
    else if (rc == 1 || rc == -2)
        result = Py_NewRef(Py_None);
    else
        PyErr_NoMemory();
    free(o.ids);
    return result;
}

/* A bytes object of ``n`` int64 items. */
static PyObject *int64_bytes(const int64_t *values, size_t n)
{
    return PyBytes_FromStringAndSize(n ? (const char *)values : "", (Py_ssize_t)(n * sizeof(int64_t)));
}

PyDoc_STRVAR(Wpm_encode_with_spans_doc,
             "encode_with_spans(text: str, unk: int) -> bytes | None: encode's tokens as int64 rows (id, char start, char "
             "end, byte start, byte end): each one's span in the text; None as encode");

static PyObject *Wpm_encode_with_spans(Wpm *self, PyObject *args)
{
    Out o = {0};
    o.with_spans = 1;
    int rc = walk_args(self, args, &o);
    PyObject *result = NULL;
    if (rc == -2) {
        result = Py_NewRef(Py_None);
    } else if (rc == -3) {
        PyErr_SetString(PyExc_ValueError, "Wpm: a token id with no text in the vocabulary, or longer than its word");
    } else if (rc == -1) {
        PyErr_NoMemory();
    } else if (rc == ARGS_REFUSED) {
        /* the exception is set */
    } else if (o.n_rows != o.n_ids) {
        PyErr_SetString(PyExc_ValueError, "Wpm: not one span per token");
    } else {
        result = int64_bytes(o.rows, 5 * o.n_rows);
    }
    free(o.word);
    free(o.ids);
    free(o.source);
    free(o.rows);
    return result;
}

WORD_CACHE_METHODS(Wpm)

static PyMethodDef Wpm_methods[] = {
    {"encode", (PyCFunction)Wpm_encode, METH_VARARGS, Wpm_encode_doc},
    {"encode_cut", (PyCFunction)(void (*)(void))Wpm_encode_cut, METH_FASTCALL, Wpm_encode_cut_doc},
    {"encode_with_spans", (PyCFunction)Wpm_encode_with_spans, METH_VARARGS, Wpm_encode_with_spans_doc},
    WORD_CACHE_METHODDEFS(Wpm),
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WpmType = {
    BPETOK_TYPE(Wpm, "bpetok.models._wpm.Wpm", "llama.cpp's WPM word split and WordPiece walk (bpetok/models/wpm.py).")};

BPETOK_MODULE(_wpm, "The bert model's compiled word split and WordPiece walk.", NULL, &WpmType)
