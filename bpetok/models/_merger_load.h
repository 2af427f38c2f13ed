/* What spm_merger (_spm_tables.h) and rank_merger (_rank_tables.h) share, included by both after
 * the Merger type and setup() (bpetok/models/_symbols.c): a new Merger built from their arguments,
 * and the entries of the token index they build from, a dict of token text (bytes) -> token id.
 */

#ifndef BPETOK_MERGER_LOAD_H
#define BPETOK_MERGER_LOAD_H

/* A new Merger for ``n_tokens`` tokens and no other symbols yet, with its byte fallbacks (setup());
 * NULL with an exception set. The caller builds its tables. */
static Merger *new_merger(unsigned long n_tokens, PyObject *byte_ids, int missing_byte_fails)
{
    Merger *self = (Merger *)MergerType.tp_alloc(&MergerType, 0);
    if (self && setup(self, n_tokens, n_tokens, byte_ids, missing_byte_fails) < 0)
        Py_CLEAR(self);
    return self;
}

/* How a Merger's tables are built from the token index and the builder's own ``table`` argument: 0;
 * 1 when there is no order to reproduce (the caller gives None); -1 with an exception set. */
typedef int (*TablesBuilder)(Merger *self, PyObject *index, PyObject *table);

/* What spm_merger() and rank_merger() share: their arguments (index, table, n_tokens, byte_ids,
 * missing_byte_fails=False) read, a new Merger with the byte fallbacks, and ``build`` filling its
 * tables: the Merger, None where ``build`` gives 1, or NULL with an exception set. */
static PyObject *build_merger(PyObject *args, TablesBuilder build)
{
    PyObject *index, *table, *byte_ids;
    unsigned long n_tokens;
    int missing_byte_fails = 0;
    if (!PyArg_ParseTuple(args, "O!OkO|p", &PyDict_Type, &index, &table, &n_tokens, &byte_ids, &missing_byte_fails))
        return NULL;
    Merger *self = new_merger(n_tokens, byte_ids, missing_byte_fails);
    int status = self ? build(self, index, table) : -1;
    if (status != 0)
        Py_CLEAR(self);
    return status == 1 ? Py_NewRef(Py_None) : (PyObject *)self;
}

/* The text and id of one entry (``key``, ``value`` as PyDict_Next gives them), checked: bytes
 * shorter than 4 GiB, an id below ``n_tokens``. 0, or -1 with an exception set. */
static int token_index_entry(PyObject *key, PyObject *value, uint32_t n_tokens, const unsigned char **text,
                             uint32_t *len, uint32_t *id)
{
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) >= (Py_ssize_t)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the token index must be keyed by bytes");
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (v >= n_tokens) {
        PyErr_Format(PyExc_ValueError, "token id %llu is out of range (below %lu)", v, (unsigned long)n_tokens);
        return -1;
    }
    *text = (const unsigned char *)PyBytes_AS_STRING(key);
    *len = (uint32_t)PyBytes_GET_SIZE(key);
    *id = (uint32_t)v;
    return 0;
}

#endif
