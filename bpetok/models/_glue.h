/* What the Python types of the model kernels bpetok/models/_trie.c and _wpm.c share: copying array
 * arguments into memory of their own, and each token id's int object, made once.
 */

#ifndef BPETOK_GLUE_H
#define BPETOK_GLUE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A copy of a buffer of ``n`` items of ``itemsize`` bytes, or NULL with an exception set. */
static void *copy_buffer(PyObject *obj, Py_ssize_t itemsize, Py_ssize_t *n, const char *name)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len % itemsize) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", name, view.len, itemsize);
        return NULL;
    }
    void *out = malloc(view.len ? (size_t)view.len : 1);
    if (out == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(out, view.buf, (size_t)view.len);
    *n = view.len / itemsize;
    PyBuffer_Release(&view);
    return out;
}

/* One array argument for copy_buffers: its name (for the error messages, and the keyword of
 * parse_buffer_args), its item size, where its copy and its item count go, and the object. */
typedef struct {
    const char *name;
    Py_ssize_t itemsize;
    void **out;
    Py_ssize_t *n;
    PyObject *obj;
} BufferArg;

/* copy_buffer on each of the ``n`` arguments in turn, stopping at the first that fails (the copies
 * made before it stay in their ``out`` slots, for the caller's dealloc): 0, or -1 with an exception
 * set. */
static int copy_buffers(const BufferArg *args, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if ((*args[k].out = copy_buffer(args[k].obj, args[k].itemsize, args[k].n, args[k].name)) == NULL)
            return -1;
    return 0;
}

/* Each id's int object below ``n``, made when first returned: Python interns no int past 256,
 * and a list of a long text's ids would otherwise make one object per id. */
typedef struct {
    PyObject **ints; /* n slots, NULL until the id is first returned */
    size_t n;
} IdInts;

/* Room for the ids below ``n``: 0, or -1 with MemoryError (then no ids are kept). */
static int id_ints_alloc(IdInts *t, size_t n)
{
    if ((t->ints = calloc(n ? n : 1, sizeof(PyObject *))) == NULL) {
        t->n = 0;
        PyErr_NoMemory();
        return -1;
    }
    t->n = n;
    return 0;
}

/* The ints let go, the table left to whoever allocated it. */
static void id_ints_release(IdInts *t)
{
    for (size_t k = 0; k < t->n; k++)
        Py_CLEAR(t->ints[k]);
}

static void id_ints_free(IdInts *t)
{
    id_ints_release(t);
    free(t->ints);
    t->ints = NULL;
    t->n = 0;
}

/* ``ids[0..n)`` as a new list of ints, or NULL with an exception set. */
static PyObject *id_ints_list(IdInts *t, const uint32_t *ids, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        PyObject *id;
        if (ids[i] < t->n) {
            if ((id = t->ints[ids[i]]) == NULL)
                id = t->ints[ids[i]] = PyLong_FromUnsignedLong(ids[i]);
            Py_XINCREF(id);
        } else {
            id = PyLong_FromUnsignedLong(ids[i]);
        }
        if (id == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, id);
    }
    return list;
}

#endif
