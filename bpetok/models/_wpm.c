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
 * ``encode_cut`` does it for a whole text cut at its specials by the automaton's cuts;
 * ``encode_with_spans`` and ``encode_cut_spans`` also give each token's span in the text (wpm.py's
 * ``fragment_spans`` is the twin, tests/test_offsets_models.py holds them equal).
 *
 * Memory safety: every table and token offset is checked when built; the walk reads the text within
 * its length, a span's word bytes within the word; the word, id and span buffers grow with checked
 * sizes. The walk holds the GIL: it writes
 * to the word cache, which callers on other threads share.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_glue.h"
#include "../_module.h"
#include "_cut_text.h"
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

/* A token's span: char start, char end, byte start, byte end. */
#define SPAN 4

typedef struct {
    uint8_t *word; /* U+2581 then the word's UTF-8 */
    size_t word_len, word_cap;
    uint32_t *ids;
    size_t n_ids, ids_cap;
    /* With spans: each token's, and room for the ids after them: the first n_spans * (SPAN
     * int64 + one int32) bytes are then encode_cut_spans' result, copied in one go. (A block each
     * call, at least the result's size: when it is freed glibc's heap keeps the memory for the
     * result that follows, where a block only the size of the result is mapped anew each call.) */
    int with_spans;
    int64_t *spans;
    size_t n_spans, spans_cap;
    /* Where the word's bytes come from. While ``contiguous``, the word is the text's characters
     * from word_at on (their UTF-8 from word_byte on) up to the one that ends it, none dropped
     * between and each as long in UTF-8 as the one it became (most words: the normalizer only
     * lowercases them): a byte's source follows from its place in the word and nothing is
     * recorded. Else ``source`` holds each byte's. */
    int contiguous;
    int64_t word_at, word_byte;
    Source *source;
    size_t source_cap;
} Out;

/* Room for ``need`` items in one of Out's arrays (grow_array; no GIL needed). 0, or -1 out of memory. */
static int grow(void **buf, size_t *cap, size_t need, size_t itemsize)
{
    return grow_array(buf, cap, need, itemsize, 64);
}

static inline int utf8_length(uint32_t c)
{
    return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
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

/* The contiguous word's bytes [3, upto) each with its source in ``source``: the word stops
 * being contiguous. */
static int record_sources(Out *o, size_t upto)
{
    if (grow((void **)&o->source, &o->source_cap, upto, sizeof(Source)) < 0)
        return -1;
    Source src = {o->word_at, o->word_byte, o->word_byte};
    for (size_t b = 3; b < upto; src.at++) {
        /* the word holds whole characters (put_utf8's): each lead byte says its length */
        size_t end = b + CUT_UTF8_LENGTH[o->word[b] >> 4];
        src.byte_start = src.byte_end;
        src.byte_end += (int64_t)(end - b);
        for (; b < end && b < upto; b++)
            o->source[b] = src;
    }
    o->contiguous = 0;
    return 0;
}

/* The word's bytes from ``from`` on came from character ``at`` of the text (its UTF-8 bytes
 * [byte_start, byte_end)). */
static inline int note_source(Out *o, size_t from, int64_t at, int64_t byte_start, int64_t byte_end)
{
    int same_length = (int64_t)(o->word_len - from) == byte_end - byte_start;
    if (from == 3) {
        o->contiguous = same_length;
        o->word_at = at, o->word_byte = byte_start;
    } else if (o->contiguous && !same_length && record_sources(o, from) < 0) {
        return -1;
    }
    if (o->contiguous)
        return 0;
    if (grow((void **)&o->source, &o->source_cap, o->word_len, sizeof(Source)) < 0)
        return -1;
    Source src = {at, byte_start, byte_end};
    for (size_t b = from; b < o->word_len; b++)
        o->source[b] = src;
    return 0;
}

/* The span of the next token. 0, or -1 out of memory. */
static inline int push_span(Out *o, int64_t char_start, int64_t char_end, int64_t byte_start, int64_t byte_end)
{
    if (o->n_spans >= o->spans_cap
        && grow((void **)&o->spans, &o->spans_cap, o->n_spans + 1, SPAN * sizeof(int64_t) + sizeof(int32_t)) < 0)
        return -1;
    int64_t *span = o->spans + SPAN * o->n_spans++;
    span[0] = char_start, span[1] = char_end, span[2] = byte_start, span[3] = byte_end;
    return 0;
}

/* The index in the text of the character at byte ``b`` of a contiguous word (a lead byte, or the
 * word's end), counted by ``cursor`` (a lead byte and its character's index) moved there. */
typedef struct {
    size_t b;
    int64_t at;
} Cursor;

static inline int64_t char_index(const uint8_t *word, Cursor *cursor, size_t b)
{
    while (cursor->b < b) /* from lead byte to lead byte: the word holds whole characters */
        cursor->b += CUT_UTF8_LENGTH[word[cursor->b] >> 4], cursor->at++;
    while (cursor->b > b) {
        do
            cursor->b--;
        while ((word[cursor->b] & 0xC0) == 0x80);
        cursor->at--;
    }
    return cursor->at;
}

/* Where in its word of ``n`` bytes token ``k`` (of o->ids), which starts at byte ``at``, ends; 0
 * where its length is not known or past the word. */
static inline size_t token_end(const Wpm *w, const Out *o, size_t k, size_t at, size_t n)
{
    uint32_t id = o->ids[k];
    size_t len = id < w->ints.n ? w->id_len[id] : 0;
    return len && len <= n - at ? at + len : 0;
}

/* end_word's spans of the tokens from ``first_id`` on, which cut a contiguous word of ``n`` bytes
 * (the text's characters word_at to next_at - 1): each spans the characters its first and last
 * bytes are in. */
static int contiguous_spans(const Wpm *w, Out *o, size_t first_id, size_t n, int64_t next_at)
{
    const uint8_t *word = o->word;
    int ascii = (int64_t)(n - 3) == next_at - o->word_at;
    int64_t byte0 = o->word_byte - 3; /* the text's byte offset of word byte 0 (U+2581 is no text) */
    Cursor cursor = {3, o->word_at};
    size_t at = 0;
    for (size_t k = first_id; k < o->n_ids; k++) {
        size_t end = token_end(w, o, k, at, n), lo = at > 3 ? at : 3, hi = end;
        if (end == 0)
            return -3;
        int rc;
        if (hi <= lo) { /* the U+2581 alone */
            rc = push_span(o, o->word_at, o->word_at, o->word_byte, o->word_byte);
        } else if (ascii) {
            rc = push_span(o, o->word_at + (int64_t)(lo - 3), o->word_at + (int64_t)(hi - 3), byte0 + (int64_t)lo,
                          byte0 + (int64_t)hi);
        } else { /* a token that cuts a character spans all of it */
            while ((word[lo] & 0xC0) == 0x80) /* byte 3 is a lead byte */
                lo--;
            while (hi < n && (word[hi] & 0xC0) == 0x80)
                hi++;
            int64_t char_start = char_index(word, &cursor, lo);
            rc = push_span(o, char_start, char_index(word, &cursor, hi), byte0 + (int64_t)lo, byte0 + (int64_t)hi);
        }
        if (rc < 0)
            return -1;
        at = end;
    }
    return at == n ? 0 : -3;
}

/* contiguous_spans for a word whose bytes have their sources recorded. */
static int recorded_spans(const Wpm *w, Out *o, size_t first_id, size_t n)
{
    const Source *src = o->source;
    size_t at = 0;
    for (size_t k = first_id; k < o->n_ids; k++) {
        size_t end = token_end(w, o, k, at, n), first = at > 3 ? at : 3;
        if (end == 0)
            return -3;
        const Source *from = &src[first], *last = &src[end - 1];
        int rc = end <= first ? push_span(o, from->at, from->at, from->byte_start, from->byte_start)
                              : push_span(o, from->at, last->at + 1, from->byte_start, last->byte_end);
        if (rc < 0)
            return -1;
        at = end;
    }
    return at == n ? 0 : -3;
}

/* flush_word, and with spans each new token's row (wpm.py's ``fragment_spans``): from the source
 * of its first byte past the U+2581 to the end of the source of its last; a token that is the
 * U+2581 alone is empty at the word's start; the unknown token alone spans the whole word.
 * ``next_at``: the index of the character that ends the word (or of the fragment's end).
 * -3: an id with no known length or past the word (a broken table). */
static int end_word(Wpm *w, Out *o, int64_t unk, int64_t next_at)
{
    size_t n = o->word_len, first_id = o->n_ids;
    int rc = flush_word(w, o, unk); /* it keeps the word's bytes */
    if (rc < 0 || !o->with_spans || n <= 3)
        return rc;
    if (o->n_ids - first_id == 1 && unk >= 0 && o->ids[first_id] == (uint32_t)unk) {
        if (o->contiguous)
            return push_span(o, o->word_at, next_at, o->word_byte, o->word_byte + (int64_t)(n - 3));
        const Source *src = o->source;
        return push_span(o, src[3].at, src[n - 1].at + 1, src[3].byte_start, src[n - 1].byte_end);
    }
    return o->contiguous ? contiguous_spans(w, o, first_id, n, next_at) : recorded_spans(w, o, first_id, n);
}

/* Characters [from, to) of the text (``kind``, ``text``), whose UTF-8 starts at *byte_at (moved
 * past them), into ``o``. */
static int walk(Wpm *w, int kind, const void *text, Py_ssize_t from, Py_ssize_t to, int64_t unk, Out *o, int64_t *byte_at)
{
    if (grow((void **)&o->word, &o->word_cap, 64, 1) < 0)
        return -1;
    memcpy(o->word, "\xe2\x96\x81", 3);
    o->word_len = 3;
    int64_t byte_end = *byte_at;
    for (Py_ssize_t i = from; i < to; i++) {
        uint32_t c = PyUnicode_READ(kind, text, i);
        int64_t byte_start = byte_end;
        byte_end += utf8_length(c);
        uint32_t entry = c < 0x10000 ? w->bmp[c] : map_codepoint(w, c);
        int rc = 0;
        size_t before = o->word_len;
        switch (entry >> 24) {
        case JOIN:
            if ((rc = put_utf8(o, entry & 0x1FFFFF)) == 0 && o->with_spans)
                rc = note_source(o, before, i, byte_start, byte_end);
            break;
        case BOUNDARY:
            rc = end_word(w, o, unk, i);
            break;
        case OWN:
            if ((rc = end_word(w, o, unk, i)) == 0 && (rc = put_utf8(o, entry & 0x1FFFFF)) == 0
                && (!o->with_spans || (rc = note_source(o, 3, i, byte_start, byte_end)) == 0))
                rc = end_word(w, o, unk, i + 1);
            break;
        default: /* DROP: inside a word, its characters are no longer the text's in a row */
            if (o->with_spans && o->word_len > 3 && o->contiguous)
                rc = record_sources(o, o->word_len);
            break;
        }
        if (rc < 0)
            return rc;
    }
    *byte_at = byte_end;
    return end_word(w, o, unk, to);
}

/* Walks each fragment of ``text`` between the specials ``cuts`` finds (Automaton.cuts' triples;
 * NULL or empty: the text is one fragment) into ``o``, each special's id after its fragment.
 * With spans a special's runs from the end of the fragment before it to the start of the one
 * after, so it holds what its LSTRIP and RSTRIP swallowed (norm_offsets._walk_rows), or from the
 * text's start, or to its end. walk's result, or 1: the caller answers None (cuts that are not
 * this text's; with spans, two specials with no fragment between, whose spans would need their
 * lengths: the Tokenizer's partition finds them). */
static int walk_cuts(Wpm *self, PyObject *text, PyObject *cuts, int64_t unk, Out *o)
{
    if (PyUnicode_GET_LENGTH(text) > (Py_ssize_t)UINT32_MAX - 1)
        return 1;
    int has_cuts = cuts && PyBytes_GET_SIZE(cuts);
    Py_ssize_t parts = has_cuts ? PyBytes_GET_SIZE(cuts) / 12 : 1;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    uint32_t n_chars = (uint32_t)PyUnicode_GET_LENGTH(text), done = 0;
    int64_t byte_at = 0;
    size_t open_span = 0; /* where ``open``: the span of the special whose end is the next fragment's start */
    int open = 0;
    for (Py_ssize_t part = 0; part < parts; part++) {
        uint32_t triple[3] = {0, n_chars, UINT32_MAX}; /* start, end in characters; the special after */
        if (has_cuts)
            memcpy(triple, PyBytes_AS_STRING(cuts) + 12 * part, sizeof triple);
        if (triple[0] > triple[1] || triple[1] > n_chars || triple[0] < done)
            return 1; /* not cuts of this text */
        int empty = triple[0] == triple[1];
        if (o->with_spans) {
            if (empty && part > 0 && triple[2] != UINT32_MAX)
                return 1;
            for (uint32_t i = done; i < triple[0]; i++) /* the special before, and what it swallowed */
                byte_at += utf8_length(PyUnicode_READ(kind, data, i));
            if (open) {
                int64_t *span = o->spans + SPAN * open_span;
                span[1] = triple[0], span[3] = byte_at;
            }
        }
        int rc = walk(self, kind, data, triple[0], triple[1], unk, o, &byte_at);
        if (rc == 0 && triple[2] != UINT32_MAX) {
            rc = push_id(o, triple[2]);
            if (rc == 0 && o->with_spans) {
                int at_start = empty && part == 0;
                rc = push_span(o, at_start ? 0 : triple[1], 0, at_start ? 0 : byte_at, 0);
                open_span = o->n_spans - 1;
            }
        }
        open = triple[2] != UINT32_MAX;
        if (rc != 0)
            return rc;
        done = triple[1];
    }
    return o->with_spans && open ? 1 : 0; /* cuts end with a fragment: else not Automaton.cuts' */
}

/* What a call answers where its walk failed, as ``rc`` says: None (1: no cuts to be had or not
 * this text's; -2: a word without tokens and no unknown token), else NULL with the error set. */
#define ARGS_REFUSED (-4) /* the exception is set */
static PyObject *walk_failure(int rc)
{
    if (rc == 1 || rc == -2)
        return Py_NewRef(Py_None);
    if (rc == -3)
        PyErr_SetString(PyExc_ValueError, "Wpm: a token id with no text in the vocabulary, or longer than its word");
    else if (rc != ARGS_REFUSED)
        PyErr_NoMemory();
    return NULL;
}

/* encode's and encode_with_spans' arguments (text: str, unk: int), walked into ``o``: walk's
 * result, or ARGS_REFUSED. */
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
    int64_t byte_at = 0;
    return walk(self, PyUnicode_KIND(text), PyUnicode_DATA(text), 0, PyUnicode_GET_LENGTH(text), unk, o, &byte_at);
}

/* encode_cut's and encode_cut_spans' arguments (cut_check_arguments; unk: int), the text cut by
 * the automaton of the mode and walked into ``o``: walk_cuts' result, 1 where there are no cuts
 * to be had, or ARGS_REFUSED. */
static int walk_cut_args(Wpm *self, PyObject *const *args, Py_ssize_t nargs, Out *o)
{
    PyObject *automaton, *cuts;
    if (cut_check_arguments(args, nargs, self->ready, "Wpm", &automaton) < 0)
        return ARGS_REFUSED;
    long long unk = PyLong_AsLongLong(args[0]);
    if ((unk == -1 && PyErr_Occurred()) || PyUnicode_READY(args[3]) < 0)
        return ARGS_REFUSED;
    int found = automaton_cuts(automaton, args[3], &cuts);
    if (found != 0)
        return found < 0 ? ARGS_REFUSED : 1;
    int rc = walk_cuts(self, args[3], cuts, unk, o);
    Py_XDECREF(cuts);
    return rc;
}

static void out_free(Out *o)
{
    BPETOK_FREE_ALL(free, o->word, o->ids, o->source, o->spans);
}

PyDoc_STRVAR(Wpm_encode_doc,
             "encode(text: str, unk: int) -> list[int] | None: WordPiece ids; None: a word has no tokens and unk < 0");

static PyObject *Wpm_encode(Wpm *self, PyObject *args)
{
    Out o = {0};
    int rc = walk_args(self, args, &o);
    PyObject *result = rc == 0 ? id_ints_list(&self->ints, o.ids, o.n_ids) : walk_failure(rc);
    out_free(&o);
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
    Out o = {0};
    int rc = walk_cut_args(self, args, nargs, &o);
    PyObject *result = rc == 0 ? id_ints_list(&self->ints, o.ids, o.n_ids) : walk_failure(rc);
    out_free(&o);
    return result;
}

/* A walk with spans (``rc``, into ``o``) as a call's answer: ``make(o)`` where it walked, else
 * walk_failure's; ``o`` freed. */
static PyObject *spans_answer(int rc, Out *o, PyObject *(*make)(Out *))
{
    PyObject *result = NULL;
    if (rc != 0)
        result = walk_failure(rc);
    else if (o->n_spans != o->n_ids)
        PyErr_SetString(PyExc_ValueError, "Wpm: not one span per token");
    else
        result = make(o);
    out_free(o);
    return result;
}

/* encode_cut_spans' buffer: the spans, then the ids as int32 (in the room push_span grew for them). */
static PyObject *spans_then_ids(Out *o)
{
    if (o->n_spans == 0)
        return PyByteArray_FromStringAndSize(NULL, 0);
    memcpy(o->spans + SPAN * o->n_spans, o->ids, o->n_ids * sizeof(uint32_t));
    return PyByteArray_FromStringAndSize((const char *)o->spans, (Py_ssize_t)(o->n_spans * (SPAN * sizeof(int64_t) + sizeof(int32_t))));
}

/* encode_with_spans' rows: id, then the span, five int64 a token. */
static PyObject *id_span_rows(Out *o)
{
    PyObject *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(o->n_ids * (SPAN + 1) * sizeof(int64_t)));
    if (result == NULL)
        return NULL;
    int64_t *row = (int64_t *)PyBytes_AS_STRING(result);
    for (size_t k = 0; k < o->n_ids; k++, row += SPAN + 1) {
        row[0] = o->ids[k];
        memcpy(row + 1, o->spans + SPAN * k, SPAN * sizeof(int64_t));
    }
    return result;
}

/* A special's span holds the whitespace its LSTRIP/RSTRIP swallowed (walk_cuts). */
PyDoc_STRVAR(Wpm_encode_cut_spans_doc, "encode_cut_spans(unk: int, plain, special, text: str, parse_special: bool) -> "
             "bytearray | None: encode_cut's tokens, a row of four int64 each (char start, char end, byte start, byte end), "
             "then their ids as int32; None as encode_cut, and where two specials have no text between them.");

static PyObject *Wpm_encode_cut_spans(Wpm *self, PyObject *const *args, Py_ssize_t nargs)
{
    Out o = {0};
    o.with_spans = 1;
    return spans_answer(walk_cut_args(self, args, nargs, &o), &o, spans_then_ids);
}

PyDoc_STRVAR(Wpm_encode_with_spans_doc,
             "encode_with_spans(text: str, unk: int) -> bytes | None: encode's tokens as int64 rows (id, char start, char "
             "end, byte start, byte end): each one's span in the text; None as encode");

static PyObject *Wpm_encode_with_spans(Wpm *self, PyObject *args)
{
    Out o = {0};
    o.with_spans = 1;
    return spans_answer(walk_args(self, args, &o), &o, id_span_rows);
}

WORD_CACHE_METHODS(Wpm)

static PyMethodDef Wpm_methods[] = {
    {"encode", (PyCFunction)Wpm_encode, METH_VARARGS, Wpm_encode_doc},
    {"encode_cut", (PyCFunction)(void (*)(void))Wpm_encode_cut, METH_FASTCALL, Wpm_encode_cut_doc},
    {"encode_cut_spans", (PyCFunction)(void (*)(void))Wpm_encode_cut_spans, METH_FASTCALL, Wpm_encode_cut_spans_doc},
    {"encode_with_spans", (PyCFunction)Wpm_encode_with_spans, METH_VARARGS, Wpm_encode_with_spans_doc},
    WORD_CACHE_METHODDEFS(Wpm),
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WpmType = {
    BPETOK_TYPE(Wpm, "bpetok.models._wpm.Wpm", "llama.cpp's WPM word split and WordPiece walk (bpetok/models/wpm.py).")};

BPETOK_MODULE(_wpm, "The bert model's compiled word split and WordPiece walk.", NULL, &WpmType)
