/* A whole text's fragments between special tokens as byte ranges of its own UTF-8, for the models
 * that encode a text in one call (bpetok/models/_trie.c's and _ugm.c's ``encode_cut``, what
 * ``TokenizerModel.text_encoder`` hands the Tokenizer): bpetok/_specials.c's ``Automaton.cuts``
 * gives the fragments in characters and the special id after each; here they become byte
 * offsets, so no str is made per fragment. bpetok/models/_wpm.c walks the characters themselves
 * and takes only the argument check (cut_check_arguments).
 *
 * Memory safety: the UTF-8 is the str's own (well-formed: a str with lone surrogates has none,
 * and the caller answers None), each character's length read from its lead byte; the cuts are
 * checked to be in order and within the text, else the caller answers None and the Tokenizer
 * partitions as usual.
 */

#ifndef BPETOK_CUT_TEXT_H
#define BPETOK_CUT_TEXT_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_module.h"

typedef struct {
    size_t begin, end; /* the fragment's bytes */
    uint32_t special;  /* the special id after it, or UINT32_MAX */
} TextPiece;

typedef struct {
    const unsigned char *utf8;
    size_t n;          /* bytes */
    TextPiece *pieces; /* count of them: &one, or in cuts' memory */
    size_t count;
    TextPiece one;
} CutText;

static const unsigned char CUT_UTF8_LENGTH[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};

static inline void cut_text_free(CutText *c)
{
    if (c->pieces != &c->one)
        PyMem_Free(c->pieces);
    c->pieces = NULL;
}

/* ``text`` cut by ``automaton`` (None: the mode has no specials) into ``c``: 0; 1 where the
 * caller must answer None (no UTF-8, no cuts to be had, cuts that are not this text's); -1 with
 * an exception set. On 0, cut_text_free(c) afterwards. */
static inline int cut_text(PyObject *text, PyObject *automaton, CutText *c)
{
    Py_ssize_t n;
    const char *utf8;
    int no_utf8 = str_utf8(text, &utf8, &n);
    if (no_utf8 != 0)
        return no_utf8;
    c->utf8 = (const unsigned char *)utf8;
    c->n = (size_t)n;
    c->one.begin = 0;
    c->one.end = (size_t)n;
    c->one.special = UINT32_MAX;
    c->pieces = &c->one;
    c->count = 1;
    PyObject *cuts;
    int found = automaton_cuts(automaton, text, &cuts);
    if (found != 0 || cuts == NULL)
        return found; /* 1: the Tokenizer's partition says what the text is; 0: one fragment */
    size_t triples = (size_t)PyBytes_GET_SIZE(cuts) / 12;
    if (triples == 0) { /* no special in the text: one fragment */
        Py_DECREF(cuts);
        return 0;
    }
    c->pieces = PyMem_Malloc(triples * sizeof(TextPiece));
    if (c->pieces == NULL) {
        Py_DECREF(cuts);
        PyErr_NoMemory();
        return -1;
    }
    c->count = triples;
    const unsigned char *raw = (const unsigned char *)PyBytes_AS_STRING(cuts);
    size_t n_chars = (size_t)PyUnicode_GET_LENGTH(text), ascii = PyUnicode_IS_ASCII(text), chars = 0, bytes = 0;
    int status = 0;
    for (size_t k = 0; k < triples && status == 0; k++) {
        uint32_t triple[3]; /* start, end in characters; the special after */
        memcpy(triple, raw + 12 * k, sizeof triple);
        if (triple[0] > triple[1] || triple[1] > n_chars || triple[0] < chars) {
            status = 1;
            break;
        }
        size_t at[2];
        for (int j = 0; j < 2; j++) {
            if (ascii) {
                bytes = triple[j];
            } else if (triple[j] == n_chars) {
                bytes = (size_t)n;
            } else {
                for (; chars < triple[j] && bytes < (size_t)n; chars++)
                    bytes += CUT_UTF8_LENGTH[c->utf8[bytes] >> 4];
            }
            chars = triple[j];
            at[j] = bytes;
        }
        if (at[1] > (size_t)n) {
            status = 1;
            break;
        }
        c->pieces[k].begin = at[0];
        c->pieces[k].end = at[1];
        c->pieces[k].special = triple[2];
    }
    Py_DECREF(cuts);
    if (status != 0)
        cut_text_free(c);
    return status;
}

/* encode_cut(first, plain, special, text, parse_special)'s arguments checked (bpetok/models/_trie.c,
 * _ugm.c, _wpm.c; ``first`` is the model's own): the model ``ready`` (else a TypeError naming
 * ``type``), five arguments, ``text`` a str; *automaton is the one of the mode parse_special
 * asks for. 0, or -1 with an exception set. */
static inline int cut_check_arguments(PyObject *const *args, Py_ssize_t nargs, int ready, const char *type, PyObject **automaton)
{
    if (!ready) {
        PyErr_Format(PyExc_TypeError, "%s is not initialised", type);
        return -1;
    }
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "encode_cut() takes 5 arguments (%zd given)", nargs);
        return -1;
    }
    int parse_special = PyObject_IsTrue(args[4]);
    if (parse_special < 0)
        return -1;
    if (!PyUnicode_Check(args[3])) {
        PyErr_Format(PyExc_TypeError, "encode_cut() takes a str, not %.100s", Py_TYPE(args[3])->tp_name);
        return -1;
    }
    *automaton = parse_special ? args[2] : args[1];
    return 0;
}

/* cut_check_arguments, then ``text`` cut by the automaton of that mode in UTF-8 bytes (the
 * models that walk bytes: rwkv, t5), as cut_text answers. */
static inline int cut_arguments(PyObject *const *args, Py_ssize_t nargs, int ready, const char *type, CutText *c)
{
    PyObject *automaton;
    if (cut_check_arguments(args, nargs, ready, type, &automaton) < 0)
        return -1;
    return cut_text(args[3], automaton, c);
}

/* cut_arguments for the models whose ``first`` argument is a flag (t5's per_word, plamo2's
 * keep_specials): *flag its truth; as cut_arguments answers, the cut freed on an error. */
static inline int cut_arguments_with_flag(PyObject *const *args, Py_ssize_t nargs, int ready, const char *type, CutText *c,
                                          int *flag)
{
    int status = cut_arguments(args, nargs, ready, type, c);
    if (status != 0)
        return status;
    *flag = PyObject_IsTrue(args[0]);
    if (*flag < 0) {
        cut_text_free(c);
        return -1;
    }
    return 0;
}

#endif
