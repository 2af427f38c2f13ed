"""Vocabulary I/O: the data model every loader fills (vocabulary.py), the GGUF reader (gguf.py, with
its C string-array reader _gguf.c) and writer (gguf_writer.py), and llama.cpp's load-time overrides
(overrides.py).

The data model is importable from here: ``from bpetok.vocab import Vocabulary, TokenAttr``.
"""

from bpetok.vocab.vocabulary import (
    CHARSMAP_KEY,
    CHAT_TEMPLATE_KEY,
    SPECIAL_ID_KEYS,
    SPECIAL_ROLES,
    TokenAttr,
    TokenType,
    Vocabulary,
)

__all__ = ["CHARSMAP_KEY", "CHAT_TEMPLATE_KEY", "SPECIAL_ID_KEYS", "SPECIAL_ROLES", "TokenAttr", "TokenType", "Vocabulary"]
