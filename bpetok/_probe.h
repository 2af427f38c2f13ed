/* The lookup of the open-addressing tables whose slots start with a uint64_t ``key``, UINT64_MAX
 * in a free slot, probed linearly from the key's hash: the gpt2 kernel's merge table
 * (bpetok/models/gpt2/kernel/kernel.h, merge_find_hashed) and _symbols.c's Table (table_find).
 * Each slot type keeps its own values after the key. */

#ifndef BPETOK_PROBE_H
#define BPETOK_PROBE_H

#include <stdint.h>

/* Defines NAME(t, key, hash): the SLOT of table t (a TABLE: its slots, t->slots[0 .. t->mask])
 * that holds key, probing from hash & t->mask, or NULL when a free slot comes first (the tables
 * always have one). One function per table type, read as that type and always inlined: the loop
 * compiles to what each table's own did (for the merge table, the merge loop's hottest lines). */
#if defined(__GNUC__) || defined(__clang__)
#define PROBE_INLINE static inline __attribute__((always_inline))
#else
#define PROBE_INLINE static inline
#endif

#define DEFINE_PROBE(NAME, TABLE, SLOT)                                                            \
    PROBE_INLINE const SLOT *NAME(const TABLE *t, uint64_t key, uint64_t hash)                     \
    {                                                                                              \
        uint64_t i = hash & t->mask;                                                               \
        for (;;) {                                                                                 \
            const SLOT *slot = &t->slots[i];                                                       \
            if (slot->key == key)                                                                  \
                return slot;                                                                       \
            if (slot->key == UINT64_MAX)                                                           \
                return NULL;                                                                       \
            i = (i + 1) & t->mask;                                                                 \
        }                                                                                          \
    }

#endif
