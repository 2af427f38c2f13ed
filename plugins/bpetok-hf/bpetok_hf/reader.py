"""Read a Hugging Face ``tokenizer.json`` (byte-level BPE) into a :class:`bpetok.Vocabulary`.

Token ids, types and texts follow llama.cpp's converter (``convert_hf_to_gguf.py``,
``get_vocab_base``): an added token is CONTROL when its ``special`` flag is set or it looks special
(``<|...|>``), else USER_DEFINED, and keeps its raw text; a model token keeps its byte-level text;
an id nobody uses is ``[PAD<id>]``, UNUSED. What the loaded tokenizer must do as HF does (which
added tokens are cut out, the file's own pre-tokenizer) travels in ``vocabulary.metadata``.
"""

from __future__ import annotations

import os

from bpetok import TokenType, Vocabulary, VocabularyError

from bpetok_hf.normalize import check_added_tokens, read_normalizer
from bpetok_hf.pretok import read_passes
from bpetok_hf.reader_spm import GEMMA4_MODEL, METASPACE_MODEL, PREPEND_FIRST, check_newline_runs, spm_layout, spm_scores
from bpetok_hf.unigram import read_unigram_layout, unigram_scores
from bpetok_hf.wordpiece import read_bert_layout
from bpetok_hf.schema import _FIX, array, bad, count, describe, flag, key_of, load_json, section, text_of, token_id

__all__ = ["read_tokenizer_json", "folder_tokenizer_json", "is_tokenizer_json", "MARK", "PASSES", "NORMALIZER", "ADDED", "CHAT_TEMPLATE"]

# Vocabulary.metadata keys this plugin sets.
MARK = "hf.tokenizer_json"  # the path of the file read: this vocabulary follows HF's rules
PASSES = "hf.pre_tokenizer"  # list[SplitPass]: the file's own passes
NORMALIZER = "hf.normalizer"  # bpetok_hf.normalize.Normalizer or None
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


def _refuse(path: str, where: str, what: str, why: str = "") -> VocabularyError:
    return VocabularyError(
        f"{path}: {where} is {what}{why}; bpetok-hf reads only byte-level BPE tokenizer.json files (a BPE "
        "model, a ByteLevel decoder): convert this model to GGUF with llama.cpp's "
        "convert_hf_to_gguf.py instead"
    )


def _check_model(model: dict, path: str) -> None:
    kind = model.get("type", "BPE")
    if kind != "BPE":
        raise _refuse(path, "model.type", describe(kind), " (WordPiece, Unigram and WordLevel models are not BPE)")
    dropout = model.get("dropout")
    if dropout is not None and type(dropout) not in (int, float):
        raise bad(path, "model.dropout", dropout, "a number or null")
    if dropout:  # NaN included
        raise _refuse(path, "model.dropout", describe(dropout), " (dropout makes ids random)")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if text_of(model, key, path, "model."):
            raise _refuse(path, f"model.{key}", repr(model[key]))


def _check_decoder(node: dict | None, path: str) -> None:
    if node is not None and node.get("type") == "Sequence":
        items = array(node, "decoders", path, "decoder.")
    else:
        items = [node]
    kinds = [d.get("type") if isinstance(d, dict) else None for d in items]
    if len(kinds) != 1 or kinds[0] != "ByteLevel":
        shown = " + ".join(k if isinstance(k, str) else describe(k) for k in kinds[:8])
        raise _refuse(path, "decoder", f"{shown!r}, not ByteLevel")


def _merge(item, path: str, i: int) -> bytes:
    if isinstance(item, str):
        left, sep, right = item.partition(" ")
    elif isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
        (left, right), sep = item, " "
    else:
        left = sep = right = ""
    if not sep or not left or not right or " " in right:
        raise bad(path, f"model.merges[{i}]", item, "'a b' or ['a', 'b']")
    return f"{left} {right}".encode("utf-8", "surrogatepass")


# A Sequence post-processor holds processors; one inside another inside another is already odd.
_MAX_PROCESSOR_DEPTH = 4


def _template_specials(node: dict | None, path: str, check_id, where: str = "post_processor", depth: int = 0):
    """The ids a TemplateProcessing puts before and after a single sequence (add_bos / add_eos)."""
    if node is None:
        return None, None
    if node.get("type") == "Sequence":
        if depth >= _MAX_PROCESSOR_DEPTH:
            raise bad(path, where, node, f"a Sequence at most {_MAX_PROCESSOR_DEPTH} deep")
        for i, item in enumerate(array(node, "processors", path, f"{where}.")):
            at = f"{where}.processors[{i}]"
            if not isinstance(item, dict):
                raise bad(path, at, item, "an object")
            found = _template_specials(item, path, check_id, at, depth + 1)
            if found != (None, None):
                return found
        return None, None
    if node.get("type") in ("BertProcessing", "RobertaProcessing"):  # [CLS] $A [SEP], <s> $A </s>
        ends = []
        for key in ("cls", "sep"):
            pair = node.get(key)
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise bad(path, f"{where}.{key}", pair, "a [token, id] pair")
            ends.append(check_id(pair[1], f"{where}.{key}[1]"))
        return ends[0], ends[1]
    if node.get("type") != "TemplateProcessing":
        return None, None
    single = array(node, "single", path, f"{where}.")
    specials = section(node, "special_tokens", path, f"{where}.") or {}

    def id_of(item, at):
        if not isinstance(item, dict) or "SpecialToken" not in item:
            return None
        token = item["SpecialToken"]
        name = token.get("id") if isinstance(token, dict) else None
        if not isinstance(name, str):
            raise bad(path, f"{at}.SpecialToken.id", name, "the name of a special token")
        entry = specials.get(name)
        if not isinstance(entry, dict):
            raise bad(path, key_of(f"{where}.special_tokens", name), entry, "an object with 'ids'")
        ids = array(entry, "ids", path, key_of(f"{where}.special_tokens", name) + ".", required=True)
        for j, value in enumerate(ids):
            check_id(value, key_of(f"{where}.special_tokens", name) + f".ids[{j}]")
        return ids[0] if len(ids) == 1 else None

    if not single:
        return None, None
    first = id_of(single[0], f"{where}.single[0]")
    last = id_of(single[-1], f"{where}.single[{len(single) - 1}]") if len(single) > 1 else None
    return first, last


def _token_text(value) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json_beside(path: str, name: str, what: str) -> dict:
    other = os.path.join(os.path.dirname(os.path.abspath(path)), name)
    if not os.path.isfile(other):
        return {}
    data = load_json(other, what)
    if not isinstance(data, dict):
        raise VocabularyError(f"{other}: {describe(data)}, not an object; is it {what}? Fix or remove it")
    return data


def _chat_template(config: dict, path: str) -> str | None:
    """transformers' chat template: tokenizer_config.json's ``chat_template`` (a string, or a list of
    named ones: the ``default``), else ``chat_template.jinja`` beside it (transformers >= 4.43 saves it so)."""
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if isinstance(template, str):
        return template
    jinja = os.path.join(os.path.dirname(os.path.abspath(path)), "chat_template.jinja")
    if os.path.isfile(jinja):
        if os.path.getsize(jinja) > MAX_TEMPLATE_BYTES:
            raise VocabularyError(f"{jinja}: more than {MAX_TEMPLATE_BYTES} bytes; is it a chat template?")
        try:
            with open(jinja, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise VocabularyError(f"{jinja}: cannot read it as a UTF-8 chat template ({e})") from e
    return None


def _read_config(path: str) -> dict:
    """tokenizer_config.json beside ``path``, with special_tokens_map.json's tokens over its own
    (transformers' order: the map is read last)."""
    config = _read_json_beside(path, "tokenizer_config.json", "a tokenizer_config.json")
    tokens_map = _read_json_beside(path, "special_tokens_map.json", "a special_tokens_map.json")
    for name, _role, _key in _CONFIG_ROLES:
        if _token_text(tokens_map.get(name)) is not None:
            config = {**config, name: tokens_map[name]}
    return config


def folder_tokenizer_json(folder: str) -> str | None:
    """The tokenizer.json of a Hugging Face model folder; None for a folder that is not one."""
    path = os.path.join(folder, "tokenizer.json")
    if os.path.isfile(path):
        return path
    if any(os.path.isfile(os.path.join(folder, name)) for name in ("tokenizer_config.json", "tokenizer.model", "vocab.json")):
        raise VocabularyError(
            f"{folder}: a Hugging Face model folder without tokenizer.json; bpetok-hf reads tokenizer.json (save one "
            "with transformers: AutoTokenizer.from_pretrained(FOLDER).save_pretrained(FOLDER), or convert the model "
            "to GGUF with llama.cpp's convert_hf_to_gguf.py)"
        )
    return None


# A chat template is a few kB; Gemma's are the longest at ~20 kB.
MAX_TEMPLATE_BYTES = 1 << 20
_ADDED_FLAGS = ("special", "lstrip", "rstrip", "single_word", "normalized")


def read_tokenizer_json(path: str) -> Vocabulary | None:
    """The vocabulary of a byte-level BPE tokenizer.json; None when the file is not a tokenizer.json.

    Every value is checked before use: a wrong type, an id outside the ids the file has room for
    (its vocab entries plus its added tokens), two tokens on one id, is a VocabularyError naming
    the key."""
    data = load_json(path)
    if not isinstance(data, dict) or "model" not in data:
        return None  # some other JSON: not ours
    model = data["model"]
    if not isinstance(model, dict):
        raise bad(path, "model", model, "an object (the BPE model)")
    kind = model.get("type", "BPE")
    layout: dict | None = None  # a WordPiece or Unigram file's components (bpetok_hf.wordpiece, .unigram)
    passes: list = []
    spm = False
    if kind == "WordPiece":
        layout = read_bert_layout(data, model, path)
        normalizer, passes = layout["normalizer"] != (False,) * 4 or None, []
    elif kind == "Unigram":
        layout = read_unigram_layout(data, model, path)
        normalizer, passes = layout["normalizer"], []
    else:
        _check_model(model, path)
        spm = flag(model, "byte_fallback", path, "model.")  # SentencePiece-style: bpetok_hf.reader_spm
    if layout is not None:
        pass
    elif spm:
        spm_model_name, add_space_prefix = spm_layout(data, path)
        normalizer, passes = None, []
    else:
        normalizer = read_normalizer(section(data, "normalizer", path, ""), path)
        _check_decoder(section(data, "decoder", path, ""), path)
        passes = read_passes(section(data, "pre_tokenizer", path, ""), path)
    post_processor = section(data, "post_processor", path, "")

    vocab = model.get("vocab")
    scores: list[float] = []
    if kind == "Unigram":
        pieces, scores = unigram_scores(array(model, "vocab", path, "model.", required=True), path)
        vocab = {piece: i for i, piece in enumerate(pieces)}
        if len(vocab) != len(pieces):
            raise VocabularyError(f"{path}: model.vocab holds a piece twice; llama.cpp and bpetok need each token text once")
    elif not isinstance(vocab, dict):
        raise bad(path, "model.vocab", vocab, "an object of token -> id")
    merges_node = array(model, "merges", path, "model.", required=layout is None)
    added = array(data, "added_tokens", path, "")
    # Ids must fit the file: as many as its vocab entries and added tokens (an added token may
    # also be a vocab entry, so a few ids can be left unused: [PAD<id>]), never more.
    n = len(vocab) + len(added)
    size_note = f"{count(len(vocab), 'vocab entry')} and {count(len(added), 'added token')}"

    def check_id(value, where):
        return token_id(value, path, where, n, size_note)

    tokens: list[bytes | None] = [None] * n
    owner: list[str | None] = [None] * n  # which key set each id, to name both of two on one id
    types = [TokenType.UNUSED] * n
    for text, value in vocab.items():
        where = key_of("model.vocab", text)
        token_id_ = check_id(value, where)
        if not text:
            raise bad(path, where, text, "a non-empty token text")
        if owner[token_id_] is not None:
            raise VocabularyError(
                f"{path}: {where} has id {token_id_}, as {owner[token_id_]} does; each id must have one token text"
            )
        tokens[token_id_] = text.encode("utf-8", "surrogatepass")
        owner[token_id_] = where
        types[token_id_] = TokenType.NORMAL
    added_info = {}
    normalized_added: dict[int, str] = {}  # added tokens HF matches in normalized text
    for i, token in enumerate(added):
        at = f"added_tokens[{i}]"
        if not isinstance(token, dict):
            raise bad(path, at, token, "an object with 'id' and 'content'")
        token_id_ = check_id(token.get("id"), f"{at}.id")
        content = token.get("content")
        if not isinstance(content, str) or not content:
            raise bad(path, f"{at}.content", content, "a non-empty string")
        special, lstrip, rstrip, single_word = (flag(token, key, path, f"{at}.") for key in _ADDED_FLAGS[:4])
        # HF's AddedToken default: normalized unless special.
        if flag(token, "normalized", path, f"{at}.", default=not special):
            normalized_added.setdefault(token_id_, content)
        if single_word:
            raise _refuse(path, f"{at} ({content!r:.40}).single_word", "true", " (not reproduced)")
        if token_id_ in added_info:
            raise VocabularyError(f"{path}: {at}.id is {token_id_}, as an earlier added token's is; each id must have one token")
        special = special or looks_special(content)
        tokens[token_id_] = content.encode("utf-8", "surrogatepass")  # raw text, as the converter keeps it
        types[token_id_] = TokenType.CONTROL if special else TokenType.USER_DEFINED
        added_info[token_id_] = (special, lstrip, rstrip)
    check_added_tokens(normalizer, normalized_added, path, kind)
    # HF's ids end at the highest one an entry has (get_vocab_size): no unused ids after it, as an
    # added token that is also a vocab entry (Tekken's 1,000 control tokens, Gemma's) takes none.
    n = max((i for i, text in enumerate(tokens) if text is not None), default=-1) + 1
    size_note = f"the highest id of its {count(len(vocab), 'vocab entry')} and {count(len(added), 'added token')}"
    del tokens[n:], types[n:]
    texts = [f"[PAD{i}]".encode() if text is None else text for i, text in enumerate(tokens)]
    index: dict[bytes, int] = {}
    for token_id_, text in enumerate(texts):
        if text in index:
            raise VocabularyError(
                f"{path}: token {token_id_} {text.decode('utf-8', 'replace')!r:.60} has the same text as token "
                f"{index[text]}; llama.cpp and bpetok need each token text once"
            )
        index[text] = token_id_
    merges = [_merge(item, path, i) for i, item in enumerate(merges_node)]
    ignore_merges = flag(model, "ignore_merges", path, "model.")
    unk_token = text_of(model, "unk_token", path, "model.") if kind != "Unigram" else None

    config = _read_config(path)
    special_id_keys = []
    for name, role, key in _CONFIG_ROLES:
        text = _token_text(config.get(name))
        if text is not None and text.encode("utf-8", "surrogatepass") in index:
            special_id_keys.append((role, key, index[text.encode("utf-8", "surrogatepass")]))
    if unk_token and not any(role == "unk" for role, _, _ in special_id_keys):
        unk = index.get(unk_token.encode("utf-8", "surrogatepass"))
        if unk is not None:
            special_id_keys.append(("unk", "tokenizer.ggml.unknown_token_id", unk))
    bos, eos = _template_specials(post_processor, path, check_id)
    roles = {role for role, _, _ in special_id_keys}
    if bos is not None and "bos" not in roles:
        special_id_keys.insert(0, ("bos", "tokenizer.ggml.bos_token_id", bos))
    if eos is not None and "eos" not in roles:
        special_id_keys.append(("eos", "tokenizer.ggml.eos_token_id", eos))
    # What HF adds with add_special_tokens=True is the post-processor's template (transformers
    # keeps a tokenizer.json's post-processor over tokenizer_config.json's add_bos_token/add_eos_token).
    flags = {"add_bos": bos is not None, "add_eos": eos is not None}

    metadata = {MARK: path, PASSES: passes, NORMALIZER: normalizer, ADDED: added_info}
    template = _chat_template(config, path)
    if template is not None:
        metadata[CHAT_TEMPLATE] = template
    if layout is not None:
        return other_vocabulary(path, kind, layout, texts, types, index, scores, set(added_info) - set(vocab.values()),
                                special_id_keys, flags, metadata, model, check_id)
    if spm:
        if spm_model_name == METASPACE_MODEL:  # the flag was Metaspace's "first"; the decoder drops a leading ▁
            metadata[PREPEND_FIRST], add_space_prefix = add_space_prefix, True
        return _spm_vocabulary(path, texts, types, index, merges, added_info, special_id_keys,
                               {**flags, "add_space_prefix": add_space_prefix}, metadata, spm_model_name)
    vocabulary = Vocabulary(
        path=path,
        model="gpt2",
        pre="",  # named by the plugin: a llama.cpp family or the file's own passes
        tokens=texts,
        token_types=[int(t) for t in types],
        merges=merges,
        special_id_keys=special_id_keys,
        flags=flags,
        metadata=metadata,
    )
    vocabulary.adopt_token_index(index)
    vocabulary.metadata["hf.ignore_merges"] = ignore_merges
    return vocabulary


def other_vocabulary(path, kind, layout, texts, types, index, scores, added_only, special_id_keys, flags, metadata,
                     model, check_id):
    """A WordPiece or Unigram file's vocabulary for bpetok-hf's hf-wordpiece / hf-unigram model."""
    from bpetok_hf import unigram, wordpiece

    module = wordpiece if kind == "WordPiece" else unigram
    roles = {role for role, _, _ in special_id_keys}
    if kind == "Unigram":
        unk = model.get("unk_id")
        if unk is None:
            raise VocabularyError(f"{path}: model.unk_id is null; bpetok-hf reads Unigram files with an unknown token "
                                  "(Hugging Face tokenizers fails on any unknown character without one)")
        unk = check_id(unk, "model.unk_id")
        if unk >= len(scores):
            raise VocabularyError(f"{path}: model.unk_id {unk} is past model.vocab's {len(scores)} pieces; {_FIX}")
        special_id_keys = [k for k in special_id_keys if k[0] != "unk"] + [("unk", "tokenizer.ggml.unknown_token_id", unk)]
        scores = scores + [0.0] * (len(texts) - len(scores))
    elif "unk" not in roles:
        special_id_keys = special_id_keys + [("unk", "tokenizer.ggml.unknown_token_id", None)]
    vocabulary = Vocabulary(
        path=path,
        model=wordpiece.WORDPIECE_MODEL if kind == "WordPiece" else unigram.UNIGRAM_MODEL,
        pre="",
        tokens=texts,
        token_types=[int(t) for t in types],
        merges=[],
        scores=scores,
        special_id_keys=[k for k in special_id_keys if k[2] is not None],
        flags=flags,
        metadata={**metadata, module.LAYOUT: layout, module.NOT_IN_MODEL: frozenset(added_only), "hf.ignore_merges": False},
    )
    vocabulary.adopt_token_index(index)
    return vocabulary


def _spm_vocabulary(path, texts, types, index, merges, added_info, special_id_keys, flags, metadata, model_name):
    """A SentencePiece-style file's vocabulary for bpetok's llama model (see bpetok_hf.reader_spm)."""
    for byte in range(256):
        token_id = index.get(b"<0x%02X>" % byte)
        if token_id is None:
            raise VocabularyError(f"{path}: model.vocab has no '<0x{byte:02X}>' token, which byte_fallback needs; "
                                  "bpetok-hf reads SentencePiece-style files with all 256 byte tokens")
        if token_id not in added_info:
            types[token_id] = TokenType.BYTE
    if model_name == GEMMA4_MODEL:  # merges by rank, as HF's BPE
        check_newline_runs(texts, merges, path)
        scores: list[float] = []
    else:
        scores = spm_scores(texts, index, merges, set(added_info), path)
        merges = []
    # An added token's merges never run (it is cut out first): llama.cpp's SPM never sees them.
    metadata = {**metadata, "hf.ignore_merges": False}
    vocabulary = Vocabulary(
        path=path,
        model=model_name,
        pre="",
        tokens=texts,
        token_types=[int(t) for t in types],
        merges=merges,
        scores=scores,
        special_id_keys=special_id_keys,
        flags=flags,
        metadata=metadata,
    )
    vocabulary.adopt_token_index(index)
    return vocabulary
