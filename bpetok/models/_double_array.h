/* A double-array copy of a _sorted_trie.h trie, for the walks that take one step a byte
 * (bpetok/models/_trie.c's longest match, _ugm.c's Viterbi).
 *
 * Each node is a 4-byte slot; the child of a node along byte b is slot base + b when that slot
 * is taken and led to by b (no two nodes share a base). A step is therefore one load, of a
 * word that also holds the child's own base and whether it has a value, where the sorted trie's
 * step reads the 16-byte node, then a bitmap or a scan of its children (two or three dependent
 * loads, a branch on each child's byte). Four bytes a node keep a 65k-token vocabulary's trie
 * (116k nodes) within a core's L2. The nodes are placed breadth first, each one's children at
 * the lowest free run that fits them, so the busy nodes near the root share a few cache lines.
 *
 * Memory safety: every base is below n_slots - 255, so base + b is always a slot; slots past
 * those the trie uses are zero (not taken); the root, slot 0, is not marked taken either, so no
 * step lands on it. More than DA_MAX_SLOTS slots is an OverflowError, not a wrap (the callers
 * then walk in Python).
 */

#ifndef BPETOK_DOUBLE_ARRAY_H
#define BPETOK_DOUBLE_ARRAY_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_sorted_trie.h"

/* A slot: bits 0-7 the byte that leads to it, bit 8 set when a node holds it, bit 9 when the node
 * has a value (in values[slot]), bits 10-31 its base (0: no children). */
#define DA_USED 0x100u
#define DA_HAS_VALUE 0x200u
#define DA_BASE_SHIFT 10
#define DA_MAX_SLOTS (1u << (32 - DA_BASE_SHIFT))
#define DA_NONE UINT32_MAX

typedef struct {
    uint32_t *slots;
    int32_t *values; /* per slot, read only where DA_HAS_VALUE says */
    uint32_t n_slots;
} DoubleArray;

static inline uint32_t da_base(uint32_t slot)
{
    return slot >> DA_BASE_SHIFT;
}

/* Whether ``slot``, reached as base + b, is the child along ``b`` of the node with that base. */
static inline int da_is_child(uint32_t slot, uint8_t b)
{
    return (slot & (DA_USED | 0xFFu)) == (DA_USED | b);
}

/* The child of slot ``s`` along byte ``b``, or DA_NONE. */
static inline uint32_t da_child(const DoubleArray *d, uint32_t s, uint8_t b)
{
    uint32_t t = da_base(d->slots[s]) + b;
    return da_is_child(d->slots[t], b) ? t : DA_NONE;
}

static inline void da_free(DoubleArray *d)
{
    free(d->slots);
    free(d->values);
    memset(d, 0, sizeof *d);
}

/* Room for slots below ``need`` (new ones free); 0, or -1 when there would be more than
 * DA_MAX_SLOTS or memory runs out. ``base_taken`` (per slot: some node has it as its base) grows
 * alongside. */
static inline int da_reserve(DoubleArray *d, uint8_t **base_taken, uint64_t need)
{
    if (need <= d->n_slots)
        return 0;
    if (need > DA_MAX_SLOTS)
        return -1;
    uint64_t size = d->n_slots ? d->n_slots : 1024;
    while (size < need)
        size *= 2;
    if (size > DA_MAX_SLOTS)
        size = DA_MAX_SLOTS;
    uint32_t *slots = realloc(d->slots, (size_t)size * sizeof(uint32_t));
    if (slots != NULL)
        d->slots = slots;
    int32_t *values = slots ? realloc(d->values, (size_t)size * sizeof(int32_t)) : NULL;
    if (values != NULL)
        d->values = values;
    uint8_t *taken = values ? realloc(*base_taken, (size_t)size) : NULL;
    if (taken == NULL)
        return -1;
    *base_taken = taken;
    memset(slots + d->n_slots, 0, (size_t)(size - d->n_slots) * sizeof(uint32_t));
    memset(taken + d->n_slots, 0, (size_t)(size - d->n_slots));
    for (uint64_t k = d->n_slots; k < size; k++)
        values[k] = -1;
    d->n_slots = (uint32_t)size;
    return 0;
}

/* The double array of ``t`` (its nodes' values kept); 0, or -1 with MemoryError set, or an
 * OverflowError when it would need more than DA_MAX_SLOTS slots.
 *
 * A slot records only the byte that leads to it, not its parent: that suffices because no two
 * nodes share a base (base_taken), so base + b holding a node led to by b means it is the child
 * of the one node with that base, and base 0, which leaves have, is no node's. */
static inline int da_build(DoubleArray *d, const SortedTrie *t)
{
    d->slots = NULL;
    d->values = NULL;
    d->n_slots = 0;
    uint8_t *base_taken = NULL;
    uint32_t *slot_of = malloc((t->n_nodes ? t->n_nodes : 1) * sizeof(uint32_t));
    uint64_t need = (uint64_t)t->n_nodes + 512;
    if (slot_of == NULL || da_reserve(d, &base_taken, need) < 0)
        goto failed;
    slot_of[0] = 0; /* the root: slot 0, not DA_USED, so no walk steps into it */
    base_taken[0] = 1;
    uint64_t next_base = 1; /* every base below it is taken (or skipped as crowded) */
    for (uint32_t k = 0; k < t->n_nodes; k++) { /* breadth first: a node's slot is set before its turn */
        const TrieNode *node = &t->nodes[k];
        if (node->value >= 0) {
            d->slots[slot_of[k]] |= DA_HAS_VALUE;
            d->values[slot_of[k]] = node->value;
        }
        if (node->count == 0)
            continue;
        uint64_t f = next_base, tried = 0; /* f: the base tried */
        for (;; f++) {
            need = f + 257; /* base + 255 stays a slot */
            if (da_reserve(d, &base_taken, need) < 0)
                goto failed;
            if (base_taken[f]) { /* the next untaken base (taken ones come in long runs) */
                const uint8_t *free_base = memchr(base_taken + f, 0, d->n_slots - f);
                f = (free_base ? (uint64_t)(free_base - base_taken) : d->n_slots) - 1;
                continue;
            }
            tried++;
            uint32_t c = node->first;
            while (c < node->first + node->count && !(d->slots[f + t->nodes[c].byte] & DA_USED))
                c++;
            if (c == node->first + node->count)
                break;
        }
        base_taken[f] = 1;
        if (tried > 32)
            next_base = f; /* a crowded stretch: later searches skip it */
        while (base_taken[next_base]) /* f + 1 is a slot and not taken yet */
            next_base++;
        uint32_t base = (uint32_t)f;
        base_taken[base] = 1;
        d->slots[slot_of[k]] |= base << DA_BASE_SHIFT;
        for (uint32_t c = node->first; c < node->first + node->count; c++) {
            uint32_t s = base + t->nodes[c].byte;
            d->slots[s] |= DA_USED | t->nodes[c].byte;
            slot_of[c] = s;
        }
    }
    free(slot_of);
    free(base_taken);
    return 0;
failed:
    free(slot_of);
    free(base_taken);
    da_free(d);
    if (need > DA_MAX_SLOTS)
        PyErr_Format(PyExc_OverflowError, "trie: needs more than %u double-array slots", DA_MAX_SLOTS);
    else
        PyErr_NoMemory();
    return -1;
}

#endif
