/* The merge loops of the byte-level BPE kernel (bpetok/models/gpt2/kernel/kernel.h lists its files;
 * bpetok/models/gpt2/bpe.py is the reference), and the storage of its byte-string tables.
 *
 * The rules are those of BytePairModel.merge_symbols: a piece's bytes start as each byte's
 * symbol; merge the adjacent pair of lowest rank, the leftmost on ties, until no pair has a rank;
 * then a token symbol is its id and a virtual one (a merge result that is not a token) its
 * fallback ids. Three loops apply them: a rescan of the pair ranks (short pieces), a heap over a
 * linked list, and for long pieces one bucket of positions per rank (merge_by_rank). All three
 * give merge_symbols' result (the tests hold them to it); bpe_piece picks one; with ignore_merges (llama3) a piece that
 * is a whole token is that token.
 *
 * The byte-string tables (BytesTable: the piece and chunk caches, and the whole tokens) are open
 * addressing over entries carved from blocks; an entry is never moved or freed while its table
 * lives. Nothing here takes a lock or needs the GIL: the callers hold the caches' lock.
 */

#include "kernel.h"

/* Up to this many symbols a piece is merged by rescanning its pair ranks (fast on short
 * pieces); above, with a heap over a linked list (O(n log n)), or rank by rank (below). */
#define SCAN_LIMIT 48
/* From this many symbols a piece is merged rank by rank (merge_by_rank), when the kernel's rank
 * count is at most RANKS_PER_SYMBOL times it (its bucket heads are one array over all ranks). */
#define RANK_LIMIT 1024
#define RANKS_PER_SYMBOL 32

/* -- the byte-string tables' storage --------------------------------------------------------- */

static int table_grow(BytesTable *t)
{
    size_t capacity = t->capacity ? t->capacity * 2 : 1024;
    Slot *slots = PyMem_RawCalloc(capacity, sizeof(Slot));
    if (slots == NULL)
        return -1;
    for (size_t k = 0; k < t->capacity; k++) {
        if (t->slots[k].entry == NULL)
            continue;
        size_t i = t->slots[k].hash & (capacity - 1);
        while (slots[i].entry != NULL)
            i = (i + 1) & (capacity - 1);
        slots[i] = t->slots[k];
    }
    PyMem_RawFree(t->slots);
    t->used += (capacity - t->capacity) * sizeof(Slot);
    t->slots = slots;
    t->capacity = capacity;
    return 0;
}

/* Room for an entry of `size` bytes (4-aligned, as its fields need), or NULL (no memory). */
static Entry *entry_room(BytesTable *t, size_t size)
{
    size = (size + 3) & ~(size_t)3;
    if (t->free_at == NULL || size > (size_t)(t->free_end - t->free_at)) {
        int own = size > ENTRY_BLOCK_BYTES / 4;
        size_t bytes = sizeof(void *) + (own ? size : ENTRY_BLOCK_BYTES);
        void **block = PyMem_RawMalloc(bytes);
        if (block == NULL)
            return NULL;
        block[0] = t->blocks;
        t->blocks = block;
        unsigned char *room = (unsigned char *)(block + 1);
        if (own)
            return (Entry *)room;
        t->free_at = room;
        t->free_end = room + ENTRY_BLOCK_BYTES;
    }
    Entry *e = (Entry *)t->free_at;
    t->free_at += size;
    return e;
}

/* Add key -> ids unless it is there or does not fit the budget. 0: done (or skipped), -1: no memory. */
int table_add(BytesTable *t, uint64_t hash, const unsigned char *key, size_t len, const uint32_t *ids,
              size_t n_ids)
{
    if (len > UINT32_MAX || n_ids > UINT32_MAX)
        return 0;
    size_t size = sizeof(Entry) + n_ids * sizeof(uint32_t) + len;
    size_t growth = (t->count + 1) * 2 > t->capacity ? (t->capacity ? t->capacity : 1024) * sizeof(Slot) : 0;
    if (t->used + size + growth > t->budget)
        return 0;
    if (table_find(t, hash, key, len) != NULL)
        return 0;
    if (growth && table_grow(t) < 0)
        return -1;
    Entry *e = entry_room(t, size);
    if (e == NULL)
        return -1;
    e->key_len = (uint32_t)len;
    e->n_ids = (uint32_t)n_ids;
    if (n_ids)
        memcpy(e->ids, ids, n_ids * sizeof(uint32_t));
    if (len)
        memcpy(e->ids + n_ids, key, len);
    size_t mask = t->capacity - 1;
    size_t i = hash & mask;
    while (t->slots[i].entry != NULL)
        i = (i + 1) & mask;
    t->slots[i].hash = hash;
    t->slots[i].entry = e;
    t->count++;
    t->used += size;
    return 0;
}

void table_free(BytesTable *t)
{
    while (t->blocks != NULL) {
        void **block = t->blocks;
        t->blocks = block[0];
        PyMem_RawFree(block);
    }
    PyMem_RawFree(t->slots);
    t->slots = NULL;
    t->free_at = t->free_end = NULL;
    t->capacity = t->count = t->used = 0;
}

/* -- merging ----------------------------------------------------------------------------------- */

/* A queued pair: rank << 32 | position of its left symbol, so one compare orders pairs by rank,
 * the leftmost first on ties. */
typedef uint64_t HeapItem;

/* The per-piece arrays (sym, rank, merged, next, prev, heap, text) are one block, from s->heap:
 * a call that merges a few short pieces then costs one allocation, not seven. */
void scratch_free(Scratch *s)
{
    PyMem_RawFree(s->heap);
    PyMem_RawFree(s->heads);
    PyMem_RawFree(s->order);
    memset(s, 0, sizeof(*s));
}

static int scratch_reserve(Scratch *s, size_t n)
{
    if (n <= s->capacity)
        return 0;
    size_t capacity = n < 64 ? 64 : n;
    /* A heap holds at most (n - 1) pairs at first plus 2 per merge (n - 1 merges): under 3n. Then
     * five arrays of uint32, then the text (2 bytes per byte at most). */
    size_t per_symbol = 3 * sizeof(HeapItem) + 5 * sizeof(uint32_t) + 2;
    PyMem_RawFree(s->heap); /* the bucket heads (heads, order) outlive a resize */
    s->capacity = 0;
    unsigned char *block = capacity <= SIZE_MAX / per_symbol ? PyMem_RawMalloc(capacity * per_symbol) : NULL;
    s->heap = (HeapItem *)block;
    if (block == NULL) {
        s->sym = s->rank = s->merged = s->next = s->prev = NULL;
        s->text = NULL;
        return -1;
    }
    uint32_t *words = (uint32_t *)(block + capacity * 3 * sizeof(HeapItem));
    s->sym = words;
    s->rank = words + capacity;
    s->merged = words + 2 * capacity;
    s->next = words + 3 * capacity;
    s->prev = words + 4 * capacity;
    s->text = (unsigned char *)(words + 5 * capacity);
    s->capacity = capacity;
    return 0;
}

static void heap_push(HeapItem *h, size_t *n, HeapItem item)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (item >= h[parent])
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = item;
}

static HeapItem heap_pop(HeapItem *h, size_t *n)
{
    HeapItem top = h[0];
    HeapItem last = h[--(*n)];
    size_t i = 0, count = *n;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= count)
            break;
        if (child + 1 < count && h[child + 1] < h[child])
            child++;
        if (h[child] >= last)
            break;
        h[i] = h[child];
        i = child;
    }
    if (count)
        h[i] = last;
    return top;
}

/* A pair's merge as one word, rank << 32 | merged, NO_PAIR if none. */
#define NO_PAIR UINT64_MAX

static inline uint64_t merge_word(const Merge *m)
{
    return m ? (uint64_t)m->rank << 32 | m->merged : NO_PAIR;
}

/* Merge s->sym[0 .. n) in place; returns the number of symbols left (in s->sym[0 ..)). */
static size_t merge_scan(const Kernel *k, Scratch *s, size_t n)
{
    uint32_t *sym = s->sym;
    uint64_t *pair = s->heap; /* pair[i]: sym[i] with sym[i + 1] (the heap is not used here) */
    uint64_t *hash = s->heap + s->capacity; /* the first pairs' hashes */
    /* The first pairs' lookups are independent: their filter words, then the slots of those that
     * pass, are requested together, so that their cache misses overlap. */
    for (size_t i = 0; i + 1 < n; i++) {
        hash[i] = mix64(merge_key(sym[i], sym[i + 1]));
        merge_prefetch(&k->merges, hash[i], 0);
    }
    for (size_t i = 0; i + 1 < n; i++)
        merge_prefetch(&k->merges, hash[i], 1);
    for (size_t i = 0; i + 1 < n; i++)
        pair[i] = merge_word(merge_find_hashed(&k->merges, merge_key(sym[i], sym[i + 1]), hash[i]));
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (pair[i] >> 32 < pair[best] >> 32) /* the leftmost of the lowest rank */
                best = i;
        if (pair[best] == NO_PAIR)
            break;
        uint32_t merged = (uint32_t)pair[best];
        /* The two pairs the merge makes are looked up next; the next step waits on them. Their
         * filter words and slots are requested together first, so that the (up to four) cache
         * misses overlap with each other and with the shift, not one after another. */
        uint64_t before_key = 0, after_key = 0, before_hash = 0, after_hash = 0;
        if (best > 0) {
            before_key = merge_key(sym[best - 1], merged);
            before_hash = mix64(before_key);
            merge_prefetch_all(&k->merges, before_hash);
        }
        if (best + 2 < n) {
            after_key = merge_key(merged, sym[best + 2]);
            after_hash = mix64(after_key);
            merge_prefetch_all(&k->merges, after_hash);
        }
        sym[best] = merged;
        for (size_t i = best + 1; i + 1 < n; i++) { /* drop symbol best + 1 and pair best */
            sym[i] = sym[i + 1];
            pair[i - 1] = pair[i];
        }
        n--;
        if (best > 0)
            pair[best - 1] = merge_word(merge_find_hashed(&k->merges, before_key, before_hash));
        if (best + 1 < n)
            pair[best] = merge_word(merge_find_hashed(&k->merges, after_key, after_hash));
    }
    return n;
}

/* Replace the pair at `left` (with the symbol after it) by `merged`, in the linked list. */
static inline void join(uint32_t *sym, uint32_t *next, uint32_t *prev, size_t n, uint32_t left, uint32_t merged)
{
    uint32_t right = next[left], after = next[right];
    sym[left] = merged;
    sym[right] = UINT32_MAX;
    next[left] = after;
    if (after < n)
        prev[after] = left;
}

static size_t merge_heap(const Kernel *k, Scratch *s, size_t n)
{
    uint32_t *sym = s->sym, *next = s->next, *prev = s->prev;
    HeapItem *heap = s->heap;
    size_t heap_n = 0, heap_cap = s->capacity * 3;
    for (size_t i = 0; i < n; i++) {
        next[i] = (uint32_t)(i + 1);
        prev[i] = i ? (uint32_t)(i - 1) : UINT32_MAX;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const Merge *m = merge_find(&k->merges, sym[i], sym[i + 1]);
        if (m)
            heap_push(heap, &heap_n, (uint64_t)m->rank << 32 | i);
    }
    while (heap_n) {
        HeapItem top = heap_pop(heap, &heap_n);
        uint32_t left = (uint32_t)top, rank = (uint32_t)(top >> 32), right = next[left];
        if (sym[left] == UINT32_MAX || right >= n)
            continue; /* stale: the left symbol was merged away, or is now the last */
        /* A pair is queued each time it forms and a symbol never goes back to an earlier value,
         * so the pair now at `left` is the queued one exactly when it has the queued rank. */
        const Merge *m = merge_find(&k->merges, sym[left], sym[right]);
        if (m == NULL || m->rank != rank)
            continue;
        uint32_t merged = m->merged, after = next[right], before = prev[left];
        join(sym, next, prev, n, left, merged);
        /* Each merge adds at most two pairs and removes one symbol: the heap holds at most
         * (n - 1) + 2 * (n - 1) items, under 3n; checked all the same. */
        if (before != UINT32_MAX) {
            const Merge *mb = merge_find(&k->merges, sym[before], merged);
            if (mb && heap_n < heap_cap)
                heap_push(heap, &heap_n, (uint64_t)mb->rank << 32 | before);
        }
        if (after < n) {
            const Merge *ma = merge_find(&k->merges, merged, sym[after]);
            if (ma && heap_n < heap_cap)
                heap_push(heap, &heap_n, (uint64_t)ma->rank << 32 | left);
        }
    }
    size_t out = 0;
    for (size_t i = 0; i < n; i = next[i])
        sym[out++] = sym[i];
    return out;
}

/* -- merging rank by rank (long pieces) ---------------------------------------------------- */

/* A bucket of left positions per rank, as singly linked lists through an entry pool (the heap's
 * buffer: entry = next entry << 32 | position, NO_ENTRY ends a list), and a small heap of the
 * ranks whose buckets are not empty. Ranks are taken in increasing order, each bucket's
 * positions left to right: the order merge_heap pops them in, as long as no merge makes a pair
 * ranked at or below the one being applied. If one does (a vocabulary whose merges are not in
 * that order), the piece is merged again from the start by merge_heap. On 1 MB of spaces this is
 * a few sweeps over the piece where the heap did a million sift-downs. */
#define NO_ENTRY UINT32_MAX

typedef struct {
    uint64_t *pool;
    size_t used, cap;
    uint32_t *heads;
    HeapItem *order; /* a heap (merge_heap's) of the ranks whose bucket is not empty: each at most once */
    size_t n_order, n_ranks;
} Buckets;

/* Queue position `left` under `rank`; 0, or -1 when out of room (cannot happen: a piece queues
 * at most its n - 1 first pairs and 2 per merge, under the pool's 3n; a rank is in the heap at
 * most once; every rank is below n_ranks), which merge_by_rank treats as out of order. */
static int bucket_add(Buckets *b, uint32_t rank, uint32_t left)
{
    if (b->used >= b->cap || rank >= b->n_ranks || (b->heads[rank] == NO_ENTRY && b->n_order >= b->n_ranks))
        return -1;
    if (b->heads[rank] == NO_ENTRY)
        heap_push(b->order, &b->n_order, rank);
    b->pool[b->used] = (uint64_t)b->heads[rank] << 32 | left;
    b->heads[rank] = (uint32_t)b->used++;
    return 0;
}

static int compare_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The rank of the pair at `left` (NO_RANK if none), and its merge in *found. */
static inline uint32_t pair_rank(const Kernel *k, const uint32_t *sym, const uint32_t *next, size_t n, uint32_t left,
                                 const Merge **found)
{
    *found = NULL;
    if (sym[left] == UINT32_MAX || next[left] >= n)
        return NO_RANK;
    *found = merge_find(&k->merges, sym[left], sym[next[left]]);
    return *found ? (*found)->rank : NO_RANK;
}

/* Merge s->sym[0 .. n) like merge_heap; returns the symbols left, or SIZE_MAX when the ranks came
 * out of order (s->sym is then as it was: merge_heap must do it). Needs s->heads for k's ranks. */
static size_t merge_by_rank(const Kernel *k, Scratch *s, size_t n)
{
    uint32_t *sym = s->sym, *next = s->next, *prev = s->prev, *original = s->merged, *positions = s->rank;
    Buckets b = {s->heap, 0, s->capacity * 3, s->heads, s->order, 0, s->n_heads};
    int in_order = 1;
    memcpy(original, sym, n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) {
        next[i] = (uint32_t)(i + 1);
        prev[i] = i ? (uint32_t)(i - 1) : UINT32_MAX;
    }
    for (size_t i = 0; i + 1 < n && in_order; i++) {
        const Merge *m = merge_find(&k->merges, sym[i], sym[i + 1]);
        if (m && bucket_add(&b, m->rank, (uint32_t)i) < 0)
            in_order = 0;
    }
    while (b.n_order && in_order) {
        uint32_t rank = (uint32_t)heap_pop(b.order, &b.n_order);
        /* The bucket's positions whose pair still has this rank (distinct: one pair per position
         * at a time), oldest first: each sweep queued its positions left to right. */
        size_t count = 0;
        for (uint32_t e = b.heads[rank]; e != NO_ENTRY; e = (uint32_t)(b.pool[e] >> 32)) {
            uint32_t left = (uint32_t)b.pool[e];
            const Merge *m;
            if (pair_rank(k, sym, next, n, left, &m) == rank) {
                if (count >= n) { /* cannot happen (see above); the heap then does it */
                    in_order = 0;
                    break;
                }
                positions[count++] = left;
            }
        }
        b.heads[rank] = NO_ENTRY;
        if (!in_order)
            break;
        int sorted = 1;
        for (size_t i = 0; i < count / 2; i++) {
            uint32_t t = positions[i];
            positions[i] = positions[count - 1 - i];
            positions[count - 1 - i] = t;
        }
        for (size_t i = 1; i < count && sorted; i++)
            sorted = positions[i - 1] < positions[i];
        if (!sorted)
            qsort(positions, count, sizeof(uint32_t), compare_u32);
        for (size_t i = 0; i < count && in_order; i++) {
            uint32_t left = positions[i];
            const Merge *m;
            if (pair_rank(k, sym, next, n, left, &m) != rank)
                continue; /* stale: merged away, or its neighbour changed, in this sweep */
            uint32_t before = prev[left];
            join(sym, next, prev, n, left, m->merged);
            const Merge *formed;
            uint32_t r;
            if (before != UINT32_MAX && (r = pair_rank(k, sym, next, n, before, &formed)) != NO_RANK)
                in_order = r > rank && bucket_add(&b, r, before) == 0;
            if (in_order && (r = pair_rank(k, sym, next, n, left, &formed)) != NO_RANK)
                in_order = r > rank && bucket_add(&b, r, left) == 0;
        }
    }
    if (!in_order) { /* leave every bucket empty for the next piece, and the symbols as they were */
        while (b.n_order)
            b.heads[heap_pop(b.order, &b.n_order)] = NO_ENTRY;
        memcpy(sym, original, n * sizeof(uint32_t));
        return SIZE_MAX;
    }
    size_t out = 0;
    for (size_t i = 0; i < n; i = next[i])
        sym[out++] = sym[i];
    return out;
}

/* Bucket heads (all empty) and a rank heap for k's ranks in s: 1, or 0 if there are too many
 * ranks for n symbols (the heap is cheaper then), or -1 (no memory). */
static int reserve_heads(const Kernel *k, Scratch *s, size_t n)
{
    if (k->n_ranks == 0 || (size_t)k->n_ranks > RANKS_PER_SYMBOL * n)
        return 0;
    if (s->n_heads < k->n_ranks) {
        PyMem_RawFree(s->heads);
        PyMem_RawFree(s->order);
        s->n_heads = 0;
        s->heads = PyMem_RawMalloc((size_t)k->n_ranks * sizeof(uint32_t));
        s->order = PyMem_RawMalloc((size_t)k->n_ranks * sizeof(HeapItem));
        if (s->heads == NULL || s->order == NULL)
            return -1;
        memset(s->heads, 0xff, (size_t)k->n_ranks * sizeof(uint32_t)); /* NO_ENTRY */
        s->n_heads = k->n_ranks;
    }
    return 1;
}

/* (see kernel.h) */
Py_ssize_t bpe_piece(const Kernel *k, Scratch *s, const unsigned char *p, size_t n, uint32_t *out, size_t cap)
{
    if (n == 0)
        return 0;
    if (n >= UINT32_MAX / 4 || scratch_reserve(s, n) < 0)
        return -1; /* positions are 32-bit, and a heap of 3n entries must fit */
    if (k->ignore_merges) {
        size_t len = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned char b = p[i];
            memcpy(s->text + len, k->byte_chars[b], k->byte_char_len[b]);
            len += k->byte_char_len[b];
        }
        const Entry *e = table_find(&k->whole, hash_bytes(k->seed, s->text, len), s->text, len);
        if (e != NULL) {
            if (cap < 1)
                return -2;
            out[0] = e->ids[0];
            return 1;
        }
    }
    for (size_t i = 0; i < n; i++)
        s->sym[i] = k->byte_ids[p[i]];
    size_t left = SIZE_MAX;
    if (n <= SCAN_LIMIT) {
        left = merge_scan(k, s, n);
    } else if (n >= RANK_LIMIT) {
        int heads = reserve_heads(k, s, n);
        if (heads < 0)
            return -1;
        if (heads)
            left = merge_by_rank(k, s, n);
    }
    if (left == SIZE_MAX)
        left = merge_heap(k, s, n);
    size_t count = 0;
    for (size_t i = 0; i < left; i++) {
        uint32_t symbol = s->sym[i];
        if (symbol < k->n_tokens) {
            if (count >= cap)
                return -2;
            out[count++] = symbol;
        } else {
            uint32_t v = symbol - k->n_tokens; /* < n_symbols - n_tokens: checked when built */
            for (uint32_t j = k->virtual_start[v]; j < k->virtual_start[v + 1]; j++) {
                if (count >= cap)
                    return -2;
                out[count++] = k->virtual_ids[j];
            }
        }
    }
    return (Py_ssize_t)count;
}
