/* The compiled merge loop's methods on text (bpetok/models/_symbols.c, included after
 * encode_to_list): ``encode_text``, one fragment escaped as SentencePieceModel.encode_fragment
 * escapes it, and ``encode_parts``, a whole partitioned text (fragments and special ids) in one
 * call, as Tokenizer._encode_parts gives it.
 */

#ifndef BPETOK_FRAGMENTS_H
#define BPETOK_FRAGMENTS_H

/* ``text``'s UTF-8 with its spaces as ``▁`` and, where ``prefix``, one in front, into ``*data``
 * (``small`` when it fits its ``room`` bytes, else malloc'd: the caller frees it unless it is
 * ``small``) and ``*size``. 0, 1 when the text is no UTF-8 (lone surrogates) or too long (the
 * caller escapes it in Python), -1 with an exception set. */
static int escape_text(PyObject *text, int prefix, unsigned char *small, size_t room, unsigned char **data, size_t *size)
{
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    if (!utf8) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    if (n > LONGEST_INPUT / 3 - 3) /* the escaped text stays below 2 GiB */
        return 1;
    Py_ssize_t spaces = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        spaces += utf8[i] == ' ';
    size_t need = (size_t)n + 2 * (size_t)spaces + (prefix ? 3 : 0); /* each space 3 bytes, the prefix 3 */
    unsigned char *out = need <= room ? small : (unsigned char *)malloc(need + 1);
    if (!out) {
        PyErr_NoMemory();
        return -1;
    }
    size_t k = 0;
    static const unsigned char SPACE_UTF8[3] = {0xE2, 0x96, 0x81};
    if (prefix) {
        memcpy(out, SPACE_UTF8, 3);
        k = 3;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (utf8[i] == ' ') {
            memcpy(out + k, SPACE_UTF8, 3);
            k += 3;
        } else {
            out[k++] = (unsigned char)utf8[i];
        }
    }
    *data = out;
    *size = k;
    return 0;
}

static int merger_ready(Merger *self)
{
    if (!self->units.slots || !self->merges.slots || !self->id_objects) {
        PyErr_SetString(PyExc_TypeError, "Merger is not initialised");
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(encode_text_doc, "encode_text(text: str, prefix: bool) -> list[int] | None\n\n"
                              "encode() of ``text``'s UTF-8 with its spaces as ``▁`` and, where ``prefix``, one in front\n"
                              "(SentencePieceModel.encode_fragment's escaping); None as encode() gives it, and for a str\n"
                              "that is no UTF-8 (lone surrogates) or too long: the caller escapes it in Python.");

static PyObject *Merger_encode_text(Merger *self, PyObject *args)
{
    PyObject *text;
    int prefix;
    if (!PyArg_ParseTuple(args, "Up", &text, &prefix))
        return NULL;
    if (!merger_ready(self))
        return NULL;
    unsigned char small[3 * SMALL_INPUT];
    unsigned char *data;
    size_t size;
    int escaped = escape_text(text, prefix, small, sizeof small, &data, &size);
    if (escaped < 0)
        return NULL;
    if (escaped > 0)
        Py_RETURN_NONE;
    PyObject *result = encode_to_list(self, data, (uint32_t)size);
    if (data != small)
        free(data);
    return result;
}

PyDoc_STRVAR(encode_parts_doc,
             "encode_parts(fragments: list, prefix: bool, after_special: bool, keep_specials: bool) -> list[int] | None\n\n"
             "The ids of a partitioned text in one call, as Tokenizer._encode_parts gives them with encode_text:\n"
             "an int is a special token's id (kept where ``keep_specials``; the next fragment starts the text\n"
             "where ``after_special``), a str is encoded with a ``▁`` in front where ``prefix`` and it starts\n"
             "the text. None where encode_text would give None for a fragment, or an item is neither a str\n"
             "nor a token id: the caller then encodes fragment by fragment. Only for a Merger with ``words``.");

/* Room for ``more`` ids past ``k`` in ``*out`` (``*capacity`` ids); 0, or -1 when out of memory. */
static int ids_reserve(int32_t **out, size_t *capacity, size_t k, size_t more)
{
    if (k + more <= *capacity)
        return 0;
    size_t want = *capacity ? *capacity : 256;
    while (want < k + more) {
        if (want > SIZE_MAX / (2 * sizeof(int32_t)))
            return -1;
        want *= 2;
    }
    int32_t *bigger = (int32_t *)realloc(*out, want * sizeof(int32_t));
    if (!bigger)
        return -1;
    *out = bigger;
    *capacity = want;
    return 0;
}

static PyObject *Merger_encode_parts(Merger *self, PyObject *args)
{
    PyObject *fragments;
    int prefix, after_special, keep_specials;
    if (!PyArg_ParseTuple(args, "O!ppp", &PyList_Type, &fragments, &prefix, &after_special, &keep_specials))
        return NULL;
    if (!merger_ready(self))
        return NULL;
    if (!self->words) /* fragments are cached whole in Python then: encode_text each */
        Py_RETURN_NONE;
    int32_t *out = NULL;
    size_t capacity = 0, k = 0;
    Work w = {0};
    int at_start = 1, status = 0; /* 0: going, 1: None, -1: an exception */
    unsigned char small[3 * SMALL_INPUT];
    for (Py_ssize_t i = 0; status == 0 && i < PyList_GET_SIZE(fragments); i++) {
        PyObject *item = PyList_GET_ITEM(fragments, i);
        if (PyLong_CheckExact(item)) {
            long id = PyLong_AsLong(item);
            if (id < 0 || (unsigned long)id >= self->n_tokens) {
                PyErr_Clear(); /* an overflow, or not a token: the caller's loop says what it does */
                status = 1;
            } else if (keep_specials) {
                if (ids_reserve(&out, &capacity, k, 1) < 0)
                    status = -1;
                else
                    out[k++] = (int32_t)id;
            }
            at_start = after_special;
            continue;
        }
        if (!PyUnicode_CheckExact(item)) {
            status = 1;
            break;
        }
        unsigned char *data;
        size_t size;
        Py_INCREF(item); /* held while the GIL may be released */
        int escaped = escape_text(item, prefix && at_start, small, sizeof small, &data, &size);
        Py_DECREF(item);
        if (escaped != 0) {
            status = escaped < 0 ? -2 : 1; /* -2: the exception is already set */
            break;
        }
        if (ids_reserve(&out, &capacity, k, size + 1) < 0) {
            status = -1;
        } else {
            Py_ssize_t got = encode_all_released(self, data, (uint32_t)size, &w, out + k);
            if (got == FAILED_MEMORY)
                status = -1;
            else if (got == FAILED_BYTE)
                status = 1;
            else
                k += (size_t)got;
        }
        if (data != small)
            free(data);
        at_start = 0;
    }
    work_free(&w);
    PyObject *result = NULL;
    if (status == -1) {
        PyErr_NoMemory();
    } else if (status == 1) {
        result = Py_None;
        Py_INCREF(result);
    } else if (status == 0) {
        result = ids_to_list(self, out, (Py_ssize_t)k);
    }
    free(out);
    return result;
}

#endif
