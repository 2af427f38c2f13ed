/* A byte trie of sorted distinct texts, breadth first (bpetok/models/_wpm.c, _ugm.c; _trie.c packs
 * rwkv's flattened trie into the same nodes).
 *
 * Node k covers the run of the sorted texts that start with its prefix; the one equal to the
 * prefix, if any, sorts first and gives the node its value; the others are grouped by their next
 * byte into the node's children, which are therefore one sorted run of the node array. One struct
 * a node, children side by side: a step of a walk reads one or two cache lines, and the nodes
 * near the root, the busiest, are packed together at the front.
 *
 * Memory safety: the texts' offsets, order and distinctness are checked before anything is built;
 * there is at most one node per byte of the texts plus the root, which the arrays are sized for.
 */

#ifndef BPETOK_SORTED_TRIE_H
#define BPETOK_SORTED_TRIE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TRIE_NO_NODE UINT32_MAX

/* Nodes with more children than this find a child by a bitmap of its bytes (its rank among the
 * set bits is its place), the others by a scan. */
#define TRIE_SCAN_CHILDREN 8

typedef struct {
    uint32_t first; /* the first child */
    int32_t value;  /* of the text equal to the prefix, or -1 */
    uint32_t bits;  /* with many children: 1 + the index of their bitmap; else 0 */
    uint16_t count; /* children (at most 256) */
    uint8_t byte;   /* the byte that leads here */
} TrieNode;

typedef struct {
    uint64_t bits[4];  /* the bytes of the node's children */
    uint8_t before[4]; /* set bits in the words before each (a child's place: no popcount of them) */
} TrieBitmap;

typedef struct {
    TrieNode *nodes;
    uint32_t n_nodes;
    uint32_t root[256]; /* the root's child per byte, or TRIE_NO_NODE */
    TrieBitmap *bitmaps; /* per node with many children */
} SortedTrie;

static inline unsigned popcount64(uint64_t x)
{
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (unsigned)((x * 0x0101010101010101ULL) >> 56);
}

/* The bitmaps of the nodes with many children (their children already placed and given their
 * bytes, in order); 0, or -1 with MemoryError set. */
static inline int sorted_trie_index(SortedTrie *t)
{
    uint32_t big = 0;
    for (uint32_t k = 0; k < t->n_nodes; k++)
        big += t->nodes[k].count > TRIE_SCAN_CHILDREN;
    free(t->bitmaps);
    t->bitmaps = big ? calloc(big, sizeof *t->bitmaps) : NULL;
    if (big && !t->bitmaps) {
        PyErr_NoMemory();
        return -1;
    }
    uint32_t at = 0;
    for (uint32_t k = 0; k < t->n_nodes; k++) {
        TrieNode *node = &t->nodes[k];
        node->bits = 0;
        if (node->count <= TRIE_SCAN_CHILDREN)
            continue;
        TrieBitmap *map = &t->bitmaps[at];
        for (uint32_t c = node->first; c < node->first + node->count; c++)
            map->bits[t->nodes[c].byte >> 6] |= 1ULL << (t->nodes[c].byte & 63);
        for (unsigned w = 1; w < 4; w++) /* at most 192 */
            map->before[w] = (uint8_t)(map->before[w - 1] + popcount64(map->bits[w - 1]));
        node->bits = ++at;
    }
    return 0;
}

/* Builds the trie of ``n`` texts (text k: blob[offsets[k] .. offsets[k + 1]], value values[k] >= 0);
 * 0, or -1 with a ValueError or MemoryError set. */
static inline int sorted_trie_build(SortedTrie *t, const uint8_t *blob, size_t blob_len, const uint32_t *offsets, size_t n,
                             const int32_t *values)
{
    if (offsets[0] != 0 || offsets[n] != (uint64_t)blob_len) {
        PyErr_SetString(PyExc_ValueError, "token offsets: must start at 0 and end at the blob's length");
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        if (offsets[k + 1] <= offsets[k]) {
            PyErr_Format(PyExc_ValueError, "token %zu: empty or offsets out of order", k);
            return -1;
        }
        if (values[k] < 0) {
            PyErr_Format(PyExc_ValueError, "token %zu: negative id", k);
            return -1;
        }
        if (k > 0) {
            size_t la = offsets[k] - offsets[k - 1], lb = offsets[k + 1] - offsets[k];
            int cmp = memcmp(blob + offsets[k - 1], blob + offsets[k], la < lb ? la : lb);
            if (cmp > 0 || (cmp == 0 && la >= lb)) {
                PyErr_Format(PyExc_ValueError, "token %zu: texts not sorted and distinct", k);
                return -1;
            }
        }
    }
    if ((uint64_t)blob_len + 1 >= TRIE_NO_NODE) {
        PyErr_SetString(PyExc_ValueError, "tokens: too many bytes for the trie");
        return -1;
    }
    size_t cap = blob_len + 1;
    uint32_t *lo = malloc(cap * sizeof(uint32_t)), *hi = malloc(cap * sizeof(uint32_t)), *depth = malloc(cap * sizeof(uint32_t));
    t->nodes = malloc(cap * sizeof(TrieNode));
    if (!lo || !hi || !depth || !t->nodes) {
        free(lo);
        free(hi);
        free(depth);
        PyErr_NoMemory();
        return -1;
    }
    uint32_t nodes = 1;
    lo[0] = 0, hi[0] = (uint32_t)n, depth[0] = 0;
    t->nodes[0].byte = 0;
    for (uint32_t k = 0; k < nodes; k++) { /* nodes grows as children are queued */
        uint32_t i = lo[k], d = depth[k];
        TrieNode *node = &t->nodes[k];
        node->value = -1;
        node->first = nodes;
        if (i < hi[k] && offsets[i + 1] - offsets[i] == d) {
            node->value = values[i];
            i++;
        }
        while (i < hi[k]) { /* every text here is longer than d */
            uint8_t b = blob[offsets[i] + d];
            uint32_t j = i + 1;
            while (j < hi[k] && blob[offsets[j] + d] == b)
                j++;
            /* each node is the prefix ending at a distinct (text, depth): fewer than cap */
            lo[nodes] = i, hi[nodes] = j, depth[nodes] = d + 1;
            t->nodes[nodes++].byte = b;
            i = j;
        }
        node->count = (uint16_t)(nodes - node->first); /* one child per byte at most */
    }
    t->n_nodes = nodes;
    free(lo);
    free(hi);
    free(depth);
    for (int b = 0; b < 256; b++)
        t->root[b] = TRIE_NO_NODE;
    for (uint32_t c = t->nodes[0].first; c < t->nodes[0].first + t->nodes[0].count; c++)
        t->root[t->nodes[c].byte] = c;
    return sorted_trie_index(t);
}

/* The child of ``node`` along byte ``b``, or TRIE_NO_NODE. */
static inline uint32_t sorted_trie_child(const SortedTrie *t, uint32_t node, uint8_t b)
{
    const TrieNode *n = &t->nodes[node];
    if (n->bits) { /* many children: the bitmap says whether b is one, and its place */
        const TrieBitmap *map = &t->bitmaps[n->bits - 1];
        unsigned word = b >> 6, bit = b & 63;
        if (!(map->bits[word] >> bit & 1))
            return TRIE_NO_NODE;
        return n->first + map->before[word] + popcount64(map->bits[word] & ((1ULL << bit) - 1));
    }
    for (uint32_t c = n->first; c < n->first + n->count; c++) /* a few children, side by side */
        if (t->nodes[c].byte == b)
            return c;
    return TRIE_NO_NODE;
}

static inline void sorted_trie_free(SortedTrie *t)
{
    free(t->nodes);
    free(t->bitmaps);
    t->nodes = NULL;
    t->bitmaps = NULL;
    t->n_nodes = 0;
}

#endif
