"""The optional C modules (bpetok/models/gpt2/kernel/*.c, bpetok/models/_symbols.c, _trie.c, _ugm.c, _wpm.c, bpetok/_specials.c, _train.c, bpetok/vocab/_gguf.c); everything else is in pyproject.toml.

``optional=True``: where no C compiler or Python headers exist, ``pip install .`` still installs
bpetok, which then runs its pure-Python engine (``bpetok info`` says which engine runs).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            # The byte-level BPE kernel: one module from the files of bpetok/models/gpt2/kernel/
            # (kernel.h says which does what); the splitters (bpetok/pretok/_split.c) live beside
            # the pre-tokenizers they accelerate.
            "bpetok.models.gpt2._kernel",
            sources=[f"bpetok/models/gpt2/kernel/{name}.c" for name in ("module", "build", "merge", "text", "threads")]
            + ["bpetok/pretok/_split.c"],
            depends=["bpetok/_module.h", "bpetok/_probe.h", "bpetok/models/gpt2/kernel/kernel.h", "bpetok/pretok/_split.h", "bpetok/pretok/_unicode_classes.h"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok.models._symbols",
            sources=["bpetok/models/_symbols.c"],
            depends=["bpetok/_module.h", "bpetok/_probe.h", "bpetok/models/_word_cache.h", "bpetok/models/_text_table.h", "bpetok/models/_rank_tables.h",
                     "bpetok/models/_spm_tables.h", "bpetok/models/_merger_load.h", "bpetok/models/_fragments.h"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok.models._trie",
            sources=["bpetok/models/_trie.c"],
            depends=["bpetok/_module.h", "bpetok/models/_glue.h", "bpetok/models/_sorted_trie.h",
                     "bpetok/models/_double_array.h", "bpetok/models/_cut_text.h"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok.models._ugm",
            sources=["bpetok/models/_ugm.c"],
            depends=["bpetok/_module.h", "bpetok/models/_sorted_trie.h", "bpetok/models/_word_cache.h",
                     "bpetok/models/_double_array.h", "bpetok/models/_cut_text.h", "bpetok/models/_sourced_bytes.h"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok.models._wpm",
            sources=["bpetok/models/_wpm.c"],
            depends=["bpetok/_module.h", "bpetok/models/_glue.h", "bpetok/models/_sorted_trie.h", "bpetok/models/_word_cache.h"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok._train",
            sources=["bpetok/_train.c"],
            depends=["bpetok/_module.h", "bpetok/_train_pieces.h"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok.vocab._gguf",
            sources=["bpetok/vocab/_gguf.c"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
        Extension(
            "bpetok._specials",
            sources=["bpetok/_specials.c"],
            depends=["bpetok/_module.h"],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        ),
    ]
)
