/* The compiled walks of bpetok's ``rwkv`` and ``plamo2`` models. First, the longest-match walk of ``rwkv`` (bpetok/models/rwkv.py's
 * ``RwkvModel.encode_reference`` is the readable twin; tests/test_more_models.py holds them equal).
 *
 * The Python model flattens its byte trie into arrays: per node its token id (-1: none), the
 * index of its first edge and its number of edges; per edge its byte (sorted within a node) and
 * child node. ``Trie.encode(data, unk)`` walks llama.cpp's way: at each position the longest token
 * the bytes start with; a byte that starts no token gives ``unk``. Where llama.cpp would emit an
 * invalid id or loop forever (no unknown token; a path that ends no token) it returns None and the
 * Python twin says why.
 *
 * Memory safety: every index in the arrays is checked when the trie is built; the walk reads the
 * input within its length and writes to a buffer of one id per input byte at most. The GIL is
 * released during the walk: the trie is read-only once built, the input an immutable bytes object.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "_glue.h"
#include "../_module.h"
#include "_cut_text.h"
#include "_double_array.h"

#define NONE UINT32_MAX
/* Texts this long are walked without the GIL (~80 µs of walk and more); shorter ones, most calls, keep
 * it rather than pay a release and a take for a few microseconds of walk. */
#define RELEASE_GIL_BYTES 16384
/* Ids of texts up to this many bytes go to the stack, not malloc'd memory. */
#define STACK_IDS 1024

/* The walk's first two steps in one load, indexed by a token's first two bytes (65536 entries,
 * 512 KiB, of which a text touches the few pairs it has): ``word`` is the double-array slot the
 * two bytes lead to (0: they lead nowhere: the token is one byte), ``token`` the longest token
 * of those one or two bytes (two when ``word`` has DA_HAS_VALUE), -1 for none, PAIR_UNKNOWN
 * where the first byte starts no token. A token is ~3 bytes on average: two of its ~4 dependent
 * loads become one. */
typedef struct {
    uint32_t word;
    int32_t token;
} TriePair;

#define PAIRS 65536
#define PAIR_UNKNOWN (-2)

typedef struct {
    PyObject_HEAD
    uint32_t n_nodes;
    int32_t *values;      /* per node: token id, or -1 */
    uint32_t *first;      /* per node: first edge */
    uint32_t *count;      /* per node: edges */
    uint8_t *edge_bytes;  /* per edge */
    uint32_t *edge_child; /* per edge */
    DoubleArray walked;   /* the same trie as a double array (_double_array.h): the walk reads this */
    TriePair *pairs;      /* PAIRS entries: the walk's first two steps (build_pairs) */
    void *hot;            /* NULL, or one block holding pairs, walked's slots and values, ints' table (keep_together) */
    /* Each id's int object, made when first returned: in the order texts use them, so a text's
     * ints lie together. Made at load, in trie order, a text's few thousand were spread over
     * 65k ints' 2 MB, and building its list missed the cache and the TLB on most of them. */
    IdInts ints;
} Trie;

static int build_pairs(Trie *self);
static void keep_together(Trie *self);

static void Trie_dealloc(Trie *self)
{
    BPETOK_FREE_ALL(free, self->values, self->first, self->count, self->edge_bytes, self->edge_child);
    if (self->hot != NULL) { /* pairs, the double array's arrays and the ints' table lie in it */
        id_ints_release(&self->ints);
        free(self->hot);
        self->pairs = NULL;
        self->walked.slots = NULL;
        self->walked.values = NULL;
        self->ints.ints = NULL;
        self->ints.n = 0;
    }
    da_free(&self->walked);
    free(self->pairs);
    id_ints_free(&self->ints);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define MOST_BUFFER_ARGS 8

/* What Trie() and Dictionary(), whose arguments are all arrays, do first: take the ``n`` arguments
 * (at most MOST_BUFFER_ARGS) by position or by the names in ``arrays``, refuse a second init where
 * the object is already ``initialised``, and copy each argument (copy_buffers): 0, or -1 with an
 * exception set. */
static int parse_buffer_args(PyObject *args, PyObject *kwds, BufferArg *arrays, size_t n, int initialised, const char *type)
{
    char *kwlist[MOST_BUFFER_ARGS + 1] = {NULL}, format[MOST_BUFFER_ARGS + 1] = {0};
    PyObject *objs[MOST_BUFFER_ARGS] = {NULL};
    if (n > MOST_BUFFER_ARGS) {
        PyErr_Format(PyExc_SystemError, "%s: more than %d array arguments", type, MOST_BUFFER_ARGS);
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        kwlist[k] = (char *)arrays[k].name;
        format[k] = 'O';
    }
    /* n objects: the pointers past the format's n are not read. */
    if (!PyArg_ParseTupleAndKeywords(args, kwds, format, kwlist, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                                     &objs[6], &objs[7]))
        return -1;
    if (initialised) {
        PyErr_Format(PyExc_TypeError, "%s is already initialised", type);
        return -1;
    }
    for (size_t k = 0; k < n; k++)
        arrays[k].obj = objs[k];
    return copy_buffers(arrays, n);
}

static int Trie_init(Trie *self, PyObject *args, PyObject *kwds)
{
    Py_ssize_t n_values, n_first, n_count, n_bytes, n_child;
    BufferArg arrays[] = {
        {"values", 4, (void **)&self->values, &n_values},
        {"first", 4, (void **)&self->first, &n_first},
        {"count", 4, (void **)&self->count, &n_count},
        {"edge_bytes", 1, (void **)&self->edge_bytes, &n_bytes},
        {"edge_child", 4, (void **)&self->edge_child, &n_child},
    };
    if (parse_buffer_args(args, kwds, arrays, sizeof arrays / sizeof arrays[0], self->values != NULL, "Trie") < 0)
        return -1;
    if (n_values < 1 || n_values != n_first || n_values != n_count || n_bytes != n_child || n_values >= (Py_ssize_t)NONE
        || n_child >= (Py_ssize_t)NONE) {
        PyErr_SetString(PyExc_ValueError, "trie arrays: need one root, equal node and edge array lengths");
        return -1;
    }
    self->n_nodes = (uint32_t)n_values;
    for (uint32_t node = 0; node < self->n_nodes; node++) {
        uint64_t end = (uint64_t)self->first[node] + self->count[node];
        if (end > (uint64_t)n_child) {
            PyErr_Format(PyExc_ValueError, "trie node %u: edges past the edge arrays", node);
            return -1;
        }
        for (uint64_t e = self->first[node]; e < end; e++) {
            if (self->edge_child[e] >= self->n_nodes || self->edge_child[e] == 0) {
                PyErr_Format(PyExc_ValueError, "trie node %u: edge to node %u, out of range", node, self->edge_child[e]);
                return -1;
            }
            if (e > self->first[node] && self->edge_bytes[e] <= self->edge_bytes[e - 1]) {
                PyErr_Format(PyExc_ValueError, "trie node %u: edges not sorted by byte", node);
                return -1;
            }
        }
    }
    /* Packed: a node's children must be consecutive nodes (breadth first, as rwkv.py's _flatten
     * numbers them), each reached by one edge; the double array is built from that. */
    SortedTrie packed = {0};
    packed.nodes = calloc(self->n_nodes, sizeof(TrieNode));
    if (packed.nodes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    packed.n_nodes = self->n_nodes;
    int32_t max_id = -1;
    uint32_t next_child = 1; /* breadth first: each node's children follow the last node's */
    for (uint32_t node = 0; node < self->n_nodes; node++) {
        TrieNode *p = &packed.nodes[node];
        p->value = self->values[node];
        max_id = p->value > max_id ? p->value : max_id;
        p->count = (uint16_t)self->count[node];
        p->first = self->count[node] ? self->edge_child[self->first[node]] : 0;
        if (self->count[node] > 256) {
            PyErr_Format(PyExc_ValueError, "trie node %u: more than 256 edges", node);
            sorted_trie_free(&packed);
            return -1;
        }
        for (uint32_t j = 0; j < self->count[node]; j++) {
            uint32_t child = self->edge_child[self->first[node] + j];
            if (child != next_child++ || child <= node) {
                PyErr_Format(PyExc_ValueError, "trie node %u: children not consecutive later nodes", node);
                sorted_trie_free(&packed);
                return -1;
            }
            packed.nodes[child].byte = self->edge_bytes[self->first[node] + j];
        }
    }
    int built = da_build(&self->walked, &packed);
    sorted_trie_free(&packed);
    if (built < 0 || build_pairs(self) < 0)
        return -1;
    if (max_id >= 0 && max_id < (1 << 26) && id_ints_alloc(&self->ints, (size_t)max_id + 1) < 0)
        return -1;
    keep_together(self);
    return 0;
}

/* The pair table of the double array: 0, or -1 with MemoryError set. Each slot read is checked
 * to lie in the array (da_build keeps every base + 255 within it). */
static int build_pairs(Trie *self)
{
    const DoubleArray *d = &self->walked;
    self->pairs = malloc(PAIRS * sizeof(TriePair));
    if (self->pairs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    uint32_t root_base = da_base(d->slots[0]);
    for (uint32_t b0 = 0; b0 < 256; b0++) {
        uint32_t s1 = root_base + b0, word1 = s1 < d->n_slots ? d->slots[s1] : 0;
        int first = da_is_child(word1, (uint8_t)b0);
        int32_t token1 = first && (word1 & DA_HAS_VALUE) ? d->values[s1] : -1;
        for (uint32_t b1 = 0; b1 < 256; b1++) {
            TriePair *p = &self->pairs[b0 << 8 | b1];
            uint32_t s2 = da_base(word1) + b1, word2 = first && s2 < d->n_slots ? d->slots[s2] : 0;
            p->word = da_is_child(word2, (uint8_t)b1) ? word2 : 0;
            p->token = !first ? PAIR_UNKNOWN : p->word & DA_HAS_VALUE ? d->values[s2] : token1;
        }
    }
    return 0;
}

/* The arrays the walk and the id lists read (~3 MB for a 65k-token vocabulary: the pair table,
 * the double array's slots and values, the ints' table) moved into one block of whole 2 MB
 * pages, which the kernel may back with huge pages (madvise): loads scattered over them then
 * miss the TLB far less. Where that memory is not to be had they stay put. */
static void keep_together(Trie *self)
{
    const size_t huge = (size_t)2 << 20;
    size_t pair_bytes = PAIRS * sizeof(TriePair), slot_bytes = (size_t)self->walked.n_slots * sizeof(uint32_t);
    size_t int_bytes = self->ints.n * sizeof(PyObject *);
    size_t size = (pair_bytes + 2 * slot_bytes + int_bytes + huge - 1) / huge * huge;
    void *hot;
    if (posix_memalign(&hot, huge, size) != 0)
        return;
#ifdef MADV_HUGEPAGE
    madvise(hot, size, MADV_HUGEPAGE); /* advice: without it the block still works */
#endif
    char *at = hot;
    memcpy(at, self->pairs, pair_bytes);
    memcpy(at + pair_bytes, self->walked.slots, slot_bytes);
    memcpy(at + pair_bytes + slot_bytes, self->walked.values, slot_bytes);
    if (int_bytes != 0) /* no int made yet: all NULL */
        memcpy(at + pair_bytes + 2 * slot_bytes, self->ints.ints, int_bytes);
    free(self->pairs);
    free(self->walked.slots);
    free(self->walked.values);
    free(self->ints.ints);
    self->pairs = (TriePair *)at;
    self->walked.slots = (uint32_t *)(at + pair_bytes);
    self->walked.values = (int32_t *)(at + pair_bytes + slot_bytes);
    self->ints.ints = int_bytes != 0 ? (PyObject **)(at + pair_bytes + 2 * slot_bytes) : NULL;
    self->hot = hot;
}

/* The walk; returns the number of ids written, or -1 where the Python twin must answer. A
 * token's first two bytes are one load of the pair table, each byte after them one load of a
 * double-array slot (_double_array.h); a token's id is read only where its slot says it has one. */
static Py_ssize_t walk(const Trie *t, const uint8_t *data, Py_ssize_t n, int64_t unk, uint32_t *out)
{
    Py_ssize_t pos = 0, written = 0;
    const uint32_t *slots = t->walked.slots;
    const int32_t *values = t->walked.values;
    while (pos + 1 < n) { /* two bytes left at least: the pair table takes the first two steps */
        const TriePair *pair = &t->pairs[data[pos] << 8 | data[pos + 1]];
        uint32_t word = pair->word;
        int32_t token = pair->token;
        Py_ssize_t end = pos + (word & DA_HAS_VALUE ? 2 : 1);
        if (token == PAIR_UNKNOWN) { /* no token starts with this byte */
            if (unk < 0)
                return -1;
            out[written++] = (uint32_t)unk;
            pos++;
            continue;
        }
        if (word != 0) {
            for (Py_ssize_t at = pos + 2; at < n; at++) {
                uint32_t next = da_base(word) + data[at];
                uint32_t next_word = slots[next];
                if (!da_is_child(next_word, data[at]))
                    break;
                word = next_word;
                if (word & DA_HAS_VALUE) {
                    token = values[next];
                    end = at + 1;
                }
            }
        }
        if (token < 0)
            return -1;
        out[written++] = (uint32_t)token;
        pos = end;
    }
    if (pos < n) { /* the last byte, alone */
        uint32_t s = da_base(slots[0]) + data[pos], word = slots[s];
        if (!da_is_child(word, data[pos])) {
            if (unk < 0)
                return -1;
            out[written++] = (uint32_t)unk;
        } else if (word & DA_HAS_VALUE) {
            out[written++] = (uint32_t)values[s];
        } else {
            return -1;
        }
    }
    return written;
}

/* The walk over data[0..len) as a list of ids; None where the Python twin must answer. The caller
 * holds a reference to the immutable object data lies in (the GIL is released on long inputs). */
static PyObject *encode_data(Trie *self, const uint8_t *data, Py_ssize_t len, long long unk)
{
    if (self->values == NULL) {
        PyErr_SetString(PyExc_TypeError, "Trie is not initialised");
        return NULL;
    }
    if (len == 0)
        return PyList_New(0);
    if ((size_t)len > SIZE_MAX / sizeof(uint32_t))
        return PyErr_NoMemory();
    uint32_t small[STACK_IDS];
    uint32_t *out = len <= STACK_IDS ? small : malloc((size_t)len * sizeof(uint32_t)); /* at most one id per byte */
    if (out == NULL)
        return PyErr_NoMemory();
    Py_ssize_t written;
    if (len >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        written = walk(self, data, len, unk, out);
        Py_END_ALLOW_THREADS
    } else {
        written = walk(self, data, len, unk, out);
    }
    PyObject *list = written < 0 ? Py_NewRef(Py_None) : id_ints_list(&self->ints, out, (size_t)written);
    if (out != small)
        free(out);
    return list;
}

PyDoc_STRVAR(Trie_encode_doc,
             "encode(data: bytes, unk: int) -> list[int] | None: the longest-match ids, None where the twin must answer");

static PyObject *Trie_encode(Trie *self, PyObject *args)
{
    Py_buffer data;
    long long unk;
    if (!PyArg_ParseTuple(args, "y*L", &data, &unk))
        return NULL;
    PyObject *result = encode_data(self, data.buf, data.len, unk);
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(Trie_encode_text_doc,
             "encode_text(text: str, unk: int) -> list[int] | None: encode() of text's UTF-8; None also for lone surrogates");

/* encode() of a str's UTF-8: an ASCII str's own bytes (no copy), else its encoding; None for a str
 * that is no UTF-8 (lone surrogates: the caller encodes it with surrogatepass). */
static PyObject *Trie_encode_text(Trie *self, PyObject *args)
{
    PyObject *text;
    long long unk;
    if (!PyArg_ParseTuple(args, "UL", &text, &unk))
        return NULL;
    if (PyUnicode_IS_ASCII(text))
        return encode_data(self, PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text), unk);
    PyObject *utf8 = PyUnicode_AsUTF8String(text);
    if (utf8 == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *result = encode_data(self, (const uint8_t *)PyBytes_AS_STRING(utf8), PyBytes_GET_SIZE(utf8), unk);
    Py_DECREF(utf8);
    return result;
}

/* walk() of each piece of a cut text into out, each special's id after its piece; how many ids,
 * or -1 where a walk is -1. */
static Py_ssize_t walk_pieces(const Trie *t, const CutText *cut, int64_t unk, uint32_t *out)
{
    Py_ssize_t written = 0;
    for (size_t k = 0; k < cut->count; k++) {
        const TextPiece *piece = &cut->pieces[k];
        Py_ssize_t got = walk(t, cut->utf8 + piece->begin, (Py_ssize_t)(piece->end - piece->begin), unk, out + written);
        if (got < 0)
            return -1;
        written += got;
        if (piece->special != UINT32_MAX)
            out[written++] = piece->special;
    }
    return written;
}

PyDoc_STRVAR(Trie_encode_cut_doc,
             "encode_cut(unk: int, plain, special, text: str, parse_special: bool, as_bytes: bool = False) -> list[int] | bytes\n"
             "| None: a whole text's ids (as int32 bytes with as_bytes), cut at the specials by the Automaton of that mode\n"
             "(None: none); None where the Tokenizer must partition");

/* encode_cut(unk, plain, special, text, parse_special): a whole text's ids in one call, the text
 * cut at its special tokens by the automaton of that mode (_cut_text.h), each fragment walked in
 * its own UTF-8 and each special's id kept; None where the Tokenizer must partition and encode
 * fragment by fragment (which is what this equals): no UTF-8, no cuts, a fragment the walk
 * leaves to the Python twin. */
static PyObject *Trie_encode_cut(Trie *self, PyObject *const *args, Py_ssize_t nargs)
{
    int as_bytes = nargs == 6 ? PyObject_IsTrue(args[5]) : 0; /* the ids as int32 bytes (offsets) */
    if (as_bytes < 0)
        return NULL;
    CutText cut;
    int status = cut_arguments(args, nargs == 6 ? 5 : nargs, self->values != NULL, "Trie", &cut);
    if (status != 0)
        return status < 0 ? NULL : Py_NewRef(Py_None);
    long long unk = PyLong_AsLongLong(args[0]);
    if (unk == -1 && PyErr_Occurred()) {
        cut_text_free(&cut);
        return NULL;
    }
    uint32_t small[STACK_IDS];
    size_t room = cut.n + cut.count; /* one id per byte at most, and the specials */
    uint32_t *out = room <= STACK_IDS ? small : malloc(room * sizeof(uint32_t));
    if (out == NULL) {
        cut_text_free(&cut);
        return PyErr_NoMemory();
    }
    Py_ssize_t written;
    if (cut.n >= RELEASE_GIL_BYTES) { /* the text (held by the caller) is immutable, the trie read-only */
        Py_BEGIN_ALLOW_THREADS
        written = walk_pieces(self, &cut, unk, out);
        Py_END_ALLOW_THREADS
    } else {
        written = walk_pieces(self, &cut, unk, out);
    }
    cut_text_free(&cut);
    PyObject *result = written < 0 ? Py_NewRef(Py_None)
                       : as_bytes  ? PyBytes_FromStringAndSize((const char *)out, written * (Py_ssize_t)sizeof(uint32_t))
                                   : id_ints_list(&self->ints, out, (size_t)written);
    if (out != small)
        free(out);
    return result;
}

/* -- plamo2: the best-score path over a byte trie of the tokens ------------------------------------
 *
 * ``Dictionary(blob, offsets, ids, scores, byte_ids)``: the candidate tokens' UTF-8 texts, sorted
 * and distinct, back to back in ``blob`` (token k is blob[offsets[k]:offsets[k + 1]]), with their
 * ids and fixed scores (bpetok/models/plamo2.py's ``_best_path`` is the readable twin). The texts
 * become a byte trie (_sorted_trie.h) laid out as a double array (_double_array.h): the tokens
 * the text at a position starts with are found one load a byte, and each token's score and id
 * lie in one 8-byte entry per slot beside it, where narrowing the sorted texts' range took two
 * binary searches a byte and the score and id two more loads.
 */

#define UNKNOWN_SCORE (-10000000)
/* Texts up to this many bytes take the best path's arrays (~36 bytes a byte) from the stack. */
#define STACK_PATH_BYTES 512

typedef struct {
    int32_t score;
    int32_t id;
} ScoredToken;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    uint8_t *blob; /* the arguments' copies (blob to scores), freed once the trie is built */
    uint64_t *offsets;
    int32_t *ids;
    int32_t *scores;
    uint32_t *byte_ids;      /* 256: each byte's id where no token covers it */
    DoubleArray trie;        /* the texts' trie, its values freed: at_slot holds what they led to */
    ScoredToken *at_slot;    /* per slot of the trie: the score and id of the token ending there */
    IdInts ints;             /* each id's int, made when first returned */
} Dictionary;

static void Dictionary_dealloc(Dictionary *self)
{
    BPETOK_FREE_ALL(free, self->blob, self->offsets, self->ids, self->scores, self->byte_ids, self->at_slot);
    da_free(&self->trie);
    id_ints_free(&self->ints);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The trie of the checked texts and each of its slots' token: 0, or -1 with an exception set. */
static int build_dictionary_trie(Dictionary *self)
{
    if (self->offsets[self->n] >= UINT32_MAX || self->n >= INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "dictionary: texts past 4 GiB or too many tokens");
        return -1;
    }
    uint32_t *offsets = malloc(((size_t)self->n + 1) * sizeof(uint32_t));
    int32_t *places = malloc(((size_t)self->n + 1) * sizeof(int32_t));
    int built = -1;
    if (offsets == NULL || places == NULL) {
        PyErr_NoMemory();
    } else {
        for (Py_ssize_t k = 0; k <= self->n; k++) {
            offsets[k] = (uint32_t)self->offsets[k];
            places[k] = (int32_t)k;
        }
        SortedTrie sorted = {0};
        built = sorted_trie_build(&sorted, self->blob, (size_t)self->offsets[self->n], offsets, (size_t)self->n, places);
        if (built == 0)
            built = da_build(&self->trie, &sorted);
        sorted_trie_free(&sorted);
    }
    free(offsets);
    free(places);
    if (built < 0)
        return -1;
    if ((self->at_slot = calloc(self->trie.n_slots, sizeof(ScoredToken))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int32_t max_id = -1;
    for (uint32_t s = 0; s < self->trie.n_slots; s++) {
        if (self->trie.slots[s] & DA_HAS_VALUE) { /* a place below n: da_build keeps sorted_trie_build's values */
            int32_t k = self->trie.values[s];
            self->at_slot[s] = (ScoredToken){self->scores[k], self->ids[k]};
            max_id = self->ids[k] > max_id ? self->ids[k] : max_id;
        }
    }
    for (int b = 0; b < 256; b++)
        max_id = (int64_t)self->byte_ids[b] > max_id && self->byte_ids[b] < (1u << 26) ? (int32_t)self->byte_ids[b] : max_id;
    free(self->trie.values);
    self->trie.values = NULL;
    if (max_id >= 0 && max_id < (1 << 26) && id_ints_alloc(&self->ints, (size_t)max_id + 1) < 0)
        return -1;
    return 0;
}

static int Dictionary_init(Dictionary *self, PyObject *args, PyObject *kwds)
{
    Py_ssize_t n_blob, n_offsets, n_scores, n_bytes;
    BufferArg arrays[] = {
        {"blob", 1, (void **)&self->blob, &n_blob},
        {"offsets", 8, (void **)&self->offsets, &n_offsets},
        {"ids", 4, (void **)&self->ids, &self->n},
        {"scores", 4, (void **)&self->scores, &n_scores},
        {"byte_ids", 4, (void **)&self->byte_ids, &n_bytes},
    };
    int initialised = self->blob != NULL || self->trie.slots != NULL;
    if (parse_buffer_args(args, kwds, arrays, sizeof arrays / sizeof arrays[0], initialised, "Dictionary") < 0)
        return -1;
    if (n_bytes != 256) {
        PyErr_SetString(PyExc_ValueError, "byte_ids: need 256 ids");
        return -1;
    }
    if (n_offsets < 1 || self->n != n_offsets - 1 || n_scores != self->n) {
        PyErr_SetString(PyExc_ValueError, "dictionary arrays: need n + 1 offsets, n ids and n scores");
        return -1;
    }
    if (self->offsets[0] != 0 || self->offsets[self->n] != (uint64_t)n_blob) {
        PyErr_SetString(PyExc_ValueError, "dictionary offsets: must start at 0 and end at the blob's length");
        return -1;
    }
    for (Py_ssize_t k = 0; k < self->n; k++) {
        if (self->offsets[k + 1] <= self->offsets[k]) {
            PyErr_Format(PyExc_ValueError, "dictionary token %zd: empty or offsets not increasing", k);
            return -1;
        }
    }
    if (build_dictionary_trie(self) < 0) /* it checks the texts are sorted and distinct */
        return -1;
    BPETOK_FREE_ALL(free, self->blob, self->offsets, self->ids, self->scores);
    self->blob = NULL;
    self->offsets = NULL;
    self->ids = self->scores = NULL;
    return 0;
}

static inline Py_ssize_t utf8_length(uint8_t b)
{
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; /* continuation bytes never lead here */
}

/* The best path's arrays, per byte of the text and one past it. */
typedef struct {
    int64_t cost;
    ScoredToken match;    /* the k-th token found at the position being decided */
    uint32_t match_len;
    uint32_t step_len;    /* the decided step: its bytes, */
    int32_t step_id;      /* and its token, or -1 for the character's bytes */
    uint8_t start;        /* a character starts here */
} PathCell;

/* The best path's ids into ``out`` (room for one id per byte), through ``cells`` (n + 1). */
static Py_ssize_t best_path(const Dictionary *d, const uint8_t *data, Py_ssize_t n, PathCell *cells, uint32_t *out)
{
    const uint32_t *slots = d->trie.slots;
    const ScoredToken *at_slot = d->at_slot;
    uint32_t root_base = da_base(slots[0]);
    for (Py_ssize_t i = 0; i <= n; i++)
        cells[i].start = 0;
    for (Py_ssize_t i = 0; i < n; i += utf8_length(data[i]))
        cells[i].start = 1;
    cells[n].start = 1;
    cells[n].cost = 0;
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        if (!cells[i].start)
            continue;
        Py_ssize_t char_len = utf8_length(data[i]);
        if (i + char_len > n)
            char_len = n - i;
        /* The tokens the text at i starts with, shortest first: one trie step a byte (a leaf's
         * base is 0: nothing follows it). Each slot is within the array (_double_array.h). */
        Py_ssize_t m = 0;
        uint32_t base = root_base;
        for (Py_ssize_t at = i; at < n; at++) {
            uint32_t s = base + data[at], word = slots[s];
            if (!da_is_child(word, data[at]))
                break;
            if ((word & DA_HAS_VALUE) && cells[at + 1].start) {
                cells[m].match = at_slot[s];
                cells[m++].match_len = (uint32_t)(at + 1 - i);
            }
            base = da_base(word);
            if (base == 0)
                break;
        }
        int64_t best = (int64_t)1 << 60;
        Py_ssize_t best_len = char_len;
        int32_t best_id = -1;
        int stopped = 0;
        for (Py_ssize_t k = m - 1; k >= 0; k--) { /* the longest first */
            int32_t score = cells[k].match.score;
            int64_t total = cells[i + cells[k].match_len].cost - score;
            if (total < best) {
                best = total;
                best_len = cells[k].match_len;
                best_id = cells[k].match.id;
            }
            if (score == UNKNOWN_SCORE) {
                stopped = 1;
                break;
            }
        }
        if (!stopped && cells[i + char_len].cost - UNKNOWN_SCORE < best) {
            best = cells[i + char_len].cost - UNKNOWN_SCORE;
            best_len = char_len;
            best_id = -1;
        }
        cells[i].cost = best;
        cells[i].step_len = (uint32_t)best_len;
        cells[i].step_id = best_id;
    }
    Py_ssize_t written = 0;
    for (Py_ssize_t pos = 0; pos < n; pos += cells[pos].step_len) {
        if (cells[pos].step_id >= 0) {
            out[written++] = (uint32_t)cells[pos].step_id;
        } else {
            for (Py_ssize_t k = 0; k < (Py_ssize_t)cells[pos].step_len; k++)
                out[written++] = d->byte_ids[data[pos + k]];
        }
    }
    return written;
}

/* best_path over each piece of a cut text into ``out`` (room for one id per byte and one per
 * piece), a byte order mark starting a piece dropped where ``drop_bom`` says (plamo2.py's
 * encode_fragment drops it), each special's id after its piece where ``keep_specials`` says. */
static Py_ssize_t path_pieces(const Dictionary *d, const CutText *cut, int drop_bom, int keep_specials, PathCell *cells,
                              uint32_t *out)
{
    Py_ssize_t written = 0;
    for (size_t k = 0; k < cut->count; k++) {
        const TextPiece *piece = &cut->pieces[k];
        const uint8_t *data = cut->utf8 + piece->begin;
        Py_ssize_t n = (Py_ssize_t)(piece->end - piece->begin);
        if (drop_bom && n >= 3 && data[0] == 0xEF && data[1] == 0xBB && data[2] == 0xBF) { /* U+FEFF */
            data += 3;
            n -= 3;
        }
        if (n > 0)
            written += best_path(d, data, n, cells, out + written);
        if (keep_specials && piece->special != UINT32_MAX)
            out[written++] = piece->special;
    }
    return written;
}

/* path_pieces' ids as a list, its arrays from the stack for a short text: NULL with an exception set. */
static PyObject *paths_list(Dictionary *self, const CutText *cut, int drop_bom, int keep_specials)
{
    size_t n = cut->n;
    /* costs then stay within int64, and the arrays' sizes within size_t */
    if (n >= INT32_MAX || n >= SIZE_MAX / (sizeof(PathCell) + sizeof(uint32_t)) - 1 - cut->count)
        return PyErr_NoMemory();
    PathCell small_cells[STACK_PATH_BYTES + 1];
    uint32_t small_out[STACK_PATH_BYTES + 1];
    size_t room = n + cut->count; /* one id per byte at most, and the specials */
    int on_stack = room <= STACK_PATH_BYTES;
    PathCell *cells = on_stack ? small_cells : malloc((n + 1) * sizeof(PathCell));
    uint32_t *out = on_stack ? small_out : malloc(room * sizeof(uint32_t));
    PyObject *list = NULL;
    if (cells == NULL || out == NULL) {
        PyErr_NoMemory();
    } else {
        Py_ssize_t written;
        if (n >= RELEASE_GIL_BYTES) { /* the text (held by the caller) is immutable, the dictionary read-only */
            Py_BEGIN_ALLOW_THREADS
            written = path_pieces(self, cut, drop_bom, keep_specials, cells, out);
            Py_END_ALLOW_THREADS
        } else {
            written = path_pieces(self, cut, drop_bom, keep_specials, cells, out);
        }
        list = id_ints_list(&self->ints, out, (size_t)written);
    }
    if (!on_stack) {
        free(cells);
        free(out);
    }
    return list;
}

PyDoc_STRVAR(Dictionary_best_path_doc, "best_path(data: bytes) -> list[int]: plamo2's cheapest path through valid UTF-8");

static PyObject *Dictionary_best_path(Dictionary *self, PyObject *args)
{
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data))
        return NULL;
    if (self->trie.slots == NULL) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_TypeError, "Dictionary is not initialised");
        return NULL;
    }
    CutText whole = {data.buf, (size_t)data.len, NULL, 1, {0, (size_t)data.len, UINT32_MAX}};
    whole.pieces = &whole.one;
    PyObject *list = paths_list(self, &whole, 0, 0);
    PyBuffer_Release(&data);
    return list;
}

PyDoc_STRVAR(Dictionary_encode_cut_doc,
             "encode_cut(keep_specials: bool, plain, special, text: str, parse_special: bool) -> list[int] | None: a whole text's\n"
             "ids, cut at the specials by the Automaton of that mode, each fragment's BOM dropped; None: the Tokenizer partitions");

/* What the partition and encode_fragment give (the cuts: _cut_text.h); None for lone surrogates. */
static PyObject *Dictionary_encode_cut(Dictionary *self, PyObject *const *args, Py_ssize_t nargs)
{
    CutText cut;
    int keep_specials;
    int status = cut_arguments_with_flag(args, nargs, self->trie.slots != NULL, "Dictionary", &cut, &keep_specials);
    if (status != 0)
        return status < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *list = paths_list(self, &cut, 1, keep_specials);
    cut_text_free(&cut);
    return list;
}

static PyMethodDef Dictionary_methods[] = {
    {"best_path", (PyCFunction)Dictionary_best_path, METH_VARARGS, Dictionary_best_path_doc},
    {"encode_cut", (PyCFunction)(void (*)(void))Dictionary_encode_cut, METH_FASTCALL, Dictionary_encode_cut_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DictionaryType = {BPETOK_TYPE(Dictionary, "bpetok.models._trie.Dictionary",
    "Sorted token texts and scores for plamo2's best path (bpetok/models/plamo2.py).")};

static PyMethodDef Trie_methods[] = {
    {"encode", (PyCFunction)Trie_encode, METH_VARARGS, Trie_encode_doc},
    {"encode_text", (PyCFunction)Trie_encode_text, METH_VARARGS, Trie_encode_text_doc},
    {"encode_cut", (PyCFunction)(void (*)(void))Trie_encode_cut, METH_FASTCALL, Trie_encode_cut_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TrieType = {BPETOK_TYPE(Trie, "bpetok.models._trie.Trie",
    "A byte trie for llama.cpp's rwkv longest-match walk (bpetok/models/rwkv.py).")};

BPETOK_MODULE(_trie, "The rwkv model's compiled longest-match walk and plamo2's best path.", NULL, &TrieType, &DictionaryType)
