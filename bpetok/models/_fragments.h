/* The compiled merge loop's methods on text (bpetok/models/_symbols.c, included after
 * encode_to_list): ``encode_text``, one fragment escaped as SentencePieceModel.encode_fragment
 * escapes it, ``encode_parts``, a whole partitioned text (fragments and special ids) in one
 * call, as Tokenizer._encode_parts gives it, and ``encode_runs``, the runs between whitespace
 * (bpetok/models/whitespace_bpe.py).
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

/* An encode_raw result added to ``*k`` ids: 0, or the status its failure makes (-1 out of memory,
 * 1 a byte without a token: the caller's Python twin says what it does). */
static inline int took(Py_ssize_t got, size_t *k)
{
    if (got == FAILED_MEMORY)
        return -1;
    if (got == FAILED_BYTE)
        return 1;
    *k += (size_t)got;
    return 0;
}

/* What a loop over fragments gives Python for its ``status``: the ids out[0..k) as a list (0),
 * None (1: a byte without a token; the caller's Python twin says what it does), NULL with
 * MemoryError (-1) or with the exception already set (-2). */
static PyObject *status_result(Merger *self, int status, const int32_t *out, size_t k)
{
    if (status == -1)
        return PyErr_NoMemory();
    if (status == 1)
        Py_RETURN_NONE;
    if (status != 0)
        return NULL;
    return ids_to_list(self, out, (Py_ssize_t)k);
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

PyDoc_STRVAR(Merger_encode_text_doc, "encode_text(text: str, prefix: bool) -> list[int] | None\n\n"
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

/* The code point of the UTF-8 character at ``p`` (``length`` bytes, as LENGTH_OF_NIBBLE says;
 * valid UTF-8: the str's own encoding). */
static inline uint32_t code_point(const unsigned char *p, uint32_t length)
{
    switch (length) {
    case 1:
        return p[0];
    case 2:
        return (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
    case 3:
        return (uint32_t)(p[0] & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    default:
        return (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 | (uint32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
    }
}

/* The ids of the runs of ``text[0..n)`` (valid UTF-8) between the characters ``breaks`` marks
 * (bit c % 8 of breaks[c / 8]; ``n_breaks`` bytes), which are dropped: each run through
 * encode_word (the word cache, else merged whole). Returns as encode_word does. */
static Py_ssize_t encode_runs(Merger *m, const unsigned char *text, uint32_t n, const unsigned char *breaks, size_t n_breaks,
                              Work *w, int32_t *out)
{
    Py_ssize_t k = 0;
    uint32_t run = 0;
    Hold hold = {0, 0};
    for (uint32_t i = 0; i <= n;) {
        uint32_t length = 1;
        int cut = i == n;
        if (!cut) {
            length = LENGTH_OF_NIBBLE[text[i] >> 4];
            if (length > n - i)
                length = n - i;
            uint32_t c = code_point(text + i, length);
            cut = c / 8 < n_breaks && (breaks[c / 8] >> (c % 8) & 1);
        }
        if (cut) {
            if (i > run) {
                Py_ssize_t got = encode_word(m, text + run, i - run, w, out + k, &hold);
                if (got < 0) {
                    hold_release(m, &hold);
                    return got;
                }
                k += got;
            }
            run = i + length;
        }
        i += length;
    }
    hold_release(m, &hold);
    return k;
}

PyDoc_STRVAR(Merger_encode_runs_doc, "encode_runs(text: str, breaks: bytes, as_bytes: bool = False) -> list[int] | bytes | None\n\n"
                                     "The ids of each run of ``text``'s UTF-8 between the characters ``breaks`` marks (bit c % 8\n"
                                     "of byte c // 8: character c is dropped), each run merged whole as encode() merges a\n"
                                     "Merger without ``words`` and kept in the word cache (set_cache_budget): llama.cpp's\n"
                                     "whitespace model. None as encode() gives it, and for a str that is no UTF-8 (lone\n"
                                     "surrogates) or too long: the caller encodes it in Python. ``as_bytes``: the ids as int32\n"
                                     "in native order (numpy reads them without an int per id: offsets' running sums).");

static PyObject *Merger_encode_runs(Merger *self, PyObject *args)
{
    PyObject *text, *breaks;
    int as_bytes = 0;
    if (!PyArg_ParseTuple(args, "UO!|p", &text, &PyBytes_Type, &breaks, &as_bytes))
        return NULL;
    if (!merger_ready(self))
        return NULL;
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    if (!utf8) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (n > LONGEST_INPUT)
        Py_RETURN_NONE;
    const unsigned char *marks = (const unsigned char *)PyBytes_AS_STRING(breaks);
    size_t n_marks = (size_t)PyBytes_GET_SIZE(breaks);
    int32_t small_out[SMALL_INPUT + 1];
    int small = n <= SMALL_INPUT; /* at most one id a byte (emit) */
    int32_t *out = small ? small_out : (int32_t *)malloc(((size_t)n + 1) * sizeof(int32_t));
    Work w = {0};
    Py_ssize_t k = FAILED_MEMORY;
    if (out) { /* the args tuple holds text and breaks while the GIL is released */
        if (n < RELEASE_GIL_BYTES) {
            k = encode_runs(self, (const unsigned char *)utf8, (uint32_t)n, marks, n_marks, &w, out);
        } else {
            Py_BEGIN_ALLOW_THREADS k = encode_runs(self, (const unsigned char *)utf8, (uint32_t)n, marks, n_marks, &w, out);
            Py_END_ALLOW_THREADS
        }
    }
    work_free(&w);
    PyObject *result = NULL;
    if (k == FAILED_MEMORY) {
        PyErr_NoMemory();
    } else if (k == FAILED_BYTE) {
        result = Py_None;
        Py_INCREF(result);
    } else {
        result = as_bytes ? PyBytes_FromStringAndSize((const char *)out, k * (Py_ssize_t)sizeof(int32_t)) : ids_to_list(self, out, k);
    }
    if (!small)
        free(out);
    return result;
}

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

PyDoc_STRVAR(Merger_encode_parts_doc,
             "encode_parts(fragments: list, prefix: bool, after_special: bool, keep_specials: bool) -> list[int] | None\n\n"
             "The ids of a partitioned text in one call, as Tokenizer._encode_parts gives them with encode_text:\n"
             "an int is a special token's id (kept where ``keep_specials``; the next fragment starts the text\n"
             "where ``after_special``), a str is encoded with a ``▁`` in front where ``prefix`` and it starts\n"
             "the text. None where encode_text would give None for a fragment, or an item is neither a str\n"
             "nor a token id: the caller then encodes fragment by fragment. Only for a Merger with ``words``.");

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
            status = took(encode_raw_released(self, utf8, (uint32_t)n, prefix && at_start, scratch, &w, out + k), &k);
            Py_DECREF(item);
        }
        at_start = 0;
    }
    free(scratch);
    work_free(&w);
    PyObject *result = status_result(self, status, out, k);
    free(out);
    return result;
}

PyDoc_STRVAR(Merger_encode_cut_doc,
             "encode_cut(prefix: bool, after_special: bool, keep_specials: bool, plain, special, text: str,\n"
             "           parse_special: bool, as_bytes: bool = False) -> list[int] | bytes | None\n\n"
             "encode_parts of text's partition in one call, its fragments read from text's own UTF-8 (no str\n"
             "per fragment): ``special`` where parse_special else ``plain`` is the bpetok._specials.Automaton\n"
             "of that mode (None: the mode has no specials), whose cuts(text) give the fragments. None where\n"
             "encode_parts would give None or the automaton gives no cuts: the caller then partitions and\n"
             "encodes as usual. Only for a Merger with ``words``. ``as_bytes``: the ids as int32 in native\n"
             "order (numpy reads them without an int per id: offsets' running sums).");

static PyObject *Merger_encode_cut(Merger *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 && nargs != 8) {
        PyErr_Format(PyExc_TypeError, "encode_cut() takes 7 or 8 arguments (%zd given)", nargs);
        return NULL;
    }
    int prefix = PyObject_IsTrue(args[0]), after_special = PyObject_IsTrue(args[1]), keep_specials = PyObject_IsTrue(args[2]);
    int parse_special = PyObject_IsTrue(args[6]), as_bytes = nargs == 8 ? PyObject_IsTrue(args[7]) : 0;
    PyObject *text = args[5], *automaton = parse_special ? args[4] : args[3];
    if (prefix < 0 || after_special < 0 || keep_specials < 0 || parse_special < 0 || as_bytes < 0)
        return NULL;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "encode_cut() takes a str, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    if (!merger_ready(self))
        return NULL;
    if (!self->words)
        Py_RETURN_NONE;
    const unsigned char *utf8;
    Py_ssize_t n;
    size_t size;
    int ready = text_utf8(text, 1, &utf8, &n, &size);
    if (ready < 0)
        return NULL;
    if (ready > 0)
        Py_RETURN_NONE;
    Py_ssize_t n_chars = PyUnicode_GET_LENGTH(text);
    PyObject *cuts;
    int found = automaton_cuts(automaton, text, &cuts);
    if (found != 0) /* 1: no cuts to be had, the Tokenizer partitions instead */
        return found < 0 ? NULL : Py_NewRef(Py_None);
    Py_ssize_t parts = cuts && PyBytes_GET_SIZE(cuts) ? PyBytes_GET_SIZE(cuts) / 12 : 1;
    const unsigned char *triples = cuts && PyBytes_GET_SIZE(cuts) ? (const unsigned char *)PyBytes_AS_STRING(cuts) : NULL;
    /* ``size`` (text_utf8's, a prefix counted) holds any one fragment escaped; the ids of all of
     * them, each with its prefix, and the specials fit in size + 4 a part. */
    int32_t small_out[SMALL_INPUT + 1];
    unsigned char small_scratch[SMALL_INPUT + 1];
    size_t room = size + 4 * (size_t)parts + 1, k = 0;
    int32_t *out = room <= SMALL_INPUT + 1 ? small_out : (int32_t *)malloc(room * sizeof(int32_t));
    unsigned char *scratch = size + 1 <= SMALL_INPUT + 1 ? small_scratch : (unsigned char *)malloc(size + 1);
    Work w = {0};
    int at_start = 1, status = (out && scratch) ? 0 : -1; /* 0: going, 1: None, -1: out of memory */
    int ascii = PyUnicode_IS_ASCII(text);
    size_t ci = 0, bi = 0; /* a character offset and its byte offset in utf8 */
    for (Py_ssize_t part = 0; status == 0 && part < parts; part++) {
        uint32_t triple[3] = {0, (uint32_t)n_chars, UINT32_MAX};
        if (triples)
            memcpy(triple, triples + 12 * part, sizeof(triple));
        if (triple[0] > triple[1] || triple[1] > (uint64_t)n_chars || triple[0] < ci) {
            status = 1; /* not cuts of this text: the caller's partition says what it is */
            break;
        }
        size_t begin, end;
        if (ascii) {
            begin = triple[0];
            end = triple[1];
        } else {
            while (ci < triple[0]) {
                bi += LENGTH_OF_NIBBLE[utf8[bi] >> 4]; /* well-formed UTF-8: each length is whole */
                ci++;
            }
            begin = bi;
            if (triple[1] == (uint64_t)n_chars) { /* the last fragment: no walk to the end */
                end = (size_t)n;
            } else {
                while (ci < triple[1]) {
                    bi += LENGTH_OF_NIBBLE[utf8[bi] >> 4];
                    ci++;
                }
                end = bi;
            }
        }
        if (begin > end || end > (size_t)n) {
            status = 1;
            break;
        }
        ci = triple[1];
        bi = end;
        if (begin < end) {
            status = took(encode_raw_released(self, utf8 + begin, (uint32_t)(end - begin), prefix && at_start, scratch, &w, out + k), &k);
            at_start = 0;
        }
        if (status == 0 && triple[2] != UINT32_MAX) {
            if (triple[2] >= self->n_tokens)
                status = 1; /* not a token: the caller's loop says what it does */
            else if (keep_specials)
                out[k++] = (int32_t)triple[2];
            at_start = after_special;
        }
    }
    work_free(&w);
    PyObject *result = as_bytes && status == 0 ? PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)(k * sizeof(int32_t)))
                                               : status_result(self, status, out, k);
    if (scratch != small_scratch)
        free(scratch);
    if (out != small_out)
        free(out);
    Py_XDECREF(cuts);
    return result;
}

#endif
