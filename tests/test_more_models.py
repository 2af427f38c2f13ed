"""The rwkv, plamo2, whitespace and hybriddna models against llama.cpp b11434.

tests/data/more-models holds llama.cpp's ids for 5,800 texts per vocabulary (both parse_special
values, ``<name>.jsonl.gz``) and, in pieces.json.gz, a SHA-256 of its token_to_piece table (special
true and false, every id) with a sample of rows, all from ../shared/oracle. The rwkv and plamo2
vocabularies are copied; the whitespace and hybriddna ones are rebuilt here from llama.cpp's
llama-bpe test vocabulary as ../shared/vocab/more-models/make_bpe_variants.py builds them
(scripts/make_bpe_variants.py).
Run on both engines (BPETOK_PURE_PYTHON=1 too).
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import pathlib
import subprocess
import sys
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.errors import InputError, UnsupportedVocabularyError, VocabularyError
from bpetok.models import whitespace_bpe
from bpetok.vocab.gguf import GGUFValueType
from bpetok.vocab.gguf_writer import write_gguf
from helpers import DATA, wrong_cases

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
from make_bpe_variants import bpe_variant  # noqa: E402

MORE = DATA / "more-models"
NAMES = ["rwkv-world", "plamo2-synth", "whitespace", "hybriddna"]
STRING, UINT32, INT32, FLOAT32, BOOL, ARRAY = (
    GGUFValueType.STRING, GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.FLOAT32,
    GGUFValueType.BOOL, GGUFValueType.ARRAY,
)
CONTROL, NORMAL, BYTE, UNKNOWN = 3, 1, 6, 2


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("more-models")
    return {
        "rwkv-world": MORE / "ggml-vocab-rwkv-world.gguf.gz",
        "plamo2-synth": MORE / "ggml-vocab-plamo2-synth.gguf.gz",
        "whitespace": bpe_variant(tmp / "whitespace.gguf", "whitespace", "whitespace", False),
        "hybriddna": bpe_variant(tmp / "hybriddna.gguf", "hybriddna", "llama-bpe", True),
    }


_tokenizers: dict[str, bpetok.Tokenizer] = {}


@pytest.fixture
def tok(name, paths) -> bpetok.Tokenizer:
    if name not in _tokenizers:
        _tokenizers[name] = bpetok.from_gguf(paths[name])
    return _tokenizers[name]


def cases(name: str) -> list[dict]:
    with gzip.open(MORE / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("name", NAMES)
def test_ids_are_llama_cpps(name, tok):
    wrong = wrong_cases(tok.encode, cases(name))
    assert not wrong, (len(wrong), wrong[:3])


@pytest.mark.parametrize("name", NAMES)
def test_reference_twin_is_llama_cpps(name, tok):
    wrong = wrong_cases(tok.encode_reference, cases(name)[::7])
    assert not wrong, (len(wrong), wrong[:3])


@pytest.mark.parametrize("name", NAMES)
def test_pieces_are_llama_cpps(name, tok):
    with gzip.open(MORE / "pieces.json.gz", "rt") as f:
        recorded = json.load(f)[name]
    assert tok.n_tokens == recorded["n"]
    for i, special, plain in recorded["sample"]:  # shows a difference before the hash does
        assert (tok.piece(i).hex(), tok.token_bytes(i).hex()) == (special, plain), i
    h = hashlib.sha256()
    for i in range(tok.n_tokens):
        h.update(f"{i} {tok.piece(i).hex()} {tok.token_bytes(i).hex()}\n".encode())
    assert h.hexdigest() == recorded["sha256"]


# llama.cpp's EOG sets (eos, eot and the EOG texts) and defaults, from impl::load.
EXPECTED = {
    "rwkv-world": ({0, 261}, False, False),
    "plamo2-synth": ({2}, False, False),
    "whitespace": ({128001, 128009}, False, True),
    "hybriddna": ({128001, 128009}, True, True),  # llama-bpe's pre (llama3) turns BOS on
}


@pytest.mark.parametrize("name", NAMES)
def test_eog_bos_and_cleanup_are_llama_cpps(name, tok):
    eog, add_bos, clean_spaces = EXPECTED[name]
    assert (set(tok.eog_ids), tok.add_bos, tok.clean_spaces) == (eog, add_bos, clean_spaces)
    ids = tok.encode("Hello", add_special=True)
    assert ids[:1] == ([128000] if add_bos else ids[:1]) and (add_bos or 128000 not in ids)


@pytest.mark.parametrize("name", ["rwkv-world", "plamo2-synth"])
def test_decode_gives_the_text_back(name, tok):
    # No space prefix, no cleanup: the pieces joined (llama_detokenize for these types).
    for c in cases(name)[::11]:
        if not c["special"] and "\ufeff" not in c["text"][:1]:
            assert tok.decode(c["ids"]) == c["text"]


@pytest.mark.parametrize("name", ["hybriddna"])
def test_dna_spans_are_kmers(name, tok):
    ids = tok.encode("x<dna>acgtacGG</dna>y", parse_special=False)
    kmer = tok.id("ACGTAC\ue000")
    assert ids[1:5] == [tok.id("<dna>"), kmer, tok.id("GGAAAA\ue000"), tok.id("</dna>")]
    assert tok.encode("<dna>ACGTAN</dna>", parse_special=False)[1] == tok.id("<oov>")
    assert tok.decode(ids) == "x<dna>ACGTACGGAAAA</dna>y"  # the marker erased, as at llama.cpp's load
    # parse_special: the tags are CONTROL tokens, cut out first; the letters are plain BPE.
    assert kmer not in tok.encode("<dna>ACGTAC</dna>", parse_special=True)


@pytest.mark.parametrize("name", ["hybriddna"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.one_of(st.text(max_size=12), st.sampled_from(["<dna>", "</dna>", "<|eot_id|>", "acgt", " "])),
                     max_size=8).map("".join))
def test_hybriddna_one_call_is_the_partition(name, tok, text):
    """The text encoder (the gpt2 model's one C call, for a text without <dna>) gives what the
    partition and encode_fragment give; a text with <dna> is left to them."""
    encoder = tok._text_encoder
    if encoder is None:
        pytest.skip("the pure-Python engine has no one-call encoder")
    for parse_special in (False, True):
        ids = encoder(text, parse_special) if text else None  # encode() calls it for a text only
        if "<dna>" in text:
            assert ids is None
        if ids is not None:
            assert ids == tok._encode_partitioned(tok._partition(text, parse_special))
            assert ids == tok.encode_reference(text, parse_special=parse_special)


@pytest.mark.parametrize("name", ["whitespace"])
def test_whitespace_is_dropped(name, tok):
    assert tok.encode("a \u3000\tb") == tok.encode("a") + tok.encode("b")
    assert tok.encode(" \n\u2003") == []


def write(path, model: str, tokens: list[bytes], types: list[int], *extra):
    write_gguf(path, [
        ("tokenizer.ggml.model", STRING, model, None),
        ("tokenizer.ggml.tokens", ARRAY, tokens, STRING),
        ("tokenizer.ggml.token_type", ARRAY, types, INT32),
        *extra,
    ])
    return path


def plamo2_file(path, byte_count: int = 256, *extra):
    tokens = [b"<|plamo:unk|>", b"<|plamo:bos|>", b"<|plamo:eos|>", b"<|plamo:pad|>"]
    tokens += [b"<0x%02X>" % b for b in range(byte_count)] + [b"a", b"ab", b" b"]
    types = [UNKNOWN, CONTROL, CONTROL, CONTROL] + [BYTE] * byte_count + [NORMAL] * 3
    scores = [0.0] * (len(tokens) - 3) + [-1.0, -1.5, -2.0]
    return write(path, "plamo2", tokens, types, ("tokenizer.ggml.scores", ARRAY, scores, FLOAT32), *extra)


def test_plamo2_drops_special_tokens_it_finds(tmp_path):
    # llama.cpp's plamo2 branch of tokenize does not copy a special token's id to its output.
    tok = bpetok.from_gguf(plamo2_file(tmp_path / "p.gguf", 256, ("tokenizer.ggml.add_bos_token", BOOL, True, None),
                                       ("tokenizer.ggml.add_eos_token", BOOL, True, None)))
    assert tok.encode("ab<|plamo:eos|>a", parse_special=True) == [261, 260]
    # Not parsed, the text is matched like any other, and the token's score (0) wins.
    assert tok.encode("<|plamo:eos|>", parse_special=False) == [2]
    assert tok.encode("a", add_special=True) == [1, 260]  # BOS, never EOS
    assert tok.encode("\ufeffé") == [4 + 0xC3, 4 + 0xA9]  # BOM dropped; a character without a token: its bytes


def test_plamo2_without_all_byte_tokens_is_refused(tmp_path):
    with pytest.raises(VocabularyError, match="BYTE token <0xFF>"):
        bpetok.from_gguf(plamo2_file(tmp_path / "p.gguf", 255))


def test_rwkv_refuses_a_token_that_is_no_valid_escape(tmp_path):
    tokens = [b"<s>"] + [bytes((b,)) if 32 < b < 127 and b != 92 else b"\\x%02x" % b for b in range(256)] + [b"ok\\"]
    path = write(tmp_path / "r.gguf", "rwkv", tokens, [CONTROL] + [NORMAL] * 257)
    with pytest.raises(VocabularyError, match="token 257"):
        bpetok.from_gguf(path)


def test_rwkv_never_adds_bos_and_needs_an_unknown_token(tmp_path):
    path = write(tmp_path / "r.gguf", "rwkv", [b"<s>", b"a", b"ab", b"\\n"], [CONTROL, NORMAL, NORMAL, NORMAL],
                 ("tokenizer.ggml.bos_token_id", UINT32, 0, None), ("tokenizer.ggml.add_bos_token", BOOL, True, None))
    tok = bpetok.from_gguf(path)
    assert tok.encode("aab\n", add_special=True) == [1, 2, 3]
    with pytest.raises(InputError, match="no unknown token"):
        tok.encode("z")
    assert tok.encode_reference("aab\n") == [1, 2, 3]


def test_rwkv_input_llama_cpp_loops_on_is_refused(tmp_path):
    # "b" only starts "bc": llama.cpp's walk finds no token at "bx" and restarts at offset 0.
    tok = bpetok.from_gguf(write(tmp_path / "r.gguf", "rwkv", [b"<s>", b"bc", b"x"], [CONTROL, NORMAL, NORMAL]))
    assert tok.encode("bcx") == [1, 2]
    with pytest.raises(InputError, match="loops forever"):
        tok.encode("bx")


@pytest.mark.parametrize("model", ["none", "no_vocab"])
def test_a_file_without_vocabulary_is_refused(tmp_path, model):
    path = tmp_path / "n.gguf"
    write_gguf(path, [("tokenizer.ggml.model", STRING, model, None)])
    with pytest.raises(UnsupportedVocabularyError, match="has no vocabulary"):
        bpetok.from_gguf(path)


def test_cli_lists_and_describes_the_models(paths):
    run = lambda *args: subprocess.run(["bpetok", *args], capture_output=True, text=True, check=True)  # noqa: E731
    listed = run("list-models").stdout
    for model in ("rwkv", "plamo2", "whitespace", "hybriddna"):
        assert f"\n{model} " in listed
    info = run("info", str(paths["rwkv-world"])).stdout
    assert "model:           rwkv" in info and "eog_ids:         0, 261" in info


def test_the_c_walk_refuses_arrays_out_of_bounds():
    trie = pytest.importorskip("bpetok.models._trie")
    from array import array

    ok = (array("i", [-1, 7]), array("I", [0, 1]), array("I", [1, 0]), b"a", array("I", [1]))
    assert trie.Trie(*ok).encode(b"aa", -1) == [7, 7]
    assert trie.Trie(*ok).encode(b"ab", -1) is None  # no unknown token: the Python twin answers
    assert trie.Trie(*ok).encode_text("aa", -1) == [7, 7] and trie.Trie(*ok).encode_text("", -1) == []
    assert trie.Trie(*ok).encode_text("a\ud800", -1) is None  # no UTF-8: the caller encodes it
    assert trie.Trie(*ok).encode_text("a\xe9", 3) == trie.Trie(*ok).encode("a\xe9".encode(), 3) == [7, 3, 3]
    bad = [
        (ok[0], ok[1], array("I", [2, 0]), ok[3], ok[4]),  # edges past the edge arrays
        (ok[0], ok[1], ok[2], ok[3], array("I", [5])),  # a child out of range
        (ok[0], ok[1], ok[2], ok[3], array("I", [0])),  # back to the root
        (array("i", []), array("I", []), array("I", []), b"", array("I", [])),  # no root
        (ok[0], array("I", [0]), ok[2], ok[3], ok[4]),  # lengths differ
        (array("i", [-1, 1, 2]), array("I", [0, 2, 2]), array("I", [2, 0, 0]), b"ba", array("I", [1, 2])),  # unsorted
        (array("i", [-1, 1, 2]), array("I", [0, 2, 2]), array("I", [2, 0, 0]), b"ab", array("I", [2, 1])),  # children out of order
    ]
    for arrays in bad:
        with pytest.raises(ValueError):
            trie.Trie(*arrays)


def test_the_c_dictionary_refuses_bad_arrays():
    trie = pytest.importorskip("bpetok.models._trie")
    from array import array

    byte_ids = array("I", range(256))
    ok = (b"aab", array("Q", [0, 1, 3]), array("i", [300, 301]), array("i", [-10, -5]), byte_ids)
    assert trie.Dictionary(*ok).best_path(b"aabz") == [300, 301, ord("z")]  # "a" "ab", then z's byte
    bad = [
        (b"aab", array("Q", [0, 1, 4]), *ok[2:]),  # past the blob
        (b"aba", array("Q", [0, 2, 3]), *ok[2:]),  # "ab" then "a": not sorted
        (b"aa", array("Q", [0, 1, 2]), *ok[2:]),  # "a" twice
        (*ok[:2], array("i", [1]), *ok[3:]),  # ids and offsets differ
        (*ok[:4], array("I", range(255))),  # byte ids missing
    ]
    for arrays in bad:
        with pytest.raises(ValueError):
            trie.Dictionary(*arrays)


@pytest.mark.parametrize("name", ["rwkv-world"])
def test_rwkv_matches_raw_bytes(name, tok):
    # llama.cpp's rwkv session matches the fragment's bytes themselves, valid UTF-8 or not:
    # World has a token for every byte (id = byte + 1), so a stray byte is its own token.
    assert tok.encode_bytes(b"\xff\xfe") == [256, 255]
    assert tok.encode_bytes(b"ab\xc3") == tok.encode("ab") + [0xC3 + 1]


@pytest.mark.parametrize("name", ["rwkv-world"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None), max_size=60))
def test_rwkv_str_walk_is_the_byte_walk(name, tok, text):
    """encode_fragment (the C walk over the str, ASCII without a copy) against llama.cpp's walk over its bytes."""
    model = tok.model
    assert model.encode_fragment(text, True) == model.encode_reference(text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("name", ["rwkv-world"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.one_of(st.text(max_size=12), st.sampled_from(["<s>", "\\n", " "])), max_size=8).map("".join))
def test_rwkv_one_call_bytes_form_is_its_list(name, tok, text):
    """encode_cut's as_bytes (what offsets read) gives the ids of its list form, as int32."""
    encoder = tok._text_encoder
    if encoder is None:
        pytest.skip("the pure-Python engine has no C walk")
    for parse_special in (False, True):
        ids = encoder(text, parse_special)
        found = encoder(text, parse_special, True)
        assert (found is None) == (ids is None)
        if ids is not None:
            assert array("i", found).tolist() == ids == tok.encode_reference(text, parse_special=parse_special)


@pytest.fixture(scope="module")
def small_rwkv(tmp_path_factory) -> bpetok.Tokenizer:
    """A trie where a walk meets every case: a first byte that is a token or only starts one
    (``d``), tokens two and three bytes deep, a byte no token starts (``e``: the unknown token)."""
    tokens = [b"<unk>", b"a", b"ab", b"abc", b"ac", b"bcd", b"b", b"c", b"cc", b"ccd", b"cd", b"dab", b"da"]
    types = [UNKNOWN] + [NORMAL] * (len(tokens) - 1)
    path = write(tmp_path_factory.mktemp("rwkv") / "r.gguf", "rwkv", tokens, types,
                 ("tokenizer.ggml.unknown_token_id", UINT32, 0, None))
    return bpetok.from_gguf(path)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=24).map(lambda b: bytes(97 + x % 5 for x in b)))
def test_rwkv_c_walk_is_the_reference_on_a_small_trie(small_rwkv, data):
    """The C walk (its first two bytes through a table, then a child at a time) against
    llama.cpp's walk; None from C where llama.cpp loops (``d`` then neither ``a`` nor ``ab``)."""
    model = small_rwkv.model
    if model._walker is None:
        pytest.skip("the pure-Python engine has no C walk")
    try:
        expected = model.encode_reference(data)
    except InputError:
        expected = None
    assert model._walker.encode(data, 0) == expected


def test_whitespace_model_with_a_pre_gpt2_lacks_is_refused(tmp_path):
    path = bpe_variant(tmp_path / "w.gguf", "whitespace", "no-such-pre", False)
    with pytest.raises(UnsupportedVocabularyError, match="no-such-pre"):
        bpetok.from_gguf(path)


any_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None), max_size=60)


@pytest.mark.parametrize("name", ["whitespace"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=any_text)
def test_whitespace_runs_are_whole_pieces_of_the_gpt2_split(name, tok, text):
    """The fast path hands each run to the piece cache: the gpt2 model's \\S+ split keeps it whole."""
    from bpetok.models.whitespace_bpe import _WHITESPACE_RUNS

    model = tok.model
    assert model._pieces_whole
    for run in _WHITESPACE_RUNS.split(text):
        if run:
            assert model.runs.model.splitter.split(run) == [run]
    twice = text + " " + text  # the second time from the cache
    assert model.encode_fragment(twice, True) == model.encode_fragment_reference(twice, True)


@pytest.mark.parametrize("name", ["whitespace"])
def test_whitespace_c_runs_cut_where_the_reference_cuts(name, tok):
    """The C loop's cut (``Merger.encode_runs``, whitespace as a bitmap of code points) drops
    exactly llama.cpp's whitespace: each character between two letters, against the reference,
    the BMP up to past U+3000 and the ends of every plane; then from the word cache (a character
    that is no token, with no byte token to stand in, is dropped too: the merge's fallback)."""
    from bpetok.pretok.unicode_data import WHITESPACE

    model = tok.model
    assert (model._run_merger is not None) == (tok.engine != "pure Python")
    chars = [c for c in itertools.chain(range(0x3100), range(0xFFF0, 0x110000, 0x10000), range(0x10FFF0, 0x110000))
             if not 0xD800 <= c < 0xE000]
    texts = ["x" + chr(c) + "y" for c in chars]
    for _ in range(2):  # the second time from the cache
        wrong = [t for t in texts if model.encode_fragment(t, True) != model.encode_fragment_reference(t, True)]
        assert not wrong, [hex(ord(t[1])) for t in wrong[:5]]
    dropped = {c for c, t in zip(chars, texts) if tok.encode(t) == tok.encode("x") + tok.encode("y")}
    assert set(WHITESPACE) <= dropped  # and the others dropped are characters that are no token
    assert all(tok.id(chr(c)) is None for c in dropped - set(WHITESPACE)), sorted(dropped - set(WHITESPACE))[:5]
    if model._run_merger is not None:
        assert tok.cache_info()["pieces"]["entries"] > 1000
        # as_bytes (offsets read the ids with numpy): the same ids as int32, None where the list is None
        breaks = whitespace_bpe._WHITESPACE_BREAKS
        for text in texts[::50] + [" ".join(texts[:400]), "", "  ", "a\ud800b"]:
            listed, packed = model._run_merger.encode_runs(text, breaks), model._run_merger.encode_runs(text, breaks, True)
            assert (packed is None) == (listed is None), text
            assert listed is None or array("i", packed).tolist() == listed, text
