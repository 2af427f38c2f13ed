"""llama.cpp's ``hybriddna`` model (src/llama-vocab.cpp, ``llm_tokenizer_hybriddna_session``).

A gpt2 vocabulary (byte-pair encoded with its ``tokenizer.ggml.pre``) plus the tokens ``<dna>``,
``</dna>``, ``<oov>`` and DNA k-mers stored with the reserved suffix U+E000 (which keeps a k-mer
apart from a BPE token of the same letters). In each fragment of text between special tokens:

- text outside ``<dna>...</dna>`` is encoded by the gpt2 model;
- ``<dna>`` and ``</dna>`` give their ids; the bytes between (to the end of the fragment when
  ``</dna>`` is missing) are upper-cased (ASCII), cut into 6-byte k-mers, the last one padded with
  ``A``, and each k-mer gives the id of its text + U+E000, or ``<oov>``'s when there is none.

The tags are CONTROL tokens: with ``parse_special`` they are cut out of the text before the model
sees it, so only text without them, or ``parse_special=False``, has k-mers. Without all three tag
tokens the model is plain gpt2 BPE. A k-mer's piece (every token after ``<oov>`` whose text ends in
the suffix) is its text without it, as llama.cpp erases it at load.
"""

from __future__ import annotations

from bpetok.hookspecs import hookimpl
from bpetok.models.whitespace_bpe import Gpt2RunsModel, gpt2_runs_spec

__all__ = ["HybridDnaModel"]

KMER_MARKER = "\ue000".encode()
_OPEN, _CLOSE = "<dna>", "</dna>"
_K = 6
_UPPER = bytes.maketrans(b"abcdefghijklmnopqrstuvwxyz", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


class HybridDnaModel(Gpt2RunsModel):
    """gpt2 BPE outside ``<dna>`` spans, 6-mers inside (see the module docstring)."""

    def __init__(self, vocabulary, pretokenizer=None):
        super().__init__(vocabulary)
        index = vocabulary.token_index()
        self.ids = index
        self.open_id, self.close_id, self.oov_id = (index.get(t.encode()) for t in (_OPEN, _CLOSE, "<oov>"))
        self.dna = None not in (self.open_id, self.close_id, self.oov_id)
        # The texts llama.cpp strips the marker from: tokens after <oov> ending in it.
        tokens = vocabulary.tokens
        start = self.oov_id + 1 if self.oov_id is not None else len(tokens)
        self.kmer_texts = frozenset(t for t in tokens[start:] if len(t) > len(KMER_MARKER) and t.endswith(KMER_MARKER))
        self.kmer_ids = frozenset(i for i in range(start, len(tokens)) if tokens[i] in self.kmer_texts) | (
            {self.oov_id} if self.dna else set()
        )
        self._n_tokens = len(tokens)
        self._kmer_flags = None  # _kmer_mask's (numpy: loading a tokenizer does not import it)

    def encode_fragment(self, text: str, at_start: bool) -> list[int]:
        """Ids of one fragment of text between special tokens."""
        return self._encode(text, self.runs.encode)

    def encode_fragment_reference(self, text: str, at_start: bool) -> list[int]:
        """:meth:`encode_fragment` by the gpt2 model's reference merge."""
        return self._encode(text, self.runs.encode_reference)

    def encode_texts(self, texts, specials, workers=1):
        """The gpt2 model's own (its C kernel's), told to hold a text with ``<dna>`` too: the
        Tokenizer cuts a held text at its specials and hands the fragments to
        :meth:`encode_fragment`, which reads the k-mers."""
        return self.runs.model.encode_texts(texts, self._held_at(specials), workers)

    def encode_texts_to_numpy(self, texts, specials, workers=1):
        """:meth:`encode_texts` as numpy arrays, the gpt2 model's likewise (machine words from its
        kernel: what bpetok.offsets encodes through)."""
        return self.runs.model.encode_texts_to_numpy(texts, self._held_at(specials), workers)

    def _held_at(self, specials: tuple[str, ...]) -> tuple[str, ...]:
        """``specials`` and ``<dna>``: the texts the gpt2 model must leave to :meth:`encode_fragment`."""
        return specials if not self.dna or _OPEN in specials else (*specials, _OPEN)

    def text_encoder(self, automata):
        """The gpt2 model's own (a whole text in one C call, its specials cut by the automata) for a
        text without ``<dna>``, which is all plain BPE; a text with one gives None, and the
        Tokenizer partitions it. A paragraph through the partition costs as much in Python calls as
        in the kernel."""
        inner = self.runs.model.text_encoder(automata)
        if inner is None or not self.dna:
            return inner

        def encode(text: str, parse_special: bool) -> list[int] | None:
            return None if _OPEN in text else inner(text, parse_special)

        return encode

    def _encode(self, text: str, encode) -> list[int]:
        if not self.dna or _OPEN not in text:
            return encode(text) if text else []
        out: list[int] = []
        pos, n = 0, len(text)
        while pos < n:
            start = text.find(_OPEN, pos)
            if start < 0:
                out += encode(text[pos:])
                break
            if start > pos:
                out += encode(text[pos:start])
            out.append(self.open_id)
            content = start + len(_OPEN)
            end = text.find(_CLOSE, content)
            out += self._kmers(text[content : end if end >= 0 else n])
            if end < 0:
                break
            out.append(self.close_id)
            pos = end + len(_CLOSE)
        return out

    def _kmers(self, sequence: str) -> list[int]:
        """The k-mer ids of a DNA span: its UTF-8 bytes cut every 6 bytes, as llama.cpp cuts them."""
        data = sequence.encode("utf-8", "surrogatepass").translate(_UPPER)
        ids, oov = self.ids, self.oov_id
        out = []
        for i in range(0, len(data), _K):
            kmer = data[i : i + _K].ljust(_K, b"A")
            out.append(ids.get(kmer + KMER_MARKER, oov))
        return out

    def normal_piece(self, text: bytes) -> bytes:
        """A NORMAL token's bytes: a k-mer's without its marker, any other as the gpt2 model renders it."""
        if text in self.kmer_texts:
            text = text[: -len(KMER_MARKER)]
        return super().normal_piece(text)

    def aligns_offsets(self, text: str) -> bool:
        """Always: :meth:`encode_with_offsets` takes a text without ``<dna>`` the gpt2 model's way,
        and :meth:`token_offsets` refuses k-mers."""
        return True

    def encode_with_offsets(self, tok, text: str, parse_special: bool, add_special: bool):
        """The ids as machine words in one call (:meth:`encode_texts_to_numpy`: a text without
        ``<dna>`` is one gpt2 kernel call) and the spans bpetok.offsets derives from their pieces;
        None where the ids hold k-mers (encode again, then :meth:`token_offsets` refuses them)."""
        from bpetok.offsets import _added, _offsets_of_own_ids

        body = tok.encode_batch_to_numpy([text], parse_special=parse_special, workers=1)[0]
        if self.dna and self._kmer_mask().take(body).any():
            return None
        return _offsets_of_own_ids(tok, text, body, _added(tok, add_special))

    def _kmer_mask(self):
        """Per token id, whether it is a k-mer or ``<oov>`` (a numpy array, made on first use)."""
        if self._kmer_flags is None:
            import numpy as np

            flags = np.zeros(self._n_tokens, dtype=bool)
            flags[sorted(self.kmer_ids)] = True
            self._kmer_flags = flags
        return self._kmer_flags

    def token_offsets(self, tok, text: str, ids: list[int], add_special: bool):
        """None (bpetok.offsets' own spans: the tokens spell the text) unless the ids hold k-mers,
        which have no exact spans here."""
        if not (self.dna and _OPEN in text) or self.kmer_ids.isdisjoint(ids):
            return None
        from bpetok.offsets import refuse_offsets

        refuse_offsets(tok, "the ids hold DNA k-mers (a <dna> span read with parse_special=False), which stand for "
                       "6 letters upper-cased and padded with A, not for the text; with parse_special=True the "
                       "<dna> tags are special tokens and the letters plain BPE, which have spans")


# What this plugin registers: the model, and llama.cpp's defaults for it.
MODEL_SPEC = gpt2_runs_spec(
    "hybriddna", HybridDnaModel, "gpt2 BPE with <dna>...</dna> spans as DNA 6-mers (reserved U+E000 suffix), <oov>"
)


@hookimpl
def bpetok_register_models(register) -> None:
    register(MODEL_SPEC)
