/* What the byte-level BPE kernel's C files share (bpetok/models/gpt2/kernel/, one extension module,
 * bpetok.models.gpt2._kernel): its limits, the tables a Kernel holds, the Kernel object itself, and
 * the functions each file offers the others. Private to the kernel; nothing here is Python API.
 *
 *     merge.c    the merge loops (a piece's bytes -> ids: a rescan, a heap, and rank by rank for
 *                long pieces), and the storage of the byte-string tables (the caches)
 *     build.c    load time: the Kernel's tables from BytePairModel's, and build_merges (raw merges ->
 *                the merge table, in C)
 *     text.c     text -> ids: UTF-8 of strs, pieces through the piece cache (resolve_pieces), and
 *                whole texts through space chunks, the chunk cache and the compiled splitter
 *                (bpetok/pretok/_split.c)
 *     threads.c  a batch of texts on several threads of the kernel's own, without the GIL
 *     module.c   the Python type Kernel, its methods (encode_chunks among them), and the module
 *
 * Threads: the tables are read-only once built; the piece and chunk caches are shared by every call
 * on a kernel under one read-write lock (lookups share it, additions take it alone). An entry is
 * never moved or freed while the kernel lives, so the ids a lookup found stay valid after the lock
 * is dropped. Whoever holds the lock never waits for the GIL (nor calls into Python), so waiting
 * for the lock with the GIL held cannot deadlock. Scratch memory is per call.
 *
 * Memory safety: every symbol in the tables is checked against the symbol count when they are
 * built, every write into an output buffer is checked against its capacity, and the only memory
 * read is what the kernel owns or the strs and bytes it was handed and holds references to.
 */

#ifndef BPETOK_KERNEL_H
#define BPETOK_KERNEL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../_probe.h"
#include "../../../pretok/_split.h"

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

static inline void lock_read_soon(CacheLock *l)
{
    for (int i = 0; i < LOCK_TRIES; i++)
        if (try_lock_read(l))
            return;
    lock_read(l);
}

static inline int lock_write_soon(CacheLock *l)
{
    for (int i = 0; i < LOCK_TRIES; i++)
        if (try_lock_write(l))
            return 1;
    return 0;
}

#define NO_RANK UINT32_MAX
#define EMPTY_KEY UINT64_MAX /* a free slot's key (_probe.h's) */
/* Pieces longer than this many bytes are never cached (one would fill the budget). */
#define CACHE_LONGEST 1024
/* What an id's int object costs: an int above 256 is 28 bytes, 32 in obmalloc's size classes. */
#define ID_OBJECT_BYTES 32
/* Release the GIL when a call has at least this many bytes of work on C data (below, a possible
 * wait to take the GIL back could cost more than the work). */
#define RELEASE_GIL_BYTES 2048

/* What the functions that run without the GIL return on failure; set_error (module.c) turns it
 * into an exception once the GIL is held again. */
#define FAIL_NO_MEMORY (-1)
#define FAIL_BOUND (-2)   /* a piece gave more ids than its bound: a bug */
#define FAIL_SPLITTER (-3) /* the splitter did not advance: a bug */
#define FAIL_PYTHON (-4)   /* a Python exception is set already */

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

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint32_t load32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* a[0 .. n) == b[0 .. n). The cache's keys are short (a piece, a space chunk): up to 16 bytes
 * they are compared inline, two overlapping words (or halves) each, not by a memcmp call. */
static inline int bytes_equal(const unsigned char *a, const unsigned char *b, size_t n)
{
    if (n > 16)
        return memcmp(a, b, n) == 0;
    if (n >= 8)
        return load64(a) == load64(b) && load64(a + n - 8) == load64(b + n - 8);
    if (n >= 4)
        return load32(a) == load32(b) && load32(a + n - 4) == load32(b + n - 4);
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static inline uint64_t hash_bytes(uint64_t seed, const unsigned char *p, size_t n)
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

static inline uint64_t merge_key(uint32_t left, uint32_t right)
{
    return (uint64_t)left << 32 | right;
}

DEFINE_PROBE(merge_probe, MergeTable, Merge)

/* The merge of the pair whose key (merge_key) hashes to h = mix64(key), or NULL. */
static inline const Merge *merge_find_hashed(const MergeTable *t, uint64_t key, uint64_t h)
{
    if (!filter_has(t, h))
        return NULL;
    return merge_probe(t, key, h);
}

static inline const Merge *merge_find(const MergeTable *t, uint32_t left, uint32_t right)
{
    uint64_t key = merge_key(left, right);
    return merge_find_hashed(t, key, mix64(key));
}

/* Request both lines merge_find_hashed(t, key, h) may read, its filter word and its slot, at
 * once: for a lookup whose answer the caller waits on, where a likely merge makes the slot's
 * line worth fetching without waiting for the filter. */
static inline void merge_prefetch_all(const MergeTable *t, uint64_t h)
{
    __builtin_prefetch(&t->filter[(h >> t->filter_shift) >> 6]);
    __builtin_prefetch(&t->slots[h & t->mask]);
}

/* Request what merge_find_hashed(t, key, h) reads first: the filter's word (stage 0), or once
 * that is in cache and has the bit, the table's slot (stage 1). */
static inline void merge_prefetch(const MergeTable *t, uint64_t h, int stage)
{
    if (stage == 0)
        __builtin_prefetch(&t->filter[(h >> t->filter_shift) >> 6]);
    else if (filter_has(t, h))
        __builtin_prefetch(&t->slots[h & t->mask]);
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

static inline const Entry *table_find(const BytesTable *t, uint64_t hash, const unsigned char *key, size_t len)
{
    if (t->capacity == 0)
        return NULL;
    size_t mask = t->capacity - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const Slot *slot = &t->slots[i];
        if (slot->entry == NULL)
            return NULL;
        const Entry *e = slot->entry;
        if (slot->hash == hash && e->key_len == len && bytes_equal(entry_key(e), key, len))
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

/* A hit reads two lines, its slot and then its entry: a lookup loop requests the slot of the
 * key 2 * LOOKUP_AHEAD on (table_prefetch) and, its slot being in cache by then, the entry of the
 * key LOOKUP_AHEAD on (this), so both misses overlap with the lookups before. Read under the
 * lookups' lock. */
static inline void table_prefetch_entry(const BytesTable *t, uint64_t hash)
{
    if (t->capacity != 0) {
        const Slot *slot = &t->slots[hash & (t->capacity - 1)];
        if (slot->entry != NULL && slot->hash == hash)
            __builtin_prefetch(slot->entry);
    }
}

/* Both requests for lookup i of keys whose hashes are hashes[k].hash, k < n (a Piece array). */
#define TABLE_PREFETCH_AHEAD(t, keys, i, n)                                                        \
    do {                                                                                           \
        if ((i) + 2 * LOOKUP_AHEAD < (n))                                                          \
            table_prefetch((t), (keys)[(i) + 2 * LOOKUP_AHEAD].hash);                              \
        if ((i) + LOOKUP_AHEAD < (n))                                                              \
            table_prefetch_entry((t), (keys)[(i) + LOOKUP_AHEAD].hash);                            \
    } while (0)


/* merge.c: the byte-string tables' storage. */
int table_add(BytesTable *t, uint64_t hash, const unsigned char *key, size_t len, const uint32_t *ids, size_t n_ids);
void table_free(BytesTable *t);

/* -- the kernel object ------------------------------------------------------------------------ */

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
    /* A one-byte piece's ids, bpe_piece's at load (byte_piece_n[b] 0: not kept, as for a byte that
     * gives more than two ids): a third of code's pieces are one byte, and these need no hash and
     * no cache lookup. */
    uint32_t byte_piece_ids[256][2];
    unsigned char byte_piece_n[256];
    SplitKind split; /* the pre-tokenizer encode_text runs (bpetok/pretok/_split.c), or SPLIT_NONE */
    CacheLock lock; /* guards cache and chunks (see Threads at the top of this file) */
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

/* -- merge.c: one piece's bytes -> ids ------------------------------------------------------- */

/* Scratch buffers for merging, owned by one call (so calls can run in parallel without the GIL):
 * heap, sym, rank, merged, next, prev and text are one allocation, from heap (merge.c). */
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

void scratch_free(Scratch *s);
/* BPE one piece into out (capacity cap ids). Returns the number of ids, or -1 (no memory) /
 * -2 (out too small: a bug, reported as such). Needs no GIL. */
Py_ssize_t bpe_piece(const Kernel *k, Scratch *s, const unsigned char *p, size_t n, uint32_t *out, size_t cap);

/* The most ids a piece of n bytes can give: each byte is at most one symbol. */
static inline size_t ids_bound(const Kernel *k, size_t n)
{
    return n * (size_t)(k->max_fallback ? k->max_fallback : 1);
}

/* -- build.c: load time ---------------------------------------------------------------------- */

/* Fill a new kernel's tables from Kernel(...)'s arguments (see Kernel_doc in module.c). 0, or -1
 * with an exception set. */
int kernel_tables_init(Kernel *self, PyObject *args, PyObject *kwds);
void kernel_tables_free(Kernel *self);
extern const char build_merges_doc[];
PyObject *module_build_merges(PyObject *module, PyObject *args);

/* -- text.c: text -> ids --------------------------------------------------------------------- */

/* A whole text as the kernel reads it without the GIL: CPython's own storage of its code points
 * (1, 2 or 4 bytes each; an ASCII str's is its UTF-8). A str cannot change, and the caller keeps
 * it alive, so its data can be read while other threads run Python. */
typedef struct {
    const void *data;
    size_t length; /* in code points */
    int kind;      /* PyUnicode_1BYTE_KIND, _2BYTE_ or _4BYTE_ */
    int ascii;
} TextView;

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

/* The distinct texts of a call's misses, so that each is worked out once per call: open
 * addressing over indices into the call's Piece array, load at most 1/2. */
typedef struct {
    Py_ssize_t *slots; /* -1: free */
    size_t mask;
} SeenSet;

/* A growing array of ids. */
typedef struct {
    uint32_t *ids;
    size_t n, capacity;
} IdBuffer;

int utf8_of(PyObject *item, PyObject **keep, const unsigned char **text, size_t *len);
int text_view(PyObject *text, TextView *v);
int text_views_utf8(const TextView *v, size_t count, const unsigned char **s, size_t *n, unsigned char **owned);
void needles_free(Needles *needles);
int contains_needle(const Needles *needles, const unsigned char *s, size_t n);
int needles_from(PyObject *strings, const char *name, Needles *needles);
int seen_init(SeenSet *seen, size_t n);
Py_ssize_t seen_add(SeenSet *seen, const Piece *p, Py_ssize_t i);
Py_ssize_t seen_find(const SeenSet *seen, const Piece *p, const Piece *key);
int resolve_pieces(Kernel *self, Piece *p, Py_ssize_t n, uint32_t **buffer, int holding_gil);
int encode_pieces(Kernel *self, PyObject *list, Piece **out_pieces, uint32_t **buffer, PyObject **keep);
int split_into(SplitKind kind, const unsigned char *s, size_t begin, size_t end, Piece **pieces, size_t *n,
               size_t *capacity);
int encode_utf8(Kernel *self, const unsigned char *const *s, const size_t *n, size_t count, IdBuffer *out,
                uint64_t *counts);

/* -- threads.c: a batch of texts on several threads ----------------------------------------- */

#define MOST_THREADS 256

/* A batch's ids: part k's texts, part_start[k] .. part_start[k + 1], have theirs one after the
 * other in part_ids[k] (a text is never cut across two parts). */
typedef struct {
    size_t n_parts;
    size_t *part_start;
    IdBuffer *part_ids;
} Encoded;

/* One encode_texts call's work, shared by the threads that do it. */
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

void encoded_free(Encoded *e);
int encode_views(Kernel *self, const TextView *v, size_t count, const Needles *specials, unsigned char *refused,
                 int threads, Encoded *out, uint64_t *counts, PartReader read, void *context);

/* -- module.c -------------------------------------------------------------------------------- */

void set_error(int failure);
PyObject *list_of_ids(Kernel *k, const uint32_t *ids, size_t n);

#endif
