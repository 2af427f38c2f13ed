"""Offsets on the models whose pieces are not simply the text's bytes: bert and t5 normalize (spans
through the normalizer's alignment), whitespace and plamo2 drop text (spans with gaps), hybriddna's DNA
k-mers stand for upper-cased, padded letters (refused) while its BPE has spans, rwkv's pieces
are its escapes' bytes. Checked on llama.cpp's reference cases in tests/data."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.offsets import OffsetsError
from helpers import DATA, LLAMA_TESTS
from test_more_models import MORE, bpe_variant
from test_offsets import check_spans, re_encode_between_specials
from bpetok.offsets import offsets_of_ids
from bpetok.models.norm_offsets import spans_of_fragments
from bpetok.vocab import TokenAttr

SPECIAL = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN

NORMALIZING = {
    "bert-bge": LLAMA_TESTS / "ggml-vocab-bert-bge.gguf.gz",
    "nomic-bert-moe": LLAMA_TESTS / "ggml-vocab-nomic-bert-moe.gguf.gz",  # t5
}
NORMALIZING_TEXTS = [
    "Hello World", " Héllo,  wörld! 日本 ﬁ unaffable [SEP] x  [CLS] </s> y <s>", "①②   \u3000 x\t\n",
    "ÉCOLE e\u0301cole \u0000\u200b\x7f a\U0001f3fb 👍🏽", "x" * 120 + " antidisestablishmentarianism", "", "   ",
]


def reference_cases(path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def normalizing() -> dict[str, bpetok.Tokenizer]:
    return {name: bpetok.from_gguf(path) for name, path in NORMALIZING.items()}


def check_normalized_spans(tok: bpetok.Tokenizer, text: str, found) -> None:
    """Spans of a normalizing model: in order, within the text, bytes and characters the same
    span; a special token's is its text (and what it swallowed)."""
    data = text.encode("utf-8", "surrogatepass")
    at = (0, 0)
    for token_id, (s, e), (a, b), partial in zip(found.ids, found.offsets, found.byte_offsets, found.partial):
        assert at <= (s, e) and 0 <= s <= e <= len(text) and 0 <= a <= b <= len(data)
        assert text[:s].encode("utf-8", "surrogatepass") == data[:a] or partial
        assert text[:e].encode("utf-8", "surrogatepass") == data[:b] or partial
        if tok.vocabulary.attrs[token_id] & SPECIAL and token_id != tok.model.unk and s < e:  # not added, not an unknown word
            assert text[s:e].strip(" \t\n\v\f\r") == tok.piece(token_id).decode()
        at = (s, e)


@pytest.mark.parametrize("name", sorted(NORMALIZING))
def test_normalizing_models_spans_on_reference_cases(name, normalizing):
    tok = normalizing[name]
    # a share of the cases: the spans come from the readable twins (the Python Viterbi for t5)
    cases = reference_cases(DATA / f"{name}.jsonl.gz")[:: 2 if name == "bert-bge" else 5]
    for k, case in enumerate(cases):
        text, parse_special = case["text"], case["special"]
        found = tok.encode_with_offsets(text, parse_special=parse_special)
        assert found.ids == case["ids"]  # llama.cpp's
        check_normalized_spans(tok, text, found)
        if k % 10 == 0:
            assert offsets_of_ids(tok, text, case["ids"]) == found
    for text in NORMALIZING_TEXTS:
        for add_special in (False, True):
            found = tok.encode_with_offsets(text, add_special=add_special)
            assert found.ids == tok.encode(text, add_special=add_special)
            check_normalized_spans(tok, text, found)
    assert tok.encode_batch_with_offsets(NORMALIZING_TEXTS) == [tok.encode_with_offsets(t) for t in NORMALIZING_TEXTS]


def test_bert_spans_spell_the_lowercased_text(normalizing):
    # on ASCII text the normalizer only lowercases and splits: each token is its span, lowercased
    tok = normalizing["bert-bge"]
    texts = [c["text"] for c in reference_cases(DATA / "bert-bge.jsonl.gz") if c["text"].isascii()]
    texts += ["Hello World! It's a test, isn't it?", "antidisestablishmentarianism $100 + 50% = #x"]
    checked = 0
    for text in texts:
        found = tok.encode_with_offsets(text, parse_special=False)
        for token_id, (s, e) in zip(found.ids, found.offsets):
            if token_id != tok.model.unk:
                assert text[s:e].lower() == tok.vocabulary.tokens[token_id].decode().removeprefix("\u2581")
                checked += 1
    assert checked > 100


def test_bert_unknown_word_spans_the_word(normalizing):
    tok = normalizing["bert-bge"]
    text = "ab \U00013460\U00013461x cd"  # no token starts at those hieroglyphs: the word is [UNK]
    found = tok.encode_with_offsets(text)
    assert tok.model.unk in found.ids
    k = found.ids.index(tok.model.unk)
    assert text[slice(*found.offsets[k])] == "\U00013460\U00013461x"
    assert found.byte_offsets[k] == (3, 12)


def test_t5_replacement_spans_its_whole_source(normalizing):
    # the charsmap maps "①" to "1" and "ﬁ" to "fi": a token of part of a replacement spans all of it
    tok = normalizing["nomic-bert-moe"]
    normalized, starts, ends = tok.model.normalize_with_sources("ﬁ①".encode())
    assert normalized == tok.model.normalize("ﬁ①".encode()) == "\u2581fi1".encode()
    assert list(zip(starts, ends)) == [(0, 0)] * 3 + [(0, 3)] * 2 + [(3, 6)]
    found = tok.encode_with_offsets("x  ﬁ")
    assert found.offsets[-1][1] == 4 and found.byte_offsets[-1][1] == 6


def test_t5_token_spans_equal_the_python_viterbi(normalizing):
    model = normalizing["nomic-bert-moe"].model
    texts = [c["text"] for c in reference_cases(DATA / "nomic-bert-moe.jsonl.gz")[::7]] + NORMALIZING_TEXTS
    for text in texts + ["\U00013460 x\U00013461\U00013462", "a\U0001fae8b"]:  # <unk>s: no token starts there
        normalized = model.normalize_with_sources(text.encode("utf-8", "surrogatepass"))[0]
        assert model.token_spans(normalized) == model.viterbi_spans(normalized), text


def bert_twin_spans(tok: bpetok.Tokenizer, text: str, ids: list[int], add_special: bool):
    """The bert spans of the readable twin: the Python normalizer and cut, token by token."""
    return spans_of_fragments(tok, text, ids, add_special, tok.model.fragment_spans, in_bytes=False)


def check_bert_kernel_spans(tok: bpetok.Tokenizer, text: str, add_special: bool = False) -> bool:
    """The spans bert's token_offsets and encode_with_offsets give (the kernel's rows where it is
    built) are the twin's; whether they came from the kernel (arrays first, no lists)."""
    ids = tok.encode(text, add_special=add_special)
    found = tok.model.token_offsets(tok, text, ids, add_special)
    twin = bert_twin_spans(tok, text, ids, add_special)
    from_kernel = found._lists is None
    assert found == twin, text
    one_pass = tok.encode_with_offsets(text, add_special=add_special)  # the kernel's ids, not encode's
    from_kernel &= one_pass._lists is None
    assert one_pass == twin and one_pass.ids == ids, text
    return from_kernel


def test_bert_kernel_spans_equal_the_python_walk(normalizing):
    tok = normalizing["bert-bge"]
    texts = [c["text"] for c in reference_cases(DATA / "bert-bge.jsonl.gz")] + NORMALIZING_TEXTS
    texts += ["ab \U00013460\U00013461x cd", "[CLS][SEP]  [MASK] x", "\ud800a\udfff 中文字", "é" * 300]
    from_kernel = sum(check_bert_kernel_spans(tok, text, k % 2 == 1) for k, text in enumerate(texts))
    assert from_kernel == (len(texts) if tok.model.compiled else 0)


def test_bert_one_call_spans_equal_the_partition_walk(normalizing):
    """``Wpm.encode_cut_spans`` (the text cut by encode's automaton, in one call) gives the spans
    of the walk over the Tokenizer's partition, a special's with what its LSTRIP/RSTRIP
    swallowed; two specials with nothing between them it leaves to that walk (None)."""
    from bpetok.models.norm_offsets import encode_with_fragment_arrays

    tok = normalizing["bert-bge"]
    if not tok.model.compiled:
        pytest.skip("the bert kernel is not built")
    kernel, automata = tok.model._kernel, tok._special_table.automata()
    texts = NORMALIZING_TEXTS + ["[CLS] x [SEP]", "  [MASK]  y  [SEP]  ", "a[SEP]b", "ÉCOLE [UNK] e\u0301cole 日本 ab"]
    for text in texts:
        for parse_special in (False, True):
            assert kernel.encode_cut_spans(tok.model.unk, *automata, text, parse_special) is not None, text
            walked = encode_with_fragment_arrays(tok, text, parse_special, False, tok.model.fragment_span_rows)
            assert tok.encode_with_offsets(text, parse_special=parse_special) == walked, text
    assert kernel.encode_cut_spans(tok.model.unk, *automata, "x [CLS][SEP] y", True) is None


def test_bert_spans_of_a_special_that_swallows_spaces(tmp_path):
    """bert-bge under a general.name that gives [MASK] llama.cpp's LSTRIP: its span holds the
    spaces it swallowed, in the one call as in the twin (and two [MASK]s with only spaces between
    them, which the one call leaves to the partition's walk)."""
    from bpetok.vocab.gguf import GGUFValueType, read_gguf
    from bpetok.vocab.gguf_writer import items_of, write_gguf

    items = [item for item in items_of(read_gguf(NORMALIZING["bert-bge"])) if item[0] != "general.name"]
    path = tmp_path / "modern-bert.gguf"
    write_gguf(path, [items[0], ("general.name", GGUFValueType.STRING, "modern-bert test", None)] + items[1:])
    tok = bpetok.from_gguf(path)
    assert tok.token_attributes(tok.id("[MASK]")) & bpetok.TokenAttr.LSTRIP
    for text in ["x  [MASK]  y", "  [MASK]", "[MASK]  ", "a [MASK] [MASK] b", "\t[MASK]\n[SEP] [MASK]"]:
        found = tok.encode_with_offsets(text)
        assert found == bert_twin_spans(tok, text, tok.encode(text), False) and found.ids == tok.encode(text), text
    found = tok.encode_with_offsets("x  [MASK]  y")
    assert found.offsets[1] == (1, 9) and found.ids[1] == tok.id("[MASK]")


def mixed_texts(alphabet: str, specials: list[str]):
    """Texts of up to twelve parts: short runs over ``alphabet``, the vocabulary's ``specials`` (and a
    long word, a lone surrogate), any codepoint."""
    return st.lists(
        st.one_of(
            st.text(alphabet=alphabet, max_size=12),
            st.sampled_from(specials + ["antidisestablishmentarianism" * 3, "\ud800"]),
            st.characters(min_codepoint=0, max_codepoint=0x10FFFF),
        ),
        max_size=12,
    ).map("".join)


bert_texts = mixed_texts("aAbBeÉéèüßıİ\u0301\u00adxyz\u4e00\u3000\U00020000\U00013460.,'-1 \t\x00\x07\u200b\ufffd😀",
                         ["[UNK]", "[SEP]", "[CLS]", " [MASK] "])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=bert_texts, add_special=st.booleans())
def test_bert_kernel_spans_equal_the_python_walk_on_any_text(normalizing, text, add_special):
    check_bert_kernel_spans(normalizing["bert-bge"], text, add_special)


def check_t5_kernel_spans(tok: bpetok.Tokenizer, text: str, parse_special: bool = True, add_special: bool = False) -> bool:
    """The spans t5's token_offsets and encode_with_offsets give (the kernel's rows where it
    normalizes in C) are the twin's (the Python normalizer with sources and Viterbi); whether
    they came from the kernel (arrays first, no lists)."""
    ids = tok.encode(text, parse_special=parse_special, add_special=add_special)
    twin = spans_of_fragments(tok, text, ids, add_special, tok.model.fragment_spans, in_bytes=True)
    found = tok.model.token_offsets(tok, text, ids, add_special)
    from_kernel = found._lists is None
    assert found == twin, text
    one_pass = tok.encode_with_offsets(text, parse_special=parse_special, add_special=add_special)
    from_kernel &= one_pass._lists is None
    assert one_pass == twin and one_pass.ids == ids, text
    return from_kernel


def test_t5_kernel_spans_equal_the_python_walk_on_every_reference_case(normalizing):
    tok = normalizing["nomic-bert-moe"]
    # every case where the kernel is built; on the pure-Python engine (the twin against itself) a share
    cases = reference_cases(DATA / "nomic-bert-moe.jsonl.gz")[:: 1 if tok.model._normalizes_in_c else 25]
    texts = [(c["text"], c["special"]) for c in cases] + [(t, True) for t in NORMALIZING_TEXTS]
    texts += [("\U00013460 x\U00013461\U00013462 \ud800a\udfff", False), ("a\U0001fae8b </s><unk>  x", True)]
    from_kernel = sum(check_t5_kernel_spans(tok, text, special, k % 2 == 1) for k, (text, special) in enumerate(texts))
    assert from_kernel == (len(texts) if tok.model.compiled else 0)


t5_texts = mixed_texts("aAeÉé\u0301ｶﾞ①ﬁ\u3000 \t\n\x00.,1\u200b\ufffd\U00013460\U000e0100😀\u2581",
                       ["</s>", "<unk>", "<s>", " <pad> "])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=t5_texts, parse_special=st.booleans(), add_special=st.booleans())
def test_t5_kernel_spans_equal_the_python_walk_on_any_text(normalizing, text, parse_special, add_special):
    check_t5_kernel_spans(normalizing["nomic-bert-moe"], text, parse_special, add_special)


@pytest.mark.parametrize("name", sorted(NORMALIZING))
def test_normalizing_models_refuse_ids_of_another_text(name, normalizing):
    tok = normalizing[name]
    with pytest.raises(OffsetsError, match="the ids are not what encode"):
        offsets_of_ids(tok, "hello world", tok.encode("goodbye"))


def test_bert_spans_equal_hugging_face_on_ascii(normalizing, tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab = {}
    for i, data in enumerate(normalizing["bert-bge"].vocabulary.tokens):
        text = data.decode()
        vocab[text[1:] if text.startswith("\u2581") else text if text.startswith("[") and text.endswith("]") else "##" + text] = i
    hf = transformers.BertTokenizerFast(vocab=vocab, do_lower_case=True)
    tok = normalizing["bert-bge"]
    texts = [c["text"] for c in reference_cases(DATA / "bert-bge.jsonl.gz") if c["text"].isascii() and not c["special"]]
    texts += ["Hello World! It's a test, isn't it?", "  leading and trailing  \t\n", "$100 + 50% = #hashtag @user <tag>"]
    compared = 0
    for text in texts:
        expected = hf(text, add_special_tokens=True, return_offsets_mapping=True)
        found = tok.encode_with_offsets(text, parse_special=False, add_special=True)
        if found.ids != expected["input_ids"]:
            continue  # HF splits this text otherwise (its own rules): no spans to compare
        inner = [tuple(span) for span in expected["offset_mapping"][1:-1]]
        assert found.offsets[1:-1] == inner, text
        compared += 1
    assert compared > len(texts) // 2


@pytest.fixture(scope="module")
def more(tmp_path_factory) -> dict[str, bpetok.Tokenizer]:
    tmp = tmp_path_factory.mktemp("offsets-models")
    return {
        "rwkv-world": bpetok.from_gguf(MORE / "ggml-vocab-rwkv-world.gguf.gz"),
        "plamo2-synth": bpetok.from_gguf(MORE / "ggml-vocab-plamo2-synth.gguf.gz"),
        "whitespace": bpetok.from_gguf(bpe_variant(tmp / "whitespace.gguf", "whitespace", "whitespace", False)),
        "hybriddna": bpetok.from_gguf(bpe_variant(tmp / "hybriddna.gguf", "hybriddna", "llama-bpe", True)),
    }


@pytest.mark.parametrize("name", ["rwkv-world", "plamo2-synth", "whitespace", "hybriddna"])
def test_spans_on_reference_cases(name, more):
    tok = more[name]
    cases = reference_cases(MORE / f"{name}.jsonl.gz")[::4]
    for case in cases:
        text, parse_special = case["text"], case["special"]
        found = tok.encode_with_offsets(text, parse_special=parse_special)
        assert found.ids == case["ids"]  # llama.cpp's
        check_spans(tok, text, found, parse_special, spelling=tok.vocabulary.tokens.__getitem__ if name == "whitespace" else None)
        re_encode_between_specials(tok, text, found, parse_special)


def spans_held_to_the_walk(tok, texts: list[str]) -> list:
    """Each text's encode_with_offsets (add_special every other text), held equal to the model's
    token_offsets and to its token-by-token walk; a text llama.cpp aborts on is left out."""
    found_all = []
    for k, text in enumerate(texts):
        add_special = k % 2 == 1
        try:
            ids = tok.encode(text, add_special=add_special)
        except bpetok.BpetokError:
            continue  # a space next to other whitespace: llama.cpp aborts, no ids
        found = tok.encode_with_offsets(text, add_special=add_special)
        assert found == tok.model.walk_offsets(tok, text, ids, add_special) == tok.model.token_offsets(tok, text, ids, add_special), text
        found_all.append(found)
    return found_all


def test_whitespace_fast_spans_equal_its_walk(more):
    # the running sums over the characters that are not whitespace (encode's ids as an array)
    texts = [c["text"] for c in reference_cases(MORE / "whitespace.jsonl.gz")]
    texts += ["ab  cd\u3000\tef", "x\u00a0y", "  ", "", "é 🤗 日本 x", "a\x1cb", "a\ud800b c"]
    found = spans_held_to_the_walk(more["whitespace"], texts)
    assert sum(f._lists is None for f in found) > len(texts) * 0.9  # made by the fast path (arrays first)


def test_whitespace_fast_spans_over_bytes_equal_its_walk(tmp_path):
    # byte-level BPE under the whitespace model: tokens hold parts of characters (an emoji's
    # bytes), so the sums run over the kept bytes
    tok = bpetok.from_gguf(bpe_variant(tmp_path / "whitespace-bytes.gguf", "whitespace", "llama-bpe", False))
    texts = ["é 🤗 日本 x", "ab  cd\u3000\tef", "x\u00a0y 🤗🤗\n\n", "👍🏽 a\u0301", "", "  "]
    found = spans_held_to_the_walk(tok, texts + [c["text"] for c in reference_cases(MORE / "whitespace.jsonl.gz")[::25]])
    assert all(f._lists is None for f in found)
    assert sum(bool(f.partial_mask.any()) for f in found) >= 3


def test_whitespace_leaves_gaps_where_it_was(more):
    tok = more["whitespace"]
    text = "ab  cd\u3000\tef"
    found = tok.encode_with_offsets(text)
    assert found.ids == tok.encode("ab") + tok.encode("cd") + tok.encode("ef")
    covered = "".join(text[s:e] for s, e in found.offsets)
    assert covered == "abcdef"
    assert found.offsets[0][0] == 0 and found.offsets[-1][1] == len(text)


def test_plamo2_leaves_a_gap_where_it_dropped_a_special_token(more):
    tok = more["plamo2-synth"]
    text = "ab<|plamo:eos|>ab"
    found = tok.encode_with_offsets(text)
    assert found.ids == tok.encode(text) == tok.encode("ab") * 2
    half = tok.encode_with_offsets("ab").offsets
    gap = len("ab<|plamo:eos|>")
    assert found.offsets == half + [(s + gap, e + gap) for s, e in half]
    not_parsed = tok.encode_with_offsets(text, parse_special=False)  # the text is encoded, no gap
    assert "".join(text[s:e] for s, e in not_parsed.offsets) == text


def test_hybriddna_numpy_ids_are_its_ids(more):
    # encode_batch_to_numpy (which offsets encode through) takes the gpt2 kernel when no text has <dna>
    tok = more["hybriddna"]
    for special in (True, False):
        texts = [c["text"] for c in reference_cases(MORE / "hybriddna.jsonl.gz") if c["special"] == special][::3]
        texts += ["x<dna>acgtacGG</dna>y", "a <dna>ACG"]
        for batch in (texts, [t for t in texts if "<dna>" not in t]):
            ids, bounds = tok.encode_batch_to_numpy(batch, parse_special=special)
            assert [ids[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])] == [tok.encode(t, parse_special=special) for t in batch]


def test_hybriddna_bpe_has_spans_and_kmers_are_refused(more):
    tok = more["hybriddna"]
    text = "x<dna>acgtacGG</dna>y"
    found = tok.encode_with_offsets(text, parse_special=True)  # tags special, letters plain BPE
    assert found.ids == tok.encode(text, parse_special=True)
    assert "".join(text[s:e] for s, e in found.offsets) == text
    with pytest.raises(OffsetsError, match="DNA k-mers"):
        tok.encode_with_offsets(text, parse_special=False)
