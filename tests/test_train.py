"""Training, pinning and extension: the merge loop against its plain twin, pins, errors, llama.cpp agreement."""

from __future__ import annotations

import lzma
import random
import re

import pytest

import bpetok
from bpetok.apps.cli import main
from bpetok.vocab.gguf import read_gguf
from bpetok._train_merge import _PairCounts, _RecountedPairs
from bpetok.train import extend, train
from helpers import QWEN3, SMOLLM2, load_cases, wrong_cases

WORDS = ("the", "model", "tokenizer", "train", "lower", "lowest", "newer", "wider", "def", "self",
         "return", "import", "numpy", "QLoRA", "Unsloth", "é", "日本", "x_1", "café")
SYLLABLES = ("ka", "ri", "to", "mu", "sen", "dor", "pli", "ax", "que", "zo")
PINS = ["QLoRA", "LoRA", "Lo", "QLoRAx", "Unsloth", "tokenizer", "checkpointing"]
TEXTS = ["QLoRA and LoRA with Unsloth: QLoRAx LoRAQLoRA Lo", " QLoRA", "def f(self):\n    return 1<|endoftext|>",
         "héllo wörld 日本語 ☃ 123", "tokenizer.tokenizer( gradient_checkpointing=True)", "<|pad|> <|endoftext|>x"]


def corpus_text(seed: int = 0, n: int = 4000) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(n // 8):
        words = [rng.choice(WORDS[:-6]) if rng.random() < 0.5 else
                 "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(8)]
        lines.append(" ".join(words) + rng.choice([".", ",", "!", ""]))
    lines.append("QLoRA Unsloth é 日本 x_1 café")  # rare words, once
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt.xz"
    path.write_bytes(lzma.compress(corpus_text().encode()))
    return path


@pytest.fixture(scope="module")
def trained(corpus_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("trained") / "trained.gguf"
    result = train([corpus_file], vocab_size=400, pre="qwen2", special_tokens=["<|endoftext|>", "<|pad|>"],
                   pins=PINS, min_frequency=1, output=out, progress=False)
    return out, result


# -- the merge loop ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_incremental_counts_match_recounting(seed):
    rng = random.Random(seed)
    words = [[rng.choice(b"abcab ") for _ in range(rng.randint(1, 12))] for _ in range(300)]
    words += [[97] * rng.randint(20, 90), [97, 98] * 40]  # long runs: overlapping (a, a), repeated (a, b)
    freqs = [rng.randint(1, 9) for _ in words]
    fast, plain = _PairCounts([list(w) for w in words], freqs), _RecountedPairs(words, freqs)
    for new in range(256, 256 + 60):
        pair = fast.best(1)
        assert pair == plain.best(1)
        if pair is None:
            break
        fast.merge(pair, new)
        plain.merge(pair, new)
        assert fast.words == plain.words
        # Every count left is what a recount gives.
        assert {k: v for k, v in fast.counts.items() if v} == plain.counts
    assert new > 280


def test_same_input_gives_the_same_file(corpus_file, tmp_path, trained):
    again = tmp_path / "again.gguf"
    train([corpus_file], vocab_size=400, pre="qwen2", special_tokens=["<|endoftext|>", "<|pad|>"],
          pins=PINS, min_frequency=1, output=again, progress=False)
    assert again.read_bytes() == trained[0].read_bytes()


def test_trained_vocabulary_shape(trained):
    path, result = trained
    tok = bpetok.from_gguf(path)
    assert tok.n_tokens == len(result.tokens) == 400
    assert [tok.token_type(i).name for i in (398, 399)] == ["CONTROL", "CONTROL"]
    assert tok.piece(398) == b"<|endoftext|>" and tok.special_ids["eos"] == 398
    assert tok.encode("<|endoftext|>") == [398] and len(tok.encode("<|endoftext|>", parse_special=False)) > 1
    assert len(tok.vocabulary.merges) == 400 - 2 - 256  # every merge here made a new token
    assert tok.id("Ġthe") is not None and tok.encode(" the") == [tok.id("Ġthe")]
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == text


def test_pinned_terms_are_single_tokens(trained):
    tok = bpetok.from_gguf(trained[0])
    for term in PINS:
        for form in (term, " " + term):
            assert len(tok.encode(form)) == 1, form
    ids = tok.encode("we use QLoRA, LoRA and Unsloth")
    assert tok.encode(" QLoRA")[0] in ids and tok.encode(" Unsloth")[0] in ids


def test_min_frequency_stops_early(corpus_file):
    result = train([corpus_file], vocab_size=5000, min_frequency=10_000, progress=False)
    assert len(result.tokens) == 256 and result.merges == []


def test_texts_and_smollm(tmp_path):
    result = train(texts=[corpus_text(1)], vocab_size=300, pre="smollm", pins=["x_1"][:0] + ["café"], progress=False)
    tok = result.tokenizer()
    assert tok.encode(" café") == [tok.id("ĠcafÃ©")]


def test_no_progress_bar_when_not_a_tty(corpus_file, capsys):
    train([corpus_file], vocab_size=300, progress=None)
    assert capsys.readouterr().err == ""


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("pin, piece", [("foo bar", "' bar'"), ("x1", "'1'"), ("QLoRA!", "'!'"), ("_init", "' _'")])
def test_pin_the_pretokenizer_splits_is_refused(corpus_file, pin, piece):
    with pytest.raises(bpetok.BpetokError, match="splits") as info:
        train([corpus_file], vocab_size=400, pins=[pin])
    assert piece in str(info.value) and "BPE never merges across pieces" in str(info.value)


def test_bad_input_errors(tmp_path, corpus_file):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(bpetok.BpetokError, match="corpus is empty"):
        train([empty], vocab_size=300)
    with pytest.raises(bpetok.BpetokError, match=r"too small: 256 byte tokens \+ 1 special tokens \+ \d+ tokens for 1 pinned"):
        train([corpus_file], vocab_size=260, special_tokens=["<s>"], pins=["QLoRA"])
    with pytest.raises(bpetok.BpetokError, match="no such corpus file"):
        train([tmp_path / "missing.txt"], vocab_size=300)
    bad = tmp_path / "bad.txt.xz"
    bad.write_bytes(b"not xz at all")
    with pytest.raises(bpetok.BpetokError, match="bad.txt.xz: cannot"):
        train([bad], vocab_size=300)
    with pytest.raises(bpetok.BpetokError, match="unknown pre-tokenizer 'no-such-pre'; installed: .*qwen2.*smollm"):
        train([corpus_file], vocab_size=300, pre="no-such-pre")


def test_cli_train_and_extend(tmp_path, corpus_file, capsys):
    out = tmp_path / "cli.gguf"
    pin_file = tmp_path / "pins.txt"
    pin_file.write_text("QLoRA\n\nUnsloth\n")
    assert main(["train", str(corpus_file), "--vocab-size", "300", "--pre", "smollm", "--special", "<|endoftext|>",
                 "--pin-file", str(pin_file), "--min-frequency", "1", "-o", str(out)]) == 0
    assert "300 tokens" in capsys.readouterr().out
    tok = bpetok.from_gguf(out)
    assert len(tok.encode(" Unsloth")) == 1 and tok.vocabulary.pre == "smollm"
    ext = tmp_path / "ext.gguf"
    assert main(["extend", str(out), "--pin", "gradient", "-o", str(ext)]) == 0
    assert "2 pinned forms added" in capsys.readouterr().out
    assert main(["train", str(corpus_file), "--vocab-size", "300", "--pin", "x 1", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bpetok: error: cannot pin 'x 1'") and err.count("\n") == 1


# -- extending Qwen3 -----------------------------------------------------------------------------

EXTEND_PINS = ["asyncio", "dataclass", "isinstance", "QLoRA", "Unsloth", "llama.cpp"]


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    out = tmp_path_factory.mktemp("extended") / "qwen3-ext.gguf"
    result = extend(QWEN3, pins=EXTEND_PINS, output=out)
    return out, result


def test_extend_pins_are_single_tokens(extended):
    path, result = extended
    tok = bpetok.from_gguf(path)
    assert tok.n_tokens == 151936 + len(result.added)
    for term in EXTEND_PINS:
        for form in (term, " " + term):
            for special in (True, False):
                assert len(tok.encode(form, parse_special=special)) == 1, form
    assert set(result.added) == {f for t in EXTEND_PINS for f in (t, " " + t)}
    assert tok.token_type(result.added[" QLoRA"]).name == "USER_DEFINED"
    assert tok.decode(tok.encode("import asyncio; isinstance(x, y)")) == "import asyncio; isinstance(x, y)"


def test_extend_changes_no_ids_of_text_without_pins(extended):
    tok = bpetok.from_gguf(extended[0])
    cases = load_cases("qwen3")
    plain = [c for c in cases if not any(t in c["text"] for t in EXTEND_PINS)]
    with_pins = [c for c in cases if any(t in c["text"] for t in EXTEND_PINS)]
    assert len(plain) > 5000 and len(with_pins) > 50
    wrong = [c["text"] for c in wrong_cases(tok.encode, plain)]
    assert not wrong, f"{len(wrong)} texts without pins changed, first: {wrong[0]!r}"
    new_ids = set(extended[1].added.values())
    assert all(new_ids & set(tok.encode(c["text"], parse_special=c["special"])) for c in with_pins)


def test_extend_keeps_base_metadata(extended):
    base, out = read_gguf(QWEN3), read_gguf(extended[0])
    assert out.keys == base.keys
    for key in base.keys:
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            n = len(base.metadata[key])
            assert list(out.metadata[key][:n]) == list(base.metadata[key])
        else:
            b, o = base.metadata[key], out.metadata[key]
            assert (list(b) == list(o)) if hasattr(b, "__len__") and not isinstance(b, bytes) else b == o, key


def test_extend_skips_terms_already_single_and_errors(extended, tmp_path):
    result = extend(QWEN3, pins=["Python", "kwargs"])
    assert result.added == {} and set(result.already) == {"Python", " Python", "kwargs", " kwargs"}
    with pytest.raises(bpetok.BpetokError, match="cannot pin '<|im_end|>': it is control token"):
        extend(QWEN3, pins=["<|im_end|>"])
    with pytest.raises(bpetok.BpetokError, match="nothing to pin"):
        extend(QWEN3, pins=[])
    with pytest.raises(bpetok.BpetokError, match="not a GGUF file"):
        (tmp_path / "x.gguf").write_bytes(b"x" * 64)
        extend(tmp_path / "x.gguf", pins=["a"])


@pytest.mark.parametrize(
    "pin, message",
    [
        ("<|im_end|>x", "it contains control token 151645 '<|im_end|>'"),
        ("say <|im_start|> now", "it contains control token 151644 '<|im_start|>'"),
        ("</s>", "it is control token 128247"),  # NORMAL in the file, CONTROL after llama.cpp's overrides
        ("a long prefix <|im", "it overlaps control token"),  # cut first, it would break "<|im_end|>"
        ("_end|> and more text", "it overlaps control token"),
    ],
)
def test_extend_refuses_a_pin_that_would_hide_a_control_token(pin, message):
    """A USER_DEFINED pin that swallows <|im_end|> would make the end of a turn vanish from text."""
    with pytest.raises(bpetok.BpetokError, match=re.escape(message)):
        extend(QWEN3, pins=[pin])


def test_extend_keeps_pins_that_a_control_token_contains(tmp_path):
    """A shorter pin inside a control token's text is fine: the control token is cut out first."""
    out = tmp_path / "ext.gguf"
    result = extend(QWEN3, pins=["im_end"], output=out)
    tok = bpetok.from_gguf(out)
    assert tok.encode("<|im_end|>im_end") == [151645, result.added.get("im_end", result.already.get("im_end"))]


def test_cli_extend_names_the_control_token_a_pin_would_hide(tmp_path, capsys):
    out = tmp_path / "ext.gguf"
    assert main(["extend", str(QWEN3), "--pin", "<|im_end|>x", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bpetok: error: ") and "'<|im_end|>'" in err and "151645" in err and err.count("\n") == 1
    assert not out.exists()


# -- llama.cpp agrees ------------------------------------------------------------------------------


def _llama_agrees(path, texts):
    llama_cpp = pytest.importorskip("llama_cpp")
    tok = bpetok.from_gguf(path)
    llama = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    for text in texts:
        for special in (True, False):
            assert tok.encode(text, parse_special=special) == llama.tokenize(
                text.encode(), add_bos=False, special=special), (text, special)
    return tok


def test_llama_cpp_agrees_on_trained_file(trained):
    cases = [c["text"] for c in load_cases("qwen3")[::40]]
    _llama_agrees(trained[0], TEXTS + PINS + [" " + p for p in PINS] + cases)


def test_llama_cpp_agrees_on_extended_file(extended):
    cases = [c["text"] for c in load_cases("qwen3")[::40]]
    pins = EXTEND_PINS + [" " + p for p in EXTEND_PINS] + ["from asyncio import run; isinstance(dataclass)", " xasyncio"]
    _llama_agrees(extended[0], TEXTS + pins + cases)


def test_chunked_reading_changes_no_piece(corpus_file, monkeypatch):
    import sys

    whole = train([corpus_file], vocab_size=380, min_frequency=1)
    monkeypatch.setattr(sys.modules["bpetok.train"], "CHUNK_CHARS", 50)
    chunked = train([corpus_file], vocab_size=380, min_frequency=1)
    assert (chunked.n_pieces, chunked.merges) == (whole.n_pieces, whole.merges)
    from_text = train(texts=[corpus_text()], vocab_size=380, min_frequency=1)
    assert (from_text.n_pieces, from_text.merges) == (whole.n_pieces, whole.merges)


def test_special_tokens_are_cut_out_before_counting(capsys):
    result = train(texts=["a<|endoftext|>b<|endoftext|>\n"] * 50, vocab_size=300, special_tokens=["<|endoftext|>"],
                   min_frequency=1, progress=True)
    assert not [t for t in result.tokens[256:-1] if b"<" in t or b"|" in t]
    assert result.tokens[-1] == b"<|endoftext|>"
    assert "merging" in capsys.readouterr().err  # progress=True draws even when stderr is not a terminal


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(
    text=st.text(alphabet="abcdeé xy\n.", max_size=300),
    pins=st.lists(st.text(alphabet="abcdeéxyQ", min_size=1, max_size=8), max_size=4),
)
def test_random_pins_are_always_single_tokens(text, pins):
    result = train(texts=[text + " x"], vocab_size=256 + 200, pins=pins, min_frequency=1)
    tok = result.tokenizer()
    for term in pins:
        assert len(tok.encode(term)) == 1 and len(tok.encode(" " + term)) == 1
    assert tok.decode(tok.encode(text)) == text


def test_cli_output_that_is_a_directory_leaves_nothing_behind(tmp_path, corpus_file, capsys):
    # `-o DIR` used to write DIR.tmp, fail to rename it over the directory, and leave it there
    target = tmp_path / "out"
    target.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv in (["train", str(corpus_file), "--vocab-size", "300", "-o", str(target)],
                 ["extend", str(SMOLLM2), "--pin", "gradient", "-o", str(target)]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"bpetok: error: {target}: is a directory") and err.count("\n") == 1, err
        assert sorted(p.name for p in tmp_path.iterdir()) == before
        assert not any(target.iterdir())
