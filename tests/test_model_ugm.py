"""The ``t5`` model (Unigram): llama.cpp b11434's ids, pieces and detokenizer on nomic-bert-moe.

Expected ids are llama.cpp's (tests/data/nomic-bert-moe.jsonl.gz), pieces its ``token_to_piece``
(nomic-bert-moe.dump.json.gz). add_special and the decoder follow llama-vocab.cpp's UGM branches
(BOS and EOS as the file's add_bos_token / add_eos_token say; one leading space dropped with
add_space_prefix). Hostile charsmaps are built by hand in the layout llama.cpp reads.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.errors import GGUFError, VocabularyError
from bpetok.vocab.gguf import GGUFValueType
from bpetok.vocab.gguf_writer import write_gguf
from bpetok.models.charsmap import CharsMap
from helpers import LLAMA_TESTS, load_cases, wrong_cases
from model_cases import llama_detokenize, load_dump

NOMIC = LLAMA_TESTS / "ggml-vocab-nomic-bert-moe.gguf.gz"


@pytest.fixture(scope="module")
def t5() -> bpetok.Tokenizer:
    return bpetok.from_gguf(NOMIC)


@pytest.fixture(scope="module")
def cases() -> list[dict]:
    return load_cases("nomic-bert-moe")


def test_every_oracle_case_is_exact(t5, cases):
    wrong = wrong_cases(t5.encode, cases)
    assert len(cases) == 5800 and not wrong, wrong[:3]


def test_the_reference_path_is_exact(t5, cases):
    """The plain twin (byte walk of the charsmap, one Viterbi over the fragment) on every fourth case."""
    wrong = wrong_cases(t5.encode_reference, cases[::4])
    assert not wrong, wrong[:3]


def test_the_fast_normalizer_is_the_byte_walk(t5, cases):
    charsmap = t5.model.charsmap
    texts = [c["text"] for c in cases[::3]] + ["ｶﾞｷﾞ ﾊ", "A\u0301e\u0300\u1100\u1161\u11a8", "①ﬁ\u3000x"]
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        assert charsmap.normalize(data) == charsmap.normalize_reference(data), text
    assert charsmap.normalize("ｶﾞ①ﬁ".encode()) == "ガ1fi".encode()  # NFKC, as SentencePiece's nmt_nfkc map


def test_malformed_bytes_are_normalized_as_llama_cpp_does(t5):
    """normalize_prefix: a byte that starts no sequence (or lacks its continuation bytes) is
    U+FFFD in the *output*, one byte consumed, not looked up in the map as a real U+FFFD is."""
    model = t5.model
    assert model.normalize(b"a\xffb") == "\u2581a\ufffdb".encode()
    assert model.normalize(b"\xe4\xb8a") == "\u2581\ufffd\ufffda".encode()
    assert model.normalize("a\ufffdb".encode()) != model.normalize(b"a\xffb")  # the map drops a real one
    assert t5.encode_bytes(b"a\xffb") == model.viterbi("\u2581a\ufffdb".encode())


def test_pieces_are_llama_cpp_token_to_piece(t5):
    dump = load_dump("nomic-bert-moe")
    assert len(dump) == t5.n_tokens
    for token_id, (with_special, without_special) in dump.items():
        assert t5.piece(token_id) == with_special, token_id
        assert t5.token_bytes(token_id) == without_special, token_id


def test_decode_is_llama_detokenize(t5, cases):
    dump = load_dump("nomic-bert-moe")
    assert t5.add_space_prefix and not t5.clean_spaces
    for c in cases[::2]:
        for skip_special in (False, True):
            pieces = [dump[i][1 if skip_special else 0] for i in c["ids"]]
            expected = llama_detokenize(pieces, remove_space=True, clean_spaces=False)
            assert t5.decode_bytes(c["ids"], skip_special=skip_special) == expected, c["text"]


def test_round_trip(t5):
    assert t5.decode(t5.encode("Hello   world")) == "Hello world"  # remove_extra_whitespaces


def test_add_special_as_the_file_says(t5):
    plain = t5.encode("Hello world")
    assert t5.add_bos and t5.add_eos  # the file's add_bos_token / add_eos_token
    assert t5.encode("Hello world", add_special=True) == [0, *plain, 2]


def test_special_ids_and_eog(t5):
    ids = t5.special_ids
    assert (ids["bos"], ids["eos"], ids["unk"], ids["pad"], ids["mask"]) == (0, 2, 3, 1, 250001)
    assert t5.eog_ids == frozenset({2})  # the EOS </s>


# -- small vocabularies and hostile charsmaps -------------------------------------------------


def _charsmap(keys: dict[bytes, bytes]) -> bytes:
    """A charsmap blob in SentencePiece's layout holding ``keys`` (each key one byte, for brevity)."""
    strings = b""
    offsets = {}
    for key, value in keys.items():
        offsets[key] = len(strings)
        strings += value + b"\0"
    # Root: node 0, BASE 256 (bit 9 clear, bits 10-30 = 256). A key byte c is node 256 ^ c with
    # LCHECK c, LEAF set and BASE 512 ^ (256 ^ c) ... so its value node is 512 + c.
    nodes = [0] * 1024
    nodes[0] = 256 << 10
    for key, offset in offsets.items():
        (c,) = key
        index = 256 ^ c
        value_at = 512 + c
        nodes[index] = ((index ^ value_at) << 10) | (1 << 8) | c
        nodes[value_at] = (1 << 31) | offset
    blob = struct.pack(f"<{len(nodes)}I", *nodes)
    return struct.pack("<I", len(blob)) + blob + strings


def _tiny_t5(path, charsmap: bytes | None, charsmap_type=GGUFValueType.UINT8):
    tokens = [b"<pad>", b"</s>", b"<unk>", b"\xe2\x96\x81", b"a", b"b", b"\xe2\x96\x81ab", b"x"]
    items = [
        ("tokenizer.ggml.model", GGUFValueType.STRING, b"t5", None),
        ("tokenizer.ggml.tokens", GGUFValueType.ARRAY, tokens, GGUFValueType.STRING),
        ("tokenizer.ggml.scores", GGUFValueType.ARRAY, [0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -1.5, -3.0], GGUFValueType.FLOAT32),
        ("tokenizer.ggml.token_type", GGUFValueType.ARRAY, [3, 3, 2, 1, 1, 1, 1, 1], GGUFValueType.INT32),
        ("tokenizer.ggml.add_space_prefix", GGUFValueType.BOOL, True, None),
    ]
    if charsmap is not None:
        items.append(("tokenizer.ggml.precompiled_charsmap", GGUFValueType.ARRAY, list(charsmap), charsmap_type))
    write_gguf(path, items)
    return path


def test_a_hand_built_charsmap_maps_and_viterbi_picks_the_best(tmp_path):
    tok = bpetok.from_gguf(_tiny_t5(tmp_path / "t.gguf", _charsmap({b"A": b"a", b"B": b"b"})))
    # "AB" -> "ab" -> "▁ab": one token (-1.5) beats "▁" "a" "b" (-5); "y" has no token: <unk>.
    assert tok.encode("AB") == [6]
    assert tok.encode("ABy") == [6, 2]
    assert tok.encode("yy zz") == [3, 2, 3, 2]  # "▁yy▁zz": consecutive unknowns merge, ▁ is a token
    assert tok.model.unknown_score == pytest.approx(-13.0)  # lowest NORMAL score minus 10
    assert tok.encode("a b", add_special=True) == [3, 4, 3, 5, 1]  # EOS by default, no BOS


@pytest.mark.parametrize(
    "blob, message",
    [
        (b"\x01\x02", "too small"),
        (struct.pack("<I", 4000) + b"\0" * 100, "says its trie takes 4000 bytes"),
        (struct.pack("<I", 100) + b"\0" * 100, "says its trie takes 100 bytes"),  # llama.cpp's >= check
    ],
)
def test_a_charsmap_that_lies_about_its_size_is_refused(tmp_path, blob, message):
    with pytest.raises(VocabularyError, match=message):
        bpetok.from_gguf(_tiny_t5(tmp_path / "t.gguf", blob))


def test_a_charsmap_pointing_outside_itself_is_refused():
    blob = bytearray(_charsmap({b"A": b"a"}))
    struct.pack_into("<I", blob, 4, 5000 << 10)  # the root's BASE far past the 1,024 nodes
    with pytest.raises(VocabularyError, match="points at node"):
        CharsMap(bytes(blob), "test")


def test_a_replacement_past_the_strings_is_refused():
    blob = bytearray(_charsmap({b"A": b"a"}))
    value_at = 512 + ord("A")
    struct.pack_into("<I", blob, 4 + 4 * value_at, (1 << 31) | 999)
    with pytest.raises(VocabularyError, match="offset 999"):
        CharsMap(bytes(blob), "test")


def test_an_unterminated_replacement_is_refused():
    blob = _charsmap({b"A": b"a"})[:-1]  # the last string's NUL cut off
    with pytest.raises(VocabularyError, match="unterminated"):
        CharsMap(blob, "test")


def test_a_charsmap_of_the_wrong_type_is_refused(tmp_path):
    with pytest.raises(GGUFError, match="uint8 or int8"):
        bpetok.from_gguf(_tiny_t5(tmp_path / "t.gguf", b"\0\0\0\0\0", GGUFValueType.INT32))


def test_no_charsmap_means_no_mapping(tmp_path):
    tok = bpetok.from_gguf(_tiny_t5(tmp_path / "t.gguf", None))
    assert tok.encode("ab") == [6] and tok.encode("AB") == [3, 2]


def test_a_t5_vocabulary_needs_an_unknown_token(tmp_path):
    items = [
        ("tokenizer.ggml.model", GGUFValueType.STRING, b"t5", None),
        ("tokenizer.ggml.tokens", GGUFValueType.ARRAY, [b"a", b"b"], GGUFValueType.STRING),
    ]
    write_gguf(tmp_path / "u.gguf", items)
    with pytest.raises(VocabularyError, match="unknown token"):
        bpetok.from_gguf(tmp_path / "u.gguf")


def test_the_c_viterbi_is_the_python_one(t5, cases):
    """bpetok/models/_ugm.c against UnigramModel.viterbi, on the normalized oracle texts (built
    directly, so this also runs under BPETOK_PURE_PYTHON=1)."""
    module = pytest.importorskip("bpetok.models._ugm")
    model = t5.model
    values = list(model.pieces.values())
    lattice = module.Lattice(list(model.pieces), [v[0] for v in values], [v[1] for v in values], model.unk, model.unknown_score)
    for c in cases[::5]:
        normalized = model.normalize(c["text"].encode("utf-8", "surrogatepass"))
        assert lattice.viterbi(normalized) == model.viterbi(normalized), c["text"]
    assert lattice.viterbi(b"") == [] and lattice.viterbi(b"\xff\xfe") == model.viterbi(b"\xff\xfe")
    with pytest.raises(TypeError):
        lattice.viterbi("text")


def test_the_c_viterbi_word_by_word_is_the_python_one(t5, cases):
    """viterbi_words (per word, with its word cache) against the Python Viterbi over the whole
    text: each oracle text twice, the second time from the cache."""
    module = pytest.importorskip("bpetok.models._ugm")
    model = t5.model
    assert model.per_word
    values = list(model.pieces.values())
    lattice = module.Lattice(list(model.pieces), [v[0] for v in values], [v[1] for v in values], model.unk, model.unknown_score)
    lattice.set_cache_budget(1 << 20)
    for c in cases[::5]:
        normalized = model.normalize(c["text"].encode("utf-8", "surrogatepass"))
        for _ in range(2):
            assert lattice.viterbi_words(normalized) == model.viterbi(normalized), c["text"]
    unknowns = "\U000e0100\u2581\U000e0101 x\u2581".encode()  # characters no token starts with, around ▁s
    assert lattice.viterbi_words(unknowns) == model.viterbi(unknowns)
    entries, used, budget = lattice.cache_stats()
    assert 0 < entries and 0 < used <= budget == 1 << 20
    lattice.set_cache_budget(0)
    assert lattice.cache_stats() == (0, 0, 0) and lattice.viterbi_words(b"\xe2\x96\x81a") == model.viterbi(b"\xe2\x96\x81a")
    with pytest.raises(TypeError):
        lattice.viterbi_words("text")


def test_the_c_lattice_takes_repeats_and_refuses_bad_input():
    module = pytest.importorskip("bpetok.models._ugm")
    # "ab" twice: the later wins, as in the Python dict; an empty text matches nothing.
    lattice = module.Lattice([b"a", b"ab", b"", b"ab", b"b"], [5, 6, 7, 8, 9], [-1.0, -1.5, 0.0, -1.0, -1.0], 0, -20.0)
    assert lattice.viterbi(b"ab") == [8] and lattice.viterbi_words(b"abc") == [8, 0]
    with pytest.raises(TypeError):
        module.Lattice([b"a", "b"], [1, 2], [0.0, 0.0], 0, -1.0)
    with pytest.raises(ValueError):
        module.Lattice([b"a"], [-1], [0.0], 0, -1.0)
    with pytest.raises(ValueError):
        module.Lattice([b"a"], [1, 2], [0.0], 0, -1.0)
    with pytest.raises(TypeError, match="not initialised"):
        module.Lattice.__new__(module.Lattice).viterbi_words(b"a")


any_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None), max_size=40)
combining = st.text(alphabet=st.sampled_from(list("AaEeKkｶﾊﾞﾟ\u0300\u0301\u0308\u3099\u1100\u1161\u11a8 \u3000①ﬁ\ufffd")), max_size=30)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(any_text, combining), raw=st.binary(max_size=24))
def test_fast_and_reference_agree_on_any_input(t5, text, raw):
    charsmap = t5.model.charsmap
    data = text.encode("utf-8", "surrogatepass")
    assert charsmap.normalize(data) == charsmap.normalize_reference(data)
    assert charsmap.normalize(raw) == charsmap.normalize_reference(raw)
    for parse_special in (False, True):
        assert t5.encode(text, parse_special=parse_special) == t5.encode_reference(text, parse_special=parse_special)


@pytest.fixture(scope="module")
def c_lattice(t5):
    """A C Lattice of t5's tokens, built directly (so this also runs under BPETOK_PURE_PYTHON=1)."""
    module = pytest.importorskip("bpetok.models._ugm")
    model = t5.model
    values = list(model.pieces.values())
    lattice = module.Lattice(list(model.pieces), [v[0] for v in values], [v[1] for v in values], model.unk, model.unknown_score)
    lattice.set_cache_budget(1 << 16)
    return lattice


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(any_text, combining), raw=st.binary(max_size=24))
def test_the_c_normalizer_is_the_byte_walk(t5, c_lattice, text, raw):
    """Lattice.encode (charsmap walk, spaces, Viterbi in C) against the Python byte walk, for each
    combination of the two space options."""
    from array import array

    model, lattice = t5.model, c_lattice
    nodes = array("I", model.charsmap.nodes).tobytes()
    for remove_extra in (False, True):
        for prefix in (False, True):
            lattice.set_normalizer(nodes, model.charsmap.strings, remove_extra, prefix)
            for data in (text.encode("utf-8", "surrogatepass"), raw, b"  " + raw + b" a  b "):
                mapped = model.charsmap.normalize_reference(data)
                if remove_extra:
                    spaced = b"".join("\u2581".encode() + w for w in mapped.split(b" ") if w)
                else:
                    spaced = mapped.replace(b" ", "\u2581".encode())
                    if prefix and mapped.strip(b" "):
                        lead = len(mapped) - len(mapped.lstrip(b" "))
                        spaced = "\u2581".encode() * (lead + 1) + spaced[3 * lead :]
                assert lattice.encode(data, True) == lattice.encode(data, False) == model.viterbi(spaced), data


def test_the_c_normalizer_leaves_a_corrupt_charsmap_to_the_python_walk(t5):
    module = pytest.importorskip("bpetok.models._ugm")
    from array import array

    lattice = module.Lattice([b"\xe2\x96\x81a"], [5], [-1.0], 0, -20.0)
    lattice.set_normalizer(array("I", [5000 << 10]).tobytes(), b"", False, False)  # the root's BASE past the nodes
    assert lattice.encode(b"a", True) is None
    with pytest.raises(TypeError, match="normalizer"):
        module.Lattice([b"a"], [1], [0.0], 0, -1.0).encode(b"a", True)
    with pytest.raises(ValueError):
        lattice.set_normalizer(b"\0\0\0", b"", False, False)


def twin_rows(model, data: bytes) -> list[tuple[int, int, int, int, int]]:
    """The Python twin's spans of ``data`` (valid UTF-8) as the kernel's rows: id, character start
    and end, byte start and end (normalize_with_sources, then the Python Viterbi's cut)."""
    normalized, starts, ends = model.normalize_with_sources(data)

    def chars(at: int) -> int:  # the characters before byte ``at`` (each starts a UTF-8 sequence)
        return sum((b & 0xC0) != 0x80 for b in data[:at])

    rows = []
    for token_id, a, b in model.viterbi_spans(normalized):
        rows.append((token_id, chars(starts[a]), chars(ends[b - 1]), starts[a], ends[b - 1]))
    return rows


def kernel_rows(lattice, data: bytes, per_word: bool):
    found = lattice.encode_with_spans(data, per_word)
    return None if found is None else [tuple(row) for row in struct.iter_unpack("<5q", found)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(any_text, combining, st.sampled_from(["\U000e0100\U000e0101 x", " \u3000ﬁ① ", "a\U0001fae8b"])))
def test_the_c_spans_are_the_python_walks(t5, c_lattice, text):
    """Lattice.encode_with_spans (normalizer with sources, Viterbi with ends, in one pass) against
    UnigramModel.normalize_with_sources and viterbi_spans, for each combination of the two space
    options, whole and word by word (twice: the second from the word cache)."""
    import copy
    from array import array

    lattice, data = c_lattice, text.encode("utf-8", "surrogatepass")
    nodes = array("I", t5.model.charsmap.nodes).tobytes()
    for remove_extra in (False, True):
        for prefix in (False, True):
            model = copy.copy(t5.model)
            model.remove_extra_whitespaces, model.add_space_prefix = remove_extra, prefix
            lattice.set_normalizer(nodes, model.charsmap.strings, remove_extra, prefix)
            expected = twin_rows(model, data)
            for per_word in (True, True, False):
                assert kernel_rows(lattice, data, per_word) == expected, (text, remove_extra, prefix)
            assert [row[0] for row in expected] == lattice.encode(data, True)


def test_the_c_spans_leave_a_span_inside_a_character_to_the_twin(tmp_path):
    # the key "\xc3" (the first byte of "é") ends inside a character: its replacement spans that
    # byte alone, and the continuation byte after it becomes U+FFFD; the kernel says None, the
    # twin marks both tokens partial
    tok = bpetok.from_gguf(_tiny_t5(tmp_path / "t.gguf", _charsmap({b"\xc3": b"a"})))
    lattice = tok.model.lattice()
    if lattice is not None:
        assert tok.model._normalizes_in_c
        assert kernel_rows(lattice, "ab".encode(), True) is not None
        assert kernel_rows(lattice, "é".encode(), True) is None
    found = tok.encode_with_offsets("é b")
    assert found.ids == tok.encode("é b") == [3, 4, 2, 3, 5]
    assert found.byte_offsets == [(0, 0), (0, 1), (1, 2), (2, 3), (3, 4)]  # "▁" "a" <unk> "▁" (the space) "b"
    assert found.partial == [False, True, True, False, False]
    assert found.offsets == [(0, 0), (0, 1), (0, 1), (1, 2), (2, 3)]
