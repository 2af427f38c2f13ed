"""DecodeStream: the steps and the flush join to exactly decode(ids), for any ids.

The reference is Tokenizer.decode, whose pieces are checked against llama.cpp's token_to_piece
(test_exact.py) and whose UTF-8 replacement is Python's one-shot decode; the stream must give the
same text however the bytes fall across ids.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.decode_stream import open_tail
from bpetok.vocab import TokenAttr
from helpers import VOCABS

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _pools(tok) -> dict[str, list[int]]:
    """Ids worth drawing: partial UTF-8 (lead and continuation bytes), specials, and the pieces that
    clean_spaces rewrites (space, quote, punctuation, s/m/re/ve), besides any id at all."""
    invalid, specials, cleanup = [], [], []
    cleanup_pieces = {b" ", b"'", b" '", b"?", b"!", b".", b",", b"s", b"m", b"re", b"ve", b"r", b"v", b"e", b"  "}
    for i in range(tok.n_tokens):
        attr = tok.vocabulary.attrs[i]
        if attr & (TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN | TokenAttr.UNUSED):
            specials.append(i)
        piece = tok.piece(i)
        if piece in cleanup_pieces:
            cleanup.append(i)
        try:
            piece.decode("utf-8")
        except UnicodeDecodeError:
            invalid.append(i)
    return {"invalid": invalid, "specials": specials, "cleanup": cleanup}


@pytest.fixture(scope="module", params=["qwen3", "smollm2", "llama-spm", "gemma-4"])
def case(request):
    """(tokenizer, id pools), for byte-level, SentencePiece and gemma4 vocabularies in tests/data
    (the SentencePiece one drops the first piece's leading space: the stream must too)."""
    if request.param in ("qwen3", "smollm2"):
        tok = request.getfixturevalue(request.param)
    else:
        tok = bpetok.from_gguf(VOCABS[request.param])
    return tok, _pools(tok)


@pytest.fixture(scope="module")
def cleaning_case(case):
    """The same vocabulary with clean_spaces on (as llama3, gpt-2, falcon... have): the detokenizer
    rewrites bytes across token boundaries, which the stream must hold back for."""
    tok, pools = case
    cleaning = copy.copy(tok)
    cleaning.clean_spaces = True  # the Tokenizer's flag, taken from its model or pre-tokenizer spec
    return cleaning, pools


def _ids(tok, pools):
    return st.lists(
        st.one_of(
            st.integers(0, tok.n_tokens - 1),
            st.sampled_from(pools["invalid"]),
            st.sampled_from(pools["specials"]),
            st.sampled_from(pools["cleanup"]),
        ),
        max_size=40,
    )


def _check_stream(tok, ids, skip_special):
    stream = tok.decode_stream(skip_special=skip_special)
    expected = tok.decode(ids, skip_special=skip_special)
    out = ""
    for k, token_id in enumerate(ids, 1):
        out += stream.step(token_id)
        # What has left is final: a prefix of the whole text.
        assert expected.startswith(out), (ids[:k], out, expected)
        # Nothing is held back needlessly: once the bytes so far are valid UTF-8 and no rewrite can
        # reach them, all of their text has left.
        done = tok.decode_bytes(ids[:k], skip_special=skip_special)
        if not tok.clean_spaces or not open_tail(done):
            try:
                assert out == done.decode("utf-8")
            except UnicodeDecodeError:
                pass
    out += stream.flush()
    assert out == expected, (ids, out, expected)
    # flush resets: the stream can be used again
    assert stream.feed(ids) + stream.flush() == expected


def _check_drawn_stream(case, data) -> None:
    """:func:`_check_stream` on ids drawn from the case's pools, skip_special drawn too."""
    tok, pools = case
    ids = data.draw(_ids(tok, pools))
    _check_stream(tok, ids, data.draw(st.booleans()))


@SETTINGS
@given(data=st.data())
def test_stream_joins_to_decode(case, data):
    _check_drawn_stream(case, data)


@SETTINGS
@given(data=st.data())
def test_stream_joins_to_decode_with_clean_spaces(cleaning_case, data):
    _check_drawn_stream(cleaning_case, data)


def test_multibyte_character_split_across_byte_tokens(qwen3):
    # é is C3 A9: two byte-level tokens, the first alone is incomplete
    ids = [qwen3.id("Ã"), qwen3.id("©"), qwen3.id("x")]
    stream = qwen3.decode_stream()
    assert [stream.step(i) for i in ids] == ["", "é", "x"]
    assert stream.flush() == ""


def test_incomplete_tail_flushes_as_replacement(qwen3):
    stream = qwen3.decode_stream()
    assert stream.step(qwen3.id("Ã")) == ""
    assert stream.flush() == "\ufffd" == qwen3.decode([qwen3.id("Ã")])


def test_invalid_byte_is_replaced_at_once(qwen3):
    # 0xFF never starts a sequence: its replacement is final as soon as it arrives
    stream = qwen3.decode_stream()
    assert stream.step(qwen3.id("ÿ")) == "\ufffd"


def test_special_tokens_render_or_vanish(qwen3):
    im_end = qwen3.id("<|im_end|>")
    assert qwen3.decode_stream().step(im_end) == "<|im_end|>"
    assert qwen3.decode_stream(skip_special=True).step(im_end) == ""


def test_clean_spaces_waits_for_the_next_byte(cleaning_case):
    tok, _ = cleaning_case
    ids = tok.encode("Hi , it 's", parse_special=False)
    stream = tok.decode_stream()
    text = "".join(stream.step(i) for i in ids) + stream.flush()
    assert text == tok.decode(ids) == "Hi, it's"


def test_clean_spaces_every_short_text_byte_by_byte(qwen3):
    """Every text of up to 5 bytes over the bytes the rewrites look at, one byte token per id
    (the rewrites work on bytes, so one vocabulary is enough)."""
    import itertools

    tok = copy.copy(qwen3)
    tok.clean_spaces = True
    from bpetok.models.gpt2 import BYTE_TO_CHAR

    byte_id = {ch: tok.id(BYTE_TO_CHAR[ord(ch)]) for ch in " '?srvemx"}
    for n in range(1, 6):
        for chars in itertools.product(byte_id, repeat=n):
            ids = [byte_id[c] for c in chars]
            stream = tok.decode_stream()
            assert stream.feed(ids) + stream.flush() == tok.decode(ids), "".join(chars)
