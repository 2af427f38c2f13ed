"""Cutting special tokens out of the text: linear work, and llama.cpp's exact order and stripping.

The work is measured with a deterministic proxy, the characters copied out of the text (a str
subclass counts every slice and index); timings are in benchmarks/specials_bench.py.
"""

from __future__ import annotations

import random
import re
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.vocab.gguf import GGUFValueType, read_gguf
from bpetok.vocab.gguf_writer import items_of, write_gguf
from helpers import QWEN3


class CountingStr(str):
    """A str that counts the characters copied out of it by slicing or indexing.

    A slice of it is again a CountingStr sharing the counter, so a fragment cut from a fragment
    is counted too.
    """

    def __new__(cls, value, counter=None):
        self = super().__new__(cls, value)
        self.counter = counter if counter is not None else [0]
        return self

    def __getitem__(self, key):
        part = str.__getitem__(self, key)
        self.counter[0] += len(part)
        return CountingStr(part, self.counter)


def copied(call, text: str) -> int:
    counting = CountingStr(text)
    call(counting)
    return counting.counter[0]


@pytest.mark.parametrize(
    "unit, parse_special",
    [
        ("<|im_end|>", True),  # CONTROL: cut only with parse_special
        ("<think>", False),  # USER_DEFINED: cut in both modes
        ("<think>", True),
        ("a<|im_end|>", True),
        (" <tool_call>\n", False),
    ],
)
@pytest.mark.parametrize("method", ["encode", "count"])
def test_cutting_repeated_specials_copies_each_character_at_most_once(qwen3, unit, parse_special, method):
    """Before the fix every match copied the rest of the text: ``unit * n`` copied ~n²/2 units."""
    call = getattr(qwen3, method)
    for n in (1000, 2000):
        text = unit * n
        work = copied(lambda t: call(t, parse_special=parse_special), text)
        assert work <= len(text), f"{method}({unit!r} * {n}) copied {work:,} characters of {len(text):,}"
    assert qwen3.encode(unit * 3, parse_special=parse_special) == qwen3.encode_reference(unit * 3, parse_special=parse_special)


def test_work_doubles_with_the_text(qwen3):
    """Specials among ordinary words: twice the text, about twice the characters copied."""
    unit = "Hello <|im_start|>user world<|im_end|>  "
    small = copied(lambda t: qwen3.encode(t), unit * 1000)
    large = copied(lambda t: qwen3.encode(t), unit * 2000)
    assert 0 < small and large <= 2.05 * small


# -- exactness against llama.cpp, with overlapping specials and LSTRIP/RSTRIP -----------------------

# Qwen3's vocabulary with some special texts renamed so that they overlap each other and the
# others (a longer special is cut first everywhere, even where a shorter one starts earlier),
# under a general.name that turns on llama.cpp's LSTRIP ("modern-bert": [MASK]) or RSTRIP
# ("phi-3": every special but <unk>, <s> and <|endoftext|>).
RENAMES = {
    "<|object_ref_start|>": ("|><|im_start|>", None),  # longer than <|im_end|>, overlaps it
    "<|video_pad|>": ("end|><|im", 4),  # shorter, USER_DEFINED: cut without parse_special too
    "<|vision_pad|>": ("> <", 4),
    "<|box_start|>": ("[MASK]", None),
}
PIECES = ["<|im_end|>", "<|im_start|>", "<think>", "</think>", "[MASK]", "end|><|im", "> <", "|><|im_start|>",
          "<|endoftext|>", "</s>", "<s>", "<unk>", " ", "  ", "\n", "\t", " \n ", "x", "hello", "é", "<|", "|>"]


def _variant(tmp_path, name: str):
    base = read_gguf(QWEN3)
    tokens = list(base.metadata["tokenizer.ggml.tokens"])
    types = np.array(base.metadata["tokenizer.ggml.token_type"])
    index = {t if isinstance(t, str) else t.decode(): i for i, t in enumerate(tokens)}
    for old, (new, new_type) in RENAMES.items():
        tokens[index[old]] = new
        if new_type is not None:
            types[index[old]] = new_type
    items = []
    for key, vtype, value, elem in items_of(base):
        if key == "tokenizer.ggml.tokens":
            value = tokens
        elif key == "tokenizer.ggml.token_type":
            value = types
        elif key == "general.name":
            continue
        items.append((key, vtype, value, elem))
    items.insert(1, ("general.name", GGUFValueType.STRING, name, None))
    path = tmp_path / f"{name.replace(' ', '-')}.gguf"
    write_gguf(path, items)
    return path


@pytest.mark.parametrize("name, attr", [("modern-bert test", bpetok.TokenAttr.LSTRIP), ("Phi-3 test", bpetok.TokenAttr.RSTRIP)])
def test_overlapping_and_stripped_specials_match_llama_cpp(tmp_path, name, attr):
    llama_cpp = pytest.importorskip("llama_cpp")
    path = _variant(tmp_path, name)
    tok = bpetok.from_gguf(path)
    assert tok.token_attributes(tok.id("[MASK]" if attr == bpetok.TokenAttr.LSTRIP else "<|im_end|>")) & attr
    llama = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    texts = ["".join(rng.choices(PIECES, k=rng.randrange(1, 40))) for _ in range(400)]
    texts += ["<|im_end|><|im_start|>", "<|im_end|><|im", "  [MASK]  [MASK]", "<|im_end|>  \n x", "> <> <"]
    for text in texts:
        for special in (False, True):
            expected = llama.tokenize(text.encode(), add_bos=False, special=special)
            assert tok.encode(text, parse_special=special) == expected, f"seed {seed}: {text!r} special={special}"


# -- the one-pass C partition (bpetok/_specials.c) against the per-special reference ----------------

def _compiled():
    from bpetok.compiled import compiled_module

    module = compiled_module("bpetok._specials")
    if module is None:
        pytest.skip("bpetok._specials is not built or BPETOK_PURE_PYTHON=1 (the reference runs alone)")
    return module


def _entries(texts_and_strips):
    """(id, text, strip) in llama.cpp's cutting order: longest UTF-8 first, ties by id."""
    ranked = sorted(
        ((-len(text.encode("utf-8", "surrogatepass")), token_id, text, strip) for token_id, (text, strip) in enumerate(texts_and_strips))
    )
    return [(token_id, text, strip) for _, token_id, text, strip in ranked]


def _both(entries, text, spans=()):
    from bpetok.specials import _normalized, partition_reference

    spans = _normalized(spans, len(text))
    automaton = _compiled().Automaton([(t.encode("utf-8", "surrogatepass"), i, s) for i, t, s in entries])
    # The form SpecialTable builds: three columns, no tuple per special; it must cut the same.
    columns = _compiled().Automaton([t.encode("utf-8", "surrogatepass") for _, t, _ in entries], [i for i, _, _ in entries],
                                    [s for _, _, s in entries])
    cut = automaton.partition(text, spans)
    assert columns.partition(text, spans) == cut
    if not spans:
        assert _from_cuts(text, columns.cuts(text)) == cut
    return cut, partition_reference(text, entries, spans)


def _from_cuts(text, cuts):
    """The fragments Automaton.cuts describes (uint32 triples: fragment start, end, then the special id)."""
    if cuts == b"":
        return [text]
    out = []
    for a, b, token_id in struct.iter_unpack("=III", cuts):
        if a < b:
            out.append(text[a:b])
        if token_id != 0xFFFFFFFF:
            out.append(token_id)
    return out


def test_cuts_leave_what_they_cannot_give_to_partition():
    automaton = _compiled().Automaton([b"ab"], [2**32], [0])  # an id no uint32 holds
    assert automaton.partition("xab") == ["x", 2**32]
    assert automaton.cuts("xab") is None
    assert automaton.cuts("xy") == b""
    with pytest.raises(TypeError, match="takes a str"):
        automaton.cuts(b"xab")


ALPHABET = "ab \né😀\ud800"  # 1-4 UTF-8 bytes a character (the order is by bytes); a lone surrogate

special_sets = st.lists(
    st.tuples(st.text(ALPHABET, min_size=1, max_size=5), st.integers(0, 3)), min_size=1, max_size=8
)


@settings(max_examples=600, deadline=None)
@given(
    specials=special_sets,
    text=st.text(ALPHABET, max_size=60),
    spans=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=3),
)
def test_one_pass_partition_equals_the_reference(specials, text, spans):
    """Overlapping, nested, adjacent, duplicate, prefix/suffix specials, LSTRIP/RSTRIP, protected spans."""
    fast, reference = _both(_entries(specials), text, spans)
    assert fast == reference


@settings(max_examples=200, deadline=None)
@given(
    specials=special_sets,
    pieces=st.lists(st.integers(0, 7), max_size=30),
    glue=st.lists(st.text(ALPHABET, max_size=2), min_size=30, max_size=30),
)
def test_one_pass_partition_equals_the_reference_on_texts_of_specials(specials, pieces, glue):
    """Texts built from the specials themselves, so that most of them match, overlap and abut."""
    texts = [t for t, _ in specials]
    text = "".join(texts[i % len(texts)] + g for i, g in zip(pieces, glue))
    fast, reference = _both(_entries(specials), text)
    assert fast == reference


@pytest.mark.parametrize(
    "specials, text, expected",
    [
        # Longest first globally, not leftmost-longest (llama.cpp cuts CDEF before ABC gets a look).
        ([("ABC", 0), ("CDEF", 0)], "ABCDEF", ["AB", 1]),
        # The same length: the lower id is cut everywhere first.
        ([("ab", 0), ("ba", 0)], "bab", ["b", 0]),
        ([("ba", 0), ("ab", 0)], "bab", [0, "b"]),
        # Leftmost-first non-overlapping within a fragment.
        ([("aa", 0)], "aaaaa", [0, 0, "a"]),
        # LSTRIP eats whitespace up to the token before, RSTRIP up to the next; neither crosses a token.
        ([("<x>", 1), ("<y>", 2)], "a  <x>  <y>  b", ["a", 0, "  ", 1, "b"]),
        ([("<long>", 2), ("<x>", 1)], "<long> \t <x>", [0, 1]),
    ],
)
def test_one_pass_partition_known_cases(specials, text, expected):
    """Cases worked out by hand from llama.cpp's tokenizer_st_partition (and the reference agrees)."""
    fast, reference = _both(_entries(specials), text)
    assert fast == reference == expected


def test_one_pass_partition_protected_spans_in_non_ascii_text():
    specials = _entries([("<s>", 0), ("é<", 0)])
    text = "ééé<s>é<s>"
    for spans in ([(3, 6)], [(0, 2), (6, 8)], [(7, 10)]):
        fast, reference = _both(specials, text, spans)
        assert fast == reference


def test_one_pass_partition_finds_specials_at_every_offset_of_ucs2_text():
    """UCS-2 text whose specials all start with one ASCII character is searched four characters a
    word: a special at each offset of a word, at the end, twice in one word, or none."""
    specials = _entries([("<s>", 0), ("<t>", 0)])
    for length in range(12):
        for at in range(length + 1):
            body = "\u3042a" * length
            for text in (body[:at] + "<s>" + body[at:], body[:at] + "<s><t>" + body[at:], body[:at] + "<" + body[at:]):
                fast, reference = _both(specials, text)
                assert fast == reference


def test_one_pass_partition_of_tokenizers_equals_the_reference(qwen3):
    """Through a Tokenizer, with its own table: every PIECES text in both modes, with spans."""
    table = qwen3._special_table
    if table.engine != "C":
        pytest.skip("the pure-Python engine runs the reference alone")
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(rng.choices(PIECES, k=rng.randrange(1, 30)))
        spans = [(rng.randrange(len(text)), rng.randrange(len(text) + 1))]
        for special in (False, True):
            assert table.partition(text, special) == table.partition_reference(text, special)
            assert table.partition(text, special, spans) == table.partition_reference(text, special, spans)


def test_one_pass_partition_of_nested_runs_equals_the_reference():
    """Gemma-3-like user-defined runs of 2..31 spaces (some LSTRIP/RSTRIP) on long space runs: ~30
    nested matches a position, replayed length by length."""
    specials = _entries([(" " * n, n % 3) for n in range(2, 32)] + [("a", 0), ("a  ", 2)])
    rng = random.Random(3)
    text = "".join(rng.choice(["a", "b", "\n"]) + " " * rng.randrange(0, 70) for _ in range(3000))
    for case in (" " * 20_000, text):
        fast, reference = _both(specials, case)
        assert fast == reference


@pytest.mark.parametrize(
    "specials, message",
    [
        ([(b"ab", 0, 0), (b"abc", 1, 0)], "cutting order"),
        ([(b"", 0, 0)], "empty"),
        ([("ab", 0, 0)], "not (bytes, int, int)"),
        ([(b"ab", "0", 0)], "not (bytes, int, int)"),
        ([b"ab"], "not (bytes, int, int)"),
    ],
)
def test_automaton_refuses_a_malformed_table(specials, message):
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        _compiled().Automaton(specials)


@pytest.mark.parametrize(
    "texts, ids, strips, message",
    [
        ([b"ab", b"abc"], [0, 1], [0, 0], "cutting order"),
        ([b""], [0], [0], "empty"),
        (["ab"], [0], [0], "special 0 is not bytes, int, int >= 0"),
        ([b"ab"], ["0"], [0], "special 0 is not bytes, int, int >= 0"),
        ([b"ab"], [0], [-1], "special 0 is not bytes, int, int >= 0"),
        ([b"ab"], [0], [2**70], "special 0 is not bytes, int, int >= 0"),
        ([b"ab", b"c"], [0], [0, 0], "differ in length"),
        ([b"ab"], 0, [0], "ids must be a sequence"),
    ],
)
def test_automaton_refuses_malformed_columns(texts, ids, strips, message):
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        _compiled().Automaton(texts, ids, strips)
    with pytest.raises(TypeError, match="ids and strips together"):
        _compiled().Automaton(texts, ids)


def test_automaton_refuses_malformed_spans():
    automaton = _compiled().Automaton([(b"ab", 0, 0)])
    assert automaton.partition("xaby", [(0, 1)]) == ["x", 0, "y"]
    for spans in ([(2, 1)], [(0, 9)], [(2, 3), (0, 1)], [(0, 2), (1, 3)], ["ab"]):
        with pytest.raises(ValueError, match="protected spans"):
            automaton.partition("xaby", spans)
