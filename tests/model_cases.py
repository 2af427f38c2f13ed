"""What llama.cpp gives for the bert and t5 vocabularies, shared by tests/test_model_wpm.py and
tests/test_model_ugm.py: its recorded pieces, and its detokenizer's rules applied to them."""

from __future__ import annotations

import gzip
import json

from helpers import DATA


def load_dump(name: str) -> dict[int, tuple[bytes, bytes]]:
    """llama.cpp's token_to_piece per id: (special=true, special=false)."""
    with gzip.open(DATA / f"{name}.dump.json.gz", "rt") as f:
        return {i: (bytes.fromhex(a), bytes.fromhex(b)) for i, a, b in json.load(f)}


def llama_detokenize(pieces: list[bytes], remove_space: bool, clean_spaces: bool) -> bytes:
    """llama_vocab::impl::detokenize over llama.cpp's own pieces, written from its C loops: one
    leading space of the first piece dropped (``remove_space``), then the three clean-up passes."""
    if pieces and remove_space and pieces[0][:1] == b" ":
        pieces = [pieces[0][1:], *pieces[1:]]
    text = bytearray(b"".join(pieces))
    if not clean_spaces:
        return bytes(text)
    out = bytearray(text[:1])
    for i in range(1, len(text)):  # " ?", " !", " .", " ,"
        if text[i - 1] == 0x20 and text[i] in b"?!.,":
            out.pop()
        out.append(text[i])
    text, out = out, bytearray(out[:1])
    i = 1
    while i < len(text):  # " ' "
        x = text[i]
        if x == 0x27 and i + 1 < len(text) and text[i - 1] == 0x20 and text[i + 1] == 0x20:
            out.pop()
            out.append(x)
            text[i + 1] = 0  # llama.cpp blanks the next space, which a later match then cannot use
            i += 2
            continue
        out.append(x)
        i += 1
    text, out = out, bytearray(out[:1])
    for i in range(1, len(text)):  # " 's", " 'm", " 're", " 've"
        x = text[i]
        if text[i - 1] == 0x20 and x == 0x27 and i + 1 < len(text):
            x1 = text[i + 1]
            if x1 in b"sm" or (i + 2 < len(text) and (x1, text[i + 2]) in ((0x72, 0x65), (0x76, 0x65))):
                out.pop()
        out.append(x)
    return bytes(out)
