/* The hot loop of reading a GGUF vocabulary in C (bpetok/vocab/gguf.py is the reference).
 *
 * read_strings cuts `count` length-prefixed strings (u64 little-endian length, then the bytes)
 * out of a buffer: the two arrays of a vocabulary, 2 x 150k strings, which a Python loop walks
 * one prefix at a time. Every length is checked against the bytes that remain before anything is
 * read or allocated; on an overrun it returns None and the caller's checked Python reader finds
 * the bad string and raises its precise error.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--)
        v = v << 8 | p[b];
    return v;
}

PyDoc_STRVAR(read_strings_doc,
             "read_strings(buffer, offset, count) -> (list[bytes], end) or None\n\n"
             "count length-prefixed strings from buffer[offset:], and the offset after the last one; None\n"
             "when they overrun the buffer (nothing is read past its end). See _Cursor.string_array_plain.");

static PyObject *read_strings(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t offset, count;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &offset, &count))
        return NULL;
    PyObject *result = NULL, *strings = NULL;
    if (offset < 0 || offset > view.len || count < 0) {
        PyErr_SetString(PyExc_ValueError, "read_strings: offset or count out of range");
        goto done;
    }
    const unsigned char *data = view.buf;
    size_t end = (size_t)view.len, pos = (size_t)offset;
    /* First a pass that only checks, so a hostile count allocates nothing: every string takes
     * at least its 8-byte prefix, and each must fit in what remains. */
    for (Py_ssize_t i = 0; i < count; i++) {
        if (end - pos < 8)
            goto overrun;
        uint64_t n = le64(data + pos);
        pos += 8;
        if (n > end - pos)
            goto overrun;
        pos += (size_t)n;
    }
    strings = PyList_New(count);
    if (strings == NULL)
        goto done;
    pos = (size_t)offset;
    for (Py_ssize_t i = 0; i < count; i++) {
        size_t n = (size_t)le64(data + pos); /* checked above */
        PyObject *s = PyBytes_FromStringAndSize((const char *)data + pos + 8, (Py_ssize_t)n);
        if (s == NULL)
            goto done;
        PyList_SET_ITEM(strings, i, s);
        pos += 8 + n;
    }
    result = Py_BuildValue("(On)", strings, (Py_ssize_t)pos);
    goto done;
overrun:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    Py_XDECREF(strings);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef module_methods[] = {
    {"read_strings", (PyCFunction)read_strings, METH_VARARGS, read_strings_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef gguf_module = {
    PyModuleDef_HEAD_INIT, "_gguf", "bpetok's compiled GGUF string-array reader (see bpetok/vocab/gguf.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__gguf(void)
{
    return PyModule_Create(&gguf_module);
}
