"""bpetok/utf8.py, the one llama.cpp-style UTF-8 decoder, and the places that use it.

The rule is llama.cpp's ``unicode_cpt_from_utf8`` (src/unicode.cpp): a lead byte (by its high
bits) followed by enough continuation bytes is decoded, overlong or surrogate alike; otherwise
``unicode_cpts_from_utf8`` emits U+FFFD and moves one byte on. tests/test_malformed_utf8.py holds
``encode_bytes`` to llama.cpp's recorded ids on thousands of such inputs; this file checks the
decoder's edge cases one by one and the two places where past U+10FFFF matters.
"""

from __future__ import annotations

import dataclasses

import pytest

import bpetok
from bpetok.errors import InputError, VocabularyError
from bpetok.models.gpt2 import decode_token_text
from bpetok.utf8 import BeyondUnicode, decode_llama_utf8
from helpers import GEMMA4

# (bytes, the code points llama.cpp's unicode_cpts_from_utf8 gives), by its branches.
EDGE_CASES = [
    (b"a\x7f", [0x61, 0x7F]),  # ASCII
    (b"\xc3\xa9", [0xE9]),  # a 2-byte sequence
    (b"\xc0\xbc", [0x3C]),  # overlong "<": decoded, not refused
    (b"\xc1\xbf", [0x7F]),  # overlong DEL
    (b"\xe0\x80\x80", [0x00]),  # 3-byte overlong NUL
    (b"\xf0\x80\x80\x80", [0x00]),  # 4-byte overlong NUL
    (b"\xed\xa0\x80", [0xD800]),  # an encoded surrogate
    (b"\xf4\x8f\xbf\xbf", [0x10FFFF]),  # the last code point
    (b"\x80", [0xFFFD]),  # a lone continuation byte
    (b"\xbfa", [0xFFFD, 0x61]),
    (b"\xe4\xb8a", [0xFFFD, 0xFFFD, 0x61]),  # truncated: the lead, then the continuation, alone
    (b"\xc3", [0xFFFD]),  # truncated at the end
    (b"\xf0\x9f\x98", [0xFFFD, 0xFFFD, 0xFFFD]),
    (b"\xf8\x88\x80\x80\x80", [0xFFFD] * 5),  # 0xF8..0xFF start nothing
    (b"\xff\xfe", [0xFFFD, 0xFFFD]),
    (b"\xc3\xc3\xa9", [0xFFFD, 0xE9]),  # a lead where a continuation should be
]


@pytest.mark.parametrize("data, cpts", EDGE_CASES, ids=[d.hex() for d, _ in EDGE_CASES])
def test_decodes_as_llama_cpp_reads_utf8(data, cpts):
    assert [ord(c) for c in decode_llama_utf8(data)] == cpts


@pytest.mark.parametrize("data, start", [(b"\xf4\x90\x80\x80", 0), (b"ab\xf7\xbf\xbf\xbf", 2), (b"\xff\xf5\x80\x80\x80", 1)])
def test_past_the_last_code_point_raises_with_its_offset(data, start):
    with pytest.raises(BeyondUnicode) as caught:
        decode_llama_utf8(data)
    assert caught.value.start == start and caught.value.cpt > 0x10FFFF


def test_gemma4_names_the_whole_inputs_offset_too():
    # gemma4 decodes each fragment itself (spaces escaped first): the error still names the
    # offset in the whole input, as for every other model (tests/test_malformed_utf8.py), not
    # in the escaped fragment (which said 10 here).
    gemma4 = bpetok.from_file(GEMMA4)
    with pytest.raises(InputError, match="f4 90 80 80 at offset 6"):
        gemma4.encode_bytes(b"a b \xffb\xf4\x90\x80\x80c")


def test_token_text_with_invalid_bytes_gives_llama_cpps_marker():
    # As llama-cpp-python 0.3.36 renders this token of a gpt2 vocabulary (detokenize).
    assert decode_token_text(b"\xffx\xc0\xbc") == b"[UNK_BYTE_0xefbfbd\xffx\xc0\xbc]x<"


def test_a_token_past_the_last_code_point_is_refused():
    # llama.cpp (0.3.36) fails to load such a vocabulary: llama_decode_text throws while it
    # renders every token's piece. Here its first render raises, naming the token.
    trained = bpetok.train(texts=["hello world, hello there"] * 20, vocab_size=270)
    odd = dataclasses.replace(trained, tokens=trained.tokens + [b"\xf4\x90\x80\x80"], token_types=trained.token_types + [1])
    tok = odd.tokenizer()
    with pytest.raises(BeyondUnicode):
        decode_token_text(b"\xf4\x90\x80\x80")
    with pytest.raises(VocabularyError, match=f"token {tok.n_tokens - 1} .* U\\+110000, past U\\+10FFFF"):
        tok.piece(tok.n_tokens - 1)
    assert tok.decode(tok.encode("hello")) == "hello"  # the other tokens are fine
