"""The optional C modules (bpetok/models/_bpe.c, _symbols.c, _trie.c, _ugm.c, bpetok/_gguf.c, _specials.c, _train.c); everything else is in pyproject.toml.

``optional=True``: where no C compiler or Python headers exist, ``pip install .`` still installs
bpetok, which then runs its pure-Python engine (``bpetok info`` says which engine runs).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "bpetok.models._bpe",
            # The splitters (bpetok/pretok/_split.c) live beside the pre-tokenizers they accelerate.
            sources=["bpetok/models/_bpe.c", "bpetok/pretok/_split.c"],
            depends=["bpetok/pretok/_split.h", "bpetok/pretok/_unicode_classes.h"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok.models._symbols",
            sources=["bpetok/models/_symbols.c"],
            depends=["bpetok/models/_word_cache.h", "bpetok/models/_text_table.h"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok.models._trie",
            sources=["bpetok/models/_trie.c"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok.models._ugm",
            sources=["bpetok/models/_ugm.c"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok._train",
            sources=["bpetok/_train.c"],
            depends=["bpetok/_train_pieces.h"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok._gguf",
            sources=["bpetok/_gguf.c"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok._specials",
            sources=["bpetok/_specials.c"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
    ]
)
