/* The glue every C module of bpetok would otherwise repeat: a type object's usual slots, the
 * module itself (multi-phase init, PEP 489: the import system makes the module, its exec function
 * fills it), the growing and freeing of a type's arrays, the reading of a byte_ids argument, a
 * str's UTF-8, and a text's cuts at its special tokens from the shared automaton. Included by bpetok/_specials.c, _train.c, models/_symbols.c, _trie.c, _ugm.c,
 * _wpm.c, _cut_text.h and models/gpt2/kernel/module.c, build.c and text.c.
 */

#ifndef BPETOK_MODULE_H
#define BPETOK_MODULE_H

/* The slots every type of struct ``T`` has: its name, size and ``T_dealloc``; the others follow
 * (a type whose instances only C makes, such as an iterator, or one with its own tp_new):
 *
 *     static PyTypeObject PieceIterType = {BPETOK_TYPE_CORE(PieceIter, "bpetok._train.PieceIter"),
 *                                          .tp_iter = PyObject_SelfIter, .tp_iternext = ...};
 */
#define BPETOK_TYPE_CORE(T, qualname)                                                                        \
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = (qualname), .tp_basicsize = sizeof(T),                          \
        .tp_dealloc = (destructor)T##_dealloc, .tp_flags = Py_TPFLAGS_DEFAULT

/* The usual slots of the type of struct ``T``, made by PyType_GenericNew, set up by ``T_init``,
 * freed by ``T_dealloc``, with the method table ``T_methods``; other slots may follow:
 *
 *     static PyTypeObject TrieType = {BPETOK_TYPE(Trie, "bpetok.models._trie.Trie", "doc")};
 *     static PyTypeObject PairCountsType = {BPETOK_TYPE(PairCounts, "...", "..."), .tp_getset = ...};
 */
#define BPETOK_TYPE(T, qualname, doc)                                                                        \
    BPETOK_TYPE_CORE(T, qualname), .tp_doc = (doc), .tp_methods = T##_methods, .tp_init = (initproc)T##_init, \
        .tp_new = PyType_GenericNew

/* ``release`` (free, or PyMem_Free for what PyMem_Malloc gave) called on each of the pointers that
 * follow, NULL ones included: the arrays a type's dealloc gives back.
 *
 *     BPETOK_FREE_ALL(free, self->values, self->first, self->count);
 */
#define BPETOK_FREE_ALL(release, ...)                                                                        \
    free_all((release), (void *[]){__VA_ARGS__}, sizeof((void *[]){__VA_ARGS__}) / sizeof(void *))

static inline void free_all(void (*release)(void *), void *const *arrays, size_t n)
{
    for (size_t i = 0; i < n; i++)
        release(arrays[i]);
}

/* Room in ``*buf`` for ``need`` items of ``size`` bytes, where ``*cap`` items fit: the room is
 * doubled from ``*cap`` (from ``first`` while it is 0) until they fit. 0, or -1 when the memory
 * runs out (``*buf`` and ``*cap`` then unchanged). It sets no Python error: callers without the GIL
 * use it too. */
static inline int grow_array(void **buf, size_t *cap, size_t need, size_t size, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : first;
    while (n < need) {
        if (n > SIZE_MAX / 2 / size)
            return -1;
        n *= 2;
    }
    void *p = realloc(*buf, n * size);
    if (p == NULL)
        return -1;
    *buf = p;
    *cap = n;
    return 0;
}

/* The sequence ``byte_ids`` of 256 ids, one per byte value, each below ``below``, read into ``out``;
 * where ``allow_none``, None stands for no id and is read as UINT32_MAX (an int32_t array, passed
 * cast, as the signed and unsigned types may alias, reads it as -1). ``name`` opens the error
 * messages (the argument, and where it comes from). 0, or -1 with an exception set. */
static inline int read_byte_ids(PyObject *byte_ids, unsigned long below, int allow_none, const char *name, uint32_t out[256])
{
    PyObject *seq = PySequence_Fast(byte_ids, "byte_ids must be a sequence");
    if (seq == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != 256) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s must have 256 entries", name);
        return -1;
    }
    for (int b = 0; b < 256; b++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, b);
        if (allow_none && item == Py_None) {
            out[b] = UINT32_MAX;
            continue;
        }
        unsigned long long v = PyLong_AsUnsignedLongLong(item);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (v >= below) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "%s: byte id %llu at index %d is out of range (below %lu)", name, v, b, below);
            return -1;
        }
        out[b] = (uint32_t)v;
    }
    Py_DECREF(seq);
    return 0;
}

/* The UTF-8 of the str ``text`` (its own cached buffer) in *utf8 and *n: 0; 1 for a str with lone
 * surrogates, which has no UTF-8 (no error set: each caller has its way with them); -1 with an
 * exception set. */
static inline int str_utf8(PyObject *text, const char **utf8, Py_ssize_t *n)
{
    if ((*utf8 = PyUnicode_AsUTF8AndSize(text, n)) != NULL)
        return 0;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
        return -1;
    PyErr_Clear();
    return 1;
}

/* ``automaton.cuts(text)`` (bpetok/_specials.c: (start, end, special id) uint32 triples in
 * characters) into ``*cuts``: 0 with the bytes, or NULL where the automaton is None (the mode has
 * no specials: the text is one fragment); 1 where there are no cuts to be had (the caller answers
 * None and the Tokenizer partitions); -1 with an exception set. */
static inline int automaton_cuts(PyObject *automaton, PyObject *text, PyObject **cuts)
{
    static PyObject *cuts_name; /* "cuts", interned on first use */
    *cuts = NULL;
    if (automaton == Py_None)
        return 0;
    if (!cuts_name && !(cuts_name = PyUnicode_InternFromString("cuts")))
        return -1;
    PyObject *found = PyObject_CallMethodOneArg(automaton, cuts_name, text);
    if (found == NULL)
        return -1;
    if (!PyBytes_Check(found) || PyBytes_GET_SIZE(found) % 12) {
        Py_DECREF(found);
        return 1;
    }
    *cuts = found;
    return 0;
}

/* Each type of the NULL-ended ``types`` readied and added to module ``m`` under its short name
 * (the tp_name after the last dot): 0, or -1 with an exception set. */
static inline int add_types(PyObject *m, PyTypeObject *const *types)
{
    for (; *types != NULL; types++)
        if (PyModule_AddType(m, *types) < 0)
            return -1;
    return 0;
}

/* The module ``name``: its PyInit_``name``, its functions ``methods`` (a PyMethodDef table, or
 * NULL) and ``exec``, the function ``int exec(PyObject *module)`` that fills it. */
#define BPETOK_MODULE_EXEC(name, doc, methods, exec)                                                          \
    static PyModuleDef_Slot name##_slots[] = {{Py_mod_exec, (void *)(exec)}, {0, NULL}};                      \
    static struct PyModuleDef name##_module = {                                                               \
        PyModuleDef_HEAD_INIT, #name, (doc), 0, (methods), name##_slots, NULL, NULL, NULL,                    \
    };                                                                                                        \
    PyMODINIT_FUNC PyInit_##name(void)                                                                        \
    {                                                                                                         \
        return PyModuleDef_Init(&name##_module);                                                              \
    }

/* The module ``name`` as BPETOK_MODULE_EXEC makes it, filled with the types that follow:
 *
 *     BPETOK_MODULE(_trie, "The rwkv model's compiled walk.", NULL, &TrieType, &DictionaryType)
 */
#define BPETOK_MODULE(name, doc, methods, ...)                                                                \
    static int name##_exec(PyObject *m)                                                                       \
    {                                                                                                         \
        PyTypeObject *types[] = {__VA_ARGS__, NULL};                                                          \
        return add_types(m, types);                                                                           \
    }                                                                                                         \
    BPETOK_MODULE_EXEC(name, doc, methods, name##_exec)

#endif
