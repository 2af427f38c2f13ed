"""Token offsets (bpetok.offsets): spans derived from the ids, checked on llama.cpp's reference
texts for every shipped vocabulary, and against Hugging Face tokenizers' own offsets on the
tokenizer.json route (byte-level BPE, where both define a character span the same way)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest

import bpetok
from bpetok.offsets import OffsetsError, TokenOffsets, offsets_of_ids
from bpetok.vocab import TokenAttr
from helpers import PHI3, QWEN3, VOCABS, load_cases

SPECIAL = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN
EXTRA = ["", " ", "Hi 🤗 there", "é🤗é", "  x\n\n y", "日本語のテキスト", "a\u0301", "x" * 3 + "😀😀😀", "\ud800 lone"]


def cases(name: str, n: int = 400) -> list[dict]:
    found = load_cases(name)
    step = max(1, len(found) // n)
    return found[::step]


def check_spans(tok: bpetok.Tokenizer, text: str, found: TokenOffsets, parse_special: bool, spelling=None) -> None:
    """What any encoding's offsets must satisfy, whatever the model. ``spelling``: what a token
    matches in the text, where that is not its piece (a raw-UTF-8 vocabulary's stored text)."""
    data = text.encode("utf-8", "surrogatepass")
    assert found.ids == tok.encode(text, parse_special=parse_special)
    assert len(found.offsets) == len(found.byte_offsets) == len(found.partial) == len(found.ids)
    # bytes: contiguous, in order, covering the text exactly
    # (except where llama.cpp dropped bytes the vocabulary has no token for: a gap that encodes to nothing)
    at = 0
    for a, b in found.byte_offsets + [(len(data), len(data))]:
        assert a >= at and b >= a
        if a > at:
            assert tok.encode(data[at:a].decode("utf-8", "surrogatepass"), parse_special=parse_special) == []
        at = b
    # characters: every character a token holds a byte of (Hugging Face's convention), computed
    # here from the bytes: the characters started before each byte offset
    started = [0]
    for byte in data:
        started.append(started[-1] + (not 0x80 <= byte < 0xC0))
    for (s, e), (a, b), partial in zip(found.offsets, found.byte_offsets, found.partial):
        starts_mid = a < len(data) and 0x80 <= data[a] < 0xC0 and b > a
        assert (s, e) == (started[a] - starts_mid, started[b])
        assert partial == (starts_mid or (b > a and b < len(data) and 0x80 <= data[b] < 0xC0))
    for token_id, (s, e), (a, b), partial in zip(found.ids, found.offsets, found.byte_offsets, found.partial):
        if tok.vocabulary.attrs[token_id] & SPECIAL:
            # a special's span holds its text, and whatever its LSTRIP/RSTRIP made it swallow
            assert tok.piece(token_id).decode() in text[s:e]
            assert text[s:e].strip(" \t\n\v\f\r") == tok.piece(token_id).decode()
        elif partial:
            assert data[a:b] and data[a:b] != text[s:e].encode("utf-8", "surrogatepass")
        else:
            # the text under the span is the token's piece (less the space a SPM model adds in front)
            assert text[s:e].encode("utf-8", "surrogatepass") == data[a:b]
            piece = (spelling or tok.piece)(token_id)
            assert data[a:b] in (piece, piece[1:])


def re_encode_between_specials(tok: bpetok.Tokenizer, text: str, found: TokenOffsets, parse_special: bool) -> None:
    """The text under each run of ordinary tokens encodes, on its own, to those tokens (llama.cpp
    encodes each fragment between special tokens by itself), and each special's to itself."""
    run: list[int] = []
    spans: list[tuple[int, int]] = []

    def flush():
        if run:
            s, e = spans[0][0], spans[-1][1]
            assert tok.encode(text[s:e], parse_special=parse_special) == run
        run.clear()
        spans.clear()

    for token_id, span in zip(found.ids, found.offsets):
        if tok.vocabulary.attrs[token_id] & SPECIAL:
            flush()
            assert tok.encode(text[span[0] : span[1]].strip(" \t\n\v\f\r"), parse_special=True) == [token_id]
        else:
            run.append(token_id)
            spans.append(span)
    flush()


@pytest.mark.parametrize("name", sorted(VOCABS))
def test_offsets_on_reference_texts(name):
    tok = bpetok.from_gguf(VOCABS[name])
    texts = [c["text"] for c in cases(name)] + EXTRA
    for parse_special in (True, False):
        for text in texts:
            found = tok.encode_with_offsets(text, parse_special=parse_special)
            check_spans(tok, text, found, parse_special)
            re_encode_between_specials(tok, text, found, parse_special)


def test_emoji_pieces_share_the_character_span(qwen3):
    found = qwen3.encode_with_offsets("Hi 🤗")
    # " " + the emoji's first two bytes, then its two last bytes one token each
    assert found.byte_offsets == [(0, 2), (2, 5), (5, 6), (6, 7)]
    assert found.offsets == [(0, 2), (2, 4), (3, 4), (3, 4)]
    assert found.partial == [False, True, True, True]


def test_rstrip_whitespace_goes_to_the_special_token():
    tok = bpetok.from_gguf(PHI3)
    token_id = tok.id("<|assistant|>")
    assert tok.vocabulary.attrs[token_id] & TokenAttr.RSTRIP
    text = "Hi<|assistant|>  \n there"
    found = tok.encode_with_offsets(text)
    k = found.ids.index(token_id)
    assert text[found.offsets[k][0] : found.offsets[k][1]] == "<|assistant|>  \n "
    assert found.offsets[k + 1][0] == len("Hi<|assistant|>  \n ")


def test_space_prefix_has_no_width():
    tok = bpetok.from_gguf(VOCABS["llama-spm"])
    found = tok.encode_with_offsets("Hello", add_special=True)
    assert found.ids == tok.encode("Hello", add_special=True)
    assert found.offsets == [(0, 0), (0, 5)]  # BOS, then "▁Hello" over "Hello"
    assert tok.piece(found.ids[1]) == b" Hello"
    # a fragment after a special token gets the space too: "</s>" then "▁x"
    found = tok.encode_with_offsets("a</s>x")
    assert found.offsets[-2:] == [(1, 5), (5, 6)]


def test_add_special_spans_are_empty():
    tok = bpetok.from_gguf(VOCABS["llama-spm"])
    found = tok.encode_with_offsets("", add_special=True)
    assert found.ids == [tok.special_ids["bos"]] and found.offsets == [(0, 0)]


def test_batch_matches_one_at_a_time(qwen3):
    texts = [c["text"] for c in cases("qwen3", 100)]
    assert qwen3.encode_batch_with_offsets(texts, workers=2) == [qwen3.encode_with_offsets(t) for t in texts]


def test_misaligned_ids_are_refused(qwen3):
    with pytest.raises(OffsetsError, match="not the text's bytes at byte 0"):
        offsets_of_ids(qwen3, "Hello", qwen3.encode("Jello"))
    with pytest.raises(OffsetsError, match="end at byte 5 of 11"):
        offsets_of_ids(qwen3, "Hello world", qwen3.encode("Hello"))
    with pytest.raises(OffsetsError, match="special token"):
        offsets_of_ids(qwen3, "Hello", qwen3.encode("<|im_end|>"))


def test_a_model_supplies_its_own_alignment(qwen3, monkeypatch):
    seen = []

    def token_offsets(tok, text, ids, add_special):
        seen.append((text, ids, add_special))
        return TokenOffsets(ids, [(0, len(text))] * len(ids), [(0, 0)] * len(ids), [False] * len(ids))

    monkeypatch.setattr(qwen3.model, "token_offsets", token_offsets, raising=False)
    monkeypatch.setattr(qwen3.model, "aligns_offsets", lambda text: text == "ab", raising=False)
    assert qwen3.encode_with_offsets("abc").offsets[0] == (0, len(qwen3.piece(qwen3.encode("abc")[0])))  # not asked
    found = qwen3.encode_with_offsets("ab")
    assert seen == [("ab", qwen3.encode("ab"), False)] and found.offsets[0] == (0, 2)


# -- Hugging Face tokenizers as the reference ---------------------------------------------------------


HF_VOCABS = {"qwen3": QWEN3, "smollm2": VOCABS["smollm2"]}


@pytest.mark.parametrize("name", sorted(HF_VOCABS))
def test_offsets_equal_hf_tokenizers(name, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")  # the test extra of plugins/bpetok-hf
    from bpetok_hf.writer import export_hf

    export_hf(bpetok.from_gguf(HF_VOCABS[name]), tmp_path)
    # both read the same tokenizer.json: bpetok through the bpetok-hf plugin, HF itself
    tok = bpetok.from_file(tmp_path / "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    compared = 0
    for text in [c["text"] for c in cases(name, 600)] + EXTRA:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            continue  # a lone surrogate: HF cannot take it
        theirs = hf.encode(text, add_special_tokens=False)
        ours = tok.encode_with_offsets(text)
        if theirs.ids != ours.ids:
            continue  # a text where the two tokenizers differ (bpetok-hf's tests cover those)
        if sum(b - a for a, b in ours.byte_offsets) != len(text.encode()):
            continue  # a byte without a token was dropped: HF gives its character to the next token
        assert ours.offsets == [tuple(o) for o in theirs.offsets], text
        compared += 1
    assert compared > 400


# -- the command line -------------------------------------------------------------------------------


def bpetok_cli(*args: str, text: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpetok.apps.cli", *args], input=text.encode(), capture_output=True, timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_cli_offsets(qwen3):
    text = "Hi 🤗<|im_end|>"
    done = bpetok_cli("tokenize", str(QWEN3), "--offsets", "--pieces", text=text)
    assert done.returncode == 0, done.stderr
    tokens = json.loads(done.stdout)["tokens"]
    found = qwen3.encode_with_offsets(text)
    assert [t["id"] for t in tokens] == found.ids
    assert [tuple(t["offsets"]) for t in tokens] == found.offsets
    assert [tuple(t["byte_offsets"]) for t in tokens] == found.byte_offsets
    assert tokens[-1]["piece"] == "<|im_end|>"


def test_cli_offsets_refuses_invalid_utf8():
    done = subprocess.run(
        [sys.executable, "-m", "bpetok.apps.cli", "tokenize", str(QWEN3), "--offsets"], input=b"ab\xff", capture_output=True
    )
    assert done.returncode == 1
    assert done.stderr.decode().strip() == "bpetok: error: stdin: --offsets needs UTF-8 text, byte 2 is not; tokenize without --offsets"


def test_cli_color_is_plain_off_a_terminal():
    done = bpetok_cli("tokenize", str(QWEN3), "--color", "--ids", text="Hello world")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "Hello[9707]| world[1879]\n"


def run_on_terminal(args: list[str], text: str, env: dict) -> bytes:
    """Run the CLI with its stdout on a pseudo-terminal; what it wrote there."""
    main, child = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bpetok.apps.cli", *args], stdin=subprocess.PIPE, stdout=child, stderr=subprocess.PIPE,
            env={**os.environ, **env},
        )
        os.close(child)
        child = -1
        _, err = proc.communicate(text.encode(), timeout=120)
        assert proc.returncode == 0, err
        out = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        os.close(main)
        if child != -1:
            os.close(child)


def test_cli_color_on_a_terminal():
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    out = run_on_terminal(["tokenize", str(QWEN3), "--color"], "Hello world", {**env, "NO_COLOR": ""})
    # two tokens in two background colors, each reset after it
    assert out.replace(b"\r\n", b"\n") == b"\x1b[48;5;153;38;5;16mHello\x1b[0m\x1b[48;5;151;38;5;16m world\x1b[0m\n"
    plain = run_on_terminal(["tokenize", str(QWEN3), "--color"], "Hello world", {"NO_COLOR": "1"})
    assert plain.replace(b"\r\n", b"\n") == b"Hello| world\n"
