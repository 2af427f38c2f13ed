/* The compiled merge loop's methods on text (bpetok/models/_symbols.c, included after
 * encode_to_list): ``encode_text``, one fragment escaped as SentencePieceModel.encode_fragment
 * escapes it, and ``encode_parts``, a whole partitioned text (fragments and special ids) in one
 * call, as Tokenizer._encode_parts gives it.
 */

#ifndef BPETOK_FRAGMENTS_H
#define BPETOK_FRAGMENTS_H

static const unsigned char SPACE_UTF8[3] = {0xE2, 0x96, 0x81};

/* ``text``'s own UTF-8 (``*utf8``, ``*n``: not copied; valid while the str lives) and the size
 * of the text escaped (``*escaped``: its spaces as ``▁`` and, where ``prefix``, one in front).
 * 0, 1 when the text is no UTF-8 (lone surrogates) or too long (the caller escapes it in
 * Python), -1 with an exception set. */
static int text_utf8(PyObject *text, int prefix, const unsigned char **utf8, Py_ssize_t *n, size_t *escaped)
{
    const char *p = PyUnicode_AsUTF8AndSize(text, n);
    if (!p) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    if (*n > LONGEST_INPUT / 3 - 3) /* the escaped text stays below 2 GiB */
        return 1;
    size_t spaces = 0;
    for (Py_ssize_t i = 0; i < *n; i++)
        spaces += p[i] == ' ';
    *utf8 = (const unsigned char *)p;
    *escaped = (size_t)*n + 2 * spaces + (prefix ? 3 : 0); /* each space 3 bytes, the prefix 3 */
    return 0;
}

/* ``text[0..n)`` escaped (as text_utf8 says) into ``out``: how many bytes. */
static uint32_t escape_into(const unsigned char *text, uint32_t n, int prefix, unsigned char *out)
{
    uint32_t k = 0;
    if (prefix) {
        memcpy(out, SPACE_UTF8, 3);
        k = 3;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (text[i] == ' ') {
            memcpy(out + k, SPACE_UTF8, 3);
            k += 3;
        } else {
            out[k++] = text[i];
        }
    }
    return k;
}

/* One word of encode_raw, ``text[0..n)`` before escaping (``prefix``: a ``▁`` goes in front),
 * into ``out``: looked up in the word cache by those bytes (a ``' '`` in front for the prefix),
 * else escaped into ``scratch`` and merged. Returns as encode_word does. */
static Py_ssize_t raw_word(Merger *m, const unsigned char *text, uint32_t n, int prefix, unsigned char *scratch, Work *w,
                           int32_t *out, Hold *h)
{
    unsigned char prefixed[WORD_CACHE_LONGEST];
    const unsigned char *key = text;
    uint32_t key_n = n + (prefix ? 1 : 0);
    int cached = m->cache.budget > 0 && key_n <= WORD_CACHE_LONGEST;
    uint64_t hash = 0;
    if (cached) {
        if (prefix) {
            prefixed[0] = ' ';
            memcpy(prefixed + 1, text, n);
            key = prefixed;
        }
        hash = word_hash(key, key_n);
        Py_ssize_t found = cache_probe(m, hash, key, key_n, out, h);
        if (found >= 0)
            return found;
    }
    uint32_t size = escape_into(text, n, prefix, scratch);
    return merge_word(m, scratch, size, w, out, h, cached, hash, key, key_n);
}

/* encode_all of ``text[0..n)`` escaped (its spaces as ``▁``, one in front where ``prefix``),
 * without escaping it all first where ``words`` is set: the words (encode_all's cuts, found in
 * the raw bytes: ``' '`` and ``▁`` are the space symbols, and no cut falls next to a ``' '``, as
 * none falls next to a ``▁``) are looked up in the word cache by their raw bytes, and only a
 * word that is merged is escaped, into ``scratch``. ``scratch`` and ``out`` have room for the
 * escaped text (text_utf8's size): ``text`` is valid UTF-8. Returns as encode_word does. */
static Py_ssize_t encode_raw(Merger *m, const unsigned char *text, uint32_t n, int prefix, unsigned char *scratch, Work *w,
                             int32_t *out)
{
    if (!m->words)
        return encode_all(m, scratch, escape_into(text, n, prefix, scratch), w, out);
    if (n == 0 && !prefix)
        return 0;
    Py_ssize_t k = 0;
    int after_space = prefix;
    Hold hold = {0, 0};
    uint32_t word = 0;
    do { /* with the prefix, an empty text is one word: the ``▁`` */
        uint32_t end = word_end(m, text, n, word, 1, &after_space);
        Py_ssize_t got = raw_word(m, text + word, end - word, prefix && word == 0, scratch, w, out + k, &hold);
        if (got < 0) {
            k = got;
            break;
        }
        k += got;
        word = end;
    } while (word < n);
    hold_release(m, &hold);
    return k;
}

/* encode_raw, with the GIL released when the input is long (the caller holds the str). */
static Py_ssize_t encode_raw_released(Merger *self, const unsigned char *text, uint32_t n, int prefix, unsigned char *scratch,
                                      Work *w, int32_t *out)
{
    Py_ssize_t k;
    if (n < RELEASE_GIL_BYTES)
        return encode_raw(self, text, n, prefix, scratch, w, out);
    Py_BEGIN_ALLOW_THREADS k = encode_raw(self, text, n, prefix, scratch, w, out);
    Py_END_ALLOW_THREADS
    return k;
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
    const unsigned char *utf8;
    Py_ssize_t n;
    size_t size;
    int ready = text_utf8(text, prefix, &utf8, &n, &size);
    if (ready < 0)
        return NULL;
    if (ready > 0)
        Py_RETURN_NONE;
    int32_t small_out[SMALL_INPUT + 1];
    unsigned char small_scratch[SMALL_INPUT + 1];
    int small = size <= SMALL_INPUT;
    int32_t *out = small ? small_out : (int32_t *)malloc((size + 1) * sizeof(int32_t));
    unsigned char *scratch = small ? small_scratch : (unsigned char *)malloc(size + 1);
    Work w = {0};
    Py_ssize_t k = FAILED_MEMORY;
    if (out && scratch)
        k = encode_raw_released(self, utf8, (uint32_t)n, prefix, scratch, &w, out);
    work_free(&w);
    PyObject *result = result_of(self, out, k);
    if (!small) {
        free(out);
        free(scratch);
    }
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

/* ``*buffer`` (``*size`` bytes) with room for ``need`` bytes; 0, or -1 when out of memory. */
static int bytes_reserve(unsigned char **buffer, size_t *size, size_t need)
{
    if (need <= *size)
        return 0;
    size_t want = need < 1024 ? 1024 : need;
    unsigned char *bigger = (unsigned char *)realloc(*buffer, want);
    if (!bigger)
        return -1;
    *buffer = bigger;
    *size = want;
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
    unsigned char *scratch = NULL; /* room for the escaped fragment (encode_raw) */
    size_t scratch_size = 0;
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
        const unsigned char *utf8;
        Py_ssize_t n;
        size_t size;
        int ready = text_utf8(item, prefix && at_start, &utf8, &n, &size);
        if (ready != 0) {
            status = ready < 0 ? -2 : 1; /* -2: the exception is already set */
            break;
        }
        if (ids_reserve(&out, &capacity, k, size + 1) < 0 || bytes_reserve(&scratch, &scratch_size, size + 1) < 0) {
            status = -1;
        } else {
            Py_INCREF(item); /* its UTF-8 is read while the GIL may be released */
            Py_ssize_t got = encode_raw_released(self, utf8, (uint32_t)n, prefix && at_start, scratch, &w, out + k);
            Py_DECREF(item);
            if (got == FAILED_MEMORY)
                status = -1;
            else if (got == FAILED_BYTE)
                status = 1;
            else
                k += (size_t)got;
        }
        at_start = 0;
    }
    free(scratch);
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
