/* SPM's token table for the compiled merge loop (bpetok/models/_symbols.c, included after
 * LENGTH_OF_NIBBLE and NO_SYMBOL): token text -> (id, priority), and the checks spm_merger makes
 * on the texts at load. Built once, read-only afterwards (shared by threads without a lock).
 */

#ifndef BPETOK_TEXT_TABLE_H
#define BPETOK_TEXT_TABLE_H

typedef struct {
    uint64_t head;     /* the text's first 8 bytes, zero-padded: most lookups compare nothing else */
    uint64_t priority; /* the token's (score_priority), beside it: one cache line per lookup */
    uint32_t offset;   /* of the rest, past those 8 bytes, in the arena */
    uint32_t len, id;
    uint32_t tag; /* the hash's high half; 0 for a free slot (tags are never 0) */
} TextSlot;

typedef struct {
    TextSlot *slots;
    size_t mask;
    unsigned char *arena; /* every text's bytes past its first 8, back to back */
    /* Optional (NULL: not used): each slot's text_short_tag, 0 for a free slot. Sixteen times
     * smaller than the slots, so a lookup of a text that is no token mostly ends here, in the
     * CPU's cache, without reading a slot of a table far larger than it. */
    uint16_t *short_tags;
} TextTable;

static inline uint32_t text_tag(uint64_t hash)
{
    uint32_t tag = (uint32_t)(hash >> 32);
    return tag ? tag : 1;
}

static inline uint16_t text_short_tag(uint64_t hash)
{
    return (uint16_t)((hash >> 40) | 1); /* never 0; bits no slot index uses (tables are below 2**40 slots) */
}

static inline uint64_t text_head(const unsigned char *p, uint32_t n)
{
    uint64_t head = 0;
    memcpy(&head, p, n < 8 ? n : 8);
    return head;
}

static inline const TextSlot *text_slot_find(const TextTable *t, const unsigned char *p, uint32_t n, uint64_t hash)
{
    uint32_t tag = text_tag(hash);
    uint64_t head = text_head(p, n);
    uint16_t short_tag = text_short_tag(hash);
    for (size_t i = (size_t)hash & t->mask;; i = (i + 1) & t->mask) {
        if (t->short_tags) {
            uint16_t found = t->short_tags[i];
            if (!found)
                return NULL;
            if (found != short_tag)
                continue;
        }
        const TextSlot *s = &t->slots[i];
        if (!s->tag)
            return NULL;
        if (s->tag == tag && s->len == n && s->head == head && (n <= 8 || memcmp(t->arena + s->offset, p + 8, n - 8) == 0))
            return s;
    }
}

static inline uint32_t text_find(const TextTable *t, const unsigned char *p, uint32_t n, uint64_t hash)
{
    const TextSlot *s = text_slot_find(t, p, n, hash);
    return s ? s->id : NO_SYMBOL;
}

static void text_table_free(TextTable *t)
{
    free(t->slots);
    free(t->arena);
    free(t->short_tags);
    t->slots = NULL;
    t->arena = NULL;
    t->short_tags = NULL;
}

static inline int is_space_symbol(const unsigned char *p, uint32_t length)
{
    return length == 3 && p[0] == 0xE2 && p[1] == 0x96 && p[2] == 0x81;
}

static inline int is_one_symbol(const unsigned char *p, uint32_t n)
{
    return n > 0 && n <= LENGTH_OF_NIBBLE[p[0] >> 4];
}

/* Whether the text ``p[0..n)`` holds a ``▁`` right after a character other than ``▁``. */
static int spans_a_word_start(const unsigned char *p, uint32_t n)
{
    int after_other = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t length = LENGTH_OF_NIBBLE[p[i] >> 4];
        if (length > n - i)
            length = n - i;
        int space = is_space_symbol(p + i, length);
        if (space && after_other)
            return 1;
        after_other = !space;
        i += length;
    }
    return 0;
}

/* Whether merges can form the token ``p[0..n)``: some cut of it into two symbols, each a token or
 * one character (what SentencePieceModel.merge's lookups can ever join). */
static int can_form(const TextTable *t, const unsigned char *p, uint32_t n)
{
    for (uint32_t cut = LENGTH_OF_NIBBLE[p[0] >> 4]; cut < n; cut += LENGTH_OF_NIBBLE[p[cut] >> 4]) {
        int left = is_one_symbol(p, cut) || text_find(t, p, cut, word_hash(p, cut)) != NO_SYMBOL;
        if (left && (is_one_symbol(p + cut, n - cut) || text_find(t, p + cut, n - cut, word_hash(p + cut, n - cut)) != NO_SYMBOL))
            return 1;
    }
    return 0;
}

/* The tables of SentencePieceModel.merge: each token's text (a copy) -> its id, and the units
 * (the tokens of one character). ``words`` is set unless a token merges can form spans a word start. */
/* A score as a priority: the higher the score the lower the priority, equal scores (0.0 and -0.0
 * too) equal, as Python orders -score; the bits of a double made to sort as unsigned integers. */
static uint64_t score_priority(double score)
{
    if (score == 0.0)
        score = 0.0;
    uint64_t bits;
    memcpy(&bits, &score, sizeof bits);
    uint64_t ascending = (bits & 0x8000000000000000ULL) ? ~bits : bits | 0x8000000000000000ULL;
    return ~ascending;
}

#endif
