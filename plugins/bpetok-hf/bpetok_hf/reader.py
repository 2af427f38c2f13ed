"""Read a Hugging Face ``tokenizer.json`` (byte-level BPE) into a :class:`bpetok.Vocabulary`.

Token ids, types and texts follow llama.cpp's converter (``convert_hf_to_gguf.py``,
``get_vocab_base``): an added token is CONTROL when its ``special`` flag is set or it looks special
(``<|...|>``), else USER_DEFINED, and keeps its raw text; a model token keeps its byte-level text;
an id nobody uses is ``[PAD<id>]``, UNUSED. What the loaded tokenizer must do as HF does (which
added tokens are cut out, the file's own pre-tokenizer) travels in ``vocabulary.metadata``.
"""

from __future__ import annotations

import gzip
import json
import os

from bpetok import TokenType, Vocabulary, VocabularyError

from bpetok_hf.pretok import read_passes

__all__ = ["read_tokenizer_json", "is_tokenizer_json", "MARK", "PASSES", "ADDED", "CHAT_TEMPLATE"]

# Vocabulary.metadata keys this plugin sets.
MARK = "hf.tokenizer_json"  # the path of the file read: this vocabulary follows HF's rules
PASSES = "hf.pre_tokenizer"  # list[SplitPass]: the file's own passes
ADDED = "hf.added_tokens"  # id -> (special, lstrip, rstrip): the tokens HF cuts out of the text
CHAT_TEMPLATE = "tokenizer.chat_template"  # the key the GGUF loader uses too

# llama.cpp's converter marks these added tokens CONTROL even when not flagged special
# (conversion/base.py, does_token_look_special).
_LOOK_SPECIAL = ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
# tokenizer_config.json's special-token names -> bpetok's roles and GGUF keys.
_CONFIG_ROLES = (
    ("bos_token", "bos", "tokenizer.ggml.bos_token_id"),
    ("eos_token", "eos", "tokenizer.ggml.eos_token_id"),
    ("unk_token", "unk", "tokenizer.ggml.unknown_token_id"),
    ("pad_token", "pad", "tokenizer.ggml.padding_token_id"),
)


def looks_special(text: str) -> bool:
    return (
        text in _LOOK_SPECIAL
        or (text.startswith("<|") and text.endswith("|>"))
        or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
        or (text.startswith("<unused") and text.endswith(">"))
    )


def is_tokenizer_json(path: str) -> bool:
    name = os.path.basename(os.fspath(path)).lower()
    return name.endswith((".json", ".json.gz"))


def _open(path: str):
    if path.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _refuse(path: str, where: str, what: str, why: str = "") -> VocabularyError:
    return VocabularyError(
        f"{path}: {where} is {what}{why}; bpetok-hf reads only byte-level BPE tokenizer.json files (a BPE "
        "model, a ByteLevel decoder, no normalizer): convert this model to GGUF with llama.cpp's "
        "convert_hf_to_gguf.py instead"
    )


def _check_model(model, path: str) -> None:
    if not isinstance(model, dict) or model.get("type", "BPE") != "BPE" or "merges" not in model:
        kind = model.get("type") if isinstance(model, dict) else type(model).__name__
        raise _refuse(path, "model.type", repr(kind), " (WordPiece, Unigram and WordLevel models are not BPE)")
    if model.get("dropout") not in (None, 0, 0.0):
        raise _refuse(path, "model.dropout", repr(model["dropout"]), " (dropout makes ids random)")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise _refuse(path, f"model.{key}", repr(model[key]))
    if model.get("byte_fallback"):
        raise _refuse(path, "model.byte_fallback", "true (a SentencePiece-style BPE)")


def _check_normalizer(node, path: str) -> None:
    if node is None or (node.get("type") == "Sequence" and not node.get("normalizers")):
        return
    raise _refuse(path, "normalizer", f"{node.get('type')!r}", " (a normalizer changes the text before splitting)")


def _check_decoder(node, path: str) -> None:
    items = node.get("decoders", []) if node and node.get("type") == "Sequence" else [node]
    kinds = [d.get("type") if isinstance(d, dict) else None for d in items]
    if kinds != ["ByteLevel"]:
        raise _refuse(path, "decoder", f"{' + '.join(map(str, kinds))!r}, not ByteLevel")


def _merge(item, path: str, i: int) -> bytes:
    if isinstance(item, str):
        left, sep, right = item.partition(" ")
    elif isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
        (left, right), sep = item, " "
    else:
        left = sep = right = ""
    if not sep or not left or not right or " " in right:
        raise VocabularyError(f"{path}: model.merges[{i}] is {item!r:.60}; expected 'a b' or ['a', 'b']")
    return f"{left} {right}".encode()


def _template_specials(node) -> tuple[int | None, int | None]:
    """The ids a TemplateProcessing puts before and after a single sequence (add_bos / add_eos)."""
    if not isinstance(node, dict):
        return None, None
    if node.get("type") == "Sequence":
        for item in node.get("processors", []):
            found = _template_specials(item)
            if found != (None, None):
                return found
        return None, None
    if node.get("type") != "TemplateProcessing":
        return None, None
    single = node.get("single", [])
    specials = node.get("special_tokens", {})

    def id_of(item):
        name = item.get("SpecialToken", {}).get("id") if isinstance(item, dict) else None
        ids = specials.get(name, {}).get("ids", []) if name is not None else []
        return ids[0] if len(ids) == 1 else None

    return (id_of(single[0]) if single else None), (id_of(single[-1]) if len(single) > 1 else None)


def _token_text(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _read_config(path: str) -> dict:
    config_path = os.path.join(os.path.dirname(os.path.abspath(path)), "tokenizer_config.json")
    if not os.path.isfile(config_path):
        return {}
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise VocabularyError(f"{config_path}: cannot read it as JSON ({e}); fix or remove it") from e
    return config if isinstance(config, dict) else {}


def read_tokenizer_json(path: str) -> Vocabulary | None:
    """The vocabulary of a byte-level BPE tokenizer.json; None when the file is not a tokenizer.json."""
    try:
        with _open(path) as f:
            data = json.load(f)
    except (UnicodeDecodeError, ValueError, EOFError, OSError) as e:
        raise VocabularyError(f"{path}: cannot read it as JSON ({e}); is it a tokenizer.json?") from e
    if not isinstance(data, dict) or "model" not in data:
        return None  # some other JSON: not ours
    model = data["model"]
    _check_model(model, path)
    _check_normalizer(data.get("normalizer"), path)
    _check_decoder(data.get("decoder"), path)
    passes = read_passes(data.get("pre_tokenizer"), path)

    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        raise VocabularyError(f"{path}: model.vocab is not an object of token -> id")
    added = data.get("added_tokens") or []
    n = max([*vocab.values(), *(a.get("id", -1) for a in added), -1]) + 1
    tokens: list[bytes | None] = [None] * n
    types = [TokenType.UNUSED] * n
    for text, token_id in vocab.items():
        tokens[token_id] = text.encode("utf-8", "surrogatepass")
        types[token_id] = TokenType.NORMAL
    added_info = {}
    for i, token in enumerate(added):
        token_id, content = token.get("id"), token.get("content")
        if not isinstance(token_id, int) or not isinstance(content, str) or not content:
            raise VocabularyError(f"{path}: added_tokens[{i}] needs an integer 'id' and a non-empty 'content'")
        if token.get("single_word"):
            raise _refuse(path, f"added_tokens[{i}] ({content!r}).single_word", "true", " (not reproduced)")
        special = bool(token.get("special")) or looks_special(content)
        tokens[token_id] = content.encode("utf-8", "surrogatepass")  # raw text, as the converter keeps it
        types[token_id] = TokenType.CONTROL if special else TokenType.USER_DEFINED
        added_info[token_id] = (special, bool(token.get("lstrip")), bool(token.get("rstrip")))
    for token_id, text in enumerate(tokens):
        if text is None:
            tokens[token_id] = f"[PAD{token_id}]".encode()
    index: dict[bytes, int] = {}
    for token_id, text in enumerate(tokens):
        if text in index:
            raise VocabularyError(
                f"{path}: token {token_id} {text.decode('utf-8', 'replace')!r} has the same text as token "
                f"{index[text]}; llama.cpp and bpetok need each token text once"
            )
        index[text] = token_id
    merges = [_merge(item, path, i) for i, item in enumerate(model["merges"])]

    config = _read_config(path)
    special_id_keys = []
    for name, role, key in _CONFIG_ROLES:
        text = _token_text(config.get(name))
        if text is not None and text.encode() in index:
            special_id_keys.append((role, key, index[text.encode()]))
    if model.get("unk_token") and not any(role == "unk" for role, _, _ in special_id_keys):
        unk = index.get(model["unk_token"].encode())
        if unk is not None:
            special_id_keys.append(("unk", "tokenizer.ggml.unknown_token_id", unk))
    bos, eos = _template_specials(data.get("post_processor"))
    roles = {role for role, _, _ in special_id_keys}
    if bos is not None and "bos" not in roles:
        special_id_keys.insert(0, ("bos", "tokenizer.ggml.bos_token_id", bos))
    if eos is not None and "eos" not in roles:
        special_id_keys.append(("eos", "tokenizer.ggml.eos_token_id", eos))
    # What HF adds with add_special_tokens=True is the post-processor's template.
    flags = {"add_bos": bos is not None, "add_eos": eos is not None}

    metadata = {MARK: path, PASSES: passes, ADDED: added_info}
    if isinstance(config.get("chat_template"), str):
        metadata[CHAT_TEMPLATE] = config["chat_template"]
    vocabulary = Vocabulary(
        path=path,
        model="gpt2",
        pre="",  # named by the plugin: a llama.cpp family or the file's own passes
        tokens=tokens,
        token_types=[int(t) for t in types],
        merges=merges,
        special_id_keys=special_id_keys,
        flags=flags,
        metadata=metadata,
    )
    vocabulary.adopt_token_index(index)
    vocabulary.metadata["hf.ignore_merges"] = bool(model.get("ignore_merges", False))
    return vocabulary
