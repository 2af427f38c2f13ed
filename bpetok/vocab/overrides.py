"""llama.cpp's load-time token overrides, as the built-in plugin of ``bpetok_adjust_token_attributes``.

After reading a vocabulary llama.cpp resolves special ids, detects end-of-turn and
fill-in-the-middle tokens by their text, marks tokens CONTROL or USER_DEFINED by text and builds
the end-of-generation (EOG) set (src/llama-vocab.cpp, ``impl::load``). Which tokens become
special changes tokenization, so we reproduce every step, in llama.cpp's order.
"""

from __future__ import annotations

from bpetok.errors import VocabularyError
from bpetok.hookspecs import hookimpl
from bpetok.vocab import SPECIAL_ID_KEYS, SPECIAL_ROLES, TokenAttr, Vocabulary


def _texts(*items: str) -> tuple[bytes, ...]:
    return tuple(t.encode() for t in items)


# Text lists from llama-vocab.cpp. "｜" (U+FF5C) and "▁" (U+2581) are literal characters.
AUTODETECTED_ROLES = {
    "eot": _texts(
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
        "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
    ),
    "eom": _texts("<|eom_id|>"),
    "fim_pre": _texts(
        "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
        "<|code_prefix|>", "<|prefix|>",
    ),
    "fim_suf": _texts(
        "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
        "<|code_suffix|>", "<|suffix|>",
    ),
    "fim_mid": _texts(
        "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
        "<|code_middle|>", "<|middle|>",
    ),
    "fim_pad": _texts("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": _texts("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": _texts("<|file_sep|>"),
}
EOG_TEXTS = _texts(
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
)
GPT_OSS_USER_DEFINED = _texts("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")
# Roles whose token joins the EOG set: two candidates would give two different sets.
EOG_ROLES = ("fim_pad", "fim_rep", "fim_sep")


def resolve_special_ids(vocab: Vocabulary) -> None:
    """The model's defaults, then the file's keys in llama.cpp's order (an out-of-range id keeps the default)."""
    n = vocab.n_tokens
    ids: dict[str, int | None] = dict.fromkeys(SPECIAL_ROLES)
    # The model's defaults (its ModelSpec.special_ids, e.g. gpt2's bos = eos = 11), which the
    # engine puts in place before this hook runs.
    ids.update((role, i) for role, i in vocab.special_ids.items() if role in ids)
    given = {(role, key): value for role, key, value in vocab.special_id_keys}
    for role, key in SPECIAL_ID_KEYS:
        current = ids[role]
        if current is not None and current >= n:
            ids[role] = None
        value = given.get((role, key))
        if value is not None and value < n:
            ids[role] = value
    vocab.special_ids = ids


def _ids_by_text(vocab: Vocabulary, texts) -> dict[bytes, list[int]]:
    """The ids, ascending, of the tokens whose text is one of ``texts`` (those present only).

    Looks the few dozen texts up in the vocabulary's index rather than scanning 150k tokens;
    when texts repeat in the vocabulary (a plugin loader may allow it) the index keeps only
    one id per text, so then it scans.
    """
    index = vocab.token_index()
    if len(index) == vocab.n_tokens:
        return {t: [index[t]] for t in texts if t in index}
    wanted = set(texts)
    found: dict[bytes, list[int]] = {}
    for token_id, text in enumerate(vocab.tokens):
        if text in wanted:
            found.setdefault(text, []).append(token_id)
    return found


def autodetect_roles(vocab: Vocabulary) -> None:
    """Find EOT/EOM/FIM tokens by text for roles the file left unset, and mark them CONTROL."""
    role_of: dict[bytes, str] = {}
    for role, texts in AUTODETECTED_ROLES.items():
        for text in texts:
            role_of.setdefault(text, role)
    candidates: dict[str, list[int]] = {}
    for text, ids in _ids_by_text(vocab, role_of).items():
        role = role_of[text]
        if vocab.special_ids.get(role) is None:
            candidates.setdefault(role, []).extend(ids)
    # Token-id order, as a scan of the tokens would give: the first ambiguous role is reported.
    for ids in candidates.values():
        ids.sort()
    candidates = dict(sorted(candidates.items(), key=lambda item: item[1][0]))
    for role, ids in candidates.items():
        if len(ids) > 1:
            # llama.cpp takes the first in hash-map order: only harmless when the choice changes
            # nothing (EOT/EOM candidates are all EOG texts anyway; FIM prefix/suffix/middle
            # candidates that are all CONTROL already).
            harmless = role in ("eot", "eom") or (
                role not in EOG_ROLES and all(vocab.attrs[i] & TokenAttr.CONTROL for i in ids)
            )
            if not harmless:
                names = ", ".join(f"{i} {vocab.tokens[i].decode('utf-8', 'replace')!r}" for i in ids)
                raise VocabularyError(
                    f"{vocab.path}: tokens {names} are all candidates for the {role} role, and llama.cpp "
                    f"picks one in hash-map order, so its ids cannot be reproduced; set "
                    f"'tokenizer.ggml.{role}_token_id' in the file to choose one"
                )
            # Which one llama.cpp reports is unknowable, so report none; the tokens are
            # CONTROL (EOT/EOM candidates become so in build_eog_set) either way.
            continue
        vocab.special_ids[role] = ids[0]
        vocab.attrs[ids[0]] |= TokenAttr.CONTROL


def _ids_containing(tokens: list[bytes], needle: bytes) -> list[int]:
    """The ids of the tokens whose text contains ``needle`` (which has no NUL byte), ascending.

    Searches all texts joined by NULs, counting the NULs before each hit to get its token:
    a few ms where a Python loop over 150k tokens costs ~30 ms.
    """
    joined = b"\0".join(tokens)
    if joined.count(b"\0") != len(tokens) - 1:  # texts with NULs of their own: scan
        return [i for i, text in enumerate(tokens) if needle in text]
    ids, token_id, counted = [], 0, 0
    pos = joined.find(needle)
    while pos >= 0:
        token_id += joined.count(b"\0", counted, pos)
        counted = pos
        ids.append(token_id)
        end = joined.find(b"\0", pos)  # the next hit in another token, not this one again
        pos = joined.find(needle, end) if end >= 0 else -1
    return ids


def build_eog_set(vocab: Vocabulary) -> None:
    attrs, tokens = vocab.attrs, vocab.tokens
    # The new attribute per distinct old one: enum.Flag's & and | cost ~2 µs a call, and Gemma's
    # vocabularies hold 6,000+ <unusedN> tokens.
    marked: dict[int, int] = {}
    for token_id in _ids_containing(tokens, b"unused"):
        attr = attrs[token_id]
        new = marked.get(attr)
        if new is None:
            new = marked[attr] = attr | TokenAttr.UNUSED if attr & TokenAttr.CONTROL else attr
        attrs[token_id] = new
    eog = {i for i in (vocab.special_ids[r] for r in EOG_ROLES) if i is not None}
    by_text = {}
    for text, ids in _ids_by_text(vocab, EOG_TEXTS + GPT_OSS_USER_DEFINED).items():
        for token_id in ids:
            if text in GPT_OSS_USER_DEFINED:
                attrs[token_id] = TokenAttr.USER_DEFINED  # replaces, does not combine
            else:
                eog.add(token_id)
                attrs[token_id] |= TokenAttr.CONTROL  # even an ordinary BPE token such as Qwen's </s>
                by_text[text] = token_id  # the last id of a repeated text, as a scan would keep
    for role in ("eos", "eot", "eom"):
        role_id = vocab.special_ids[role]
        if role_id is not None:
            eog.add(role_id)
    in_eog = {tokens[i] for i in eog}
    has = lambda t: t.encode() in in_eog  # noqa: E731
    # Harmony (gpt-oss) and solar-open end their turns with <|return|>/<|call|>: <|end|> is not EOG.
    if (has("<|return|>") and (has("<|call|>") or has("<|calls|>")) and has("<|end|>")) or (
        (has("<|call|>") or has("<|calls|>")) and has("<|flush|>") and has("<|end|>")
    ):
        end = by_text[b"<|end|>"]
        eog.discard(end)
        attrs[end] = TokenAttr.USER_DEFINED
    if (has("<|tool_response>") or has("<|plamo:eos|>")) and has("</s>"):
        slash_s = by_text[b"</s>"]
        eog.discard(slash_s)
        attrs[slash_s] = TokenAttr.NORMAL
    vocab.eog_ids = eog


def apply_strip_rules(vocab: Vocabulary) -> None:
    """LSTRIP/RSTRIP by model name (llama-vocab.cpp, after the caches are built)."""
    pre = vocab.pre
    arch = vocab.metadata.get("general.architecture", "")
    name = vocab.metadata.get("general.name", "").lower()
    if any(p in pre for p in ("jina-v2-de", "jina-v2-es", "jina-v2-code", "mmbert")) or any(
        a in arch for a in ("nomic-bert-moe", "jina-bert-v3")
    ):
        mask = vocab.id_of(b"<mask>")
        if mask is not None:
            vocab.attrs[mask] |= TokenAttr.LSTRIP
    elif "phi-3" in name or "phi3" in name:
        found = {t: vocab.id_of(t) for t in (b"</s>", b"<unk>", b"<s>", b"<|endoftext|>")}
        missing = [t.decode() for t, i in found.items() if i is None]
        needed = {t: i for t, i in found.items() if i is not None}
        if missing:
            raise VocabularyError(
                f"{vocab.path}: a phi-3 vocabulary (general.name {name!r}) must have the tokens {missing}; "
                "llama.cpp refuses to load it without them"
            )
        special = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN
        for token_id, attr in enumerate(vocab.attrs):
            if attr & special:
                vocab.attrs[token_id] |= TokenAttr.RSTRIP
        vocab.attrs[needed[b"</s>"]] |= TokenAttr.RSTRIP
        for t in (b"<unk>", b"<s>", b"<|endoftext|>"):
            vocab.attrs[needed[t]] &= ~TokenAttr.RSTRIP
    elif "modern-bert" in name:
        mask = vocab.id_of(b"[MASK]")
        if mask is not None:
            vocab.attrs[mask] |= TokenAttr.LSTRIP


# Pre names llama.cpp maps to LLAMA_VOCAB_PRE_TYPE_GEMMA4, for which it turns add_bos on even when
# the file says false (its "workaround for Gemma 4", llama.cpp PR 21500).
BOS_FORCED_PRES = ("gemma4", "granite-embed-multi-311m")


def force_bos(vocab: Vocabulary) -> None:
    if vocab.pre in BOS_FORCED_PRES:
        vocab.flags["add_bos"] = True


@hookimpl(tryfirst=True)
def bpetok_adjust_token_attributes(vocabulary: Vocabulary) -> None:
    force_bos(vocabulary)
    resolve_special_ids(vocabulary)
    autodetect_roles(vocabulary)
    build_eog_set(vocabulary)
    apply_strip_rules(vocabulary)
