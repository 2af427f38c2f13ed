/* llama.cpp's special-token partition in one pass, for any number of special tokens.
 *
 * The C twin of bpetok.specials.partition_reference (tests hold the two equal). The reference
 * cuts each special (longest UTF-8 first, ties by id: its "rank") out of every remaining raw
 * fragment in turn, leftmost first, so it costs (specials) x (text). Here:
 *
 * 1. An Aho-Corasick automaton over the specials' UTF-8, built once, reads the str's characters
 *    once, fed as their UTF-8 (surrogates as surrogatepass writes them, as the specials were), so
 *    no copy of the text is made and positions are character offsets. At each end position the
 *    matches ending there are a chain of distinct lengths (the node's output, then its
 *    dictionary-suffix links); a "candidate" keeps the end position and the longest match of
 *    the chain not yet tried: one per position at most, however many specials nest there.
 * 2. The cuts are replayed in the reference's order: length by length, longest first; within a
 *    length by rank, then position. A match is taken iff none of its characters is consumed (by a
 *    token taken before, or the whitespace an LSTRIP/RSTRIP token ate) or protected. Consumed
 *    characters are what separates the reference's raw fragments, so "none consumed" is "inside
 *    one raw fragment", and ascending position with that test is the reference's leftmost-first
 *    non-overlapping cut within each fragment. The candidates wait in buckets by the length of
 *    their next match; a round empties its bucket, moving each candidate on to the bucket of its
 *    next shorter match, or dropping it when its end character is consumed (every match ending
 *    there holds it) or its chain is done. So each round touches only its own matches, and a
 *    candidate is touched once per match tried: nested specials cost time, not memory.
 * 3. The fragments are the raw runs between the taken tokens (an eaten run of whitespace is
 *    always next to its token), sliced out of the str by character offsets (partition), or
 *    given as those offsets (cuts: for bpetok/models/_fragments.h's encode_cut, which reads the
 *    fragments from the str's own UTF-8).
 *
 * Memory: the candidates (12 bytes per position where a match ends), a round's matches (8 bytes
 * each), two bitmaps (consumed, protected: a bit per character) and the taken tokens (8 bytes
 * each): O(text), whatever the specials. The GIL is released while 1 and 2 run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_module.h"

#define STRIP_LEFT 1
#define STRIP_RIGHT 2

typedef struct {
    int32_t fail;    /* the longest proper suffix that is a node */
    int32_t out;     /* rank of the special spelled by this node, or -1 */
    int32_t dict;    /* the nearest proper suffix with an output, or -1 */
    uint32_t depth;  /* bytes from the root */
    uint32_t edges;  /* first of this node's edges (sorted by byte) */
    uint32_t n_edges;
} Node;

typedef struct {
    PyObject_HEAD
    Node *nodes;
    uint8_t *edge_byte;
    int32_t *edge_to;
    int32_t root_next[256]; /* the root's edges as a table: -1 for none */
    int only_first;         /* the one byte every special starts with, or -1 */
    Py_ssize_t n_nodes;
    Py_ssize_t n_specials;
    PyObject **ids;     /* rank -> the token id (a Python int) */
    uint32_t *lengths;  /* rank -> length in characters (code points) */
    uint8_t *strips;    /* rank -> STRIP_LEFT | STRIP_RIGHT */
} Automaton;

/* -- building ------------------------------------------------------------------------------- */

typedef struct {  /* the trie while it is built: children as linked lists */
    int32_t *first_child, *next_sibling, *out;
    uint8_t *byte;
    uint32_t *depth;
    Py_ssize_t n, cap;
} Trie;

static int trie_grow(Trie *t) {
    Py_ssize_t cap = t->cap ? t->cap * 2 : 1024;
    int32_t *fc = PyMem_Realloc(t->first_child, cap * sizeof(int32_t));
    if (fc) t->first_child = fc;
    int32_t *ns = PyMem_Realloc(t->next_sibling, cap * sizeof(int32_t));
    if (ns) t->next_sibling = ns;
    int32_t *out = PyMem_Realloc(t->out, cap * sizeof(int32_t));
    if (out) t->out = out;
    uint8_t *by = PyMem_Realloc(t->byte, cap);
    if (by) t->byte = by;
    uint32_t *de = PyMem_Realloc(t->depth, cap * sizeof(uint32_t));
    if (de) t->depth = de;
    if (!fc || !ns || !out || !by || !de) return -1;
    t->cap = cap;
    return 0;
}

static void trie_free(Trie *t) {
    PyMem_Free(t->first_child);
    PyMem_Free(t->next_sibling);
    PyMem_Free(t->out);
    PyMem_Free(t->byte);
    PyMem_Free(t->depth);
}

static int32_t trie_node(Trie *t, int32_t parent, uint8_t b) {
    int32_t c;
    for (c = t->first_child[parent]; c >= 0; c = t->next_sibling[c])
        if (t->byte[c] == b) return c;
    if (t->n >= INT32_MAX - 1) return -2;
    if (t->n == t->cap && trie_grow(t) < 0) return -1;
    c = (int32_t)t->n++;
    t->first_child[c] = -1;
    t->out[c] = -1;
    t->byte[c] = b;
    t->depth[c] = t->depth[parent] + 1;
    t->next_sibling[c] = t->first_child[parent];
    t->first_child[parent] = c;
    return c;
}

static inline int32_t child_of(const Automaton *a, int32_t node, uint8_t b) {
    if (node == 0) return a->root_next[b];
    const Node *n = &a->nodes[node];
    uint32_t lo = n->edges, hi = n->edges + n->n_edges;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint8_t m = a->edge_byte[mid];
        if (m == b) return a->edge_to[mid];
        if (m < b) lo = mid + 1; else hi = mid;
    }
    return -1;
}

static inline int32_t step(const Automaton *a, int32_t state, uint8_t b) {
    for (;;) {
        int32_t next = child_of(a, state, b);
        if (next >= 0) return next;
        if (state == 0) return 0;
        state = a->nodes[state].fail;
    }
}

static int compare_edges(const void *x, const void *y) {
    return (int)((const uint8_t *)x)[0] - (int)((const uint8_t *)y)[0];
}

/* The trie's nodes and sorted edges as arrays; fail and dictionary links in breadth-first order. */
static int automaton_finish(Automaton *a, Trie *t) {
    Py_ssize_t n = t->n;
    a->nodes = PyMem_Calloc(n, sizeof(Node));
    a->edge_byte = PyMem_Malloc(n > 1 ? n - 1 : 1);
    a->edge_to = PyMem_Malloc((n > 1 ? n - 1 : 1) * sizeof(int32_t));
    int32_t *queue = PyMem_Malloc(n * sizeof(int32_t));
    uint8_t (*pairs)[5] = PyMem_Malloc(256 * 5);
    if (!a->nodes || !a->edge_byte || !a->edge_to || !queue || !pairs) {
        PyMem_Free(queue);
        PyMem_Free(pairs);
        return -1;
    }
    a->n_nodes = n;
    uint32_t e = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Node *node = &a->nodes[i];
        node->out = t->out[i];
        node->depth = t->depth[i];
        node->edges = e;
        int k = 0;
        for (int32_t c = t->first_child[i]; c >= 0; c = t->next_sibling[c]) {
            pairs[k][0] = t->byte[c];
            memcpy(&pairs[k][1], &c, 4);
            k++;
        }
        qsort(pairs, k, 5, compare_edges);
        for (int j = 0; j < k; j++) {
            a->edge_byte[e] = pairs[j][0];
            memcpy(&a->edge_to[e], &pairs[j][1], 4);
            e++;
        }
        node->n_edges = (uint32_t)k;
    }
    PyMem_Free(pairs);
    for (int b = 0; b < 256; b++) a->root_next[b] = -1;
    for (uint32_t j = 0; j < a->nodes[0].n_edges; j++) a->root_next[a->edge_byte[j]] = a->edge_to[j];
    a->only_first = a->nodes[0].n_edges == 1 ? a->edge_byte[0] : -1;
    a->nodes[0].fail = 0;
    a->nodes[0].dict = -1;
    Py_ssize_t head = 0, tail = 0;
    queue[tail++] = 0;
    while (head < tail) {
        int32_t u = queue[head++];
        const Node *un = &a->nodes[u];
        for (uint32_t j = un->edges; j < un->edges + un->n_edges; j++) {
            int32_t v = a->edge_to[j];
            Node *vn = &a->nodes[v];
            if (u == 0) {
                vn->fail = 0;
            } else {
                vn->fail = step(a, un->fail, a->edge_byte[j]);
            }
            const Node *f = &a->nodes[vn->fail];
            vn->dict = f->out >= 0 ? vn->fail : f->dict;
            queue[tail++] = v;
        }
    }
    PyMem_Free(queue);
    return 0;
}

static void Automaton_dealloc(Automaton *self) {
    if (self->ids) {
        for (Py_ssize_t i = 0; i < self->n_specials; i++) Py_XDECREF(self->ids[i]);
        PyMem_Free(self->ids);
    }
    BPETOK_FREE_ALL(PyMem_Free, self->lengths, self->strips, self->nodes, self->edge_byte, self->edge_to);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Automaton_init(Automaton *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"specials", "ids", "strips", NULL};
    PyObject *specials, *id_arg = NULL, *strip_arg = NULL, *id_seq = NULL, *strip_seq = NULL;
    if (self->ids) {
        PyErr_SetString(PyExc_TypeError, "Automaton is already built");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO:Automaton", kwlist, &specials, &id_arg, &strip_arg)) return -1;
    if ((id_arg == NULL) != (strip_arg == NULL)) {
        PyErr_SetString(PyExc_TypeError, "Automaton(texts, ids, strips): give ids and strips together");
        return -1;
    }
    /* columns: three parallel sequences (texts, ids, strips), no tuple per special */
    int columns = id_arg != NULL;
    PyObject *seq = PySequence_Fast(specials, columns ? "Automaton(texts, ids, strips): texts must be a sequence of bytes"
                                                      : "Automaton(specials): a sequence of (bytes, id, strip)");
    if (!seq) return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (columns) {
        id_seq = PySequence_Fast(id_arg, "Automaton(texts, ids, strips): ids must be a sequence of int");
        strip_seq = id_seq ? PySequence_Fast(strip_arg, "Automaton(texts, ids, strips): strips must be a sequence of int") : NULL;
        if (!strip_seq) {
            Py_XDECREF(id_seq);
            Py_DECREF(seq);
            return -1;
        }
        if (PySequence_Fast_GET_SIZE(id_seq) != count || PySequence_Fast_GET_SIZE(strip_seq) != count) {
            PyErr_SetString(PyExc_ValueError, "Automaton(texts, ids, strips): the three sequences differ in length");
            Py_DECREF(id_seq);
            Py_DECREF(strip_seq);
            Py_DECREF(seq);
            return -1;
        }
    }
    Trie t = {0};
    int ok = 0;
    self->ids = PyMem_Calloc(count ? count : 1, sizeof(PyObject *));
    self->lengths = PyMem_Calloc(count ? count : 1, sizeof(uint32_t));
    self->strips = PyMem_Calloc(count ? count : 1, 1);
    if (!self->ids || !self->lengths || !self->strips || trie_grow(&t) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    self->n_specials = count;
    t.n = 1;
    t.first_child[0] = -1;
    t.out[0] = -1;
    t.depth[0] = 0;
    Py_ssize_t previous_size = PY_SSIZE_T_MAX;
    for (Py_ssize_t rank = 0; rank < count; rank++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, rank);
        const char *text;
        Py_ssize_t size;
        PyObject *token_id;
        int strip;
        if (columns) {
            PyObject *strip_obj = PySequence_Fast_GET_ITEM(strip_seq, rank);
            token_id = PySequence_Fast_GET_ITEM(id_seq, rank);
            long strip_long = PyLong_Check(strip_obj) ? PyLong_AsLong(strip_obj) : -1;
            if (!PyBytes_Check(item) || !PyLong_Check(token_id) || strip_long < 0 || strip_long > INT_MAX) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "Automaton(texts, ids, strips): special %zd is not bytes, int, int >= 0", rank);
                goto done;
            }
            text = PyBytes_AS_STRING(item);
            size = PyBytes_GET_SIZE(item);
            strip = (int)strip_long;
        } else if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "y#O!i", &text, &size, &PyLong_Type, &token_id, &strip)) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "Automaton(specials): item %zd is not (bytes, int, int)", rank);
            }
            goto done;
        }
        if (size == 0 || size > UINT32_MAX / 2) {
            PyErr_Format(PyExc_ValueError, "Automaton(specials): item %zd has an empty or oversized text", rank);
            goto done;
        }
        Py_INCREF(token_id);
        self->ids[rank] = token_id;
        uint32_t chars = 0;
        for (Py_ssize_t i = 0; i < size; i++) chars += ((uint8_t)text[i] & 0xC0) != 0x80;
        self->lengths[rank] = chars;
        self->strips[rank] = (uint8_t)(strip & (STRIP_LEFT | STRIP_RIGHT));
        int32_t node = 0;
        for (Py_ssize_t i = 0; i < size; i++) {
            node = trie_node(&t, node, (uint8_t)text[i]);
            if (node < 0) {
                if (node == -1) PyErr_NoMemory();
                else PyErr_SetString(PyExc_ValueError, "Automaton(specials): too many bytes of special text");
                goto done;
            }
        }
        if (t.out[node] < 0) t.out[node] = (int32_t)rank;  /* a duplicate text: the first rank takes all */
        if (size > previous_size) {
            PyErr_SetString(PyExc_ValueError, "Automaton(specials): not in cutting order (longest first)");
            goto done;
        }
        previous_size = size;
    }
    if (automaton_finish(self, &t) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    ok = 1;
done:
    trie_free(&t);
    Py_DECREF(seq);
    Py_XDECREF(id_seq);
    Py_XDECREF(strip_seq);
    return ok ? 0 : -1;
}

/* -- partition ------------------------------------------------------------------------------ */

static inline int bit(const uint64_t *bits, size_t i) { return (int)((bits[i >> 6] >> (i & 63)) & 1); }
static inline void set_bit(uint64_t *bits, size_t i) { bits[i >> 6] |= (uint64_t)1 << (i & 63); }

/* Whether any bit in [start, end) is set. */
static int any_bit(const uint64_t *bits, size_t start, size_t end) {
    if (start >= end) return 0;
    size_t first = start >> 6, last = (end - 1) >> 6;
    uint64_t head = ~(uint64_t)0 << (start & 63);
    uint64_t tail = ~(uint64_t)0 >> (63 - ((end - 1) & 63));
    if (first == last) return (bits[first] & head & tail) != 0;
    if (bits[first] & head) return 1;
    for (size_t w = first + 1; w < last; w++)
        if (bits[w]) return 1;
    return (bits[last] & tail) != 0;
}

static void set_bits(uint64_t *bits, size_t start, size_t end) {
    while (start < end && (start & 63)) set_bit(bits, start++);
    for (; start + 64 <= end; start += 64) bits[start >> 6] = ~(uint64_t)0;
    while (start < end) set_bit(bits, start++);
}

/* Stable sort of keys by bits [shift, shift + nbits), 8 bits a pass. */
static int radix_sort(uint64_t *keys, size_t n, int shift, int nbits) {
    if (n < 2 || nbits <= 0) return 0;
    uint64_t *tmp = PyMem_RawMalloc(n * sizeof(uint64_t));
    if (!tmp) return -1;
    uint64_t *src = keys, *dst = tmp;
    for (int pass = 0; pass * 8 < nbits; pass++) {
        size_t counts[257] = {0};
        int s = shift + pass * 8;
        for (size_t i = 0; i < n; i++) counts[((src[i] >> s) & 255) + 1]++;
        for (int d = 0; d < 256; d++) counts[d + 1] += counts[d];
        for (size_t i = 0; i < n; i++) dst[counts[(src[i] >> s) & 255]++] = src[i];
        uint64_t *swap = src; src = dst; dst = swap;
    }
    if (src != keys) memcpy(keys, src, n * sizeof(uint64_t));
    PyMem_RawFree(tmp);
    return 0;
}

static int bits_for(uint64_t value) {
    int b = 0;
    while (value) b++, value >>= 1;
    return b;
}

/* A position where a match ends: its next match to try (a node), the next candidate in its bucket. */
typedef struct { uint32_t end; int32_t node, next; } Candidate;

typedef struct {
    const Automaton *a;
    int kind;          /* the str's storage: 1, 2 or 4 bytes a code point */
    const void *data;
    size_t n;          /* characters */
    uint64_t *consumed, *protected_;  /* a bit per character; protected_: NULL when nothing is */
    uint64_t *taken;                  /* (start << 32) | rank */
    size_t n_taken, cap_taken;
} Cut;

static inline int space_at(const Cut *c, size_t i) {
    Py_UCS4 cp = PyUnicode_READ(c->kind, c->data, i);
    return cp == ' ' || (cp >= '\t' && cp <= '\r');  /* C isspace() */
}

static int take(Cut *c, uint32_t start, uint32_t rank) {
    uint32_t end = start + c->a->lengths[rank];
    if (any_bit(c->consumed, start, end)) return 0;
    if (c->protected_ && any_bit(c->protected_, start, end)) return 0;
    if (c->n_taken == c->cap_taken) {
        size_t cap = c->cap_taken ? c->cap_taken * 2 : 256;
        uint64_t *grown = PyMem_RawRealloc(c->taken, cap * sizeof(uint64_t));
        if (!grown) return -1;
        c->taken = grown;
        c->cap_taken = cap;
    }
    c->taken[c->n_taken++] = ((uint64_t)start << 32) | rank;
    set_bits(c->consumed, start, end);
    uint8_t strip = c->a->strips[rank];
    if (strip & STRIP_LEFT)
        for (size_t i = start; i > 0 && !bit(c->consumed, i - 1) && space_at(c, i - 1); i--) set_bit(c->consumed, i - 1);
    if (strip & STRIP_RIGHT)
        for (size_t i = end; i < c->n && !bit(c->consumed, i) && space_at(c, i); i++) set_bit(c->consumed, i);
    return 0;
}

/* The UTF-8 of ``cp``; surrogates too, as the specials were encoded (surrogatepass). */
static inline int utf8_of(Py_UCS4 cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 63));
        out[2] = (uint8_t)(0x80 | (cp & 63));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 63));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 63));
    out[3] = (uint8_t)(0x80 | (cp & 63));
    return 4;
}

static inline uint8_t first_byte_of(Py_UCS4 cp) {
    if (cp < 0x80) return (uint8_t)cp;
    if (cp < 0x800) return (uint8_t)(0xC0 | (cp >> 6));
    if (cp < 0x10000) return (uint8_t)(0xE0 | (cp >> 12));
    return (uint8_t)(0xF0 | (cp >> 18));
}

/* Advance i to the next character some special starts with (one loop per storage kind). */
#define SKIP_TO_START(T)                                                     \
    do {                                                                     \
        const T *chars = (const T *)c->data;                                 \
        while (a->root_next[first_byte_of(chars[i])] < 0)                    \
            if (++i == c->n) goto scanned;                                   \
        cp = chars[i];                                                       \
    } while (0)

/* The first i' >= i below n with chars[i'] == target, else n; four characters a word (a word
 * holding target has a zero lane once XORed with it, and the test below finds a zero lane and
 * nothing else). For UCS-2 text, as memchr is for Latin-1: most English and CJK text. */
static inline size_t find_ucs2(const Py_UCS2 *chars, size_t i, size_t n, Py_UCS2 target) {
    const uint64_t ones = 0x0001000100010001ULL, highs = 0x8000800080008000ULL, pattern = ones * target;
    for (; i + 4 <= n; i += 4) {
        uint64_t w;
        memcpy(&w, chars + i, sizeof(w));
        uint64_t x = w ^ pattern;
        if (((x - ones) & ~x & highs) != 0) break;
    }
    for (; i < n; i++)
        if (chars[i] == target) return i;
    return n;
}

/* Steps 1 and 2 of the header: fills c->taken, sorted by start. 0, or -1 when out of memory. */
/* The text between the match before taken match ``k`` (ending at ``pos``) and match ``k`` (the
 * text's end for k == n_taken), less the whitespace either match consumed: [*a, *b). Returns where
 * match ``k`` starts. */
static inline size_t gap_before(const Cut *c, size_t k, size_t n, size_t pos, size_t *a, size_t *b) {
    size_t start = k < c->n_taken ? (size_t)(c->taken[k] >> 32) : n;
    *a = pos, *b = start;
    while (*a < *b && bit(c->consumed, *a)) (*a)++;     /* the whitespace the token before ate */
    while (*b > *a && bit(c->consumed, *b - 1)) (*b)--; /* the whitespace this one ate */
    return start;
}

static int cut(Cut *c) {
    const Automaton *a = c->a;
    const Node *nodes = a->nodes;
    Candidate *cands = NULL;
    uint64_t *round = NULL;
    int32_t *heads = NULL, *tails = NULL;
    size_t n_cands = 0, cap_cands = 0;
    uint32_t longest = 0;
    int32_t state = 0;
    /* Latin-1 storage holds an ASCII character as its byte: the C library can look for it. */
    int use_memchr = c->kind == PyUnicode_1BYTE_KIND && a->only_first >= 0 && a->only_first < 0x80;
    int use_words = c->kind == PyUnicode_2BYTE_KIND && a->only_first >= 0 && a->only_first < 0x80;
    for (size_t i = 0; i < c->n; i++) {
        Py_UCS4 cp;
        if (state == 0) { /* skip the characters no special starts with */
            if (use_memchr) {
                const uint8_t *base = c->data;
                const uint8_t *at = memchr(base + i, a->only_first, c->n - i);
                if (!at) break;
                i = (size_t)(at - base);
                cp = (Py_UCS4)a->only_first;
            } else if (use_words) {
                i = find_ucs2(c->data, i, c->n, (Py_UCS2)a->only_first);
                if (i == c->n) break;
                cp = (Py_UCS4)a->only_first;
            } else if (c->kind == PyUnicode_1BYTE_KIND) {
                SKIP_TO_START(Py_UCS1);
            } else if (c->kind == PyUnicode_2BYTE_KIND) {
                SKIP_TO_START(Py_UCS2);
            } else {
                SKIP_TO_START(Py_UCS4);
            }
        } else {
            cp = PyUnicode_READ(c->kind, c->data, i);
        }
        uint8_t bytes[4];
        int size = utf8_of(cp, bytes);
        for (int k = 0; k < size; k++) state = step(a, state, bytes[k]);
        /* Matches end on whole characters: a special's UTF-8 is whole, and UTF-8 self-synchronizing. */
        int32_t m = nodes[state].out >= 0 ? state : nodes[state].dict;
        if (m < 0 || (c->protected_ && bit(c->protected_, i))) continue;
        if (n_cands == cap_cands) {
            size_t cap = cap_cands ? cap_cands * 2 : 256;
            Candidate *grown = PyMem_RawRealloc(cands, cap * sizeof(Candidate));
            if (!grown) goto oom;
            cands = grown;
            cap_cands = cap;
        }
        cands[n_cands].end = (uint32_t)(i + 1);
        cands[n_cands].node = m;
        n_cands++;
        if (nodes[m].depth > longest) longest = nodes[m].depth;
    }
scanned:
    if (!n_cands) goto finished;
    /* Buckets by the UTF-8 length of a candidate's next match: singly linked lists through
       ``next``, filled in position order; a candidate sits in one bucket at a time. */
    heads = PyMem_RawMalloc(((size_t)longest + 1) * 2 * sizeof(int32_t));
    round = PyMem_RawMalloc(n_cands * sizeof(uint64_t));
    if (!heads || !round) goto oom;
    tails = heads + (size_t)longest + 1;
    for (size_t d = 0; d <= longest; d++) heads[d] = tails[d] = -1;
    for (size_t k = 0; k < n_cands; k++) {
        uint32_t d = nodes[cands[k].node].depth;
        cands[k].next = -1;
        if (tails[d] < 0) heads[d] = (int32_t)k; else cands[tails[d]].next = (int32_t)k;
        tails[d] = (int32_t)k;
    }
    int rank_bits = bits_for((uint64_t)a->n_specials), start_bits = bits_for(c->n);
    /* Rounds go by UTF-8 length (the node's depth: the cutting order); positions are characters. */
    for (uint32_t length = longest; length > 0; length--) {
        size_t n_round = 0;
        int32_t low_rank = INT32_MAX, high_rank = -1;
        int in_order = 1;
        uint32_t last_start = 0;
        int32_t k = heads[length];
        while (k >= 0) {
            Candidate *cand = &cands[k];
            int32_t next = cand->next;
            if (!bit(c->consumed, cand->end - 1)) { /* else every match ending here holds that character */
                const Node *node = &nodes[cand->node];
                int32_t rank = node->out;
                uint32_t start = cand->end - a->lengths[rank];
                if (start < last_start) in_order = 0;
                last_start = start;
                round[n_round++] = ((uint64_t)(uint32_t)rank << 32) | start;
                if (rank < low_rank) low_rank = rank;
                if (rank > high_rank) high_rank = rank;
                cand->node = node->dict;
                if (cand->node >= 0) { /* on to the bucket of its next shorter match */
                    uint32_t d = nodes[cand->node].depth;
                    cand->next = -1;
                    if (tails[d] < 0) heads[d] = k; else cands[tails[d]].next = k;
                    tails[d] = k;
                }
            }
            k = next;
        }
        /* The reference's order within a length: by rank, then position. A bucket filled over
           several rounds is out of position order. */
        if (!in_order && radix_sort(round, n_round, 0, start_bits) < 0) goto oom;
        if (low_rank != high_rank && radix_sort(round, n_round, 32, rank_bits) < 0) goto oom;
        for (size_t r = 0; r < n_round; r++)
            if (take(c, (uint32_t)round[r], (uint32_t)(round[r] >> 32)) < 0) goto oom;
    }
finished:
    PyMem_RawFree(cands);
    PyMem_RawFree(round);
    PyMem_RawFree(heads);
    return radix_sort(c->taken, c->n_taken, 32, bits_for(c->n));
oom:
    PyMem_RawFree(cands);
    PyMem_RawFree(round);
    PyMem_RawFree(heads);
    return -1;
}

static PyObject *slice(PyObject *text, size_t start, size_t end) {
    if (PyUnicode_CheckExact(text)) return PyUnicode_Substring(text, (Py_ssize_t)start, (Py_ssize_t)end);
    return PySequence_GetSlice(text, (Py_ssize_t)start, (Py_ssize_t)end);  /* a subclass's own slicing */
}

static int append_new(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int r = PyList_Append(list, item);
    Py_DECREF(item);
    return r;
}

PyDoc_STRVAR(Automaton_partition_doc,
             "partition(text, protected=None): text cut at the specials, as str fragments and int ids.\n\n"
             "protected: sorted, disjoint, non-empty (start, end) character spans no special may overlap.");

static PyObject *Automaton_partition(Automaton *self, PyObject *args) {
    PyObject *text, *spans = NULL, *span_seq = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "U|O:partition", &text, &spans)) return NULL;
    if (!self->nodes) {
        PyErr_SetString(PyExc_TypeError, "Automaton is not built");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if ((uint64_t)n >= INT32_MAX) { /* candidates are numbered by int32 */
        PyErr_SetString(PyExc_OverflowError, "partition: text of 2**31 characters or more");
        return NULL;
    }
    Cut c = {self, PyUnicode_KIND(text), PyUnicode_DATA(text), (size_t)n, NULL, NULL, NULL, 0, 0};
    size_t words = ((size_t)n + 63) / 64 + 1;
    c.consumed = PyMem_RawCalloc(words, sizeof(uint64_t));
    if (!c.consumed) goto oom;
    Py_ssize_t n_spans = 0;
    if (spans && spans != Py_None) {
        span_seq = PySequence_Fast(spans, "partition: protected spans must be a sequence of (start, end)");
        if (!span_seq) goto fail;
        n_spans = PySequence_Fast_GET_SIZE(span_seq);
    }
    if (n_spans) {
        c.protected_ = PyMem_RawCalloc(words, sizeof(uint64_t));
        if (!c.protected_) goto oom;
        Py_ssize_t last_end = 0;
        for (Py_ssize_t k = 0; k < n_spans; k++) {
            Py_ssize_t start, end;
            PyObject *item = PySequence_Fast_GET_ITEM(span_seq, k);
            if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "nn", &start, &end) || start < last_end || end <= start ||
                end > n) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError,
                                "partition: protected spans must be sorted, disjoint, non-empty (start, end) within the text");
                goto fail;
            }
            last_end = end;
            set_bits(c.protected_, (size_t)start, (size_t)end);
        }
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = cut(&c);
    Py_END_ALLOW_THREADS
    if (failed) goto oom;
    result = PyList_New(0);
    if (!result) goto fail;
    if (c.n_taken == 0) {
        if (PyList_Append(result, text) < 0) goto fail;
        goto done;
    }
    size_t pos = 0;
    for (size_t k = 0; k <= c.n_taken; k++) {
        size_t a, b, start = gap_before(&c, k, (size_t)n, pos, &a, &b);
        if (a < b && append_new(result, slice(text, a, b)) < 0) goto fail;
        if (k == c.n_taken) break;
        uint32_t rank = (uint32_t)(c.taken[k] & 0xFFFFFFFFu);
        if (PyList_Append(result, self->ids[rank]) < 0) goto fail;
        pos = start + self->lengths[rank];
    }
    goto done;
oom:
    PyErr_NoMemory();
fail:
    Py_CLEAR(result);
done:
    Py_XDECREF(span_seq);
    PyMem_RawFree(c.consumed);
    PyMem_RawFree(c.protected_);
    PyMem_RawFree(c.taken);
    return result;
}

/* cuts() releases the GIL for texts of at least this many characters (partition always does). */
#define CUTS_RELEASE_GIL_CHARS 256
/* Texts up to this many characters keep their consumed bits on the stack. */
#define CUTS_SMALL_WORDS 16

PyDoc_STRVAR(Automaton_cuts_doc,
             "cuts(text) -> bytes | None: partition(text)'s fragments as (start, end, id) uint32 triples, native\n"
             "byte order: the fragment [start, end) in characters (start == end: none), then the special id\n"
             "(0xFFFFFFFF after the last). b'' when no special is cut; None when the text is 2**31 characters\n"
             "or more, or an id is no uint32.");

/* partition() without the str objects, for a caller that encodes the fragments from the text's
 * own UTF-8 (bpetok/models/_fragments.h, Merger.encode_cut): the same fragments, as (start, end,
 * id) uint32 triples, native byte order: the raw fragment [start, end) in characters (start ==
 * end: none) and then the special ``id`` (UINT32_MAX after the last fragment). b"" when no
 * special is cut: the whole text is one fragment. None when the text is too long or an id is no
 * uint32 below UINT32_MAX: the caller then partitions as usual. */
static PyObject *Automaton_cuts(Automaton *self, PyObject *text) {
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "cuts() takes a str, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    if (!self->nodes) {
        PyErr_SetString(PyExc_TypeError, "Automaton is not built");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if ((uint64_t)n >= INT32_MAX) Py_RETURN_NONE;
    Cut c = {self, PyUnicode_KIND(text), PyUnicode_DATA(text), (size_t)n, NULL, NULL, NULL, 0, 0};
    uint64_t small[CUTS_SMALL_WORDS];
    size_t words = ((size_t)n + 63) / 64 + 1;
    if (words <= CUTS_SMALL_WORDS) {
        memset(small, 0, sizeof(small));
        c.consumed = small;
    } else if (!(c.consumed = PyMem_RawCalloc(words, sizeof(uint64_t)))) {
        return PyErr_NoMemory();
    }
    int failed;
    if (n < CUTS_RELEASE_GIL_CHARS) {
        failed = cut(&c);
    } else {
        Py_BEGIN_ALLOW_THREADS
        failed = cut(&c);
        Py_END_ALLOW_THREADS
    }
    PyObject *result = NULL;
    if (failed) {
        PyErr_NoMemory();
    } else if (c.n_taken == 0) {
        result = PyBytes_FromStringAndSize(NULL, 0);
    } else if (c.n_taken >= (size_t)PY_SSIZE_T_MAX / 12 - 1) {
        result = PyErr_NoMemory();
    } else if ((result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((c.n_taken + 1) * 12)))) {
        unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
        size_t pos = 0;
        for (size_t k = 0; k <= c.n_taken; k++) {
            size_t a, b, start = gap_before(&c, k, (size_t)n, pos, &a, &b);
            uint32_t triple[3] = {(uint32_t)a, (uint32_t)b, UINT32_MAX};
            if (k < c.n_taken) {
                uint32_t rank = (uint32_t)(c.taken[k] & 0xFFFFFFFFu);
                unsigned long id = PyLong_AsUnsignedLong(self->ids[rank]);
                if ((id == (unsigned long)-1 && PyErr_Occurred()) || id >= UINT32_MAX) {
                    PyErr_Clear(); /* not a uint32: partition() gives it as it is */
                    Py_SETREF(result, Py_None);
                    Py_INCREF(Py_None);
                    break;
                }
                triple[2] = (uint32_t)id;
                pos = start + self->lengths[rank];
            }
            memcpy(out + 12 * k, triple, sizeof(triple));
        }
    }
    if (c.consumed != small) PyMem_RawFree(c.consumed);
    PyMem_RawFree(c.taken);
    return result;
}

static PyMethodDef Automaton_methods[] = {
    {"partition", (PyCFunction)Automaton_partition, METH_VARARGS, Automaton_partition_doc},
    {"cuts", (PyCFunction)Automaton_cuts, METH_O, Automaton_cuts_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AutomatonType = {BPETOK_TYPE(Automaton, "bpetok._specials.Automaton",
    "Automaton(specials): the specials, (UTF-8 bytes, id, strip flags) in cutting order "
    "(longest first, ties by id); strip: 1 LSTRIP, 2 RSTRIP. Automaton(texts, ids, strips): the "
    "same as three parallel sequences (no tuple per special).")};

BPETOK_MODULE(_specials, "llama.cpp's special-token partition in one Aho-Corasick pass (C twin of bpetok.specials).", NULL,
              &AutomatonType)
