"""SentencePiece-style BPE tokenizer.json files (Llama 2, Mistral...: BPE with ``byte_fallback``)
read into bpetok's ``llama`` model, llama.cpp's SPM.

llama.cpp merges the adjacent pair whose concatenation is the highest-scored token; HF merges the
lowest-ranked pair of ``merges``. The two agree when ``merges`` holds every cut of every token into
two tokens and the merges of each token are consecutive (transformers' converter and bpetok's
export write them so): each token then gets the score ``-(its first merge's rank)``. A file whose
merges are otherwise is refused, naming the token.

The text layouts, each piece of text between added tokens being one HF segment:

- normalizer ``Prepend("▁")`` + ``Replace(" ", "▁")`` (transformers' ``legacy``), no pre-tokenizer:
  llama.cpp's space prefix at the start and after each added token: model ``llama``;
- normalizer ``Replace(" ", "▁")`` alone, or with Gemma's ``Split(" ")``, which finds no space
  left to split at: model ``llama`` without a space prefix;
- normalizer ``Replace(" ", "▁")`` with a ``Split`` at runs of newlines (``\n+``, Isolated), as
  bpetok exports Gemma 4: model ``gemma4``, which merges by rank as HF does (its rule that a run of
  newlines that is a token is taken whole is checked to be what the merges do);
- pre-tokenizer ``Metaspace(prepend_scheme="always" | "first", split=false)`` (what transformers
  writes for Llama, legacy or not): ``▁`` is put before a segment (``first``: only the one that
  starts the text) when it does not already start with one: model ``hf-metaspace``, registered by
  this plugin. ``split=true`` (each ▁-word merged alone) is refused.
"""

from __future__ import annotations

from bpetok import VocabularyError
from bpetok.models import ModelSpec
from bpetok.models.llama import SPACE, SentencePieceModel

from bpetok_hf.schema import describe, flag, text_of

__all__ = ["GEMMA4_MODEL", "check_newline_runs", "PREPEND_FIRST", "spm_layout", "spm_scores", "MetaspaceModel", "METASPACE_MODEL", "metaspace_spec"]

METASPACE_MODEL = "hf-metaspace"
GEMMA4_MODEL = "gemma4"
PREPEND_FIRST = "hf.metaspace_first"  # Vocabulary.metadata: Metaspace's prepend_scheme is "first"
_DECODERS = ("Replace", "ByteFallback", "Fuse", "Strip")


def _refuse(path: str, where: str, what: str) -> VocabularyError:
    return VocabularyError(
        f"{path}: {where} is {what}; bpetok-hf reads SentencePiece-style BPE files (byte_fallback) whose text layout "
        "is Prepend('▁') + Replace(' ', '▁'), Replace(' ', '▁') alone or Metaspace(prepend_scheme='always', split="
        "false), and refuses others rather than give ids that differ from Hugging Face tokenizers': convert this "
        "model to GGUF with llama.cpp's convert_hf_to_gguf.py instead"
    )


def _is_space_replace(node) -> bool:
    return (isinstance(node, dict) and node.get("type") == "Replace" and node.get("pattern") == {"String": " "}
            and node.get("content") == SPACE)


def spm_layout(data: dict, path: str) -> tuple[str, bool]:
    """(model, add_space_prefix) for a byte_fallback file's normalizer and pre-tokenizer; for the
    hf-metaspace model, the flag says prepend_scheme "first" (▁ only at the text's start)."""
    normalizer, pre = data.get("normalizer"), data.get("pre_tokenizer")
    decoder = data.get("decoder")
    items = decoder.get("decoders") if isinstance(decoder, dict) and decoder.get("type") == "Sequence" else [decoder]
    for i, item in enumerate(items if isinstance(items, list) else [items]):
        if item is not None and not (isinstance(item, dict) and item.get("type") in _DECODERS):
            kind = item.get("type") if isinstance(item, dict) else item
            raise _refuse(path, f"decoder item {i}", f"{describe(kind)}, not one of {', '.join(_DECODERS)}")
    if (isinstance(pre, dict) and pre.get("type") == "Split" and pre.get("pattern") == {"Regex": "\n+"}
            and pre.get("behavior", "Isolated") == "Isolated" and not flag(pre, "invert", path, "pre_tokenizer.")
            and _is_space_replace(normalizer)):
        return GEMMA4_MODEL, False  # llama.cpp's gemma4: ▁ for spaces, newline runs apart, merges by rank
    if (isinstance(pre, dict) and pre.get("type") == "Split" and pre.get("pattern") == {"String": " "}
            and not flag(pre, "invert", path, "pre_tokenizer.") and _is_space_replace(normalizer)):
        pre = None  # Gemma's: a split at spaces after the normalizer made every space ▁, so never one
    if pre is None:
        steps = normalizer.get("normalizers") if isinstance(normalizer, dict) and normalizer.get("type") == "Sequence" else [normalizer]
        if isinstance(steps, list) and len(steps) == 2 and _is_space_replace(steps[1]) and steps[0] == {"type": "Prepend", "prepend": SPACE}:
            return "llama", True
        if isinstance(steps, list) and len(steps) == 1 and _is_space_replace(steps[0]):
            return "llama", False
        shown = normalizer.get("type") if isinstance(normalizer, dict) else normalizer
        raise _refuse(path, "normalizer", f"{describe(shown)} with no pre-tokenizer")
    if normalizer is not None:
        raise _refuse(path, "normalizer", f"{describe(normalizer.get('type') if isinstance(normalizer, dict) else normalizer)} "
                      "beside a pre-tokenizer")
    if not isinstance(pre, dict) or pre.get("type") != "Metaspace":
        raise _refuse(path, "pre_tokenizer", describe(pre.get("type") if isinstance(pre, dict) else pre))
    if text_of(pre, "replacement", path, "pre_tokenizer.") != SPACE:
        raise _refuse(path, "pre_tokenizer.replacement", describe(pre.get("replacement")))
    if flag(pre, "split", path, "pre_tokenizer.", default=True):
        raise _refuse(path, "pre_tokenizer.split", "true (each ▁-word merged alone)")
    scheme = pre.get("prepend_scheme", "always")
    if scheme == "never":
        return "llama", False
    if scheme not in ("always", "first"):
        raise _refuse(path, "pre_tokenizer.prepend_scheme", describe(scheme))
    return METASPACE_MODEL, scheme == "first"


def spm_scores(tokens: list[bytes], index: dict[bytes, int], merges: list[bytes], skip: set[int], path: str) -> list[float]:
    """Scores giving llama.cpp's merge order what ``merges`` (``b"left right"``, ranked) gives HF's.

    ``skip``: added tokens' ids, cut out of the text before merging (their merges never run)."""
    first_rank: dict[int, int] = {}
    previous = None
    for rank, merge in enumerate(merges):
        left, _, right = merge.partition(b" ")
        token_id = index.get(left + right)
        if token_id is None or left not in index or right not in index:
            raise VocabularyError(f"{path}: model.merges[{rank}] {merge.decode('utf-8', 'replace')!r:.60} joins texts "
                                  "that are not all tokens of model.vocab; the file is damaged: re-export it")
        if token_id != previous and token_id in first_rank:
            raise _refuse(path, f"model.merges[{rank}]", f"a merge of token {token_id} after merges of other tokens "
                          "(bpetok's SentencePiece model orders merges by the token they make: each token's merges "
                          "must be consecutive)")
        first_rank.setdefault(token_id, rank)
        previous = token_id
    cuts_in_merges = set(merges)
    for token_id, text in enumerate(tokens):
        if token_id in skip or len(text) < 2:
            continue
        decoded = text.decode("utf-8", "surrogatepass")
        for i in range(1, len(decoded)):
            left, right = decoded[:i].encode("utf-8", "surrogatepass"), decoded[i:].encode("utf-8", "surrogatepass")
            if (left in index or i == 1) and (right in index or i == len(decoded) - 1) and left + b" " + right not in cuts_in_merges:
                if left in index and right in index:
                    what = f"without the merge {decoded[:i]!r} + {decoded[i:]!r} of token {token_id} {decoded!r:.40}"
                else:
                    what = f"a vocabulary where token {token_id} {decoded!r:.40} has a character that is no token"
                raise _refuse(path, "model.merges", what + " (llama.cpp's SentencePiece model would merge it, HF does not)")
    lowest = -float(len(merges) + 1)
    return [-float(first_rank[i]) if i in first_rank else lowest for i in range(len(tokens))]


class MetaspaceModel(SentencePieceModel):
    """llama.cpp's SPM under HF's ``Metaspace(prepend_scheme="always")``: ``▁`` before each piece of
    text between added tokens unless it already starts with a space (or ``▁``)."""

    def __init__(self, vocabulary, pretokenizer=None):
        super().__init__(vocabulary, pretokenizer)
        self.add_space_prefix = False  # the prefix is this model's own rule, below
        # "first": only the text's first segment gets one; the Tokenizer then says at_start there only.
        self.first_only = bool(vocabulary.metadata.get(PREPEND_FIRST))
        self.start_after_special = not self.first_only

    def _wants_prefix(self, text, at_start: bool) -> bool:
        space = " " if isinstance(text, str) else b" "
        mark = SPACE if isinstance(text, str) else SPACE.encode()
        return bool(text) and (at_start or not self.first_only) and not text.startswith((space, mark))

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        return super().encode_fragment(" " + text if self._wants_prefix(text, at_start) else text, False)

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        return super().encode_fragment_reference(" " + text if self._wants_prefix(text, at_start) else text, False)

    def encode_fragment_bytes(self, data: bytes, at_start: bool) -> list[int]:
        return super().encode_fragment_bytes(b" " + data if self._wants_prefix(data, at_start) else data, False)


def metaspace_spec() -> ModelSpec:
    return ModelSpec(
        name=METASPACE_MODEL,
        factory=MetaspaceModel,
        pretokenized=False,
        special_ids={"bos": 1, "eos": 2, "unk": 0},
        add_bos=False,
        clean_spaces=False,
        add_space_prefix=False,
        description="a Metaspace tokenizer.json's SentencePiece BPE (bpetok-hf): llama's merges, ▁ before each segment",
    )


def check_newline_runs(tokens: list[bytes], merges: list[bytes], path: str) -> None:
    """Refuse a gemma4-layout file whose merges do not make each newline-run token whole: llama.cpp's
    gemma4 takes such a run whole, HF's BPE merges it."""
    from bpetok.models.llama import merge_symbols

    ranks: dict[tuple[bytes, bytes], int] = {}
    for rank, merge in enumerate(merges):
        left, _, right = merge.partition(b" ")
        ranks.setdefault((left, right), rank)
    for token_id, text in enumerate(tokens):
        if text and set(text) == {10} and len(merge_symbols(text, lambda a, b: ranks.get((a, b)))) != 1:
            raise _refuse(path, "model.merges", f"without the merges that make newline-run token {token_id} "
                          f"({len(text)} newlines) whole, which llama.cpp's gemma4 takes whole")
