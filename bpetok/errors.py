"""The exceptions bpetok raises on bad input. All are ValueErrors, so callers can catch one type."""

from __future__ import annotations


class BpetokError(ValueError):
    """Base class of every error bpetok raises for a bad file, argument or plugin."""


class GGUFError(BpetokError):
    """A GGUF file is truncated, corrupt or not what the key expects.

    The message names the file, the byte offset and the key being read.
    """


class VocabularyError(BpetokError):
    """A vocabulary loaded fine but cannot be tokenized exactly as llama.cpp would."""


class UnsupportedVocabularyError(VocabularyError):
    """No installed plugin handles this vocabulary's (model, pre) combination."""


class PluginError(BpetokError):
    """Two plugins claim the same key, or a plugin registered something malformed."""


class InputError(BpetokError):
    """Input that llama.cpp cannot tokenize (it aborts on it), e.g. bytes that decode past U+10FFFF."""


class ChatTemplateError(BpetokError):
    """A chat template is missing, does not parse, or fails while rendering the messages.

    The message names the template (file and key, or "the template passed in") and the line.
    """


class RegexTimeoutError(InputError):
    """A pre-tokenizer's regex ran past its time limit on a text (a pattern that backtracks
    catastrophically). The message names the pattern, the text's length and how to change the limit."""
