"""The tokenizer.json of a ``t5`` (Unigram) vocabulary.

t5: llama.cpp's UGM session, per piece of text between special tokens, replaces the longest key
of the precompiled charsmap at each position, turns spaces into ``▁`` (with
``remove_extra_whitespaces``: one ``▁`` before each run of non-spaces, none left over; else each
space, plus one before the first non-space with ``add_space_prefix``) and runs one Viterbi over
the whole piece. As HF:

- normalizer: a ``Replace`` ending grapheme clusters (below), ``Precompiled`` (the GGUF's own
  charsmap, when it has one), then ``Replace`` steps for the spaces
  (``" +"`` to one, ``\\A | \\z`` removed, ``Prepend("▁")``, ``" "`` to ``▁``);
- no pre-tokenizer (one Viterbi over the whole piece, no ``▁`` split);
- a ``Unigram`` model of every token with its score (USER_DEFINED ones at 0, as llama.cpp
  scores them), ``unk_id`` the unknown token; BOS/EOS as llama.cpp's add_special adds them a
  ``TemplateProcessing``.

What HF cannot say: its ``Precompiled`` looks each grapheme cluster up whole (a cluster under 6
bytes starting with a key is replaced by the SHORTEST such key's replacement, any other cluster
character by character), where llama.cpp takes the longest key at each position. For a map whose
keys are all single characters the two agree once no cluster runs on past a key: a ``Replace``
puts U+0001 (a control, so a cluster ends there; the map deletes it) after each key character,
and ``Ａ`` + U+0301 is then ``Ａ`` (mapped) and U+0301 (kept), as in llama.cpp. A map with a key of
more than one character is refused: such a key is 6 bytes or more (HF never looks it up:
decomposed Hangul ``ᄀ`` + ``ᅡ`` + ``ᆨ`` stays three jamo, llama.cpp composes ``각``), or its
cluster swallows what follows (``a`` + U+0308 + U+0301 becomes ``ä``, llama.cpp ``ä`` + U+0301),
or a shorter key stands for it (the key ``Ａ`` + U+0301 becomes ``A``, ``Ａ``'s replacement;
llama.cpp ``Á``), and no Replace can end clusters after llama.cpp's longest keys without knowing
where its walk is. SentencePiece's ``nmt_nfkc`` maps (T5, mT5, XLM-R) all have such keys.

HF's Viterbi also sees the CONTROL tokens' texts (llama.cpp's does not) and takes its unknown
score from every piece (llama.cpp's from the NORMAL ones), so a score below the lowest NORMAL one
(the ``[PADn]`` fillers' -10000) is written as that lowest: a text holding a filler's own text
(``[PAD250001]``) can then be cut otherwise.
"""

from __future__ import annotations

import base64

from bpetok import TokenAttr, Tokenizer
from bpetok.models.charsmap import CharsMap, _base
from bpetok.vocab import CHARSMAP_KEY

from bpetok_hf.writer_wpm import _char_class

__all__ = ["t5_refusal", "t5_model", "t5_normalizer", "T5_DECODER"]

SPACE = "\u2581"
T5_DECODER = {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": False}


def t5_refusal(tok: Tokenizer) -> str | None:
    """Why this t5 vocabulary cannot be a tokenizer.json with llama.cpp's ids, or None."""
    vocab = tok.vocabulary
    scores = vocab.scores or []
    if len(scores) != vocab.n_tokens:
        return "it has no token scores (tokenizer.ggml.scores), which Unigram's Viterbi needs"
    if any(s != s for s in scores):
        return "a token score is NaN: the best cut is then undefined"
    if vocab.special_ids.get("unk") is None:
        return "it has no unknown token (tokenizer.ggml.unknown_token_id), which HF's Unigram needs"
    if not any(a & TokenAttr.NORMAL for a in vocab.attrs):
        return "it has no NORMAL token, whose lowest score llama.cpp's unknown-character cost comes from"
    charsmap = vocab.metadata.get(CHARSMAP_KEY)
    return _charsmap_refusal(bytes(charsmap), vocab.path) if charsmap else None


def t5_normalizer(tok: Tokenizer) -> dict:
    """Precompiled (the GGUF's charsmap, after a Replace ending clusters at each key character) and
    llama.cpp's space rules as Replace/Prepend steps. Only for a vocabulary :func:`t5_refusal` passes."""
    flags = tok.vocabulary.flags
    steps: list[dict] = []
    charsmap = tok.vocabulary.metadata.get(CHARSMAP_KEY)
    if charsmap:
        keys = _charsmap(bytes(charsmap), tok.vocabulary.path)._fast[0]  # type: ignore[index]
        if keys:
            steps.append(_replace(f"(?<={_char_class(set(keys))})", _BREAKER))
        steps.append({"type": "Precompiled", "precompiled_charsmap": base64.b64encode(bytes(charsmap)).decode("ascii")})
    if flags.get("remove_extra_whitespaces", False):
        steps += [
            _replace(" +", " "),
            _replace(r"\A | \z", ""),
            {"type": "Prepend", "prepend": SPACE},
        ]
    elif flags.get("add_space_prefix", False):
        steps.append(_replace(r"\A(?=[\s\S]*[^ ])", SPACE))  # one ▁ in front when there is a non-space
    steps.append({"type": "Replace", "pattern": {"String": " "}, "content": SPACE})
    return {"type": "Sequence", "normalizers": steps}


# Put after each key character: a control, so HF's grapheme cluster ends there (UAX #29 GB5).
_BREAKER = "\x01"
# How many keys of more than one character are tried for a text showing the refusal's cause.
_WITNESS_KEYS = 200


def _charsmap(blob: bytes, path: str) -> CharsMap:
    return CharsMap(blob, f"{path}: {CHARSMAP_KEY}")


def _charsmap_refusal(blob: bytes, path: str) -> str | None:
    """Why HF's Precompiled (after the cluster-ending Replace) cannot normalize as llama.cpp's walk
    of this map does, or None: a key ending inside a character, a key of more than one character,
    or keys with a map that keeps U+0001 (the Replace's mark would stay in the text)."""
    charsmap = _charsmap(blob, path)
    fast = charsmap._fast
    if fast is None:
        return ("its charsmap has a key ending inside a character or a replacement that is not UTF-8, and HF's "
                "Precompiled works on whole characters")
    keys, starters = fast[0], fast[1]
    if starters:
        return _longer_key_refusal(blob, path, charsmap, sorted(starters), set(keys) - set(map(ord, starters)))
    if keys and charsmap.normalize(_BREAKER.encode()) != b"":
        return ("its charsmap keeps U+0001, which the export must put after each mapped character (HF's Precompiled "
                "replaces a grapheme cluster under 6 bytes whole by the replacement of the key it starts with, so "
                "a combining mark after a mapped character would go) and the map must then delete")
    return None


def _longer_key_refusal(blob: bytes, path: str, charsmap: CharsMap, starters: list[str], alone: set[int]) -> str:
    """The refusal for a map with keys of more than one character, naming the first one for which a
    short text normalizes otherwise in HF than in llama.cpp (checked with bpetok_hf.precompiled's
    copy of HF's rule, after the cluster-ending Replace the export would write)."""
    import regex

    from bpetok_hf.precompiled import Precompiled

    hf_map = Precompiled(blob, f"{path}: {CHARSMAP_KEY}")
    breaker = regex.compile(f"(?<={_char_class(alone)})") if alone else None
    why = ("llama.cpp replaces the longest key at each position, HF's Precompiled each grapheme cluster whole "
           "(under 6 bytes by the replacement of the shortest key it starts with, else character by character)")
    first = None
    for n, (key, replacement) in enumerate(_longer_keys(charsmap, starters)):
        first = first or (key, replacement)
        for text in (key, key + "\u0301"):
            llama = charsmap.normalize(text.encode()).decode("utf-8", "replace")
            hf = hf_map(breaker.sub(_BREAKER, text) if breaker else text)
            if hf != llama:
                return (f"its charsmap has keys of more than one character, which HF cannot apply as llama.cpp does: "
                        f"{why}; with the key {_spell(key)} -> {_spell(replacement)} the text {_spell(text)} "
                        f"normalizes to {_spell(llama)} in llama.cpp and {_spell(hf)} in HF")
        if n >= _WITNESS_KEYS:
            break
    key, replacement = first or (starters[0], "")
    return f"its charsmap has keys of more than one character (the first: {_spell(key)} -> {_spell(replacement)}): {why}"


def _longer_keys(charsmap: CharsMap, starters: list[str], budget: int = 200_000):
    """(key, replacement) for the map's keys of more than one character in code point order (UTF-8
    byte order is code point order): a depth-first walk of the trie under each starting character,
    children found by probing each byte. Stops after ``budget`` nodes (a corrupt map's trie can
    loop)."""
    nodes = charsmap.nodes

    def below(state: int, path: bytes) -> list[tuple[int, bytes, bool]]:
        out = []
        for c in range(1, 256):
            index = state ^ c
            if index < len(nodes) and nodes[index] & 0x800000FF == c:
                out.append((index ^ _base(nodes[index]), path + bytes((c,)), bool(nodes[index] >> 8 & 1)))
        return out

    for first in starters:
        state = _base(nodes[0])
        for c in first.encode():  # a walk _build_fast has made, every index checked
            state ^= c
            state ^= _base(nodes[state])
        stack = below(state, first.encode())[::-1]
        while stack:
            budget -= 1
            if budget < 0:
                return
            state, path, leaf = stack.pop()
            if leaf:
                try:
                    yield path.decode(), charsmap._string(nodes[state] & 0x7FFFFFFF).decode()
                except (UnicodeDecodeError, ValueError):
                    pass  # a key ending inside a character, or a replacement that is not UTF-8
            if len(path) < 64:  # far longer than any real key
                stack += below(state, path)[::-1]


def _spell(text: str) -> str:
    """``'a' + U+0308``: printable ASCII quoted, any other character as its code point."""
    if not text:
        return "''"
    parts: list[str] = []
    for c in text:
        if " " < c < "\x7f" and c != "'":
            if parts and parts[-1].startswith("'"):
                parts[-1] = parts[-1][:-1] + c + "'"
            else:
                parts.append(f"'{c}'")
        else:
            parts.append(f"U+{ord(c):04X}")
    return " + ".join(parts)


def _replace(pattern: str, content: str) -> dict:
    return {"type": "Replace", "pattern": {"Regex": pattern}, "content": content}


def t5_model(tok: Tokenizer, texts: list[str]) -> dict:
    """HF's Unigram model: every token with its score, USER_DEFINED ones at llama.cpp's 0, none below
    the lowest NORMAL score (HF's unknown-character cost comes from the lowest of all, llama.cpp's
    from the NORMAL ones: the [PADn] fillers' -10000 would make it 1000 times dearer)."""
    vocab = tok.vocabulary
    lowest = min(s for s, a in zip(vocab.scores, vocab.attrs) if a & TokenAttr.NORMAL)
    pieces = []
    for text, score, attr in zip(texts, vocab.scores, vocab.attrs):
        pieces.append([text, 0.0 if attr & TokenAttr.USER_DEFINED else max(float(score), lowest)])
    return {"type": "Unigram", "unk_id": vocab.special_ids["unk"], "vocab": pieces, "byte_fallback": False}
