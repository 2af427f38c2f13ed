/* SentencePieceModel's tables for the compiled merge loop (bpetok/models/_symbols.c, included
 * after the Merger type and setup()): the token texts with their scores' priorities
 * (_text_table.h), the units, the ``joins`` pairs and the ``words`` check, built at load from
 * the token index.
 */

#ifndef BPETOK_SPM_TABLES_H
#define BPETOK_SPM_TABLES_H

#include "_merger_load.h"

static int build_spm(Merger *self, PyObject *index, const uint64_t *priority)
{
    PyObject **spanning = NULL; /* the texts that hold a ▁ after another character */
    size_t n_spanning = 0, spanning_room = 0;
    Py_ssize_t n = PyDict_Size(index), pos = 0;
    PyObject *key, *value;
    size_t total = 0;
    while (PyDict_Next(index, &pos, &key, &value)) {
        if (!PyBytes_Check(key)) {
            PyErr_SetString(PyExc_ValueError, "the token index must be keyed by bytes");
            return -1;
        }
        total += (size_t)PyBytes_GET_SIZE(key);
    }
    if (total >= (size_t)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the token texts are too long (4 GiB)");
        return -1;
    }
    size_t size = 16;
    while (size < (size_t)n * 2 + 1)
        size *= 2;
    TextTable *t = &self->texts;
    if (!(t->slots = (TextSlot *)calloc(size, sizeof(TextSlot))) || !(t->arena = (unsigned char *)malloc(total + 1)) ||
        !(t->short_tags = (uint16_t *)calloc(size, sizeof(uint16_t))) ||
        table_init(&self->units, 1024) < 0 || table_init(&self->merges, 0) < 0)
        goto no_memory;
    t->mask = size - 1;
    uint32_t offset = 0;
    pos = 0;
    /* The texts go in by batches: a batch's slots are fetched ahead, together (the table is far
     * larger than the CPU's caches), and free slots are found in short_tags (0: free). */
    enum { BATCH = 32 };
    struct { PyObject *text; const unsigned char *p; uint32_t len, id; uint64_t hash; } batch[BATCH];
    for (int more = 1; more;) {
        int count = 0;
        while (count < BATCH && (more = PyDict_Next(index, &pos, &key, &value))) {
            const unsigned char *p;
            uint32_t len, id;
            if (token_index_entry(key, value, self->n_tokens, &p, &len, &id) < 0)
                goto fail;
            uint64_t hash = word_hash(p, len);
            PREFETCH(&t->short_tags[(size_t)hash & t->mask]);
            PREFETCH(&t->slots[(size_t)hash & t->mask]);
            batch[count].text = key;
            batch[count].p = p;
            batch[count].len = len;
            batch[count].id = id;
            batch[count].hash = hash;
            count++;
        }
        for (int b = 0; b < count; b++) {
            const unsigned char *p = batch[b].p;
            uint32_t len = batch[b].len, v = batch[b].id;
            uint64_t hash = batch[b].hash;
            size_t i = (size_t)hash & t->mask;
            while (t->short_tags[i])
                i = (i + 1) & t->mask;
            uint32_t rest = len > 8 ? len - 8 : 0;
            memcpy(t->arena + offset, p + 8, rest);
            t->slots[i] = (TextSlot){text_head(p, len), priority[v], offset, len, v, text_tag(hash)};
            t->short_tags[i] = text_short_tag(hash);
            offset += rest;
            if (is_one_symbol(p, len) && table_put(&self->units, unit_key(p, len), 0, v) < 0)
                goto no_memory;
            for (uint32_t j = 0; j + 1 < len; j++)
                if (p[j] < 0x80 && p[j + 1] < 0x80)
                    self->joins[p[j]][p[j + 1] >> 3] |= (uint8_t)(1u << (p[j + 1] & 7));
            /* Checked once the table is whole (can_form looks the halves up): the few that do. */
            if (len && spans_a_word_start(p, len)) {
                if (n_spanning == spanning_room) {
                    size_t room = spanning_room ? spanning_room * 2 : 64;
                    PyObject **bigger = (PyObject **)realloc(spanning, room * sizeof(PyObject *));
                    if (!bigger)
                        goto no_memory;
                    spanning = bigger;
                    spanning_room = room;
                }
                spanning[n_spanning++] = batch[b].text;
            }
        }
    }
    self->words = 1;
    for (size_t j = 0; self->words && j < n_spanning; j++) {
        PyObject *text = spanning[j]; /* the index's own key: the index is not changed meanwhile */
        if (can_form(t, (const unsigned char *)PyBytes_AS_STRING(text), (uint32_t)PyBytes_GET_SIZE(text)))
            self->words = 0;
    }
    free(spanning);
    fill_ascii(self);
    return 0;
no_memory:
    PyErr_NoMemory();
fail:
    free(spanning);
    return -1;
}

/* Each token's merge priority from its score (score_priority), into a new array of n_tokens + 1:
 * 0; 1 for a NaN score (llama.cpp's heap has no order either: the Python twin runs); -1 with an
 * exception set. */
static int read_priorities(PyObject *scores, uint32_t n_tokens, uint64_t **priority)
{
    PyObject *seq = PySequence_Fast(scores, "scores must be a sequence");
    if (!seq)
        return -1;
    int status = -1;
    if (PySequence_Fast_GET_SIZE(seq) != (Py_ssize_t)n_tokens) {
        PyErr_SetString(PyExc_ValueError, "scores must have n_tokens entries");
        goto done;
    }
    if (!(*priority = (uint64_t *)malloc(((size_t)n_tokens + 1) * sizeof(uint64_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    for (uint32_t i = 0; i < n_tokens; i++) {
        double score = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (score == -1.0 && PyErr_Occurred())
            goto done;
        if (score != score) {
            status = 1;
            goto done;
        }
        (*priority)[i] = score_priority(score);
    }
    status = 0;
done:
    Py_DECREF(seq);
    return status;
}

PyDoc_STRVAR(spm_merger_doc, "spm_merger(index, scores, n_tokens, byte_ids, missing_byte_fails=False) -> Merger | None\n\n"
                             "SentencePieceModel's tables from its token index (text -> id) and its n_tokens scores: two\n"
                             "adjacent symbols merge when their text is a token, the highest score first. None when a score\n"
                             "is NaN (no order to reproduce). ``words`` is set when no token merges can form holds a ``▁``\n"
                             "right after another character.");

/* spm_merger()'s TablesBuilder: the priorities of ``scores``, then build_spm. */
static int spm_tables(Merger *self, PyObject *index, PyObject *scores)
{
    uint64_t *priority = NULL;
    int status = read_priorities(scores, self->n_tokens, &priority);
    if (status == 0)
        status = build_spm(self, index, priority);
    free(priority);
    return status;
}

static PyObject *spm_merger(PyObject *Py_UNUSED(module), PyObject *args)
{
    return build_merger(args, spm_tables);
}

#endif
