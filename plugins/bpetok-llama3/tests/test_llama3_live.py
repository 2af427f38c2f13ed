"""Random text against a live llama.cpp (llama-cpp-python), when it is installed.

The recorded cases in tests/data are the check that always runs; this one looks for what they
miss. ``pip install llama-cpp-python==0.3.36`` to run it.
"""

from __future__ import annotations

import gzip
import shutil

import pytest
from hypothesis import given, settings, strategies as st

llama_cpp = pytest.importorskip("llama_cpp")

# Text llama3's rules care about: letters, digits of several scripts, apostrophes, whitespace of
# every kind, punctuation, marks, and the special tokens' own characters.
ALPHABET = st.one_of(
    st.sampled_from(list("aAsStTmMdDlLrReEvV'’ \t\n\r\x0b\x0c\u00a0\u3000\u2028.,!?<>|_-0123456789")),
    st.sampled_from(["<|eot_id|>", "<|begin_of_text|>", "<|reserved_special_token_3|>", "١٢٣", "½", "Ⅻ", "\u0301"]),
    st.characters(codec="utf-8"),
)
TEXTS = st.lists(ALPHABET, max_size=40).map("".join)


@pytest.fixture(scope="module")
def live(tmp_path_factory, llama_bpe_path):
    path = tmp_path_factory.mktemp("vocab") / "ggml-vocab-llama-bpe.gguf"
    with gzip.open(llama_bpe_path) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return llama_cpp.Llama(str(path), vocab_only=True, verbose=False)


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, special=st.booleans(), add_special=st.booleans())
def test_random_text_matches_llama_cpp(live, llama_bpe, text, special, add_special):
    expected = live.tokenize(text.encode("utf-8", "surrogatepass"), add_bos=add_special, special=special)
    assert llama_bpe.encode(text, parse_special=special, add_special=add_special) == expected
