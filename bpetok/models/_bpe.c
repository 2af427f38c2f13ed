/* The compiled kernel of bpetok's byte-level BPE (bpetok/models/gpt2.py is the reference).
 *
 * Only the hot loops live here: merging a piece's bytes by merge rank, a bounded cache of
 * piece -> ids, and the glue that turns a list of pre-tokenized pieces into ids in one call.
 * Everything else (loading, special tokens, pre-tokenizing, decoding) stays in Python.
 *
 * The tables come from BytePairModel, built once per vocabulary: each byte's initial symbol,
 * the merges keyed by (left symbol, right symbol) -> (rank, merged symbol), and for each
 * "virtual" symbol (a merge result that is not a token) the ids its bytes fall back to. The
 * rules are those of BytePairModel.merge_symbols: merge the adjacent pair of lowest rank, the
 * leftmost on ties, until no pair has a rank; then a token symbol is its id and a virtual one
 * its fallback ids. Three loops apply them: a rescan (short pieces), a heap, and for long pieces
 * one bucket of positions per rank (merge_by_rank, BytePairModel._merge_long's twin).
 *
 * Memory safety: every symbol in the tables is checked against the symbol count when the
 * tables are built, every write into an output buffer is checked against its capacity, and the
 * only memory read is what this object owns or the pieces it was handed (UTF-8 buffers of str
 * objects it holds references to).
 *
 * Threads: the GIL is released only around work on C data (encode_text: splitting, cache lookups
 * and merging; the other entry points: merging). The tables are read-only after init; the two
 * caches are shared by every call on the kernel and guarded by one read-write lock (lookups
 * share it, additions take it alone). An entry is never moved or freed while the kernel lives,
 * so the ids a lookup found stay valid after the lock is dropped. Whoever holds the lock never
 * waits for the GIL (nor calls into Python), so waiting for the lock with the GIL held cannot
 * deadlock. Scratch memory is per call. encode_texts(threads=N) starts N - 1 threads of its own
 * for one call (see "a batch of texts on several threads"); they never touch a Python object
 * and are done before the call returns.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../pretok/_split.h"

#ifdef _WIN32
#include <windows.h>
typedef SRWLOCK CacheLock;
#define lock_init(l) (InitializeSRWLock(l), 0)
#define lock_destroy(l) ((void)0)
#define lock_read(l) AcquireSRWLockShared(l)
#define unlock_read(l) ReleaseSRWLockShared(l)
#define unlock_write(l) ReleaseSRWLockExclusive(l)
#define try_lock_read(l) (TryAcquireSRWLockShared(l) != 0)
#define try_lock_write(l) (TryAcquireSRWLockExclusive(l) != 0)
#else
#include <pthread.h>
typedef pthread_rwlock_t CacheLock;
#define lock_init(l) pthread_rwlock_init(l, NULL)
#define lock_destroy(l) pthread_rwlock_destroy(l)
#define lock_read(l) pthread_rwlock_rdlock(l)
#define unlock_read(l) pthread_rwlock_unlock(l)
#define unlock_write(l) pthread_rwlock_unlock(l)
#define try_lock_read(l) (pthread_rwlock_tryrdlock(l) == 0)
#define try_lock_write(l) (pthread_rwlock_trywrlock(l) == 0)
#endif

/* The cache's lock is held only for a batch's lookups or for copying its new entries in: far
 * shorter than a thread's sleep and wake-up, which made two threads slower than one. So a
 * reader retries for a while before it sleeps, and a writer that cannot get the lock soon does
 * not remember its batch (the cache is only a cache: those pieces are merged again next time). */
#define LOCK_TRIES 4096

static void lock_read_soon(CacheLock *l)
{
    for (int i = 0; i < LOCK_TRIES; i++)
        if (try_lock_read(l))
            return;
    lock_read(l);
}

static int lock_write_soon(CacheLock *l)
{
    for (int i = 0; i < LOCK_TRIES; i++)
        if (try_lock_write(l))
            return 1;
    return 0;
}

#define NO_RANK UINT32_MAX
#define EMPTY_KEY UINT64_MAX
/* Up to this many symbols a piece is merged by rescanning its pair ranks (fast on short
 * pieces); above, with a heap over a linked list (O(n log n)), or rank by rank (below). */
#define SCAN_LIMIT 48
/* From this many symbols a piece is merged rank by rank (merge_by_rank), when the kernel's rank
 * count is at most RANKS_PER_SYMBOL times it (its bucket heads are one array over all ranks). */
#define RANK_LIMIT 1024
#define RANKS_PER_SYMBOL 32
/* Pieces longer than this many bytes are never cached (one would fill the budget). */
#define CACHE_LONGEST 1024
/* What an id's int object costs: an int above 256 is 28 bytes, 32 in obmalloc's size classes. */
#define ID_OBJECT_BYTES 32
/* Release the GIL when a call has at least this many bytes of work on C data (below, a possible
 * wait to take the GIL back could cost more than the work). */
#define RELEASE_GIL_BYTES 2048

/* What the functions that run without the GIL return on failure; set_error turns it into an
 * exception once the GIL is held again. */
#define FAIL_NO_MEMORY (-1)
#define FAIL_BOUND (-2)   /* a piece gave more ids than its bound: a bug */
#define FAIL_SPLITTER (-3) /* the splitter did not advance: a bug */
#define FAIL_PYTHON (-4)   /* a Python exception is set already */

static void set_error(int failure)
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

/* -- hashing ------------------------------------------------------------------------------ */

/* Cheap and good enough for open addressing (the table index takes the low bits): one multiply,
 * then the high half folded down so the low bits depend on every bit of x. */
static inline uint64_t mix64(uint64_t x)
{
    x *= 0x9E3779B97F4A7C15ULL;
    return x ^ x >> 32;
}

/* The last n (< 8) bytes of a key as one word, without a variable-length memcpy call. */
static inline uint64_t tail_word(const unsigned char *p, size_t n)
{
    if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4); /* overlaps a when n < 8 */
        return (uint64_t)a << 32 | b;
    }
    if (n == 0)
        return 0;
    return (uint64_t)p[0] << 16 | (uint64_t)p[n / 2] << 8 | p[n - 1];
}

static uint64_t hash_bytes(uint64_t seed, const unsigned char *p, size_t n)
{
    uint64_t h = seed ^ (n * 0x9E3779B97F4A7C15ULL);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    return mix64(h ^ tail_word(p, n));
}

/* -- the merge table: (left, right) -> (rank, merged), open addressing ------------------------- */

typedef struct {
    uint64_t key; /* left << 32 | right; EMPTY_KEY for a free slot */
    uint32_t rank;
    uint32_t merged;
} Merge;

/* The table is several MB, so most probes miss the CPU's caches, and most pairs a piece asks
 * about have no merge. A bit per hash value (its high bits; the table takes the low ones), set
 * for every merge and small enough to stay in cache, answers those without touching the table. */
typedef struct {
    Merge *slots;
    uint64_t mask;
    uint64_t *filter; /* 1 << filter_bits bits */
    unsigned filter_shift; /* 64 - filter_bits */
} MergeTable;

static inline int filter_has(const MergeTable *t, uint64_t h)
{
    uint64_t bit = h >> t->filter_shift;
    return (int)(t->filter[bit >> 6] >> (bit & 63) & 1);
}

static inline const Merge *merge_find(const MergeTable *t, uint32_t left, uint32_t right)
{
    uint64_t key = (uint64_t)left << 32 | right;
    uint64_t h = mix64(key);
    if (!filter_has(t, h))
        return NULL;
    uint64_t i = h & t->mask;
    for (;;) {
        const Merge *m = &t->slots[i];
        if (m->key == key)
            return m;
        if (m->key == EMPTY_KEY)
            return NULL;
        i = (i + 1) & t->mask;
    }
}

/* -- a table of byte strings -> ids (the piece cache, and whole tokens for ignore_merges) ---- */

typedef struct {
    uint32_t key_len;
    uint32_t n_ids;
    uint32_t ids[]; /* n_ids ids, then key_len bytes of key */
} Entry;

static inline const unsigned char *entry_key(const Entry *e)
{
    return (const unsigned char *)(e->ids + e->n_ids);
}

/* A slot keeps its entry's hash, so a probe reads the entry (a likely cache miss) only when the
 * hash matches. */
typedef struct {
    uint64_t hash;
    Entry *entry; /* NULL: free */
} Slot;

/* Entries are carved from blocks of ENTRY_BLOCK_BYTES (one allocation per block, not per entry);
 * an entry above a quarter of that gets a block of its own. Each block starts with a pointer to
 * the one made before it. Entries are never freed on their own. */
#define ENTRY_BLOCK_BYTES ((size_t)1 << 16)

typedef struct {
    Slot *slots;
    size_t capacity; /* a power of two, or 0 */
    size_t count;
    size_t used;   /* bytes: entries plus the slot array */
    size_t budget; /* past it, nothing more is added */
    void *blocks;  /* the newest block, or NULL */
    unsigned char *free_at, *free_end; /* the room left in the block entries are carved from */
} BytesTable;

static const Entry *table_find(const BytesTable *t, uint64_t hash, const unsigned char *key, size_t len)
{
    if (t->capacity == 0)
        return NULL;
    size_t mask = t->capacity - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const Slot *slot = &t->slots[i];
        if (slot->entry == NULL)
            return NULL;
        const Entry *e = slot->entry;
        if (slot->hash == hash && e->key_len == len && memcmp(entry_key(e), key, len) == 0)
            return e;
    }
}

/* Request the slot table_find(t, hash, ...) reads first (a lookup loop does this some keys
 * ahead, so that the lookups' cache misses overlap). Under the same lock as the lookups. */
#define LOOKUP_AHEAD 8

static inline void table_prefetch(const BytesTable *t, uint64_t hash)
{
    if (t->capacity != 0)
        __builtin_prefetch(&t->slots[hash & (t->capacity - 1)]);
}

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
static int table_add(BytesTable *t, uint64_t hash, const unsigned char *key, size_t len, const uint32_t *ids,
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

static void table_free(BytesTable *t)
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

/* -- the kernel object ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    uint32_t n_tokens;
    uint32_t n_symbols; /* tokens, then virtual symbols */
    uint32_t byte_ids[256];
    MergeTable merges;
    uint32_t *virtual_start; /* virtual symbol k's fallback ids: virtual_ids[start[k] .. start[k + 1]) */
    uint32_t *virtual_ids;
    uint32_t max_fallback; /* the most ids one symbol can give */
    uint32_t n_ranks;      /* the highest rank in the merge table, plus one */
    int ignore_merges;
    BytesTable whole; /* ignore_merges: GPT-2 text of a token -> its id */
    BytesTable cache;  /* piece UTF-8 -> ids */
    BytesTable chunks; /* space chunk UTF-8 (without its leading space) -> ids of " " + chunk */
    uint64_t seed;
    unsigned char byte_chars[256][2]; /* each byte's GPT-2 character, UTF-8 */
    unsigned char byte_char_len[256];
    SplitKind split; /* the pre-tokenizer encode_text runs (bpetok/pretok/_split.c), or SPLIT_NONE */
    PyObject *array_type;
    CacheLock lock; /* guards cache and chunks (see the top of this file) */
    int lock_ready;
    /* One int object per token id (n_id_objects entries, or NULL): result lists take references
     * instead of allocating an int per id, which was a sixth of the work on new text. encode_texts
     * makes them all on its first call; otherwise the table comes with the first result list when
     * the piece cache's budget is at least twice its most (id_reserved, taken from that budget;
     * else 0 and no table) and each int on its id's first use (id_bytes: what it holds now).
     * Touched only with the GIL held. */
    PyObject **id_objects;
    uint32_t n_id_objects;
    size_t id_reserved, id_bytes;
} Kernel;

/* Scratch buffers for merging, owned by one call (so calls can run in parallel without the GIL). */
typedef struct {
    uint32_t *sym, *rank, *merged, *next, *prev;
    uint64_t *heap;
    unsigned char *text;
    size_t capacity;
    /* merge_by_rank's bucket heads and rank heap, n_heads each; between pieces every head is empty */
    uint32_t *heads;
    uint64_t *order;
    size_t n_heads;
} Scratch;

/* A queued pair: rank << 32 | position of its left symbol, so one compare orders pairs by rank,
 * the leftmost first on ties. */
typedef uint64_t HeapItem;

static void scratch_free(Scratch *s)
{
    PyMem_RawFree(s->sym);
    PyMem_RawFree(s->rank);
    PyMem_RawFree(s->merged);
    PyMem_RawFree(s->next);
    PyMem_RawFree(s->prev);
    PyMem_RawFree(s->heap);
    PyMem_RawFree(s->text);
    PyMem_RawFree(s->heads);
    PyMem_RawFree(s->order);
    memset(s, 0, sizeof(*s));
}

static int scratch_reserve(Scratch *s, size_t n)
{
    if (n <= s->capacity)
        return 0;
    size_t capacity = n < 64 ? 64 : n;
    uint32_t *heads = s->heads;
    uint64_t *order = s->order;
    size_t n_heads = s->n_heads;
    s->heads = NULL; /* the bucket heads outlive a resize */
    s->order = NULL;
    scratch_free(s);
    s->heads = heads;
    s->order = order;
    s->n_heads = n_heads;
    s->sym = PyMem_RawMalloc(capacity * sizeof(uint32_t));
    s->rank = PyMem_RawMalloc(capacity * sizeof(uint32_t));
    s->merged = PyMem_RawMalloc(capacity * sizeof(uint32_t));
    s->next = PyMem_RawMalloc(capacity * sizeof(uint32_t));
    s->prev = PyMem_RawMalloc(capacity * sizeof(uint32_t));
    /* A heap holds at most (n - 1) pairs at first plus 2 per merge (n - 1 merges): under 3n. */
    s->heap = PyMem_RawMalloc(capacity * 3 * sizeof(HeapItem));
    s->text = PyMem_RawMalloc(capacity * 2);
    if (!s->sym || !s->rank || !s->merged || !s->next || !s->prev || !s->heap || !s->text) {
        scratch_free(s);
        return -1;
    }
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

static inline uint64_t pair_word(const Kernel *k, uint32_t left, uint32_t right)
{
    const Merge *m = merge_find(&k->merges, left, right);
    return m ? (uint64_t)m->rank << 32 | m->merged : NO_PAIR;
}

/* Merge s->sym[0 .. n) in place; returns the number of symbols left (in s->sym[0 ..)). */
static size_t merge_scan(const Kernel *k, Scratch *s, size_t n)
{
    uint32_t *sym = s->sym;
    uint64_t *pair = s->heap; /* pair[i]: sym[i] with sym[i + 1] (the heap is not used here) */
    for (size_t i = 0; i + 1 < n; i++)
        pair[i] = pair_word(k, sym[i], sym[i + 1]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (pair[i] >> 32 < pair[best] >> 32) /* the leftmost of the lowest rank */
                best = i;
        if (pair[best] == NO_PAIR)
            break;
        sym[best] = (uint32_t)pair[best];
        for (size_t i = best + 1; i + 1 < n; i++) { /* drop symbol best + 1 and pair best */
            sym[i] = sym[i + 1];
            pair[i - 1] = pair[i];
        }
        n--;
        if (best > 0)
            pair[best - 1] = pair_word(k, sym[best - 1], sym[best]);
        if (best + 1 < n)
            pair[best] = pair_word(k, sym[best], sym[best + 1]);
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

/* -- merging rank by rank (BytePairModel._merge_long in C) ----------------------------------- */

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

/* BPE one piece into out (capacity cap ids). Returns the number of ids, or -1 (no memory) /
 * -2 (out too small: a bug, reported as such). Needs no GIL. */
static Py_ssize_t bpe_piece(const Kernel *k, Scratch *s, const unsigned char *p, size_t n, uint32_t *out, size_t cap)
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

/* The most ids a piece of n bytes can give: each byte is at most one symbol. */
static size_t ids_bound(const Kernel *k, size_t n)
{
    return n * (size_t)(k->max_fallback ? k->max_fallback : 1);
}

/* -- construction --------------------------------------------------------------------------- */

static int read_u32(PyObject *value, uint32_t limit, const char *what, uint32_t *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (v >= limit) {
        PyErr_Format(PyExc_ValueError, "kernel tables: %s %llu out of range (< %u)", what, v, limit);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static void Kernel_dealloc(Kernel *self)
{
    PyMem_RawFree(self->merges.slots);
    PyMem_RawFree(self->merges.filter);
    PyMem_RawFree(self->virtual_start);
    PyMem_RawFree(self->virtual_ids);
    table_free(&self->whole);
    table_free(&self->cache);
    table_free(&self->chunks);
    if (self->lock_ready)
        lock_destroy(&self->lock);
    for (uint32_t i = 0; self->id_objects != NULL && i < self->n_id_objects; i++)
        Py_XDECREF(self->id_objects[i]);
    PyMem_Free(self->id_objects);
    Py_XDECREF(self->array_type);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Put one merge in the table; with keep_first, a pair already there keeps its (lower) rank. */
static int merge_add(Kernel *self, unsigned long long left, unsigned long long right, unsigned long long rank,
                     unsigned long long merged, int keep_first)
{
    if (left >= self->n_symbols || right >= self->n_symbols || merged >= self->n_symbols || rank >= NO_RANK) {
        PyErr_SetString(PyExc_ValueError, "kernel tables: a merge names a symbol out of range");
        return -1;
    }
    uint64_t mkey = left << 32 | right;
    uint64_t h = mix64(mkey), bit = h >> self->merges.filter_shift;
    uint64_t i = h & self->merges.mask;
    self->merges.filter[bit >> 6] |= (uint64_t)1 << (bit & 63);
    while (self->merges.slots[i].key != EMPTY_KEY && self->merges.slots[i].key != mkey)
        i = (i + 1) & self->merges.mask;
    if (keep_first && self->merges.slots[i].key == mkey)
        return 0;
    self->merges.slots[i].key = mkey;
    self->merges.slots[i].rank = (uint32_t)rank;
    self->merges.slots[i].merged = (uint32_t)merged;
    return 0;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The merges of a build_merges table, in rank order: a duplicated pair keeps its first (lowest) rank. */
static int merges_from_table(Kernel *self, const unsigned char *table, size_t count)
{
    for (size_t r = 0; r < count; r++) {
        const unsigned char *row = table + 12 * r;
        uint32_t left = le32(row), right = le32(row + 4), merged = le32(row + 8);
        if (left == UINT32_MAX && right == UINT32_MAX && merged == UINT32_MAX)
            continue; /* a merge that never matches */
        if (merge_add(self, left, right, r, merged, 1) < 0)
            return -1;
    }
    return 0;
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

static int Kernel_init(Kernel *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"byte_ids", "ranks", "stride", "shift", "n_tokens", "virtual_emit", "whole",
                             "byte_chars", "cache_bytes", "seed", "chunk_bytes", "split", NULL};
    PyObject *byte_ids, *ranks, *virtual_emit, *whole, *byte_chars;
    unsigned long long stride, seed;
    unsigned int shift, n_tokens;
    Py_ssize_t cache_bytes, chunk_bytes = 0;
    const char *split = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOKIIO!OO!nK|nz", kwlist, &byte_ids, &ranks, &stride,
                                     &shift, &n_tokens, &PyList_Type, &virtual_emit, &whole, &PyList_Type,
                                     &byte_chars, &cache_bytes, &seed, &chunk_bytes, &split))
        return -1;
    if (!PyDict_Check(ranks) && !PyBytes_Check(ranks)) {
        PyErr_SetString(PyExc_TypeError, "kernel tables: ranks must be a dict or the table of build_merges");
        return -1;
    }
    if (self->merges.slots != NULL || self->virtual_start != NULL) { /* before anything changes under a user */
        PyErr_SetString(PyExc_RuntimeError, "Kernel is already initialised");
        return -1;
    }
    self->split = split ? split_kind_of(split) : SPLIT_NONE;
    if (split && self->split == SPLIT_NONE) {
        PyErr_Format(PyExc_ValueError, "kernel: no compiled splitter named '%.100s' (see bpetok.models._bpe.SPLITTERS)",
                     split);
        return -1;
    }
    Py_ssize_t n_virtual = PyList_GET_SIZE(virtual_emit);
    if ((unsigned long long)n_tokens + n_virtual >= UINT32_MAX || shift >= 63 || stride == 0 ||
        cache_bytes < 0 || chunk_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "kernel tables: bad sizes");
        return -1;
    }
    self->n_tokens = n_tokens;
    self->n_symbols = (uint32_t)(n_tokens + n_virtual);
    self->seed = seed;
    self->cache.budget = (size_t)cache_bytes;
    /* The id objects' most: the table and an int per token. */
    size_t id_most = (size_t)n_tokens * (sizeof(PyObject *) + ID_OBJECT_BYTES);
    if (n_tokens > 0 && self->cache.budget / 2 >= id_most) {
        self->id_reserved = id_most;
        self->cache.budget -= id_most;
    }
    self->chunks.budget = (size_t)chunk_bytes;

    PyObject *fast = PySequence_Fast(byte_ids, "byte_ids must be a sequence");
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != 256) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "kernel tables: byte_ids must have 256 entries");
        return -1;
    }
    for (int b = 0; b < 256; b++) {
        if (read_u32(PySequence_Fast_GET_ITEM(fast, b), self->n_symbols, "byte symbol", &self->byte_ids[b]) < 0) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    if (PyList_GET_SIZE(byte_chars) != 256) {
        PyErr_SetString(PyExc_ValueError, "kernel tables: byte_chars must have 256 entries");
        return -1;
    }
    for (int b = 0; b < 256; b++) {
        PyObject *c = PyList_GET_ITEM(byte_chars, b);
        if (!PyBytes_Check(c) || PyBytes_GET_SIZE(c) < 1 || PyBytes_GET_SIZE(c) > 2) {
            PyErr_SetString(PyExc_ValueError, "kernel tables: byte_chars must be 1-2 byte UTF-8 strings");
            return -1;
        }
        memcpy(self->byte_chars[b], PyBytes_AS_STRING(c), PyBytes_GET_SIZE(c));
        self->byte_char_len[b] = (unsigned char)PyBytes_GET_SIZE(c);
    }

    /* Virtual symbols' fallback ids. */
    size_t total = 0;
    for (Py_ssize_t v = 0; v < n_virtual; v++) {
        PyObject *ids = PyList_GET_ITEM(virtual_emit, v);
        if (!PyList_Check(ids)) {
            PyErr_SetString(PyExc_TypeError, "kernel tables: virtual_emit must be a list of lists of ids");
            return -1;
        }
        total += (size_t)PyList_GET_SIZE(ids);
    }
    self->virtual_start = PyMem_RawMalloc((n_virtual + 1) * sizeof(uint32_t));
    self->virtual_ids = PyMem_RawMalloc((total ? total : 1) * sizeof(uint32_t));
    if (!self->virtual_start || !self->virtual_ids || total >= UINT32_MAX) {
        PyErr_NoMemory();
        return -1;
    }
    self->max_fallback = 1;
    size_t at = 0;
    for (Py_ssize_t v = 0; v < n_virtual; v++) {
        PyObject *ids = PyList_GET_ITEM(virtual_emit, v);
        self->virtual_start[v] = (uint32_t)at;
        Py_ssize_t len = PyList_GET_SIZE(ids);
        if ((size_t)len > self->max_fallback)
            self->max_fallback = (uint32_t)len;
        for (Py_ssize_t j = 0; j < len; j++) {
            if (at >= total) { /* the list changed under us */
                PyErr_SetString(PyExc_RuntimeError, "kernel tables: virtual_emit changed while read");
                return -1;
            }
            if (read_u32(PyList_GET_ITEM(ids, j), n_tokens, "fallback id", &self->virtual_ids[at++]) < 0)
                return -1;
        }
    }
    self->virtual_start[n_virtual] = (uint32_t)at;

    /* The merge table, load at most 1/2. */
    Py_ssize_t count = PyDict_Check(ranks) ? PyDict_GET_SIZE(ranks) : PyBytes_GET_SIZE(ranks) / 12;
    if (PyBytes_Check(ranks) && PyBytes_GET_SIZE(ranks) % 12 != 0) {
        PyErr_SetString(PyExc_ValueError, "kernel tables: a build_merges table is a multiple of 12 bytes");
        return -1;
    }
    size_t size = 1024;
    while (size < (size_t)count * 2)
        size *= 2;
    unsigned filter_bits = 12; /* at least 16 bits per merge: few pairs without a merge get through */
    while (((size_t)1 << filter_bits) < (size_t)count * 16 && filter_bits < 40)
        filter_bits++;
    self->merges.filter = PyMem_RawCalloc((size_t)1 << (filter_bits - 6), sizeof(uint64_t));
    if (self->merges.filter == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->merges.filter_shift = 64 - filter_bits;
    self->merges.slots = PyMem_RawMalloc(size * sizeof(Merge));
    if (self->merges.slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < size; i++)
        self->merges.slots[i].key = EMPTY_KEY;
    self->merges.mask = size - 1;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    if (PyBytes_Check(ranks)) {
        if (merges_from_table(self, (const unsigned char *)PyBytes_AS_STRING(ranks), (size_t)count) < 0)
            return -1;
    } else {
        unsigned long long mask = (1ULL << shift) - 1;
        while (PyDict_Next(ranks, &pos, &key, &value)) {
            unsigned long long k = PyLong_AsUnsignedLongLong(key);
            if (k == (unsigned long long)-1 && PyErr_Occurred())
                return -1;
            unsigned long long packed = PyLong_AsUnsignedLongLong(value);
            if (packed == (unsigned long long)-1 && PyErr_Occurred())
                return -1;
            unsigned long long left = k / stride, right = k % stride, rank = packed >> shift, merged = packed & mask;
            if (merge_add(self, left, right, rank, merged, 0) < 0)
                return -1;
        }
    }

    self->n_ranks = 0;
    for (size_t i = 0; i < size; i++)
        if (self->merges.slots[i].key != EMPTY_KEY && self->merges.slots[i].rank >= self->n_ranks)
            self->n_ranks = self->merges.slots[i].rank + 1; /* rank < NO_RANK: checked by merge_add */

    /* ignore_merges: whole tokens by their GPT-2 text. */
    if (whole != Py_None) {
        if (!PyDict_Check(whole)) {
            PyErr_SetString(PyExc_TypeError, "kernel tables: whole must be a dict or None");
            return -1;
        }
        self->ignore_merges = 1;
        self->whole.budget = SIZE_MAX;
        pos = 0;
        while (PyDict_Next(whole, &pos, &key, &value)) {
            uint32_t id;
            if (!PyBytes_Check(key)) {
                PyErr_SetString(PyExc_TypeError, "kernel tables: whole's keys must be bytes");
                return -1;
            }
            if (read_u32(value, n_tokens, "token id", &id) < 0)
                return -1;
            const unsigned char *text = (const unsigned char *)PyBytes_AS_STRING(key);
            size_t len = (size_t)PyBytes_GET_SIZE(key);
            if (table_add(&self->whole, hash_bytes(seed, text, len), text, len, &id, 1) < 0) {
                PyErr_NoMemory();
                return -1;
            }
        }
    }
    PyObject *array_module = PyImport_ImportModule("array");
    if (array_module == NULL)
        return -1;
    self->array_type = PyObject_GetAttrString(array_module, "array");
    Py_DECREF(array_module);
    return self->array_type ? 0 : -1;
}

/* -- the merge table from the raw merges (BytePairModel._build_ranks in C) ------------------- */

/* Symbol texts -> symbol ids while the merges are read: a token's text is its bytes object in
 * the tokens list, a virtual symbol's text lives in an arena. Open addressing over ids. */
typedef struct {
    uint32_t *slots; /* symbol id, or UINT32_MAX for a free slot */
    size_t mask;
    size_t count;
    PyObject *tokens; /* list of bytes, checked; nothing runs Python code while this is used */
    uint32_t n_tokens;
    unsigned char *arena; /* virtual texts back to back */
    size_t arena_len, arena_cap;
    size_t *virtual_start; /* virtual k's text: arena[start[k] .. start[k + 1]) */
    size_t n_virtual, virtual_cap;
} SymbolTexts;

static void symbol_text(const SymbolTexts *t, uint32_t id, const unsigned char **text, size_t *len)
{
    if (id < t->n_tokens) {
        PyObject *b = PyList_GET_ITEM(t->tokens, id);
        *text = (const unsigned char *)PyBytes_AS_STRING(b);
        *len = (size_t)PyBytes_GET_SIZE(b);
    } else {
        size_t k = id - t->n_tokens;
        *text = t->arena + t->virtual_start[k];
        *len = t->virtual_start[k + 1] - t->virtual_start[k];
    }
}

/* The slot holding text, or the free slot where it would go. */
static size_t symbol_slot(const SymbolTexts *t, const unsigned char *text, size_t len)
{
    for (size_t i = hash_bytes(0, text, len) & t->mask;; i = (i + 1) & t->mask) {
        uint32_t id = t->slots[i];
        if (id == UINT32_MAX)
            return i;
        const unsigned char *other;
        size_t other_len;
        symbol_text(t, id, &other, &other_len);
        if (other_len == len && memcmp(other, text, len) == 0)
            return i;
    }
}

/* Make room for one more symbol (load at most 1/2). 0, or -1 with MemoryError set. */
static int symbol_reserve(SymbolTexts *t)
{
    if ((t->count + 1) * 2 <= t->mask + 1)
        return 0;
    size_t capacity = (t->mask + 1) * 2;
    uint32_t *slots = PyMem_RawMalloc(capacity * sizeof(uint32_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(slots, 0xff, capacity * sizeof(uint32_t));
    uint32_t *old = t->slots;
    size_t old_capacity = t->mask + 1;
    t->slots = slots;
    t->mask = capacity - 1;
    for (size_t k = 0; k < old_capacity; k++) {
        if (old[k] == UINT32_MAX)
            continue;
        const unsigned char *text;
        size_t len;
        symbol_text(t, old[k], &text, &len);
        t->slots[symbol_slot(t, text, len)] = old[k];
    }
    PyMem_RawFree(old);
    return 0;
}

/* The id of a virtual symbol for text (added if new); UINT32_MAX with MemoryError set. */
static uint32_t symbol_virtual(SymbolTexts *t, const unsigned char *text, size_t len)
{
    if (symbol_reserve(t) < 0)
        return UINT32_MAX;
    size_t i = symbol_slot(t, text, len);
    if (t->slots[i] != UINT32_MAX)
        return t->slots[i];
    if ((uint64_t)t->n_tokens + t->n_virtual + 1 >= UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "build_merges: too many symbols");
        return UINT32_MAX;
    }
    if (t->n_virtual + 2 > t->virtual_cap) {
        size_t cap = t->virtual_cap ? t->virtual_cap * 2 : 256;
        size_t *starts = PyMem_RawRealloc(t->virtual_start, cap * sizeof(size_t));
        if (starts == NULL) {
            PyErr_NoMemory();
            return UINT32_MAX;
        }
        t->virtual_start = starts;
        t->virtual_cap = cap;
    }
    if (len > t->arena_cap - t->arena_len) {
        size_t cap = t->arena_cap ? t->arena_cap : 4096;
        while (len > cap - t->arena_len)
            cap *= 2;
        unsigned char *arena = PyMem_RawRealloc(t->arena, cap);
        if (arena == NULL) {
            PyErr_NoMemory();
            return UINT32_MAX;
        }
        t->arena = arena;
        t->arena_cap = cap;
    }
    if (len)
        memcpy(t->arena + t->arena_len, text, len);
    t->virtual_start[t->n_virtual] = t->arena_len;
    t->arena_len += len;
    t->virtual_start[++t->n_virtual] = t->arena_len;
    uint32_t id = t->n_tokens + (uint32_t)(t->n_virtual - 1);
    t->slots[i] = id;
    t->count++;
    return id;
}

static void symbol_texts_free(SymbolTexts *t)
{
    PyMem_RawFree(t->slots);
    PyMem_RawFree(t->arena);
    PyMem_RawFree(t->virtual_start);
}

/* The table's slots are read at random, each one a cache miss: the slots of the merge this many
 * ranks ahead are requested early, so that the misses of several merges overlap. */
#define MERGE_LOOKAHEAD 8

static inline void prefetch_text(const SymbolTexts *t, const unsigned char *text, size_t len)
{
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&t->slots[hash_bytes(0, text, len) & t->mask]);
#else
    (void)t, (void)text, (void)len;
#endif
}

/* Request the slots the merge will read: its left and right texts and their concatenation. */
static void prefetch_merge(const SymbolTexts *t, PyObject *merge, unsigned char *joined)
{
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(merge);
    size_t len = (size_t)PyBytes_GET_SIZE(merge);
    const unsigned char *space = len > 1 ? memchr(p + 1, ' ', len - 1) : NULL;
    if (space == NULL)
        return;
    size_t cut = (size_t)(space - p);
    prefetch_text(t, p, cut);
    prefetch_text(t, p + cut + 1, len - cut - 1);
    memcpy(joined, p, cut);
    memcpy(joined + cut, p + cut + 1, len - cut - 1);
    prefetch_text(t, joined, len - 1);
}

PyDoc_STRVAR(build_merges_doc,
             "build_merges(tokens, merges, virtual_texts) -> (table: bytes, new_virtual_texts: list[bytes]) or None\n\n"
             "BytePairModel._build_ranks in C. For merge r, table holds three little-endian uint32 at 12 * r: left,\n"
             "right and merged symbol (0xFFFFFFFF x 3: the merge has no space at byte 1 or later, so never matches).\n"
             "A merged text that is not a token gets a virtual id, numbered after tokens and virtual_texts (the\n"
             "virtual symbols made so far, e.g. for bytes without a token), in rank order; the new ones are\n"
             "returned. None: a merge names a text that is not a token (the reference then raises its error).");

static PyObject *module_build_merges(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *tokens, *merges, *virtual_texts;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &tokens, &PyList_Type, &merges, &PyList_Type, &virtual_texts))
        return NULL;
    Py_ssize_t n_tokens = PyList_GET_SIZE(tokens), n_merges = PyList_GET_SIZE(merges);
    Py_ssize_t n_given = PyList_GET_SIZE(virtual_texts);
    if ((uint64_t)n_tokens + n_given + n_merges >= UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "build_merges: too many symbols");
        return NULL;
    }
    size_t longest = 0;
    for (Py_ssize_t i = 0; i < n_tokens; i++)
        if (!PyBytes_Check(PyList_GET_ITEM(tokens, i))) {
            PyErr_SetString(PyExc_TypeError, "build_merges: tokens must be a list of bytes");
            return NULL;
        }
    for (Py_ssize_t i = 0; i < n_given; i++)
        if (!PyBytes_Check(PyList_GET_ITEM(virtual_texts, i))) {
            PyErr_SetString(PyExc_TypeError, "build_merges: virtual_texts must be a list of bytes");
            return NULL;
        }
    for (Py_ssize_t r = 0; r < n_merges; r++) {
        PyObject *m = PyList_GET_ITEM(merges, r);
        if (!PyBytes_Check(m)) {
            PyErr_SetString(PyExc_TypeError, "build_merges: merges must be a list of bytes");
            return NULL;
        }
        if ((size_t)PyBytes_GET_SIZE(m) > longest)
            longest = (size_t)PyBytes_GET_SIZE(m);
    }
    SymbolTexts t = {0};
    t.tokens = tokens;
    t.n_tokens = (uint32_t)n_tokens;
    size_t capacity = 1024;
    while (capacity < (size_t)(n_tokens + n_given) * 2)
        capacity *= 2;
    t.slots = PyMem_RawMalloc(capacity * sizeof(uint32_t));
    unsigned char *joined = PyMem_RawMalloc(longest ? longest : 1);
    unsigned char *ahead = PyMem_RawMalloc(longest ? longest : 1);
    PyObject *table = PyBytes_FromStringAndSize(NULL, n_merges * 12);
    PyObject *result = NULL;
    if (t.slots == NULL || joined == NULL || ahead == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (table == NULL)
        goto done;
    memset(t.slots, 0xff, capacity * sizeof(uint32_t));
    t.mask = capacity - 1;
    /* A duplicated token text keeps its last id, as dict(zip(tokens, ids)) does. */
    for (Py_ssize_t i = 0; i < n_tokens; i++) {
        PyObject *b = PyList_GET_ITEM(tokens, i);
        size_t slot = symbol_slot(&t, (const unsigned char *)PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
        if (t.slots[slot] == UINT32_MAX)
            t.count++;
        t.slots[slot] = (uint32_t)i;
    }
    for (Py_ssize_t i = 0; i < n_given; i++) {
        PyObject *b = PyList_GET_ITEM(virtual_texts, i);
        Py_ssize_t before = (Py_ssize_t)t.n_virtual;
        if (symbol_virtual(&t, (const unsigned char *)PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b)) ==
            UINT32_MAX)
            goto done;
        if ((Py_ssize_t)t.n_virtual != before + 1) {
            PyErr_SetString(PyExc_ValueError, "build_merges: virtual_texts must be new, distinct texts");
            goto done;
        }
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(table);
    for (Py_ssize_t r = 0; r < n_merges; r++) {
        if (r + MERGE_LOOKAHEAD < n_merges)
            prefetch_merge(&t, PyList_GET_ITEM(merges, r + MERGE_LOOKAHEAD), ahead);
        PyObject *m = PyList_GET_ITEM(merges, r);
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(m);
        size_t len = (size_t)PyBytes_GET_SIZE(m);
        /* Split at the first space at byte index >= 1 (llama.cpp); none: the merge never matches. */
        const unsigned char *space = len > 1 ? memchr(p + 1, ' ', len - 1) : NULL;
        uint32_t row[3] = {UINT32_MAX, UINT32_MAX, UINT32_MAX};
        if (space != NULL) {
            size_t cut = (size_t)(space - p);
            uint32_t left = t.slots[symbol_slot(&t, p, cut)];
            uint32_t right = t.slots[symbol_slot(&t, p + cut + 1, len - cut - 1)];
            if (left >= t.n_tokens || right >= t.n_tokens) { /* not a token (free slot, or virtual) */
                Py_INCREF(Py_None);
                result = Py_None;
                goto done;
            }
            memcpy(joined, p, cut);
            memcpy(joined + cut, p + cut + 1, len - cut - 1);
            size_t joined_len = len - 1;
            uint32_t merged = t.slots[symbol_slot(&t, joined, joined_len)];
            if (merged == UINT32_MAX && (merged = symbol_virtual(&t, joined, joined_len)) == UINT32_MAX)
                goto done;
            row[0] = left;
            row[1] = right;
            row[2] = merged;
        }
        for (int j = 0; j < 3; j++)
            for (int b = 0; b < 4; b++)
                out[12 * r + 4 * j + b] = (unsigned char)(row[j] >> (8 * b));
    }
    PyObject *new_virtual = PyList_New((Py_ssize_t)t.n_virtual - n_given);
    if (new_virtual == NULL)
        goto done;
    for (size_t k = (size_t)n_given; k < t.n_virtual; k++) {
        PyObject *text = PyBytes_FromStringAndSize((const char *)t.arena + t.virtual_start[k],
                                                   (Py_ssize_t)(t.virtual_start[k + 1] - t.virtual_start[k]));
        if (text == NULL) {
            Py_DECREF(new_virtual);
            goto done;
        }
        PyList_SET_ITEM(new_virtual, (Py_ssize_t)(k - (size_t)n_given), text);
    }
    result = PyTuple_Pack(2, table, new_virtual);
    Py_DECREF(new_virtual);
done:
    Py_XDECREF(table);
    PyMem_RawFree(joined);
    PyMem_RawFree(ahead);
    symbol_texts_free(&t);
    return result;
}

/* -- encoding ------------------------------------------------------------------------------- */

/* The UTF-8 of a str: its own cached buffer, or for a str with lone surrogates their three
 * UTF-8-style bytes (as llama.cpp gets them) in a bytes object kept alive in *keep. */
static int utf8_of(PyObject *item, PyObject **keep, const unsigned char **text, size_t *len)
{
    if (!PyUnicode_Check(item)) {
        PyErr_Format(PyExc_TypeError, "pieces must be str, not %.100s", Py_TYPE(item)->tp_name);
        return -1;
    }
    Py_ssize_t size;
    const char *data = PyUnicode_AsUTF8AndSize(item, &size);
    if (data == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear();
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

/* A whole text as the kernel reads it without the GIL: CPython's own storage of its code points
 * (1, 2 or 4 bytes each; an ASCII str's is its UTF-8). A str cannot change, and the caller keeps
 * it alive, so its data can be read while other threads run Python. */
typedef struct {
    const void *data;
    size_t length; /* in code points */
    int kind;      /* PyUnicode_1BYTE_KIND, _2BYTE_ or _4BYTE_ */
    int ascii;
} TextView;

/* 0, or -1 with TypeError set (under the GIL). */
static int text_view(PyObject *text, TextView *v)
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

/* A text view's code points of one kind (TYPE) as UTF-8 at out, which moves to its end. A lone
 * surrogate gets its three UTF-8-style bytes, as "surrogatepass" writes it and llama.cpp reads it. */
#define UTF8_ENCODE_LOOP(TYPE)                                                                      \
    do {                                                                                            \
        const TYPE *cp = (const TYPE *)v->data;                                                     \
        for (size_t i = 0; i < v->length; i++) {                                                    \
            Py_UCS4 c = cp[i];                                                                      \
            if (c < 0x80) {                                                                         \
                *out++ = (unsigned char)c;                                                          \
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
        UTF8_ENCODE_LOOP(Py_UCS1);
    else if (v->kind == PyUnicode_2BYTE_KIND)
        UTF8_ENCODE_LOOP(Py_UCS2);
    else
        UTF8_ENCODE_LOOP(Py_UCS4);
}

/* The UTF-8 of text views v[0 .. count) at s[i], n[i] bytes: an ASCII str's own data, the others
 * encoded into one buffer, *owned (PyMem_RawFree it). Needs no GIL: 0 or FAIL_NO_MEMORY. */
static int text_views_utf8(const TextView *v, size_t count, const unsigned char **s, size_t *n, unsigned char **owned)
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

/* The strings a batch of texts is refused for (encode_texts(texts, specials)): their UTF-8, and
 * which bytes start one, so that a text's bytes are scanned once whatever their number. */
typedef struct {
    size_t count;
    const unsigned char **s;
    size_t *n;
    unsigned char *owned;  /* the UTF-8 made for the non-ASCII ones */
    PyObject *strs;        /* a list of them: an ASCII one's UTF-8 is its str's own data */
    int empty;             /* one is "": every text contains it */
    int only_start;        /* the one byte they all start with (memchr finds it), or -1 */
    unsigned char starts[256];
} Needles;

static void needles_free(Needles *needles)
{
    PyMem_Free(needles->s);
    PyMem_Free(needles->n);
    PyMem_RawFree(needles->owned);
    Py_XDECREF(needles->strs);
}

/* Whether one of the needles occurs in s[0 .. n). Needs no GIL. */
static int contains_needle(const Needles *needles, const unsigned char *s, size_t n)
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
static int needles_from(PyObject *strings, const char *name, Needles *needles)
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

/* A piece or a chunk of a call: its UTF-8, and its ids once known. */
typedef struct {
    const unsigned char *text;
    size_t len;
    uint64_t hash;
    const uint32_t *ids; /* a cache entry's ids, or into the call's own buffer */
    size_t n_ids;
    size_t offset; /* a miss: where its ids go in the call's buffer (else SIZE_MAX) */
    Py_ssize_t first; /* a repeated miss: the index of its first occurrence in this call, else -1 */
} Piece;

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

static PyObject *list_of_ids(Kernel *k, const uint32_t *ids, size_t n)
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

/* The distinct texts of a call's misses, so that each is worked out once per call: open
 * addressing over indices into the call's Piece array, load at most 1/2. */
typedef struct {
    Py_ssize_t *slots; /* -1: free */
    size_t mask;
} SeenSet;

/* 0, or FAIL_NO_MEMORY (no exception set: it may run without the GIL). Freed with PyMem_RawFree. */
static int seen_init(SeenSet *seen, size_t n)
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

/* The index of an earlier piece of p with p[i]'s text (hash set), else -1 after adding i. */
static Py_ssize_t seen_add(SeenSet *seen, const Piece *p, Py_ssize_t i)
{
    size_t slot = p[i].hash & seen->mask;
    for (; seen->slots[slot] >= 0; slot = (slot + 1) & seen->mask) {
        const Piece *q = &p[seen->slots[slot]];
        if (q->hash == p[i].hash && q->len == p[i].len && memcmp(q->text, p[i].text, p[i].len) == 0)
            return seen->slots[slot];
    }
    seen->slots[slot] = i;
    return -1;
}

/* Look the pieces p[0 .. n) (text and len set) up in the cache; merge the misses, each distinct
 * text once, and cache them. On success (0) every p[i].ids/.n_ids is set; *buffer holds the
 * misses' ids and is the caller's to free (PyMem_RawFree). On failure a FAIL_ code, no exception
 * set. ``holding_gil``: the caller holds the GIL, which is then released around the merging when
 * there is enough of it; otherwise the caller has released it and nothing here needs it. */
static int resolve_pieces(Kernel *self, Piece *p, Py_ssize_t n, uint32_t **buffer, int holding_gil)
{
    *buffer = NULL;
    size_t miss_capacity = 0, miss_bytes = 0, misses = 0;
    SeenSet seen;
    for (Py_ssize_t i = 0; i < n; i++)
        p[i].hash = hash_bytes(self->seed, p[i].text, p[i].len);
    lock_read_soon(&self->lock);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + LOOKUP_AHEAD < n)
            table_prefetch(&self->cache, p[i + LOOKUP_AHEAD].hash);
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
        for (Py_ssize_t i = 0; i < n && failure == 0; i++)
            if (p[i].offset != SIZE_MAX && p[i].len <= CACHE_LONGEST && p[i].len > 0)
                failure = table_add(&self->cache, p[i].hash, p[i].text, p[i].len, p[i].ids, p[i].n_ids);
        unlock_write(&self->lock);
    }
    return failure < 0 ? FAIL_NO_MEMORY : 0;
}

/* The pieces of a list of str: their UTF-8, then resolve_pieces. *out_pieces and *buffer must
 * be freed (PyMem_Free, PyMem_RawFree) and *keep released by the caller. -1 with an exception set. */
static int encode_pieces(Kernel *self, PyObject *list, Piece **out_pieces, uint32_t **buffer, PyObject **keep)
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

/* The pieces of the missing chunks, and where each chunk's pieces stop. The inner chunks are
 * pre-tokenized together, joined back to back with their spaces (" a b c"): each ends in a
 * character that is not whitespace, so by the pre-tokenizer's space_chunks promise no piece
 * crosses from one to the next. A text's last part may end in whitespace and is split on its
 * own. If the pieces do not fall on the chunk boundaries all the same, each chunk is split on
 * its own. Returns a new list of pieces; stops[k] is the end of chunk k's pieces. */
static PyObject *split_chunks(PyObject *split, PyObject *missing, int last_alone, Py_ssize_t *stops)
{
    Py_ssize_t m = PyList_GET_SIZE(missing), inner = last_alone ? m - 1 : m;
    PyObject *space = PyUnicode_FromString(" "), *pieces = NULL;
    if (space == NULL)
        return NULL;
    if (inner > 0) {
        PyObject *head = PyList_GetSlice(missing, 0, inner);
        PyObject *body = head ? PyUnicode_Join(space, head) : NULL;
        PyObject *joined = body ? PyUnicode_Concat(space, body) : NULL;
        PyObject *got = joined ? PyObject_CallOneArg(split, joined) : NULL;
        pieces = got ? PySequence_List(got) : NULL;
        Py_XDECREF(head);
        Py_XDECREF(body);
        Py_XDECREF(joined);
        Py_XDECREF(got);
        if (pieces == NULL)
            goto fail;
        /* Walk the pieces' lengths against the chunks' ends (in code points). */
        Py_ssize_t k = 0, at = 0, end = 1 + PyUnicode_GET_LENGTH(PyList_GET_ITEM(missing, 0));
        int aligned = 1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pieces) && aligned; i++) {
            PyObject *piece = PyList_GET_ITEM(pieces, i);
            if (!PyUnicode_Check(piece)) {
                PyErr_Format(PyExc_TypeError, "the pre-tokenizer gave a %.100s, not a str", Py_TYPE(piece)->tp_name);
                goto fail;
            }
            at += PyUnicode_GET_LENGTH(piece);
            if (at > end)
                aligned = 0;
            while (aligned && at == end && k < inner) {
                stops[k++] = i + 1;
                if (k < inner)
                    end += 1 + PyUnicode_GET_LENGTH(PyList_GET_ITEM(missing, k));
            }
        }
        if (!aligned || k != inner) { /* split each chunk on its own */
            Py_CLEAR(pieces);
            pieces = PyList_New(0);
            if (pieces == NULL)
                goto fail;
            for (k = 0; k < inner; k++) {
                PyObject *text = PyUnicode_Concat(space, PyList_GET_ITEM(missing, k));
                PyObject *one = text ? PyObject_CallOneArg(split, text) : NULL;
                Py_XDECREF(text);
                if (one == NULL)
                    goto fail;
                PyObject *all = PySequence_InPlaceConcat(pieces, one);
                Py_DECREF(one);
                if (all == NULL)
                    goto fail;
                Py_DECREF(all);
                stops[k] = PyList_GET_SIZE(pieces);
            }
        }
    } else {
        pieces = PyList_New(0);
        if (pieces == NULL)
            goto fail;
    }
    if (last_alone) {
        PyObject *text = PyUnicode_Concat(space, PyList_GET_ITEM(missing, m - 1));
        PyObject *one = text ? PyObject_CallOneArg(split, text) : NULL;
        Py_XDECREF(text);
        if (one == NULL)
            goto fail;
        PyObject *all = PySequence_InPlaceConcat(pieces, one);
        Py_DECREF(one);
        if (all == NULL)
            goto fail;
        Py_DECREF(all);
        stops[m - 1] = PyList_GET_SIZE(pieces);
    }
    Py_DECREF(space);
    return pieces;
fail:
    Py_DECREF(space);
    Py_XDECREF(pieces);
    return NULL;
}

PyDoc_STRVAR(Kernel_encode_chunks_doc,
             "encode_chunks(parts, start, split) -> list[int]: the ids of \" \" + part for each of parts[start:],\n"
             "from the chunk cache; the chunks it lacks are pre-tokenized with split (together: see\n"
             "Tokenizer._encode_chunked), merged and remembered while the chunk budget lasts.");

static PyObject *Kernel_encode_chunks(Kernel *self, PyObject *args)
{
    PyObject *parts, *split;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "OnO", &parts, &start, &split))
        return NULL;
    PyObject *list = as_list(parts);
    if (list == NULL)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (start < 0 || start > n) {
        Py_DECREF(list);
        PyErr_Format(PyExc_ValueError, "start %zd is outside 0..%zd", start, n);
        return NULL;
    }
    Py_ssize_t m = n - start, *stops = NULL;
    /* The chunks, as pieces: .offset is a missing chunk's index in `missing`. */
    Piece *c = PyMem_Calloc(m ? (size_t)m : 1, sizeof(Piece));
    SeenSet seen = {NULL, 0};
    PyObject *keep = NULL, *missing = PyList_New(0), *pieces = NULL, *piece_keep = NULL, *result = NULL;
    Piece *p = NULL;
    uint32_t *buffer = NULL, *miss_ids = NULL;
    size_t *miss_at = NULL, *miss_n = NULL;
    Py_ssize_t *miss_of = NULL; /* missing index -> its first chunk */
    if (c == NULL || missing == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    miss_of = PyMem_Malloc((m ? (size_t)m : 1) * sizeof(Py_ssize_t));
    if (miss_of == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (seen_init(&seen, (size_t)m) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    int last_alone = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (utf8_of(PyList_GET_ITEM(list, start + i), &keep, &c[i].text, &c[i].len) < 0)
            goto done;
        c[i].hash = hash_bytes(self->seed, c[i].text, c[i].len);
    }
    lock_read_soon(&self->lock);
    for (Py_ssize_t i = 0; i < m; i++) {
        const Entry *e = table_find(&self->chunks, c[i].hash, c[i].text, c[i].len);
        if (e != NULL) {
            c[i].ids = e->ids;
            c[i].n_ids = e->n_ids;
        }
    }
    unlock_read(&self->lock);
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *part = PyList_GET_ITEM(list, start + i);
        if (c[i].ids != NULL)
            continue;
        Py_ssize_t first = seen_add(&seen, c, i);
        if (first >= 0) {
            c[i].offset = c[first].offset;
            continue;
        }
        c[i].offset = (size_t)PyList_GET_SIZE(missing);
        miss_of[c[i].offset] = i;
        if (PyList_Append(missing, part) < 0)
            goto done;
        last_alone = i == m - 1;
    }
    Py_ssize_t n_missing = PyList_GET_SIZE(missing);
    if (n_missing > 0) {
        stops = PyMem_Calloc((size_t)n_missing, sizeof(Py_ssize_t));
        if (stops == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        pieces = split_chunks(split, missing, last_alone, stops);
        if (pieces == NULL || encode_pieces(self, pieces, &p, &buffer, &piece_keep) < 0)
            goto done;
        size_t total = 0;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pieces); i++)
            total += p[i].n_ids;
        miss_ids = PyMem_Malloc((total ? total : 1) * sizeof(uint32_t));
        miss_at = PyMem_Malloc((size_t)n_missing * sizeof(size_t));
        miss_n = PyMem_Malloc((size_t)n_missing * sizeof(size_t));
        if (miss_ids == NULL || miss_at == NULL || miss_n == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        size_t at = 0;
        Py_ssize_t from = 0;
        for (Py_ssize_t k = 0; k < n_missing; k++) {
            miss_at[k] = at;
            for (Py_ssize_t i = from; i < stops[k]; i++) { /* at + n_ids <= total: counted above */
                if (p[i].n_ids)
                    memcpy(miss_ids + at, p[i].ids, p[i].n_ids * sizeof(uint32_t));
                at += p[i].n_ids;
            }
            miss_n[k] = at - miss_at[k];
            from = stops[k];
        }
        int failure = 0;
        if (lock_write_soon(&self->lock)) {
            for (Py_ssize_t k = 0; k < n_missing && failure == 0; k++) {
                const Piece *first = &c[miss_of[k]];
                failure = table_add(&self->chunks, first->hash, first->text, first->len, miss_ids + miss_at[k], miss_n[k]);
            }
            unlock_write(&self->lock);
        }
        if (failure < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        if (c[i].ids == NULL) { /* a missing chunk */
            c[i].ids = miss_ids + miss_at[c[i].offset];
            c[i].n_ids = miss_n[c[i].offset];
        }
    }
    result = list_of_piece_ids(self, c, m);
done:
    PyMem_Free(c);
    PyMem_RawFree(seen.slots);
    PyMem_Free(miss_of);
    PyMem_Free(stops);
    PyMem_Free(p);
    PyMem_RawFree(buffer);
    PyMem_Free(miss_ids);
    PyMem_Free(miss_at);
    PyMem_Free(miss_n);
    Py_XDECREF(keep);
    Py_XDECREF(piece_keep);
    Py_XDECREF(pieces);
    Py_XDECREF(missing);
    Py_DECREF(list);
    return result;
}

/* -- text -> ids, split in C ---------------------------------------------------------------- */

/* A text's space chunks are looked up, split and merged this many at a time (bounded scratch). */
#define TEXT_BATCH_CHUNKS 4096

/* A growing array of ids. */
typedef struct {
    uint32_t *ids;
    size_t n, capacity;
} IdBuffer;

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

static int ids_append(IdBuffer *b, const uint32_t *ids, size_t n)
{
    if (ids_reserve(b, n) < 0)
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
static size_t chunk_end(const unsigned char *s, size_t n, size_t at)
{
    for (size_t i = at + 1; i < n; i++) {
        const unsigned char *space = memchr(s + i, ' ', n - i);
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
static int split_into(SplitKind kind, const unsigned char *s, size_t begin, size_t end, Piece **pieces, size_t *n,
                      size_t *capacity)
{
    const unsigned char *text = s + begin;
    size_t len = end - begin;
    for (size_t at = 0; at < len;) {
        size_t stop = split_next(kind, text, len, at);
        if (stop <= at || stop > len) /* a splitter must advance within the text */
            return FAIL_SPLITTER;
        if (*n == *capacity) {
            size_t grown = *capacity ? *capacity * 2 : 1024;
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
static int encode_utf8(Kernel *self, const unsigned char *const *s, const size_t *n, size_t count, IdBuffer *out,
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
    Piece *c = PyMem_RawMalloc(most * sizeof(Piece)), *pieces = NULL;
    size_t *text = PyMem_RawMalloc(most * sizeof(size_t)); /* per chunk: its text, */
    size_t *begin = PyMem_RawMalloc(most * sizeof(size_t)); /* its bytes, */
    size_t *end = PyMem_RawMalloc(most * sizeof(size_t));
    size_t *stop = PyMem_RawMalloc(most * sizeof(size_t)); /* and a new chunk's last piece + 1 */
    size_t pieces_capacity = 0;
    if (c == NULL || text == NULL || begin == NULL || end == NULL || stop == NULL)
        goto done;
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
            if (k + LOOKUP_AHEAD < m)
                table_prefetch(&self->chunks, c[k + LOOKUP_AHEAD].hash);
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
    PyMem_RawFree(text);
    PyMem_RawFree(begin);
    PyMem_RawFree(end);
    PyMem_RawFree(stop);
    PyMem_RawFree(pieces);
    PyMem_RawFree(seen.slots);
    PyMem_RawFree(buffer);
    return failure;
}

PyDoc_STRVAR(Kernel_encode_text_doc,
             "encode_text(text) -> list[int]: the ids of text (no special tokens), pre-tokenized by the\n"
             "kernel's own splitter (Kernel(split=...)) and cut into space chunks as Tokenizer._encode_chunked\n"
             "cuts them; the chunk and piece caches are used as encode_chunks uses them. The GIL is released\n"
             "while it works, so threads encoding texts on one kernel run in parallel.");

/* -- a batch of texts on several threads ---------------------------------------------------
 * encode_texts(texts, threads=N) cuts the texts into parts of about PART_CODE_POINTS, and this
 * thread and N - 1 helpers take the next part in turn, each into its own buffer, which the
 * caller reads in order (see Encoded, PartReader). The helpers touch no Python object (raw allocation, the kernel's
 * own lock), so the whole batch runs without the GIL: threads in Python, one group each, spent a
 * good part of a warm batch waiting for the GIL between groups. */

#define PART_CODE_POINTS ((size_t)1 << 18)
#define MOST_THREADS 256

/* A batch's ids: part k's texts, part_start[k] .. part_start[k + 1], have theirs one after the
 * other in part_ids[k] (a text is never cut across two parts). */
typedef struct {
    size_t n_parts;
    size_t *part_start;
    IdBuffer *part_ids;
} Encoded;

static void encoded_free(Encoded *e)
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
    Kernel *self;
    const TextView *v;
    size_t count;
    uint64_t *counts;
    unsigned char *refused;    /* per text: it holds one of specials (NULL: none looked for) */
    const Needles *specials;
    Encoded *parts;
    PyThread_type_lock lock;   /* guards next_part, part_done and failure */
    size_t next_part;
    unsigned char *part_done;
    int failure;
} Batch;

/* What the calling thread does with each part once it is encoded, in order and with the GIL
 * (encode_texts makes its lists while the helpers encode the parts after). 0, or -1 with an
 * exception set. */
typedef int (*PartReader)(void *context, const Batch *b, size_t k);

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
static int encode_views(Kernel *self, const TextView *v, size_t count, const Needles *specials,
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

static PyObject *Kernel_encode_texts(Kernel *self, PyObject *args, PyObject *kwargs)
{
    BatchArgs a;
    if (batch_args(args, kwargs, "O|Oi:encode_texts", &a) < 0)
        return NULL;
    Encoded out = {0, NULL, NULL};
    uint64_t *counts;
    Py_ssize_t count;
    PyObject *refused, *lists = NULL, *result = NULL;
    if (encode_all(self, &a, "encode_texts", &out, &counts, &count, &refused, lists_of_part, &lists) == 0)
        result = PyTuple_Pack(2, lists, refused);
    Py_XDECREF(lists); /* on failure, with the items of the parts not read yet NULL */
    Py_XDECREF(refused);
    PyMem_Free(counts);
    encoded_free(&out);
    return result;
}

PyDoc_STRVAR(Kernel_encode_texts_flat_doc,
             "encode_texts_flat(texts, specials=None, threads=1) -> (bytearray, bytearray, list[int]): what\n"
             "encode_texts gives, as machine words and no int objects: every text's ids one after the other\n"
             "(uint32) and each text's number of ids (uint64, 0 for a text left out), for numpy.frombuffer;\n"
             "and the indices of the texts left out. The whole call but its copy of the two buffers runs\n"
             "without the GIL.");

static PyObject *Kernel_encode_texts_flat(Kernel *self, PyObject *args, PyObject *kwargs)
{
    BatchArgs a;
    if (batch_args(args, kwargs, "O|Oi:encode_texts_flat", &a) < 0)
        return NULL;
    Encoded out = {0, NULL, NULL};
    uint64_t *counts;
    Py_ssize_t count;
    PyObject *refused, *result = NULL;
    if (encode_all(self, &a, "encode_texts_flat", &out, &counts, &count, &refused, NULL, NULL) == 0) {
        size_t n_ids = 0;
        for (size_t k = 0; k < out.n_parts; k++)
            n_ids += out.part_ids[k].n;
        /* the parts' ids copied straight into the bytearray, in order */
        PyObject *ids = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n_ids * sizeof(uint32_t)));
        PyObject *lengths = PyByteArray_FromStringAndSize((const char *)counts, (Py_ssize_t)((size_t)count * sizeof(uint64_t)));
        if (ids != NULL && lengths != NULL) {
            char *at = PyByteArray_AS_STRING(ids);
            for (size_t k = 0; k < out.n_parts; k++) {
                if (out.part_ids[k].n) {
                    memcpy(at, out.part_ids[k].ids, out.part_ids[k].n * sizeof(uint32_t));
                    at += out.part_ids[k].n * sizeof(uint32_t);
                }
            }
            result = PyTuple_Pack(3, ids, lengths, refused);
        }
        Py_XDECREF(ids);
        Py_XDECREF(lengths);
        Py_DECREF(refused);
    }
    PyMem_Free(counts);
    encoded_free(&out);
    return result;
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
        PyErr_Format(PyExc_ValueError, "no compiled splitter named '%.100s' (see bpetok.models._bpe.SPLITTERS)", name);
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
    {"encode_chunks", (PyCFunction)Kernel_encode_chunks, METH_VARARGS, Kernel_encode_chunks_doc},
    {"encode_text", (PyCFunction)Kernel_encode_text, METH_O, Kernel_encode_text_doc},
    {"encode_texts", (PyCFunction)(void (*)(void))Kernel_encode_texts, METH_VARARGS | METH_KEYWORDS,
     Kernel_encode_texts_doc},
    {"encode_texts_flat", (PyCFunction)(void (*)(void))Kernel_encode_texts_flat, METH_VARARGS | METH_KEYWORDS,
     Kernel_encode_texts_flat_doc},
    {"encode_piece", (PyCFunction)Kernel_encode_piece, METH_O, Kernel_encode_piece_doc},
    {"cache_info", (PyCFunction)Kernel_cache_info, METH_NOARGS, Kernel_cache_info_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(Kernel_doc, "Kernel(byte_ids, ranks, stride, shift, n_tokens, virtual_emit, whole, byte_chars, "
                         "cache_bytes, seed)\n\nBytePairModel's tables in C (see BytePairModel.make_kernel). ranks: "
                         "BytePairModel.ranks, or the table of build_merges (stride and shift then unused).");

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bpetok.models._bpe.Kernel",
    .tp_basicsize = sizeof(Kernel),
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Kernel_doc,
    .tp_methods = Kernel_methods,
    .tp_getset = Kernel_getset,
    .tp_init = (initproc)Kernel_init,
    .tp_new = Kernel_new,
};

static PyMethodDef module_methods[] = {
    {"split", (PyCFunction)module_split, METH_VARARGS, split_doc},
    {"build_merges", (PyCFunction)module_build_merges, METH_VARARGS, build_merges_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef bpe_module = {
    PyModuleDef_HEAD_INIT, "_bpe", "bpetok's compiled BPE kernel (see bpetok/models/gpt2.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__bpe(void)
{
    if (PyType_Ready(&KernelType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&bpe_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&KernelType);
    if (PyModule_AddObject(m, "Kernel", (PyObject *)&KernelType) < 0) {
        Py_DECREF(&KernelType);
        Py_DECREF(m);
        return NULL;
    }
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
    if (names == NULL || PyModule_AddObject(m, "SPLITTERS", names) < 0) { /* the compiled splitters' names */
        Py_XDECREF(names);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
