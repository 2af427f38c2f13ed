"""Write a bpetok vocabulary as Hugging Face ``tokenizer.json`` + ``tokenizer_config.json``.

The tokenizer.json reproduces bpetok's ``encode(text, parse_special=True)``: the tokens bpetok
cuts out of a text (CONTROL, USER_DEFINED, UNKNOWN attributes after llama.cpp's overrides) become
``added_tokens`` (``special`` for CONTROL/UNKNOWN), the pre-tokenizer's pattern a ``Split`` before
a ``ByteLevel``, the merges and ``ignore_merges`` the BPE model's, and BOS/EOS as llama.cpp adds
them with ``add_special`` a ``TemplateProcessing``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bpetok import BpetokError, TokenAttr, Tokenizer

from bpetok_hf.pretok import patterns_of
from bpetok_hf.reader import ADDED, CHAT_TEMPLATE, MARK, PASSES
from bpetok_hf.writer_ugm import T5_DECODER, t5_model, t5_normalizer, t5_refusal
from bpetok_hf.writer_wpm import WPM_DECODER, wpm_model, wpm_normalizer_and_pre, wpm_refusal, wpm_template, wpm_texts
from bpetok_hf.writer_spm import GEMMA4_SPLIT, gemma4_model, gemma4_refusal, spm_decoder, spm_model, spm_normalizer, spm_refusal
from bpetok_hf.writer_ws import HYBRIDDNA_REFUSAL, whitespace_pre_tokenizer, whitespace_refusal

__all__ = ["tokenizer_json", "tokenizer_config", "export_hf", "ExportError"]

_CUT_OUT = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN
_SPECIAL = TokenAttr.CONTROL | TokenAttr.UNKNOWN


class ExportError(BpetokError, ValueError):
    """The vocabulary cannot be written as a tokenizer.json that gives bpetok's ids."""


def _text(tok: Tokenizer, token_id: int) -> str:
    data = tok.vocabulary.tokens[token_id]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ExportError(
            f"{tok.vocabulary.path}: token {token_id} {data!r} is not valid UTF-8; a tokenizer.json "
            "holds token texts as JSON strings"
        ) from None


def _passes(tok: Tokenizer) -> list[dict]:
    """The pre-tokenizer as HF Split passes: the file's own, or the registered pattern."""
    passes = tok.vocabulary.metadata.get(PASSES) if tok.vocabulary.metadata.get(MARK) else None
    if passes is not None:
        return [_split(p.pattern, p.behavior, p.invert) for p in passes]
    # A registered family: its regexes, each run inside the pieces of the one before, are HF
    # Splits in sequence (Isolated keeps the text between matches as pieces, as llama.cpp does).
    patterns = patterns_of(tok.spec.factory() if tok.spec is not None else None)
    if patterns is None:
        raise ExportError(
            f"{tok.vocabulary.path}: pre-tokenizer {tok.spec.name!r} (pre {tok.vocabulary.pre!r}) is a hand-written "
            "splitter with no regex bpetok-hf can write as tokenizer.json Splits; such a vocabulary cannot be exported"
        )
    return [_split(pattern, "Isolated", False) for pattern in patterns]


def _split(pattern: str, behavior: str, invert: bool) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": invert}


def _byte_level() -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def _post_processor(tok: Tokenizer, added_text: dict[int, str]) -> dict:
    template = _template(tok, added_text)
    if template is None:
        return _byte_level()
    return {"type": "Sequence", "processors": [_byte_level(), template]}


def _template(tok: Tokenizer, added_text: dict[int, str]) -> dict | None:
    """A TemplateProcessing adding BOS/EOS as llama.cpp's add_special does; None when it adds neither."""
    bos, eos = tok.vocabulary.special_ids.get("bos"), tok.vocabulary.special_ids.get("eos")
    first = bos if tok.add_bos and bos is not None else None
    last = eos if tok.add_eos and eos is not None else None
    if first is None and last is None:
        return None

    def names(token_id):
        return added_text.get(token_id) or _text(tok, token_id)

    single, pair, specials = [], [], {}
    for token_id, where in ((first, "start"), (last, "end")):
        if token_id is None:
            continue
        name = names(token_id)
        specials[name] = {"id": name, "ids": [token_id], "tokens": [name]}
    a, b = {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}
    head = [{"SpecialToken": {"id": names(first), "type_id": 0}}] if first is not None else []
    tail = [{"SpecialToken": {"id": names(last), "type_id": 0}}] if last is not None else []
    single = head + [a] + tail
    pair = head + [a] + tail + [{**x} for x in head] + [b] + [{**x} for x in tail]
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}


def tokenizer_json(tok: Tokenizer) -> dict:
    """The tokenizer.json of a loaded byte-level BPE tokenizer, as a dict."""
    vocab = tok.vocabulary
    if vocab.model in ("llama", "gemma4"):
        return _spm_tokenizer_json(tok)
    if vocab.model == "t5":
        return _t5_tokenizer_json(tok)
    if vocab.model == "bert":
        return _wpm_tokenizer_json(tok)
    if vocab.model == "whitespace":
        return _whitespace_tokenizer_json(tok)
    if vocab.model == "hybriddna":
        raise ExportError(f"{vocab.path}: tokenizer.ggml.model is 'hybriddna' and {HYBRIDDNA_REFUSAL}; "
                          "it cannot be exported")
    if vocab.model != "gpt2":
        raise ExportError(
            f"{vocab.path}: tokenizer.ggml.model is {vocab.model!r}; bpetok-hf writes byte-level BPE (gpt2), "
            "SentencePiece-style BPE (llama), Gemma 4 (gemma4), WordPiece (bert), Unigram (t5) and "
            "whitespace vocabularies only"
        )
    if tok.spec is not None and not tok.spec.byte_encode:
        # llama.cpp runs BPE over raw UTF-8 for this pre (gemma4, mmbert, whitespace...): a
        # ByteLevel tokenizer.json would give other ids.
        raise ExportError(
            f"{vocab.path}: tokenizer.ggml.pre {vocab.pre!r} runs BPE over raw UTF-8, not bytes "
            f"(llama.cpp type {tok.spec.llama_type}); bpetok-hf writes byte-level BPE (gpt2) only"
        )
    model_vocab, added, added_text = _vocab_and_added(tok, normalized=True)
    merges = _merges(tok)
    return _document(
        added, normalizer=None,
        pre_tokenizer={"type": "Sequence", "pretokenizers": [*_passes(tok), _byte_level()]},
        post_processor=_post_processor(tok, added_text), decoder=_byte_level(),
        model=_bpe_model(model_vocab, merges, tok.spec.ignore_merges))


def _document(added: list, **components) -> dict:
    """A tokenizer.json document: its added tokens and components (normalizer, pre_tokenizer,
    post_processor, decoder, model), in HF's key order."""
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, **components}


def _merges(tok: Tokenizer) -> list[list[str]]:
    merges = []
    for merge in tok.vocabulary.merges:
        left, _, right = merge.decode("utf-8", "surrogatepass").partition(" ")
        merges.append([left, right])
    return merges


def _bpe_model(model_vocab: dict[str, int], merges: list[list[str]], ignore_merges: bool) -> dict:
    return {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": ignore_merges,
        "vocab": model_vocab,
        "merges": merges,
    }


def _vocab_and_added(tok: Tokenizer, normalized: bool) -> tuple[dict[str, int], list[dict], dict[int, str]]:
    """Every token's text -> id, and the added tokens (those bpetok cuts out of a text).

    ``normalized``: whether a non-special added token is matched in normalized text (HF's
    default); false where the file has a normalizer, which bpetok applies after cutting."""
    vocab = tok.vocabulary
    from_hf = vocab.metadata.get(ADDED) if vocab.metadata.get(MARK) else None
    model_vocab: dict[str, int] = {}
    added = []
    added_text: dict[int, str] = {}
    for token_id in range(vocab.n_tokens):
        attr = vocab.attrs[token_id]
        text = _text(tok, token_id)
        if from_hf is not None:
            cut, special = token_id in from_hf, from_hf.get(token_id, (False,))[0]
        else:
            cut, special = bool(attr & _CUT_OUT), bool(attr & _SPECIAL)
        # Every token goes in the model's vocab, added ones too: HF gives an added token whose
        # text the model lacks a fresh id past the model's size, not the id the file names.
        if text in model_vocab:
            raise ExportError(
                f"{vocab.path}: tokens {model_vocab[text]} and {token_id} are both {text!r:.60}; a tokenizer.json "
                "holds each token text once"
            )
        model_vocab[text] = token_id
        if cut:
            added_text[token_id] = text
            added.append(
                {
                    "id": token_id,
                    "content": text,
                    "single_word": False,
                    "lstrip": bool(attr & TokenAttr.LSTRIP),
                    "rstrip": bool(attr & TokenAttr.RSTRIP),
                    "normalized": normalized and not special,
                    "special": special,
                }
            )
    return model_vocab, added, added_text


def _spm_tokenizer_json(tok: Tokenizer) -> dict:
    """The tokenizer.json of a SentencePiece-style (llama) or gemma4 vocabulary (see bpetok_hf.writer_spm)."""
    gemma4 = tok.vocabulary.model == "gemma4"
    texts = [_text(tok, i) for i in range(tok.vocabulary.n_tokens)]
    why = gemma4_refusal(tok, texts) if gemma4 else spm_refusal(tok)
    if why is not None:
        raise ExportError(f"{tok.vocabulary.path}: tokenizer.ggml.model is {tok.vocabulary.model!r} and {why}; "
                          "it cannot be exported")
    _model_vocab, added, added_text = _vocab_and_added(tok, normalized=False)
    return _document(
        added, normalizer=spm_normalizer(tok), pre_tokenizer=GEMMA4_SPLIT if gemma4 else None,
        post_processor=_template(tok, added_text), decoder=spm_decoder(tok),
        model=gemma4_model(tok, texts) if gemma4 else spm_model(tok, texts))


def _whitespace_tokenizer_json(tok: Tokenizer) -> dict:
    """The tokenizer.json of a whitespace vocabulary (see bpetok_hf.writer_ws)."""
    texts = [_text(tok, i) for i in range(tok.vocabulary.n_tokens)]
    merges = _merges(tok)
    why = whitespace_refusal(tok, texts, merges)
    if why is not None:
        raise ExportError(f"{tok.vocabulary.path}: tokenizer.ggml.model is 'whitespace' and {why}; "
                          "it cannot be exported")
    model_vocab, added, added_text = _vocab_and_added(tok, normalized=True)
    return _document(
        added, normalizer=None, pre_tokenizer=whitespace_pre_tokenizer(texts),
        post_processor=_template(tok, added_text), decoder=_byte_level(),
        model=_bpe_model(model_vocab, merges, tok.model.runs.spec.ignore_merges))  # type: ignore[attr-defined]


def _t5_tokenizer_json(tok: Tokenizer) -> dict:
    """The tokenizer.json of a t5 (Unigram) vocabulary (see bpetok_hf.writer_ugm)."""
    why = t5_refusal(tok)
    if why is not None:
        raise ExportError(f"{tok.vocabulary.path}: tokenizer.ggml.model is 't5' and {why}; it cannot be exported "
                          "(for a model from the Hugging Face hub, use its own tokenizer.json, which bpetok reads too)")
    texts = [_text(tok, i) for i in range(tok.vocabulary.n_tokens)]
    _model_vocab, added, added_text = _vocab_and_added(tok, normalized=False)
    return _document(
        added, normalizer=t5_normalizer(tok), pre_tokenizer=None, post_processor=_template(tok, added_text),
        decoder=T5_DECODER, model=t5_model(tok, texts))


def _wpm_tokenizer_json(tok: Tokenizer) -> dict:
    """The tokenizer.json of a bert (WordPiece) vocabulary (see bpetok_hf.writer_wpm)."""
    texts = wpm_texts(tok)
    why = wpm_refusal(tok, texts)
    if why is not None:
        raise ExportError(f"{tok.vocabulary.path}: tokenizer.ggml.model is 'bert' and {why}; it cannot be exported")
    _model_vocab, added, _added_text = _vocab_and_added(tok, normalized=False)
    normalizer, pre_tokenizer = wpm_normalizer_and_pre(tok)
    return _document(
        added, normalizer=normalizer, pre_tokenizer=pre_tokenizer, post_processor=wpm_template(tok, texts),
        decoder=WPM_DECODER, model=wpm_model(tok, texts))


def tokenizer_config(tok: Tokenizer) -> dict:
    """tokenizer_config.json for transformers: the special tokens, BOS/EOS flags, the chat template."""
    vocab = tok.vocabulary
    config: dict = {"tokenizer_class": "PreTrainedTokenizerFast"}
    roles = ("cls", "sep", "unk", "pad", "mask") if vocab.model == "bert" else ("bos", "eos", "unk", "pad")
    for role in roles:
        token_id = vocab.special_ids.get("bos" if role == "cls" else role)
        if token_id is not None:
            config[f"{role}_token"] = _text(tok, token_id)
    config["add_bos_token"] = bool(tok.add_bos and vocab.special_ids.get("bos") is not None)
    config["add_eos_token"] = bool(tok.add_eos and vocab.special_ids.get("eos") is not None)
    config["clean_up_tokenization_spaces"] = False
    config["model_max_length"] = 1_000_000_000_000_000_019_884_624_838_656  # transformers' "no limit"
    template = vocab.metadata.get(CHAT_TEMPLATE)
    if isinstance(template, bytes):
        template = template.decode("utf-8", "replace")
    if template:
        config["chat_template"] = template
    return config


def special_tokens_map(config: dict) -> dict:
    """special_tokens_map.json: the special tokens of ``config`` (older transformers read them from here)."""
    keys = ("bos_token", "eos_token", "unk_token", "pad_token", "cls_token", "sep_token", "mask_token")
    return {key: config[key] for key in keys if key in config}


def export_hf(tok: Tokenizer, directory: str | os.PathLike) -> list[Path]:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` into
    ``directory``; returns their paths."""
    out = Path(directory)
    data = tokenizer_json(tok)  # before touching the disk: a refusal leaves nothing behind
    config = tokenizer_config(tok)
    try:
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "tokenizer.json", out / "tokenizer_config.json", out / "special_tokens_map.json"]
        for path, content in zip(paths, (data, config, special_tokens_map(config))):
            with open(path, "w", encoding="utf-8") as f:
                json.dump(content, f, ensure_ascii=False, indent=2 if path.name != "tokenizer.json" else None)
                f.write("\n")
    except OSError as e:
        raise ExportError(f"{out}: cannot write the tokenizer files ({e.strerror or e})") from e
    return paths
