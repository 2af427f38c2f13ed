"""llama.cpp's WHITESPACE type (``tokenizer.ggml.pre = whitespace``, jina-embeddings-v2-base-zh):
``\\S+`` runs, the whitespace between them a piece of its own, BPE over raw UTF-8 (no GPT-2 byte
alphabet, no ``▁`` escaping; see :mod:`bpetok.models.raw_utf8`).

llama.cpp aborts on any whitespace run that holds a space next to another character
(``"a  b"``, ``" \\n"``): its BPE asserts that no symbol holds a space. bpetok refuses such text
with an InputError. A NORMAL token's piece is its text read through GPT-2's alphabet, as
llama.cpp's ``token_to_piece`` reads it for a BPE vocabulary without ``escape_whitespaces``.
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok.chain import chain_spec


@hookimpl
def bpetok_register_pretokenizers(register):
    register(chain_spec("whitespace", "WHITESPACE", ("whitespace",), [r"\S+"], byte_encode=False,
                        description="runs of non-whitespace, BPE over raw UTF-8 (no byte alphabet)"))
