/* The compiled merge loop of bpetok's whole-fragment models, ``llama`` (SentencePiece-style) and
 * ``gemma4`` (bpetok/models/llama.py's ``merge_symbols`` is the readable twin).
 *
 * Both models split their input into UTF-8 characters (llama.cpp's ``unicode_len_utf8`` rule:
 * a symbol is as long as its first byte says, cut short at the end of the input) and merge
 * adjacent symbols, the pair of lowest priority first, the leftmost on ties, until no pair
 * merges; SPM's priority is the merged token's score, gemma4's the merge rank. gemma4's symbols
 * are ids: the Python model builds, once per vocabulary, the ids of the single characters that
 * can take part in a merge or are tokens, and the table (left id, right id) -> (priority, merged
 * id). Ids below ``n_tokens`` are tokens; the others ("virtual") are texts that are not tokens,
 * which fall back to their bytes' tokens when they end up as a final symbol. SPM's tables
 * (spm_merger, built at load) are the token texts (_text_table.h): a pair merges when its span of
 * the input is a token. Where no token merges can form spans a word start, SPM merges word by
 * word and caches words (_word_cache.h; see encode_all). The tables are built in _spm_tables.h
 * (SPM) and _rank_tables.h (gemma4); the methods on str input are in _fragments.h.
 *
 * Memory safety: every id and priority in the tables is checked when they are built, every read
 * of the input is within its length and every write within a buffer sized for the worst case.
 * The GIL is released while merging: the tables are read-only once built, the word cache is
 * guarded by its lock, and the input is a bytes object (immutable) the call holds a reference to
 * or a copy.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_module.h"
#include "../_probe.h"
#include "_word_cache.h"

#define NO_SYMBOL UINT32_MAX /* a character that is no token and takes part in no merge */
#define EMPTY_KEY UINT64_MAX /* a free slot's key (_probe.h's) */
/* Indices into the input are uint32; longer inputs go to the Python twin. */
#define LONGEST_INPUT ((Py_ssize_t)INT32_MAX)
/* Release the GIL for inputs of at least this many bytes. */
#define RELEASE_GIL_BYTES 256

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* -- open-addressing table: uint64 key -> two uint32 values -------------------------------------- */

typedef struct {
    uint64_t key; /* EMPTY_KEY for a free slot */
    uint32_t priority;
    uint32_t value;
} Slot;

typedef struct {
    Slot *slots;
    uint64_t mask;
    size_t count;
} Table;

static int table_alloc(Table *t, size_t size)
{
    if (size > SIZE_MAX / sizeof(Slot))
        return -1;
    t->slots = (Slot *)malloc(size * sizeof(Slot));
    if (!t->slots)
        return -1;
    for (size_t i = 0; i < size; i++)
        t->slots[i].key = EMPTY_KEY;
    t->mask = size - 1;
    t->count = 0;
    return 0;
}

static int table_init(Table *t, size_t entries)
{
    size_t size = 16;
    while (size < entries * 2 + 1) { /* at most half full */
        if (size > (SIZE_MAX / sizeof(Slot)) / 2)
            return -1;
        size *= 2;
    }
    return table_alloc(t, size);
}

DEFINE_PROBE(slot_probe, Table, Slot)

static inline const Slot *table_find(const Table *t, uint64_t key)
{
    return slot_probe(t, key, mix64(key));
}

static void table_insert(Table *t, uint64_t key, uint32_t priority, uint32_t value)
{
    uint64_t i = mix64(key) & t->mask;
    while (t->slots[i].key != EMPTY_KEY) {
        if (t->slots[i].key == key)
            return; /* the first value stays, as the Python tables keep one per key */
        i = (i + 1) & t->mask;
    }
    t->slots[i].key = key;
    t->slots[i].priority = priority;
    t->slots[i].value = value;
    t->count++;
}

/* Insert ``key`` unless present, doubling the table past half full; -1 when out of memory. */
static int table_put(Table *t, uint64_t key, uint32_t priority, uint32_t value)
{
    if ((t->count + 1) * 2 > t->mask + 1) {
        Table bigger;
        if (t->mask + 1 > SIZE_MAX / 2 || table_alloc(&bigger, (size_t)(t->mask + 1) * 2) < 0)
            return -1;
        for (uint64_t i = 0; i <= t->mask; i++)
            if (t->slots[i].key != EMPTY_KEY)
                table_insert(&bigger, t->slots[i].key, t->slots[i].priority, t->slots[i].value);
        free(t->slots);
        *t = bigger;
    }
    table_insert(t, key, priority, value);
    return 0;
}

/* -- symbols ---------------------------------------------------------------------------------------- */

/* unicode_len_utf8: a sequence's length from its first byte's high nibble (continuation bytes: 1). */
static const uint8_t LENGTH_OF_NIBBLE[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};

#include "_text_table.h"

/* A character of 1-4 bytes as a key: its length above its bytes (never EMPTY_KEY). */
static inline uint64_t unit_key(const unsigned char *p, uint32_t length)
{
    uint64_t key = (uint64_t)length << 32;
    for (uint32_t i = 0; i < length; i++)
        key |= (uint64_t)p[i] << (8 * i);
    return key;
}

typedef struct {
    uint64_t priority; /* then left, right, size: compared in this order, as Python compares its tuples */
    uint32_t left, right, size;
    uint32_t merged;                      /* the id the pair merges into */
} Pair;

static inline int pair_before(const Pair *a, const Pair *b)
{
    if (a->priority != b->priority)
        return a->priority < b->priority;
    if (a->left != b->left)
        return a->left < b->left;
    if (a->right != b->right)
        return a->right < b->right;
    return a->size < b->size;
}

typedef struct {
    Pair *items;
    size_t count, capacity;
} Heap;

static int heap_push(Heap *h, Pair p)
{
    if (h->count == h->capacity) {
        size_t capacity = h->capacity ? h->capacity * 2 : 64;
        if (capacity > SIZE_MAX / sizeof(Pair))
            return -1;
        Pair *items = (Pair *)realloc(h->items, capacity * sizeof(Pair));
        if (!items)
            return -1;
        h->items = items;
        h->capacity = capacity;
    }
    size_t i = h->count++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &h->items[parent]))
            break;
        h->items[i] = h->items[parent];
        i = parent;
    }
    h->items[i] = p;
    return 0;
}

static Pair heap_pop(Heap *h)
{
    Pair top = h->items[0];
    Pair last = h->items[--h->count];
    size_t n = h->count, i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && pair_before(&h->items[child + 1], &h->items[child]))
            child++;
        if (!pair_before(&h->items[child], &last))
            break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (n)
        h->items[i] = last;
    return top;
}

typedef struct {
    PyObject_HEAD
    Table units;  /* character -> symbol id */
    uint32_t ascii[128]; /* the same for one-byte characters, without hashing */
    Table merges; /* left << 32 | right -> (priority, merged id) */
    /* SPM's tables instead of merges (spm_merger): two adjacent symbols merge when their text is
     * a token, at that token's priority. */
    TextTable texts;
    uint32_t n_symbols, n_tokens;
    int32_t byte_ids[256]; /* each byte's fallback token, -1 for none */
    int missing_byte_fails;
    /* Whether no merged symbol can span a word boundary (see split_words): then encode() merges
     * word by word and caches each word's ids, which gives the same ids as merging it whole. */
    int words;
    /* Which two ASCII characters some token holds one after the other (bit b of joins[a][b / 8]):
     * no merged symbol spans two that none does. Where one is a control character (``\n``,
     * ``\t``), words are also cut between them: a text of lines caches line by line. */
    uint8_t joins[128][16];
    /* One int object per token id, made on first use: result lists take references instead of
     * allocating an int per id. Touched only with the GIL held. */
    PyObject **id_objects;
    WordCache cache;
    PyThread_type_lock lock; /* guards cache: encode() runs without the GIL */
} Merger;

/* The merge state of one input: symbol i starts at start[i], is size[i] bytes long (0 once
 * merged into its left neighbour) and has the id id[i]; next/prev link the live symbols. The
 * buffers are kept from one word to the next (capacity symbols). */
typedef struct {
    uint32_t count, capacity;
    uint32_t *start, *size, *id, *next, *prev; /* five arrays in one allocation, at start */
    Heap heap;
} Work;

static void work_free(Work *w)
{
    free(w->start);
    free(w->heap.items);
}

static int work_reserve(Work *w, uint32_t n)
{
    if (n < w->capacity)
        return 0;
    size_t cells = (size_t)n + 1; /* n < 2**31: no overflow below */
    uint32_t *start = (uint32_t *)realloc(w->start, 5 * cells * sizeof(uint32_t));
    if (!start)
        return -1;
    w->start = start;
    w->size = w->start + cells;
    w->id = w->size + cells;
    w->next = w->id + cells;
    w->prev = w->next + cells;
    w->capacity = (uint32_t)cells;
    return 0;
}

#if defined(__GNUC__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

/* The hash of two adjacent symbols' text (SPM's lookup key), with its slot fetched ahead: the
 * table of a large vocabulary is far bigger than the CPU's caches, so the lookups of a word's
 * pairs are started together rather than one after the other. */
static inline uint64_t pair_hash(const Merger *m, const unsigned char *data, const Work *w, uint32_t left, uint32_t right)
{
    uint64_t hash = word_hash(data + w->start[left], w->size[left] + w->size[right]);
    PREFETCH(&m->texts.slots[(size_t)hash & m->texts.mask]);
    PREFETCH(&m->texts.short_tags[(size_t)hash & m->texts.mask]);
    return hash;
}

/* No pair: above every priority (a score's is at most score_priority(-inf), a rank's below 2**32). */
#define NO_PAIR UINT64_MAX

/* The priority at which the pair (left, right) merges, and into which id (``*merged``), or
 * NO_PAIR; ``hash``: its pair_hash (SPM only). */
static inline uint64_t find_pair(const Merger *m, const unsigned char *data, const Work *w, uint32_t left, uint32_t right,
                                 uint64_t hash, uint32_t *merged)
{
    if (m->texts.slots) {
        const TextSlot *s = text_slot_find(&m->texts, data + w->start[left], w->size[left] + w->size[right], hash);
        if (!s)
            return NO_PAIR;
        *merged = s->id;
        return s->priority;
    }
    if (w->id[left] == NO_SYMBOL || w->id[right] == NO_SYMBOL)
        return NO_PAIR;
    const Slot *s = table_find(&m->merges, (uint64_t)w->id[left] << 32 | w->id[right]);
    if (!s)
        return NO_PAIR;
    *merged = s->value;
    return s->priority;
}

/* Queue the pair (left, right) if it merges; ``hash``: its pair_hash (SPM only). */
static inline int queue_pair(const Merger *m, const unsigned char *data, Work *w, uint32_t left, uint32_t right, uint64_t hash)
{
    uint32_t merged = 0;
    uint64_t priority = find_pair(m, data, w, left, right, hash, &merged);
    if (priority == NO_PAIR)
        return 0;
    Pair p = {priority, left, right, w->size[left] + w->size[right], merged};
    return heap_push(&w->heap, p);
}

/* The neighbours of a symbol that has just grown, and (by text only) the hashes of its pairs with them. */
typedef struct {
    uint32_t before, after; /* UINT32_MAX: none before; count or more: none after */
    uint64_t hash_before, hash_after;
} Neighbours;

/* Symbol ``right`` joined into its left neighbour ``left``, which becomes ``merged``, ``size``
 * bytes long; returns the neighbours whose pairs with ``left`` changed. */
static inline Neighbours join(const Merger *m, const unsigned char *data, Work *w, uint32_t left, uint32_t right,
                              uint32_t merged, uint32_t size, int by_text)
{
    w->id[left] = merged;
    w->size[left] = size;
    w->size[right] = 0;
    Neighbours n = {w->prev[left], w->next[left] = w->next[right], 0, 0};
    if (n.after < w->count)
        w->prev[n.after] = left;
    if (by_text && n.before != UINT32_MAX)
        n.hash_before = pair_hash(m, data, w, n.before, left);
    if (by_text && n.after < w->count)
        n.hash_after = pair_hash(m, data, w, left, n.after);
    return n;
}

/* Words of at most this many symbols merge by scanning their pairs (merge_short), not by heap. */
#define SHORT_SYMBOLS 24

/* merge()'s loop for a few symbols: each live symbol's pair with its right neighbour has its
 * priority in ``pair``; the lowest, leftmost on ties, merges next. The heap's order exactly: a
 * queued pair is live when neither side changed since, so the heap's lowest live entry is the
 * lowest (priority, left) among the current neighbours, which is what the scan picks. */
static void merge_short(const Merger *m, const unsigned char *data, Work *w)
{
    uint32_t count = w->count;
    uint64_t pair[SHORT_SYMBOLS];
    uint32_t into[SHORT_SYMBOLS];
    int by_text = m->texts.slots != NULL;
    uint64_t hashes[SHORT_SYMBOLS];
    for (uint32_t i = 0; by_text && i + 1 < count; i++)
        hashes[i] = pair_hash(m, data, w, i, i + 1);
    for (uint32_t i = 0; i + 1 < count; i++)
        pair[i] = find_pair(m, data, w, i, i + 1, by_text ? hashes[i] : 0, &into[i]);
    pair[count - 1] = NO_PAIR;
    for (;;) {
        uint64_t best = NO_PAIR;
        uint32_t left = 0;
        for (uint32_t i = 0; i < count; i = w->next[i])
            if (pair[i] < best) {
                best = pair[i];
                left = i;
            }
        if (best == NO_PAIR)
            return;
        uint32_t right = w->next[left];
        Neighbours n = join(m, data, w, left, right, into[left], w->size[left] + w->size[right], by_text);
        if (n.before != UINT32_MAX)
            pair[n.before] = find_pair(m, data, w, n.before, left, n.hash_before, &into[n.before]);
        pair[left] = n.after < count ? find_pair(m, data, w, left, n.after, n.hash_after, &into[left]) : NO_PAIR;
    }
}

/* How many of a word's first pairs are looked up together (see pair_hash). */
#define PAIR_BATCH 16

/* Merge ``data``'s symbols into ``w`` (zeroed, or left by an earlier call); returns 0, or -1
 * when out of memory. Runs without the GIL. */
static int merge(const Merger *m, const unsigned char *data, uint32_t n, Work *w)
{
    w->count = 0;
    w->heap.count = 0;
    if (n == 0)
        return 0;
    if (work_reserve(w, n) < 0)
        return -1;
    uint32_t count = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t length = LENGTH_OF_NIBBLE[data[i] >> 4];
        if (length > n - i)
            length = n - i; /* cut short at the end, as llama.cpp's substr does */
        w->start[count] = i;
        w->size[count] = length;
        if (data[i] < 0x80) {
            w->id[count] = m->ascii[data[i]];
        } else {
            const Slot *s = table_find(&m->units, unit_key(data + i, length));
            w->id[count] = s ? s->value : NO_SYMBOL;
        }
        count++;
        i += length;
    }
    w->count = count;
    for (uint32_t i = 0; i < count; i++) {
        w->next[i] = i + 1;
        w->prev[i] = i - 1; /* UINT32_MAX for the first: no symbol before it */
    }
    if (count <= SHORT_SYMBOLS) {
        merge_short(m, data, w);
        return 0;
    }
    int by_text = m->texts.slots != NULL;
    for (uint32_t i = 0; i + 1 < count; i += PAIR_BATCH) {
        uint64_t hashes[PAIR_BATCH];
        uint32_t batch = count - 1 - i < PAIR_BATCH ? count - 1 - i : PAIR_BATCH;
        for (uint32_t j = 0; by_text && j < batch; j++)
            hashes[j] = pair_hash(m, data, w, i + j, i + j + 1);
        for (uint32_t j = 0; j < batch; j++)
            if (queue_pair(m, data, w, i + j, i + j + 1, by_text ? hashes[j] : 0) < 0)
                return -1;
    }
    while (w->heap.count) {
        Pair p = heap_pop(&w->heap);
        uint32_t left = p.left, right = p.right;
        /* Stale: one side was merged away, or a side grew since this pair was queued. */
        if (!w->size[left] || !w->size[right] || w->size[left] + w->size[right] != p.size)
            continue;
        Neighbours n = join(m, data, w, left, right, p.merged, p.size, by_text);
        if (n.before != UINT32_MAX && queue_pair(m, data, w, n.before, left, n.hash_before) < 0)
            return -1;
        if (n.after < count && queue_pair(m, data, w, left, n.after, n.hash_after) < 0)
            return -1;
    }
    return 0;
}

/* The final symbols' ids into ``out`` (room for n ids: a symbol gives at most one id a byte).
 * Returns how many, or -1 when a byte has no token and missing_byte_fails is set. */
static Py_ssize_t emit(const Merger *m, const unsigned char *data, const Work *w, int32_t *out)
{
    Py_ssize_t k = 0;
    for (uint32_t i = 0; i < w->count; i = w->next[i]) {
        uint32_t id = w->id[i];
        if (id < m->n_tokens) {
            out[k++] = (int32_t)id;
            continue;
        }
        for (uint32_t j = w->start[i]; j < w->start[i] + w->size[i]; j++) {
            int32_t fallback = m->byte_ids[data[j]];
            if (fallback >= 0)
                out[k++] = fallback;
            else if (m->missing_byte_fails)
                return -1;
        }
    }
    return k;
}

#define FAILED_BYTE (-1)
#define FAILED_MEMORY (-2)

/* How many cache hits in a row one hold of the lock serves: fewer lock operations (each costs
 * more than a probe), while other threads wait at most that long. */
#define HITS_PER_LOCK 64

/* Who holds the word cache's lock in encode_all: whether it is held, and for how many more hits. */
typedef struct {
    int held, hits_left;
} Hold;

static void hold_release(Merger *m, Hold *h)
{
    if (h->held)
        PyThread_release_lock(m->lock);
    h->held = 0;
}

/* The cached ids of the word keyed ``key[0..n)`` (hash ``hash``) into ``out``: how many, or -1.
 * The cache's lock is taken as ``h`` says and left held: the caller releases it (hold_release). */
static Py_ssize_t cache_probe(Merger *m, uint64_t hash, const unsigned char *key, uint32_t n, int32_t *out, Hold *h)
{
    if (!h->held || h->hits_left == 0) {
        hold_release(m, h);
        PyThread_acquire_lock(m->lock, WAIT_LOCK);
        h->held = 1;
        h->hits_left = HITS_PER_LOCK;
    }
    Py_ssize_t found = word_cache_get(&m->cache, hash, key, n, out);
    if (found >= 0)
        h->hits_left--;
    return found;
}

/* Merge the word ``data[0..n)`` (escaped: its spaces ``▁``) into ``out`` and, where ``cached``,
 * keep its ids under ``key[0..key_n)`` (hash ``hash``). Returns as encode_word does. */
static Py_ssize_t merge_word(Merger *m, const unsigned char *data, uint32_t n, Work *w, int32_t *out, Hold *h, int cached,
                             uint64_t hash, const unsigned char *key, uint32_t key_n)
{
    hold_release(m, h); /* merging runs without the lock */
    if (merge(m, data, n, w) < 0)
        return FAILED_MEMORY;
    Py_ssize_t k = emit(m, data, w, out);
    if (k >= 0 && cached) {
        PyThread_acquire_lock(m->lock, WAIT_LOCK); /* kept for the next words' probes */
        h->held = 1;
        h->hits_left = HITS_PER_LOCK;
        word_cache_put(&m->cache, hash, key, key_n, out, (uint32_t)k); /* a cache: when full or out of memory, skipped */
    }
    return k < 0 ? FAILED_BYTE : k;
}

/* One escaped word's ids into ``out``: from the cache, or merged (and then cached). Returns how
 * many, FAILED_BYTE (a byte without a token, missing_byte_fails) or FAILED_MEMORY; the cache's
 * lock as cache_probe leaves it. A cache key's byte 0x20 stands for ``▁`` (encode_raw keys words
 * by their text before escaping), so a word that holds a real one is not cached here. */
static Py_ssize_t encode_word(Merger *m, const unsigned char *data, uint32_t n, Work *w, int32_t *out, Hold *h)
{
    int cached = m->cache.budget > 0 && n <= WORD_CACHE_LONGEST && !memchr(data, ' ', n);
    uint64_t hash = 0;
    if (cached) {
        hash = word_hash(data, n);
        Py_ssize_t found = cache_probe(m, hash, data, n, out, h);
        if (found >= 0)
            return found;
    }
    return merge_word(m, data, n, w, out, h, cached, hash, data, n);
}

/* Whether no merge can join the symbols ``a`` and ``b`` (first bytes of two adjacent symbols,
 * ``a`` a whole one when it is ASCII) and words are cut there (see Merger.joins). */
static inline int splits(const Merger *m, unsigned char a, unsigned char b)
{
    return a < 0x80 && b < 0x80 && (a < 0x20 || b < 0x20) && !(m->joins[a][b >> 3] & (1u << (b & 7)));
}

/* The end of the word that starts at ``start`` in ``t[0..n)``, n for the last: encode_all's cuts.
 * A word starts at a space symbol that follows no space symbol (``*after_space``: whether the
 * symbol before ``start`` is one; updated as the word is read), and between two characters no
 * token holds side by side (splits). ``raw``: ``t`` is text before escaping (encode_raw), where
 * ``' '`` and ``▁`` are the space symbols and no cut falls next to a ``' '``, as none falls next to
 * a ``▁``; else ``t`` is escaped and read a UTF-8 character at a time. */
static inline uint32_t word_end(const Merger *m, const unsigned char *t, uint32_t n, uint32_t start, int raw,
                                int *after_space)
{
    for (uint32_t i = start; i < n;) {
        uint32_t length;
        int space, cut;
        if (raw && t[i] > ' ' && t[i] != 0xE2 && (i == 0 || t[i - 1] >= 0x20)) {
            /* No word starts here nor at the next bytes above ' ' other than 0xE2: none is a
             * space symbol, and splits() wants a control character on one side. */
            do
                i++;
            while (i < n && t[i] > ' ' && t[i] != 0xE2);
            *after_space = 0;
            continue;
        }
        if (raw) {
            length = 1;
            space = t[i] == ' ';
            if (t[i] == 0xE2 && n - i >= 3 && t[i + 1] == 0x96 && t[i + 2] == 0x81) {
                space = 1;
                length = 3;
            }
            cut = i > 0 && t[i] != ' ' && t[i - 1] != ' ' && splits(m, t[i - 1], t[i]);
        } else {
            length = LENGTH_OF_NIBBLE[t[i] >> 4];
            if (length > n - i)
                length = n - i;
            space = is_space_symbol(t + i, length);
            cut = i > 0 && splits(m, t[i - 1], t[i]);
        }
        if (i > start && ((space && !*after_space) || cut))
            return i;
        *after_space = space;
        i += length;
    }
    return n;
}

/* All of ``data``'s ids into ``out`` (room for n ids). Where ``words`` is set, word by word: a
 * word starts at each ``▁`` symbol that follows a symbol other than ``▁`` (symbols cut by the
 * length rule from the start of the input, so the words' symbols are the input's); no merged
 * symbol spans such a start, so no merge joins two words and each word merges as it would
 * whole. A word also starts between two ASCII characters no token holds side by side (splits).
 * Otherwise all at once. Returns as encode_word does. */
static Py_ssize_t encode_all(Merger *m, const unsigned char *data, uint32_t n, Work *w, int32_t *out)
{
    if (!m->words) {
        if (merge(m, data, n, w) < 0)
            return FAILED_MEMORY;
        Py_ssize_t k = emit(m, data, w, out);
        return k < 0 ? FAILED_BYTE : k;
    }
    Py_ssize_t k = 0;
    int after_space = 0;
    Hold hold = {0, 0};
    for (uint32_t word = 0, end; word < n; word = end) {
        end = word_end(m, data, n, word, 0, &after_space);
        Py_ssize_t got = encode_word(m, data + word, end - word, w, out + k, &hold);
        if (got < 0) {
            k = got;
            break;
        }
        k += got;
    }
    hold_release(m, &hold);
    return k;
}

/* -- the Python type ------------------------------------------------------------------------------ */

static void Merger_dealloc(Merger *self)
{
    free(self->units.slots);
    free(self->merges.slots);
    text_table_free(&self->texts);
    word_cache_free(&self->cache);
    if (self->lock)
        PyThread_free_lock(self->lock);
    for (uint32_t i = 0; self->id_objects && i < self->n_tokens; i++)
        Py_XDECREF(self->id_objects[i]);
    PyMem_Free(self->id_objects);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int read_u32(PyObject *seq, Py_ssize_t i, uint32_t below, const char *what, uint32_t *out)
{
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    unsigned long long v = PyLong_AsUnsignedLongLong(item);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (v >= below) {
        PyErr_Format(PyExc_ValueError, "%s %llu at index %zd is out of range (below %lu)", what, v, i, (unsigned long)below);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* What both constructors set first: the id counts, the byte fallbacks and the cache's lock. */
static int setup(Merger *self, unsigned long n_symbols, unsigned long n_tokens, PyObject *byte_ids, int missing_byte_fails)
{
    if (self->units.slots || self->merges.slots || self->lock) {
        PyErr_SetString(PyExc_TypeError, "Merger is already initialised");
        return -1;
    }
    if (n_symbols >= (unsigned long)INT32_MAX || n_tokens > n_symbols) {
        PyErr_SetString(PyExc_ValueError, "n_tokens <= n_symbols < 2**31 - 1 is required");
        return -1;
    }
    self->n_symbols = (uint32_t)n_symbols;
    self->n_tokens = (uint32_t)n_tokens;
    self->missing_byte_fails = missing_byte_fails;
    if (read_byte_ids(byte_ids, self->n_tokens, 1, "byte_ids", (uint32_t *)self->byte_ids) < 0)
        return -1;
    if (!(self->id_objects = (PyObject **)PyMem_Calloc((size_t)n_tokens + 1, sizeof(PyObject *)))) {
        PyErr_NoMemory();
        return -1;
    }
    if (!(self->lock = PyThread_allocate_lock())) {
        PyErr_SetString(PyExc_RuntimeError, "could not create the word cache's lock");
        return -1;
    }
    return 0;
}

static void fill_ascii(Merger *self)
{
    for (unsigned b = 0; b < 128; b++) {
        unsigned char c = (unsigned char)b;
        const Slot *s = table_find(&self->units, unit_key(&c, 1));
        self->ascii[b] = s ? s->value : NO_SYMBOL;
    }
}

static int Merger_init(Merger *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"units", "left", "right", "priority", "merged", "n_symbols", "n_tokens", "byte_ids",
                             "missing_byte_fails", "words", NULL};
    PyObject *units, *left, *right, *priority, *merged, *byte_ids;
    unsigned long n_symbols, n_tokens;
    int missing_byte_fails, words = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOOOkkOp|p", kwlist, &PyDict_Type, &units, &left, &right, &priority,
                                     &merged, &n_symbols, &n_tokens, &byte_ids, &missing_byte_fails, &words))
        return -1;
    if (setup(self, n_symbols, n_tokens, byte_ids, missing_byte_fails) < 0)
        return -1;
    self->words = words;

    if (table_init(&self->units, (size_t)PyDict_Size(units)) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(units, &pos, &key, &value)) {
        if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) < 1 || PyBytes_GET_SIZE(key) > 4) {
            PyErr_SetString(PyExc_ValueError, "units must be keyed by bytes of 1 to 4 bytes");
            return -1;
        }
        unsigned long long v = PyLong_AsUnsignedLongLong(value);
        if (v == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        if (v >= self->n_symbols) {
            PyErr_Format(PyExc_ValueError, "unit id %llu is out of range (below %lu)", v, (unsigned long)self->n_symbols);
            return -1;
        }
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(key);
        table_insert(&self->units, unit_key(p, (uint32_t)PyBytes_GET_SIZE(key)), 0, (uint32_t)v); /* sized for all */
    }
    fill_ascii(self);

    PyObject *seqs[4] = {NULL, NULL, NULL, NULL};
    PyObject *given[4] = {left, right, priority, merged};
    int status = -1;
    for (int k = 0; k < 4; k++)
        if (!(seqs[k] = PySequence_Fast(given[k], "left, right, priority and merged must be sequences")))
            goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seqs[0]);
    for (int k = 1; k < 4; k++)
        if (PySequence_Fast_GET_SIZE(seqs[k]) != n) {
            PyErr_SetString(PyExc_ValueError, "left, right, priority and merged must have the same length");
            goto done;
        }
    if (table_init(&self->merges, (size_t)n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t l, r, pr, mg;
        if (read_u32(seqs[0], i, self->n_symbols, "left id", &l) < 0 ||
            read_u32(seqs[1], i, self->n_symbols, "right id", &r) < 0 ||
            read_u32(seqs[2], i, UINT32_MAX, "priority", &pr) < 0 ||
            read_u32(seqs[3], i, self->n_symbols, "merged id", &mg) < 0)
            goto done;
        table_insert(&self->merges, (uint64_t)l << 32 | r, pr, mg); /* sized for all */
    }
    status = 0;
done:
    for (int k = 0; k < 4; k++)
        Py_XDECREF(seqs[k]);
    return status;
}

/* What a method does with its input's bytes data[0..n), merging in ``w``: a new reference, or
 * NULL with an exception set. */
typedef PyObject *(*InputReader)(Merger *self, const unsigned char *data, uint32_t n, Work *w);

/* What encode() and spans() share: ``arg`` (bytes) checked and held while ``run`` reads it, with
 * merge work memory freed after; None when it is too long for the C loop; NULL with an exception
 * set. */
static PyObject *with_input(Merger *self, PyObject *arg, const char *method, InputReader run)
{
    if (!PyBytes_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s() takes bytes, not %.100s", method, Py_TYPE(arg)->tp_name);
        return NULL;
    }
    if (!self->units.slots || !self->merges.slots) {
        PyErr_SetString(PyExc_TypeError, "Merger is not initialised");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Work w = {0};
    PyObject *result = view.len > LONGEST_INPUT ? Py_NewRef(Py_None) : run(self, (const unsigned char *)view.buf, (uint32_t)view.len, &w);
    work_free(&w);
    PyBuffer_Release(&view);
    return result;
}

/* Inputs up to this many bytes are escaped and encoded in stack buffers, without malloc. */
#define SMALL_INPUT 512

/* ``out[0..k)`` as a list of int objects, each token id's one (Merger.id_objects). */
static PyObject *ids_to_list(Merger *self, const int32_t *out, Py_ssize_t k)
{
    PyObject *result = PyList_New(k);
    for (Py_ssize_t i = 0; result && i < k; i++) {
        PyObject **slot = &self->id_objects[out[i]]; /* every id is a token's: below n_tokens */
        if (!*slot && !(*slot = PyLong_FromLong(out[i]))) {
            Py_CLEAR(result);
            break;
        }
        Py_INCREF(*slot);
        PyList_SET_ITEM(result, i, *slot);
    }
    return result;
}

/* encode_all's result ``k`` for Python: the ids out[0..k) as a list, None for FAILED_BYTE, NULL
 * with MemoryError for FAILED_MEMORY. */
static PyObject *result_of(Merger *self, const int32_t *out, Py_ssize_t k)
{
    if (k == FAILED_MEMORY)
        return PyErr_NoMemory();
    if (k == FAILED_BYTE)
        Py_RETURN_NONE;
    return ids_to_list(self, out, k);
}

/* encode_all, with the GIL released when the input is long. */
static Py_ssize_t encode_all_released(Merger *self, const unsigned char *data, uint32_t n, Work *w, int32_t *out)
{
    Py_ssize_t k;
    if (n < RELEASE_GIL_BYTES)
        return encode_all(self, data, n, w, out);
    Py_BEGIN_ALLOW_THREADS k = encode_all(self, data, n, w, out);
    Py_END_ALLOW_THREADS
    return k;
}

/* encode_all on ``data`` (the GIL released when it is long) as a list; None for FAILED_BYTE. */
static PyObject *encode_to_list(Merger *self, const unsigned char *data, uint32_t n, Work *w)
{
    int32_t small[SMALL_INPUT + 1];
    Py_ssize_t k = FAILED_MEMORY;
    int32_t *out = n <= SMALL_INPUT ? small : (int32_t *)malloc(((size_t)n + 1) * sizeof(int32_t));
    if (out)
        k = encode_all_released(self, data, n, w, out);
    PyObject *result = result_of(self, out, k);
    if (out != small)
        free(out);
    return result;
}

PyDoc_STRVAR(Merger_encode_doc, "encode(data: bytes) -> list[int] | None\n\n"
                                "The ids of ``data`` after merging (word by word through the word cache where ``words``\n"
                                "is set); None when a byte has no token and missing_byte_fails is set, or the input is too\n"
                                "long (2 GiB): the Python twin then says what happened.");

static PyObject *Merger_encode(Merger *self, PyObject *arg)
{
    return with_input(self, arg, "encode", encode_to_list);
}

#include "_fragments.h"

/* spans()'s reading of its input: the merged symbols' (start, length) spans. */
static PyObject *spans_of(Merger *self, const unsigned char *data, uint32_t n, Work *w)
{
    int failed;
    Py_BEGIN_ALLOW_THREADS failed = merge(self, data, n, w);
    Py_END_ALLOW_THREADS
    PyObject *result = failed ? PyErr_NoMemory() : PyList_New(0);
    for (uint32_t i = 0; result && i < w->count; i = w->next[i]) {
        PyObject *span = Py_BuildValue("(kk)", (unsigned long)w->start[i], (unsigned long)w->size[i]);
        if (!span || PyList_Append(result, span) < 0)
            Py_CLEAR(result);
        Py_XDECREF(span);
    }
    return result;
}

PyDoc_STRVAR(Merger_spans_doc, "spans(data: bytes) -> list[tuple[int, int]] | None\n\n"
                               "The final symbols as (start, length) byte spans, as merge_symbols gives them\n"
                               "(None for an input of 2 GiB or more).");

static PyObject *Merger_spans(Merger *self, PyObject *arg)
{
    return with_input(self, arg, "spans", spans_of);
}

PyDoc_STRVAR(Merger_set_cache_budget_doc, "set_cache_budget(budget: int) -> None\n\n"
                                          "Give the word cache ``budget`` bytes (0: none) and empty it. An SPM merger\n"
                                          "without ``words`` keeps no cache (its encode() merges whole inputs).");

static PyObject *Merger_set_cache_budget(Merger *self, PyObject *arg)
{
    Py_ssize_t budget = PyLong_AsSsize_t(arg);
    if (budget == -1 && PyErr_Occurred())
        return NULL;
    if (budget < 0) {
        PyErr_SetString(PyExc_ValueError, "the cache budget must be >= 0");
        return NULL;
    }
    if (!self->lock) {
        PyErr_SetString(PyExc_TypeError, "Merger is not initialised");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(self->lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
    word_cache_free(&self->cache);
    /* An SPM merger without words merges whole fragments: no cache. A rank merger caches the runs
     * of encode_runs (its encode() merges whole inputs and never reads the cache). */
    self->cache.budget = self->words || !self->texts.slots ? (size_t)budget : 0;
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(Merger_cache_info_doc, "cache_info() -> dict: the word cache's entries, bytes and budget.");

static PyObject *Merger_cache_info(Merger *self, PyObject *Py_UNUSED(ignored))
{
    WordCache c = {0};
    if (self->lock) {
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
        c = self->cache;
        PyThread_release_lock(self->lock);
    }
    return Py_BuildValue("{s:n,s:n,s:n}", "entries", (Py_ssize_t)c.count, "bytes", (Py_ssize_t)c.used, "budget",
                         (Py_ssize_t)c.budget);
}

static PyObject *Merger_get_words(Merger *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->words);
}

static PyGetSetDef Merger_getset[] = {
    {"words", (getter)Merger_get_words, NULL, "whether encode() merges word by word (and may cache words)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Merger_methods[] = {
    {"encode", (PyCFunction)Merger_encode, METH_O, Merger_encode_doc},
    {"encode_text", (PyCFunction)Merger_encode_text, METH_VARARGS, Merger_encode_text_doc},
    {"encode_runs", (PyCFunction)Merger_encode_runs, METH_VARARGS, Merger_encode_runs_doc},
    {"encode_parts", (PyCFunction)Merger_encode_parts, METH_VARARGS, Merger_encode_parts_doc},
    {"encode_cut", (PyCFunction)(void (*)(void))Merger_encode_cut, METH_FASTCALL, Merger_encode_cut_doc},
    {"spans", (PyCFunction)Merger_spans, METH_O, Merger_spans_doc},
    {"set_cache_budget", (PyCFunction)Merger_set_cache_budget, METH_O, Merger_set_cache_budget_doc},
    {"cache_info", (PyCFunction)Merger_cache_info, METH_NOARGS, Merger_cache_info_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(Merger_doc, "Merger(units, left, right, priority, merged, n_symbols, n_tokens, byte_ids, missing_byte_fails)\n\n"
                         "One vocabulary's merge tables: ``units`` maps each character (1-4 bytes) that is a token\n"
                         "or takes part in a merge to its symbol id; pair i merges symbols left[i], right[i] into\n"
                         "merged[i] at priority[i] (lowest first). Ids below n_tokens are tokens; ``byte_ids``\n"
                         "gives each byte's fallback token or None (a byte without one is dropped, or makes\n"
                         "encode() return None when missing_byte_fails is true).");

static PyTypeObject MergerType = {BPETOK_TYPE(Merger, "bpetok.models._symbols.Merger", Merger_doc),
                                  .tp_getset = Merger_getset};

#include "_spm_tables.h"
#include "_rank_tables.h"

static PyMethodDef module_methods[] = {
    {"spm_merger", (PyCFunction)spm_merger, METH_VARARGS, spm_merger_doc},
    {"rank_merger", (PyCFunction)rank_merger, METH_VARARGS, rank_merger_doc},
    {NULL, NULL, 0, NULL},
};

BPETOK_MODULE(_symbols, "The compiled merge loop of the llama (SPM) and gemma4 models (see bpetok/models/llama.py).",
              module_methods, &MergerType)
