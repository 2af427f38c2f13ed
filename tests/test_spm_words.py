"""The SPM C loop's word-by-word path (bpetok/models/_symbols.c: ``spm_merger``, the word cache,
``encode_text``) against its readable twin, ``merge_symbols`` (bpetok/models/llama.py).

The loop merges word by word only when no token merges can form spans a word start (a ``▁``
after another character): these tests check that property is read off the vocabulary, that the
words' ids equal the whole fragment's merged in Python with the cache empty and full, and that
the tables are built at load. The C module is imported directly, so these run under
BPETOK_PURE_PYTHON=1 too.
"""

from __future__ import annotations

from array import array
import importlib.util
import math
import pathlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.errors import BpetokError
from bpetok.vocab.gguf import read_gguf
from bpetok.vocab.gguf_writer import items_of, write_gguf
from bpetok import _specials
from bpetok.models import _symbols  # the suite requires the C modules to be built (CI builds them)
from bpetok.models.llama import SPACE
from helpers import LLAMA_SPM, PHI3, load_cases, on_threads

ROOT = pathlib.Path(__file__).resolve().parent.parent
SPACE_BYTES = SPACE.encode()


def make_gemma3_like(path: pathlib.Path) -> None:
    spec = importlib.util.spec_from_file_location("make_gemma3_like_vocab", ROOT / "scripts" / "make_gemma3_like_vocab.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    module.write(path)


@pytest.fixture(scope="module")
def gemma3_like(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("gemma3") / "gemma-3-like.gguf"
    make_gemma3_like(path)
    return path


def with_tokens(tmp_path: pathlib.Path, src, added: dict[bytes, float], name: str) -> pathlib.Path:
    """``src`` with tokens appended (NORMAL, with these scores)."""
    items = items_of(read_gguf(src))
    for i, (key, vtype, value, etype) in enumerate(items):
        if key == "tokenizer.ggml.tokens":
            items[i] = (key, vtype, [*value, *added], etype)
        elif key == "tokenizer.ggml.scores":
            items[i] = (key, vtype, [*map(float, value), *added.values()], etype)
        elif key == "tokenizer.ggml.token_type":
            items[i] = (key, vtype, [*map(int, value), *[1] * len(added)], etype)
    write_gguf(tmp_path / name, items)
    return tmp_path / name


def python_ids(tok, data: bytes) -> list[int] | None:
    try:
        return tok.model._emit(data, tok.model.merge(data))
    except BpetokError:
        return None


def fragments(tok, name: str, limit: int = 3000) -> list[bytes]:
    """The reference texts as the SPM loop gets them: ▁ for spaces, the space prefix."""
    texts = list(dict.fromkeys(case["text"] for case in load_cases(name)))[:limit]
    prefix = SPACE_BYTES if tok.model.add_space_prefix else b""
    return [prefix + t.replace(" ", SPACE).encode("utf-8", "surrogatepass") for t in texts]


def check_words(tok, merger, inputs: list[bytes]) -> None:
    """Cache empty, then filling, then full: every pass equals the Python twin on the whole input."""
    expected = [python_ids(tok, data) for data in inputs]
    merger.set_cache_budget(0)
    assert [merger.encode(data) for data in inputs] == expected
    merger.set_cache_budget(1 << 24)
    for _ in range(2):
        assert [merger.encode(data) for data in inputs] == expected
    assert merger.cache_info()["entries"] > 0


@pytest.mark.parametrize("name, path", [("llama-spm", LLAMA_SPM), ("phi-3", PHI3)])
def test_words_equal_whole_fragments(name, path):
    tok = bpetok.from_gguf(path)
    merger = tok.model.build_merger(_symbols)
    assert merger.words  # Llama 2's pieces never hold a ▁ after another character
    check_words(tok, merger, fragments(tok, name))


def test_gemma3_like_vocabulary(gemma3_like):
    """The generated vocabulary has Gemma 3's shape, and its C loop equals the Python twin."""
    meta = read_gguf(gemma3_like).metadata
    types = list(meta["tokenizer.ggml.token_type"])
    tokens = meta["tokenizer.ggml.tokens"]
    assert len(tokens) >= 250_000 and types.count(3) >= 6_000 and types.count(6) == 256
    user = {t for t, k in zip(tokens, types) if k == 4}
    assert {b"  ", b"    ", b"\n\n", b"\n\n\n"} <= user
    tok = bpetok.from_gguf(gemma3_like)
    merger = tok.model.build_merger(_symbols)
    assert merger.words
    inputs = fragments(tok, "llama-spm", 1500)
    check_words(tok, merger, inputs)
    # Its added pieces do merge: fewer ids than Llama 2's on the same texts.
    llama = bpetok.from_gguf(LLAMA_SPM)
    texts = [case["text"] for case in load_cases("llama-spm")][:1500]
    assert sum(len(tok.encode(t)) for t in texts) < sum(len(llama.encode(t)) for t in texts)


def test_tokenizer_on_gemma3_like_matches_its_reference(gemma3_like):
    """The whole path (user-defined runs of spaces and newlines, the word cache) against
    encode_reference (the Python merge loop, no cache)."""
    tok = bpetok.from_gguf(gemma3_like)
    rng = random.Random(5)
    texts = [case["text"] for case in load_cases("llama-spm")][:1500]
    texts += ["".join(rng.choices(["the", " ", "  ", "\n", "\n\n", "x", "日本", "<start_of_turn>", "\t"], k=40)) for _ in range(300)]
    for text in texts:
        for parse_special in (False, True):
            assert tok.encode(text, parse_special=parse_special) == tok.encode_reference(text, parse_special=parse_special), text


def test_a_formable_token_across_a_word_start_turns_words_off(tmp_path):
    """``s▁t`` forms from ``s`` and ``▁t``: words must not be merged one by one; an unformable
    one (no cut into tokens or characters) changes nothing."""
    unformable = with_tokens(tmp_path, LLAMA_SPM, {"ꙮꙮꙮ▁".encode(): 0.0}, "unformable.gguf")
    assert bpetok.from_gguf(unformable).model.build_merger(_symbols).words
    path = with_tokens(tmp_path, LLAMA_SPM, {"s▁t".encode(): 0.0}, "across.gguf")
    tok = bpetok.from_gguf(path)
    merger = tok.model.build_merger(_symbols)
    assert not merger.words
    inputs = fragments(tok, "llama-spm", 1500) + [SPACE_BYTES + "this is tests at st".replace(" ", SPACE).encode()]
    merger.set_cache_budget(1 << 20)  # no words, no cache
    assert [merger.encode(data) for data in inputs] == [python_ids(tok, data) for data in inputs]
    assert merger.cache_info() == {"entries": 0, "bytes": 0, "budget": 0}
    ids = tok.encode("is test")
    assert tok.vocabulary.token_index()["s▁t".encode()] in ids and ids == tok.encode_reference("is test")


def test_tables_are_built_at_load(monkeypatch):
    tok = bpetok.from_gguf(LLAMA_SPM)
    monkeypatch.setattr(type(tok.model), "build_merger", lambda self, module: pytest.fail("built on first encode"))
    assert tok.encode("Hello world") == [15043, 3186]


def test_nan_scores_run_the_python_twin(tmp_path):
    items = items_of(read_gguf(LLAMA_SPM))
    for i, (key, vtype, value, etype) in enumerate(items):
        if key == "tokenizer.ggml.scores":
            scores = [float(s) for s in value]
            scores[500] = math.nan
            items[i] = (key, vtype, scores, etype)
    write_gguf(tmp_path / "nan.gguf", items)
    tok = bpetok.from_gguf(tmp_path / "nan.gguf")
    assert _symbols.spm_merger(tok.model.ids, tok.model.scores, tok.model.n_tokens, tok.model.byte_ids, True) is None
    assert tok.engine == "pure Python" and tok.encode("Hello world") == [15043, 3186]


def test_encode_text_escapes_as_encode_fragment():
    tok = bpetok.from_gguf(LLAMA_SPM)
    merger = tok.model.build_merger(_symbols)
    # 1534 and 1535 bytes: with the prefix, the escaped text fills the C stack buffer (1536) exactly or just past it
    for text in ["Hello  world ", " x", "", "日本 語", "a" * 2000 + " b", "a" * 1534, "a" * 1533, " " * 511 + "a"]:
        for prefix in (False, True):
            data = (" " * prefix + text).replace(" ", SPACE).encode()
            assert merger.encode_text(text, prefix) == merger.encode(data) == python_ids(tok, data)
    assert merger.encode_text("a\ud800b", True) is None  # lone surrogate: the Python path encodes it
    assert tok.encode("a\ud800b", parse_special=False) == tok.encode_reference("a\ud800b", parse_special=False)


RAW_TEXTS = st.lists(st.sampled_from(["a", "b", "t", "he", " ", "  ", SPACE, "\n", "\t", "é", "日本", "0", "<"]), max_size=20).map("".join)


@pytest.mark.parametrize("source", ["llama-spm", "gemma-3-like"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(RAW_TEXTS, min_size=1, max_size=6), prefix=st.booleans())
def test_words_keyed_before_escaping_share_the_cache_with_escaped_input(source, texts, prefix, gemma3_like):
    """encode_text keys the word cache by a word's bytes before escaping (a space for its ▁);
    encode() by the escaped bytes. Both in one cache, twice over (misses, then hits), with literal
    ▁ and real spaces in the input: each equals the Python twin, and a byte 0x20 given to encode()
    stays a byte 0x20 (no word cached from a str is taken for it)."""
    tok = spm_tokenizer(source, gemma3_like)
    merger = tok.model.build_merger(_symbols)
    merger.set_cache_budget(1 << 24)
    for _ in range(2):
        for text in texts:
            data = (" " * prefix + text).replace(" ", SPACE).encode()
            assert merger.encode_text(text, prefix) == python_ids(tok, data)
            assert merger.encode(data) == python_ids(tok, data)
            raw = (" " * prefix + text).encode()  # real spaces given as escaped input: plain characters
            assert merger.encode(raw) == python_ids(tok, raw)


def test_bad_spm_tables_are_refused():
    none = [None] * 256
    with pytest.raises(ValueError, match="n_tokens"):
        _symbols.spm_merger({b"a": 0}, [0.0], 2, none, True)
    with pytest.raises(ValueError, match="token id"):
        _symbols.spm_merger({b"a": 5}, [0.0, 0.0], 2, none, True)
    with pytest.raises(ValueError, match="bytes"):
        _symbols.spm_merger({"a": 0}, [0.0], 1, none, True)
    with pytest.raises(TypeError):
        _symbols.spm_merger({b"a": 0}, ["x"], 1, none, True)
    merger = _symbols.spm_merger({b"a": 0, b"b": 1, b"ab": 2, "▁".encode(): 3}, [0.0, 0.0, 1.0, 0.0], 4, none, True)
    assert merger.words and merger.encode("▁ab▁ab".encode()) == [3, 2, 3, 2]
    with pytest.raises(ValueError):
        merger.set_cache_budget(-1)


def test_threads_share_one_word_cache():
    """The GIL is released while merging; the word cache is locked: threads agree."""
    tok = bpetok.from_gguf(LLAMA_SPM)
    merger = tok.model.build_merger(_symbols)
    merger.set_cache_budget(1 << 16)  # small: some threads find it full
    rng = random.Random(7)
    words = ["the", "quick", "brown", "fox", "é", "日本", "jumps", "over"] + ["".join(rng.choices("abcdefgh", k=6)) for _ in range(3000)]
    inputs = [(SPACE + SPACE.join(rng.choices(words, k=rng.randrange(50, 400)))).encode() for _ in range(60)]
    expected = [python_ids(tok, data) for data in inputs]
    results = on_threads(lambda k: [merger.encode(data) for data in inputs])
    assert all(found == expected for found in results)
    info = merger.cache_info()
    assert 0 < info["bytes"] <= info["budget"]


def test_words_are_cut_between_characters_no_token_joins(tmp_path):
    """Llama 2 has no token holding a newline next to another character: words are cut there
    too. Tokens that join a newline to its neighbours (``.\\n``, ``\\nThe``, ``\\n\\n``) keep the
    word whole where they could form, and the ids still equal the Python twin's."""
    texts = ["end.\nThe next\n\nline", "a\tb\n\tc.\n", "\n\n\nThe", "x\r\ny", "list\nof\nitems\n" * 30]
    plain = bpetok.from_gguf(LLAMA_SPM)
    joined = with_tokens(tmp_path, LLAMA_SPM, {b".\n": 100.0, b"\nThe": 100.0, b"\n\n": 100.0, b"\t\t": 100.0}, "newline.gguf")
    tok = bpetok.from_gguf(joined)
    for t in (plain, tok):
        merger = t.model.build_merger(_symbols)
        assert merger.words
        inputs = [SPACE_BYTES + text.replace(" ", SPACE).encode() for text in texts] + fragments(t, "llama-spm", 500)
        check_words(t, merger, inputs)
    index = tok.vocabulary.token_index()
    ids = tok.encode("end.\nThe next\n\nline")
    assert {index[b".\n"], index[b"\n\n"]} <= set(ids) and ids != plain.encode("end.\nThe next\n\nline")


FRAGMENTS = st.lists(
    st.one_of(
        st.lists(st.sampled_from(list("ab é日\n\t.▁") + ["the", "  "]), max_size=20).map("".join),
        st.sampled_from([1, 2, 3, 13]),
    ),
    min_size=1,
    max_size=8,
)


@pytest.mark.parametrize("source", ["llama-spm", "gemma-3-like"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=FRAGMENTS)
def test_encode_parts_equals_fragment_by_fragment(source, parts, gemma3_like):
    """The whole partitioned text in one C call equals the Tokenizer's loop over fragments with
    the Python merge loop (space prefix at the start and after a special, specials kept)."""
    tok = spm_tokenizer(source, gemma3_like)
    merger = tok.model.build_merger(_symbols)
    if merger is None:
        return  # BPETOK_PURE_PYTHON: no C loop
    model = tok.model
    expected = tok._encode_parts(parts, model.encode_fragment_reference)
    assert merger.encode_parts(parts, model.add_space_prefix, True, True) == expected
    assert model.encode_parts(parts) in (expected, None)


def c_automata(tok) -> tuple:
    """The C automata of the tokenizer's specials (parse_special False, True; None: none), built
    from its table here, so that the tests run under BPETOK_PURE_PYTHON=1 too."""
    table = tok._special_table
    out = []
    for parse_special in (False, True):
        ids, texts, strips = table._columns[parse_special]
        encoded = [text.encode("utf-8", "surrogatepass") for text in texts]
        out.append(_specials.Automaton(encoded, ids, strips) if texts else None)
    return tuple(out)


SPECIAL_TEXTS = st.lists(
    st.sampled_from(list("ab é日\n\t.▁") + ["the", "  ", "    ", "\n\n", "<s>", "</s>", "<start_of_turn>", "<unused7>",
                                              "<b>", "<unk>", "<table>", "\ud800"]),
    max_size=24,
).map("".join)


@pytest.mark.parametrize("source", ["llama-spm", "gemma-3-like"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=SPECIAL_TEXTS, flags=st.tuples(st.booleans(), st.booleans(), st.booleans()))
def test_encode_cut_equals_partition_then_fragments(source, text, flags, gemma3_like):
    """encode_cut (the automaton's cuts and the fragments read from the text's own UTF-8, in one
    call) against its readable twin: the per-special Python partition, then the fragments one by
    one through the Python merge loop, with every combination of the model flags."""
    tok = spm_tokenizer(source, gemma3_like)
    merger = tok.model.build_merger(_symbols)
    automata = c_automata(tok)
    prefix, after_special, keep_specials = flags
    model = tok.model
    if not text:
        return  # the Tokenizer gives [] without asking the model
    for parse_special in (False, True):
        found = merger.encode_cut(prefix, after_special, keep_specials, *automata, text, parse_special)
        if "\ud800" in text:
            assert found is None  # no UTF-8: the caller's way
            continue
        fragments = tok._special_table.partition_reference(text, parse_special)
        expected = []
        at_start = True
        for fragment in fragments:
            if isinstance(fragment, int):
                expected += [fragment] if keep_specials else []
                at_start = after_special
            else:
                expected += model.encode_escaped_reference(
                    ((" " if prefix and at_start else "") + fragment).replace(" ", SPACE).encode()
                )
                at_start = False
        assert found == expected, (text, parse_special)
        as_bytes = merger.encode_cut(prefix, after_special, keep_specials, *automata, text, parse_special, True)
        assert array("i", as_bytes).tolist() == found  # the bytes form: the same ids as int32
        if flags == (model.add_space_prefix, True, True):
            assert tok.encode(text, parse_special=parse_special) == expected


def test_encode_cut_leaves_what_it_cannot_encode_to_the_caller():
    tok = bpetok.from_gguf(LLAMA_SPM)
    merger = tok.model.build_merger(_symbols)
    plain, special = c_automata(tok)
    assert plain is None and special is not None  # llama-spm: CONTROL and UNKNOWN tokens only
    assert merger.encode_cut(True, True, True, plain, special, "a\ud800", True) is None
    assert merger.encode_cut(True, True, True, None, None, "", False) == []
    with pytest.raises(TypeError, match="7 or 8 arguments"):
        merger.encode_cut(True, True, True, plain, special, "a")
    assert merger.encode_cut(True, True, True, plain, special, "a\ud800", True, True) is None  # not bytes either
    with pytest.raises(TypeError, match="takes a str"):
        merger.encode_cut(True, True, True, plain, special, b"a", False)

    class NoCuts:  # an automaton that has no cuts to give: the caller partitions instead
        def cuts(self, text):
            return None

    assert merger.encode_cut(True, True, True, None, NoCuts(), "a</s>", True) is None
    both = merger.encode_cut(True, True, True, plain, special, "Hello</s> world", True)
    assert both == tok.encode_reference("Hello</s> world") == tok.encode("Hello</s> world")


_TOKENIZERS: dict = {}


def spm_tokenizer(source: str, gemma3_like: pathlib.Path):
    if source not in _TOKENIZERS:
        _TOKENIZERS[source] = bpetok.from_gguf(LLAMA_SPM if source == "llama-spm" else gemma3_like)
    return _TOKENIZERS[source]


def test_encode_parts_leaves_what_it_cannot_encode_to_the_caller():
    tok = bpetok.from_gguf(LLAMA_SPM)
    merger = tok.model.build_merger(_symbols)
    assert merger.encode_parts(["a\ud800", 1], True, True, True) is None  # lone surrogate
    assert merger.encode_parts(["a", 10**6], True, True, True) is None  # not a token id
    assert merger.encode_parts(["a", b"b"], True, True, True) is None
    with pytest.raises(TypeError):
        merger.encode_parts(("a",), True, True, True)
    # Specials dropped, no start after a special: the flags the Tokenizer passes for other models.
    assert merger.encode_parts(["a", 2, " b"], True, False, False) == merger.encode_text("a", True) + merger.encode_text(" b", False)
    assert tok.encode("Hello</s> world") == tok.encode_reference("Hello</s> world")
