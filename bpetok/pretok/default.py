"""llama.cpp's ``default`` type (a file with no ``tokenizer.ggml.pre``) and ``falcon``.

Both are chains: punctuation/symbol runs are cut out first, GPT-2's pattern runs inside what is
left, and (default only) number runs are cut again, then every ``[0-9][0-9][0-9]`` inside a
piece becomes a piece of its own (``12345`` -> ``123``, ``45``).
"""

from bpetok.hookspecs import hookimpl
from bpetok.pretok.chain import chain_spec
from bpetok.pretok.gpt2 import GPT2

DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"]
FALCON = [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"]


@hookimpl
def bpetok_register_pretokenizers(register):
    # "" is a file without the key: llama.cpp warns and uses its default pre-tokenizer.
    register(chain_spec("default", "DEFAULT", ("default", ""), DEFAULT, space_chunks=True,
                        description="llama.cpp's fallback: punctuation runs, GPT-2, numbers in threes"))
    register(chain_spec("default", "FALCON", ("falcon",), FALCON, space_chunks=True,
                        description="Falcon: punctuation runs, GPT-2, numbers in threes"))
