"""bpetok-hf: Hugging Face ``tokenizer.json`` in and out, as a bpetok plugin.

- In: a ``bpetok_load_vocabulary`` implementation reads byte-level BPE ``tokenizer.json`` files
  (normalizers included), SentencePiece-style ones (into the ``llama`` model, or ``hf-metaspace``
  registered here), WordPiece ones (``hf-wordpiece``) and Unigram ones (``hf-unigram``), alone or
  in a Hugging Face model folder, so ``bpetok.from_file(...)`` gives Hugging Face tokenizers' ids.
  The byte-level pre-tokenizer is the file's own passes (``hf-regex``), registered here through
  ``bpetok_register_pretokenizers``.
- Out: :func:`bpetok_hf.writer.export_hf` (``bpetok export MODEL.gguf --format hf -o DIR``)
  writes ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` for a
  byte-level BPE, SentencePiece-style (llama), gemma4, WordPiece (bert: :mod:`bpetok_hf.writer_wpm`)
  or Unigram (t5: :mod:`bpetok_hf.writer_ugm`) vocabulary.
"""

from __future__ import annotations

import os

from bpetok import PreTokenizerSpec, TokenAttr, TokenType, Vocabulary, hookimpl

from bpetok_hf.pretok import GPT2_PATTERN, HFPreTokenizer, SplitPass
from bpetok_hf.reader import ADDED, MARK, NORMALIZER, PASSES, folder_tokenizer_json, is_tokenizer_json, read_tokenizer_json

__version__ = "0.1.0"
__all__ = ["HF_PRE", "HF_PRE_IGNORE_MERGES", "make_pretokenizer", "pretokenizer_for", "__version__"]

# The pre names of a tokenizer.json whose passes no llama.cpp family shares: the file's own
# passes, with or without the BPE model's ignore_merges.
HF_PRE = "hf-regex"
HF_PRE_IGNORE_MERGES = "hf-regex-ignore-merges"

_ATTR_OF_TYPE = {
    TokenType.NORMAL: TokenAttr.NORMAL,
    TokenType.BYTE: TokenAttr.BYTE,
    TokenType.UNKNOWN: TokenAttr.UNKNOWN,
    TokenType.CONTROL: TokenAttr.CONTROL,
    TokenType.USER_DEFINED: TokenAttr.USER_DEFINED,
    TokenType.UNUSED: TokenAttr.UNUSED,
}


def make_pretokenizer() -> HFPreTokenizer:
    """The default of the hf-regex pre names: HF's ByteLevel(use_regex=true) alone (GPT-2's regex)."""
    return HFPreTokenizer([SplitPass(GPT2_PATTERN)])


def pretokenizer_for(vocabulary: Vocabulary) -> HFPreTokenizer:
    """The passes the tokenizer.json of ``vocabulary`` describes."""
    return HFPreTokenizer(vocabulary.metadata[PASSES], normalizer=vocabulary.metadata.get(NORMALIZER))


def _choose_pre(vocabulary: Vocabulary) -> str:
    """The file's own passes, with or without ignore_merges. Never a llama.cpp family's splitter,
    even for the same pattern: those use llama.cpp's Unicode tables (15.1), which class thousands of
    newer codepoints (Unicode 16's scripts) otherwise than HF's Oniguruma does."""
    return HF_PRE_IGNORE_MERGES if vocabulary.metadata["hf.ignore_merges"] else HF_PRE


@hookimpl
def bpetok_load_vocabulary(path: str) -> Vocabulary | None:
    if os.path.isdir(path):  # a Hugging Face model folder: its tokenizer.json, with the configs beside it
        found = folder_tokenizer_json(path)
        if found is None:
            return None
        path = found
    elif not is_tokenizer_json(path):
        return None
    vocabulary = read_tokenizer_json(path)
    if vocabulary is not None and vocabulary.model == "gpt2":
        vocabulary.pre = _choose_pre(vocabulary)
    return vocabulary


@hookimpl
def bpetok_register_models(register) -> None:
    from bpetok_hf.reader_spm import metaspace_spec
    from bpetok_hf.unigram import unigram_spec
    from bpetok_hf.wordpiece import wordpiece_spec

    register(metaspace_spec())
    register(wordpiece_spec())
    register(unigram_spec())


@hookimpl
def bpetok_register_pretokenizers(register):
    for pre, ignore_merges in ((HF_PRE, False), (HF_PRE_IGNORE_MERGES, True)):
        register(
            PreTokenizerSpec(
                name="hf-regex",
                pre_names=(pre,),
                factory=make_pretokenizer,
                for_vocabulary=pretokenizer_for,
                clean_spaces=False,  # HF tokenizers' ByteLevel decoder leaves spaces alone
                ignore_merges=ignore_merges,
                description="a tokenizer.json's own Split/Digits/ByteLevel passes, HF tokenizers' semantics",
            )
        )


@hookimpl(trylast=True)
def bpetok_adjust_token_attributes(vocabulary: Vocabulary) -> None:
    """HF cuts exactly the file's added tokens out of a text: undo llama.cpp's by-text overrides
    (Qwen's ``</s>`` made CONTROL) for a tokenizer.json, keep its end-of-generation set."""
    added = vocabulary.metadata.get(ADDED)
    if vocabulary.metadata.get(MARK) is None or added is None:
        return
    attrs = [_ATTR_OF_TYPE.get(t, TokenAttr.UNDEFINED) for t in vocabulary.token_types]
    for token_id, (_special, lstrip, rstrip) in added.items():
        attrs[token_id] |= (TokenAttr.LSTRIP if lstrip else 0) | (TokenAttr.RSTRIP if rstrip else 0)
    vocabulary.attrs[:] = attrs


@hookimpl
def bpetok_register_commands(subparsers) -> None:
    """``bpetok export MODEL --format hf -o DIR`` (the command lives here, beside the format)."""
    from bpetok_hf.cli import add_command

    add_command(subparsers)
