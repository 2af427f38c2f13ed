"""Record llama.cpp reference cases for a GGUF vocabulary with llama-cpp-python.

Writes one JSON object per line, ``{"text": str, "special": bool, "ids": [int]}``, the format of
tests/data/*.jsonl.gz, where ids are llama.cpp's
``llama_tokenize(vocab, text, add_special=false, parse_special=special)``.

    pip install llama-cpp-python==0.3.36       # builds llama.cpp (about 10 minutes on 2 cores)
    python scripts/record_reference_cases.py MODEL.gguf OUT.jsonl.gz [--texts FILE] [--random N] [--seed S]
        [--add-special]

--texts takes a file of cases separated by lines ``__ggml_vocab_test__`` (llama.cpp's .inp format);
--random adds N random strings drawn from many Unicode ranges (the generator tests/test_live_llama.py uses);
--add-special records llama_tokenize(add_special=true) and llama_detokenize's bytes (``"detok"``, hex).

Pre-tokenizer cases (tests/data/pretok/): every llama.cpp pre-tokenizer type, recorded on a copy of
one test vocabulary with only ``tokenizer.ggml.pre`` changed, so llama.cpp splits with that type's
rules and its ids test bpetok's implementation of them::

    python scripts/record_reference_cases.py --pretok-inputs tests/data/pretok-cases.inp  # the texts, once
    python scripts/record_reference_cases.py --pretok tests/data/llama.cpp-tests/ggml-vocab-qwen2.gguf.gz \
        tests/data/pretok/ [PRE ...]                                                    # default: every spec

The raw-UTF-8 types (gemma4, granite-embed-multi-311m, mmbert, sarvam-moe, whitespace), on llama.cpp's
Gemma 4 test vocabulary as a gpt2 model, with llama.cpp b11434 through scripts/llama_vocab_driver.c
(build it as its header says)::

    python scripts/record_reference_cases.py --raw-utf8 tests/data/llama.cpp-tests/ggml-vocab-gemma-4.gguf.gz \
        tests/data/pretok-raw/ /tmp/llama_vocab_driver [PRE ...]
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import lzma
import os
import pathlib
import random
import tempfile

# Ranges that exercise the pre-tokenizers: ASCII, Latin-1, combining marks, Greek/Cyrillic,
# Arabic/Hebrew, Devanagari, Thai, CJK, Hangul, fullwidth, emoji, digits of many scripts,
# whitespace of many kinds, and Unicode 15/16 additions llama.cpp's table may lack.
RANGES = [
    (0x20, 0x7E), (0x09, 0x0D), (0xA0, 0xFF), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
    (0x590, 0x5FF), (0x600, 0x6FF), (0x660, 0x669), (0x900, 0x97F), (0xE00, 0xE7F), (0x2000, 0x206F),
    (0x2150, 0x218F), (0x2460, 0x24FF), (0x3000, 0x303F), (0x3040, 0x30FF), (0x4E00, 0x4FFF),
    (0xAC00, 0xACFF), (0xFF00, 0xFFEF), (0x1F300, 0x1F6FF), (0x1F900, 0x1F9FF), (0x1D7CE, 0x1D7FF),
    (0x10D40, 0x10D8F), (0x2EBF0, 0x2EE5D), (0x1C, 0x1F), (0x85, 0x85), (0xFE00, 0xFE0F), (0x200B, 0x200D),
]
# More scripts the pre-tokenizer families treat apart (Han extensions and compatibility
# ideographs, kana, halfwidth forms, Bopomofo, Hangul jamo, Thai/Lao/Khmer/Myanmar, Kangxi radicals,
# CJK punctuation, Greek extended, letterlike symbols), and the Han ranges' unassigned ends.
PRETOK_RANGES = RANGES + [
    (0x3400, 0x4DBF), (0xF900, 0xFAFF), (0x9FF0, 0x9FFF), (0x2B730, 0x2B82F), (0x2CE9F, 0x2CEBF), (0x2FA10, 0x2FA1F),
    (0x20000, 0x2001F), (0xFF61, 0xFF9F), (0x3100, 0x312F), (0x3130, 0x318F), (0x1100, 0x11FF), (0x0E80, 0x0EFF),
    (0x1780, 0x17FF), (0x1000, 0x109F), (0x2F00, 0x2FDF), (0x3000, 0x3003), (0x1F00, 0x1FFF), (0x2100, 0x214F),
    (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F), (0x0041, 0x005A), (0x0061, 0x007A), (0x0030, 0x0039), (0x2026, 0x2026),
    (0x0964, 0x0964), (0x06D4, 0x06D4), (0x060C, 0x060C), (0x01C4, 0x01CC), (0x02B0, 0x02FF), (0x0300, 0x0310),
]
# Hand-picked edge cases for the pre-tokenizer families: digit runs and groupings, CamelCase,
# contractions in any case, CJK/kana/Hangul runs and their neighbours, long whitespace runs (Jais
# 2 cuts them at 512, 256... 4), the strings chameleon and bloom treat apart, special tokens.
PRETOK_EDGE_CASES = [
    "", " ", "  ", "   ", "\n", "\n\n\n", "\r\n", "\t\t", " \n ", "a", "a ", " a", "a  1", "ab 1234", "x1abc",
    "1", "12", "123", "1234", "1234567", "12345678901234", "1,234.5", "3.14159", "$1,000,000.00", "v1.2.3-rc4",
    "٣٤٥٦٧", "१२३४५६", "½¾⅓", "①②③", "Ⅻ", "2024-01-01T12:34:56Z", "0x7fffffff", "1e-10", "a123b4567c",
    "CamelCaseWord", "HTTPServer", "iPhone", "XMLHttpRequest", "getHTTPResponseCode", "snake_case_name",
    "ALLCAPS", "Élan Über ÇA", "ǅemal ǈub", "ʰʲ modifier", "İstanbul'da K", "Straße",
    "I'M DON'T WE'LL YOU'RE THEY'VE HE'D she's", "it's y'all 'tis 'TWAS", " 's", "'s", "'", "''", "rock'n'roll",
    "Hello , world ! it 's I 'm ' quoted ' .", "x ?y !z .w ,v 'mom ' 're ' 've 't 'd 'll",
    "中文字符测试", "日本語のテキストです。", "カタカナとひらがな", "ﾊﾝｶｸｶﾀｶﾅ", "한국어 텍스트입니다", "ㄱㄴㄷ ㅏㅑ",
    "ㄅㄆㄇ", "中文abc中文", "a中b", "!中", " 中", "中1文2", "漢字かな交じり文、句読点。", "「引用」（括弧）",
    "ภาษาไทย ๑๒๓", "ພາສາລາວ", "ភាសាខ្មែរ", "မြန်မာ", "⼀⼆⼃", "豈更車", "\U0002ebf0\U0002ebf1x",
    "\U00020000\U0002a6df\U0002b73a\U0002b81f", "\u9fff\ufa6e\ufadf", "हिन्दी भाषा", "العربية ١٢٣", "עברית",
    "Ελληνικά ἀρχή", "Русский текст", "e\u0301\u0301 a\u0308", "👍🏽 😀😃", "ＡＢＣ１２３！？", "…。，、।۔،",
    "a.b,c!d?e…f。g，h、i।j۔k،l (a|b)", ".append(x)", "obj.method().chain", "#include <stdio.h>",
    "def f(x):\n    return x**2\n", "if (a && b) { c++; }", "a/b/c", "https://example.com/a?b=1&c=2",
    "<sentinel:12>", "<sentinel:x>", "IMGIMGABCDZ", "IMGIMGABCDEZ", "    four spaces", "  two\ttab\n",
    "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>", "</s>", "<think>x</think>",
    "x\u3000\u3000y", "\u00a0a\u00a0", "\x1c\x1d\x1e\x1f", "a\x85b", "a\u2028b", "\u200b\u200d",
    "a" + " " * 600 + "b", " " * 520, "\n" * 40 + "x", "a\t\t\t\t\t\t\t\t\tb", "a \n\n b", "end   ",
]


def corpus_snippets(corpus_dir: str, rng: random.Random, per_file: int, size: int) -> list[str]:
    """``per_file`` slices of about ``size`` characters from each of /work/shared/corpus's texts."""
    snippets = []
    for name in ("en.txt.xz", "code.txt.xz", "multi.txt.xz"):
        text = lzma.open(os.path.join(corpus_dir, name), "rt", encoding="utf-8").read()
        for _ in range(per_file):
            start = rng.randrange(len(text) - size)
            snippets.append(text[start:start + rng.randint(size // 2, size)])
    return snippets


def pretok_fuzz(rng: random.Random, count: int) -> list[str]:
    """``count`` random strings from PRETOK_RANGES (special-token snippets mixed in)."""
    fuzz = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 10)):
            if rng.random() < 0.15:
                parts.append(rng.choice(SPECIAL_SNIPPETS))
            else:
                lo, hi = rng.choice(PRETOK_RANGES)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
        fuzz.append("".join(parts))
    return fuzz


def pretok_texts(corpus_dir: str, seed: int = 13) -> list[str]:
    """The inputs of tests/data/pretok/: edge cases, fuzz from many Unicode ranges, prose/code/multilingual."""
    rng = random.Random(seed)
    return PRETOK_EDGE_CASES + pretok_fuzz(rng, 100) + corpus_snippets(corpus_dir, rng, 15, 160)


def write_inputs(path: str, texts: list[str]) -> None:
    """llama.cpp's .inp format: every text followed by a separator line."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        for text in texts:
            f.write(text + SEPARATOR)


def read_inputs(path: str) -> list[str]:
    with open(path, encoding="utf-8", newline="") as f:
        return f.read().split(SEPARATOR)[:-1]


def gguf_with_pre(src: str, dst: str, pre: str) -> None:
    """Copy the GGUF vocabulary ``src`` (plain or .gz) to ``dst`` with tokenizer.ggml.pre set to ``pre``."""
    from bpetok.vocab.gguf import GGUFValueType, read_gguf
    from bpetok.vocab.gguf_writer import items_of, write_gguf

    items = [item for item in items_of(read_gguf(src)) if item[0] != "tokenizer.ggml.pre"]
    if pre:  # "" is a file without the key (llama.cpp's default pre-tokenizer)
        items.insert(1, ("tokenizer.ggml.pre", GGUFValueType.STRING, pre, None))
    write_gguf(dst, items)


def detokenize(llama, ids: list[int]) -> bytes:
    """llama_detokenize(remove_special=False, unparse_special=True): the bytes decode_bytes must give."""
    import llama_cpp

    size = 64 + 64 * len(ids)
    buf = ctypes.create_string_buffer(size)
    arr = (llama_cpp.llama_token * len(ids))(*ids)
    n = llama_cpp.llama_detokenize(llama._model.vocab, arr, len(ids), buf, size, False, True)
    if n < 0:
        raise RuntimeError(f"detokenize needs {-n} bytes, had {size}")
    return buf.raw[:n]


def record_pretok(base: str, out_dir: str, inputs: str, pres: list[str]) -> None:
    """For each pre name: llama.cpp's ids for every input on ``base`` with that pre, both parse_special.

    Writes ``out_dir/<pre>.json.gz``: {"pre", "base", "inputs", "ids": [ids with parse_special
    false], "special": {index: ids with parse_special true, where they differ}, "bos": ids of
    "Hi" with add_special, "detok": [hex of llama_detokenize(ids) for the first 40 inputs]}.
    """
    from llama_cpp import Llama

    from bpetok.plugins import get_registry

    texts = read_inputs(inputs)
    if not pres:  # one name per registered spec (names sharing a spec split alike)
        pres = [row.spec.pre_names[0] for row in get_registry().rows() if row.pre == row.spec.pre_names[0]]
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for pre in pres:
            path = os.path.join(tmp, "vocab.gguf")
            gguf_with_pre(base, path, pre)
            llama = Llama(path, vocab_only=True, verbose=False)
            plain = [llama_ids(llama, text, False) for text in texts]
            special = {}
            for i, text in enumerate(texts):
                ids = llama_ids(llama, text, True)
                if ids != plain[i]:
                    special[i] = ids
            try:
                bos = llama.tokenize(b"Hi", add_bos=True, special=False)
            except Exception as e:  # llama.cpp asserts when add_bos is set and there is no BOS
                bos = f"error: {type(e).__name__}"
            record = {"pre": pre, "base": os.path.basename(base), "inputs": os.path.basename(inputs), "ids": plain,
                      "special": special, "bos": bos, "detok": [detokenize(llama, ids).hex() for ids in plain[:40]]}
            del llama
            name = pre or "(no pre)"
            with gzip.open(os.path.join(out_dir, f"{name}.json.gz"), "wt", encoding="utf-8") as f:
                json.dump(record, f, ensure_ascii=False, separators=(",", ":"))
            print(f"{name}: {len(texts)} texts, {len(special)} differ with parse_special")

# -- raw-UTF-8 types (tests/data/pretok-raw/) ----------------------------------------------------
# gemma4, granite-embed-multi-311m, mmbert, sarvam-moe and whitespace run BPE over raw UTF-8; their
# cases are recorded on llama.cpp's Gemma 4 test vocabulary as a gpt2 model, with llama.cpp b11434
# itself through scripts/llama_vocab_driver.c (llama-cpp-python 0.3.36 does not know mmbert; the
# other four are cross-checked against it). llama.cpp aborts on some inputs for some of these
# types (whitespace: any space next to other whitespace): the driver dies and the case is
# recorded as null.
RAW_UTF8_PRES = ["gemma4", "granite-embed-multi-311m", "mmbert", "sarvam-moe", "whitespace"]
RAW_UTF8_EXTRA = [
    "\u2581", "a \u2581 b", "\u2581\u2581x", "x\u2581", "\n\n\n", "a\n\n\nb", "a\n \nb", "\n\n  \n", " \n", "\t\n",
    "<mask>", " <mask>", "a <mask> b", "<mask> x", "<start_of_turn>user\nHi<end_of_turn>\n", "<|turn>model\n<turn|>",
    "<eos>", "<bos>Hi", "<pad>", "x\u3000y", "a\u00a0b", "a\u2028b", "a\x85b", "a\u200bb", "tab\there", "a\t\tb",
    "\r\n\r\n", "word  word", " ", "  ", "Hello World", "HELLO world 123", "ǅ ǈ", "e\u0301", "\U0001f600\U0001f600",
]
# Raw bytes (parse_special false): invalid UTF-8, overlongs (c0 a0 is a space), encoded
# surrogates, a sequence past U+10FFFF.
RAW_UTF8_BYTES = [
    b"a\xffb", b"\xff", b"a\xc0\xa0b", b"\xc0\xa0", b"\xc0\xbc", b"x\xed\xa0\x80y", b"\xe4\xb8a", b"x\xf4\x90\x80\x80",
    b"\xe2\x96", b"a \xe2\x96\x81 b", b"\n\xc0\xa0\n",
]


class LlamaDriver:
    """llama.cpp's tokenizer through scripts/llama_vocab_driver.c (which tokenizes in a forked child,
    so an abort costs one child); restarted should the driver itself die."""

    def __init__(self, driver: str, gguf: str):
        self.argv = [driver, gguf]
        self.proc = None

    def _start(self):
        import subprocess

        if self.proc is None:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL)
        return self.proc

    def _ask(self, request: bytes) -> bytes | None:
        """The first i32 of the answer and its payload, or None when llama.cpp aborted."""
        proc = self._start()
        try:
            proc.stdin.write(request)
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        head = proc.stdout.read(4)
        if len(head) < 4:
            proc.wait()
            self.proc = None
            return None
        return head

    def _i32(self, n: int) -> list[int]:
        import struct

        return list(struct.unpack(f"<{n}i", self.proc.stdout.read(4 * n))) if n else []

    def tokenize(self, data: bytes, add_special: bool, parse_special: bool) -> list[int] | None:
        import struct

        head = self._ask(b"T" + bytes((add_special, parse_special)) + struct.pack("<I", len(data)) + data)
        n = None if head is None else struct.unpack("<i", head)[0]
        if n is None or n == -(2**31):  # llama.cpp aborted (in the driver's child, or the driver)
            return None
        return self._i32(n)

    def piece(self, token_id: int, special: bool) -> bytes:
        import struct

        head = self._ask(b"P" + struct.pack("<i", token_id) + bytes((special,)))
        n = struct.unpack("<i", head)[0]
        return self.proc.stdout.read(n)

    def detokenize(self, ids: list[int]) -> bytes:
        import struct

        head = self._ask(b"D" + struct.pack(f"<I{len(ids)}i", len(ids), *ids))
        n = struct.unpack("<i", head)[0]
        return self.proc.stdout.read(n)

    def info(self) -> tuple[int, bool, int]:
        import struct

        n_tokens = struct.unpack("<i", self._ask(b"I"))[0]
        add_bos, bos = self._i32(2)
        return n_tokens, bool(add_bos), bos

    def is_eog(self, token_id: int) -> bool:
        import struct

        return bool(struct.unpack("<i", self._ask(b"E" + struct.pack("<i", token_id)))[0])

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None


def pieces_digest(rows) -> str:
    """SHA-256 of ``[[id, hex(piece special), hex(piece plain)], ...]`` as compact JSON: the whole
    token_to_piece table in 64 characters (tests recompute it from bpetok's pieces)."""
    import hashlib

    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def record_raw_utf8(base: str, out_dir: str, inputs: str, driver: str, pres: list[str]) -> None:
    """For each raw-UTF-8 pre name: llama.cpp b11434's ids (null where it aborts), both
    parse_special, the raw-byte cases, BOS, detokenized bytes, and every id's pieces (a digest
    and a sample), on ``base`` as a gpt2 vocabulary with that pre. Writes ``out_dir/<pre>.json.gz``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gguf_with_pre", pathlib.Path(__file__).parent / "gguf_with_pre.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    texts = read_inputs(inputs) + RAW_UTF8_EXTRA
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for pre in pres or RAW_UTF8_PRES:
            path = os.path.join(tmp, f"{pre}.gguf")
            module.gguf_with_pre(base, path, pre, "gpt2")
            llama = LlamaDriver(driver, path)
            plain = [llama.tokenize(t.encode("utf-8", "surrogatepass"), False, False) for t in texts]
            special = {}
            for i, text in enumerate(texts):
                ids = llama.tokenize(text.encode("utf-8", "surrogatepass"), False, True)
                if ids != plain[i]:
                    special[i] = ids
            raw = [[data.hex(), llama.tokenize(data, False, False)] for data in RAW_UTF8_BYTES]
            bos = llama.tokenize(b"Hi", True, False)
            n_tokens, add_bos, bos_id = llama.info()
            rows = [[i, llama.piece(i, True).hex(), llama.piece(i, False).hex()] for i in range(n_tokens)]
            eog = [i for i in range(n_tokens) if llama.is_eog(i)]
            detok = [None if ids is None else llama.detokenize(ids).hex() for ids in plain[:60]]
            llama.close()
            rng = random.Random(pre)
            sample = sorted(set(rng.sample(range(n_tokens), 3000)) | set(range(300)))
            aborted = [i for i, ids in enumerate(plain) if ids is None]
            agrees = cross_check_llama_cpp_python(path, texts, plain, special) if pre != "mmbert" else None
            record = {
                "pre": pre, "model": "gpt2", "base": os.path.basename(base), "inputs": os.path.basename(inputs),
                "extra": RAW_UTF8_EXTRA, "llama.cpp": "b11434 (scripts/llama_vocab_driver.c)",
                "llama_cpp_python_0.3.36_agrees": agrees,
                "ids": plain, "special": special, "bytes": raw, "bos": bos, "add_bos": add_bos, "bos_id": bos_id,
                "detok": detok, "eog": eog, "n_tokens": n_tokens, "pieces_sha256": pieces_digest(rows),
                "pieces_sample": [rows[i] for i in sample],
            }
            with gzip.open(os.path.join(out_dir, f"{pre}.json.gz"), "wt", encoding="utf-8") as f:
                json.dump(record, f, ensure_ascii=False, separators=(",", ":"))
            print(f"{pre}: {len(texts)} texts, {len(aborted)} aborted, {len(special)} differ with parse_special, "
                  f"llama-cpp-python agrees: {agrees}")


def cross_check_llama_cpp_python(path: str, texts: list[str], plain, special) -> bool:
    """Whether llama-cpp-python 0.3.36 gives the same ids where llama.cpp b11434 did not abort
    (its llama.cpp aborts the whole process on those, so they are not asked)."""
    from llama_cpp import Llama

    llama = Llama(path, vocab_only=True, verbose=False)
    for i, text in enumerate(texts):
        data = text.encode("utf-8", "surrogatepass")
        if plain[i] is not None and llama.tokenize(data, add_bos=False, special=False) != plain[i]:
            return False
        expected = special.get(i, plain[i])
        if expected is not None and llama.tokenize(data, add_bos=False, special=True) != expected:
            return False
    return True


SPECIAL_SNIPPETS = ["<|im_end|>", "<|endoftext|>", "<think>", "</think>", "</s>", "<|im_start|>", "<|im_end",
                    "<reponame>", "<|fim_pad|>", "'s", "'LL", " 's", "\r\n", "  ", "123456"]


def random_texts(rng: random.Random, count: int) -> list[str]:
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.15:
                parts.append(rng.choice(SPECIAL_SNIPPETS))
            else:
                lo, hi = rng.choice(RANGES)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
        texts.append("".join(parts))
    return texts


SEPARATOR = "\n__ggml_vocab_test__\n"


def llama_ids(llama, text: str, special: bool) -> list[int]:
    return llama.tokenize(text.encode("utf-8"), add_bos=False, special=special)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?")
    parser.add_argument("out", nargs="?")
    parser.add_argument("--texts", help="a file of cases separated by __ggml_vocab_test__ lines")
    parser.add_argument("--random", type=int, default=0, help="add N random strings")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--add-special", action="store_true", help="add_special=true, and llama_detokenize's bytes")
    parser.add_argument("--pretok-inputs", metavar="FILE", help="write the pre-tokenizer cases' texts to FILE")
    parser.add_argument("--pretok", nargs="+", metavar=("BASE OUT_DIR", "PRE"),
                        help="record every pre-tokenizer type's ids on BASE with its pre, into OUT_DIR")
    parser.add_argument("--raw-utf8", nargs="+", metavar=("BASE OUT_DIR DRIVER", "PRE"),
                        help="record the raw-UTF-8 types on BASE as a gpt2 vocabulary with llama.cpp through "
                             "DRIVER (scripts/llama_vocab_driver.c), into OUT_DIR")
    parser.add_argument("--corpus", default="/work/shared/corpus", help="where en/code/multi.txt.xz are")
    parser.add_argument("--inputs", default=str(pathlib.Path(__file__).parent.parent / "tests/data/pretok-cases.inp"))
    args = parser.parse_args()

    if args.pretok_inputs:
        texts = pretok_texts(args.corpus)
        write_inputs(args.pretok_inputs, texts)
        print(f"wrote {len(texts)} texts to {args.pretok_inputs}")
        return
    if args.raw_utf8:
        if len(args.raw_utf8) < 3:
            parser.error("--raw-utf8 needs BASE, OUT_DIR and DRIVER")
        base, out_dir, driver, *pres = args.raw_utf8
        record_raw_utf8(base, out_dir, args.inputs, driver, pres)
        return
    if args.pretok:
        if len(args.pretok) < 2:
            parser.error("--pretok needs BASE and OUT_DIR")
        record_pretok(args.pretok[0], args.pretok[1], args.inputs, args.pretok[2:])
        return
    if not (args.model and args.out):
        parser.error("MODEL and OUT are required")

    from llama_cpp import Llama

    llama = Llama(args.model, vocab_only=True, verbose=False)
    texts = []
    if args.texts:
        texts += read_inputs(args.texts)
    texts += random_texts(random.Random(args.seed), args.random)
    with gzip.open(args.out, "wt", encoding="utf-8") as out:
        for text in texts:
            for special in (False, True):
                if args.add_special:
                    ids = llama.tokenize(text.encode("utf-8"), add_bos=True, special=special)
                    case = {"text": text, "special": special, "add_special": True, "ids": ids,
                            "detok": detokenize(llama, ids).hex()}
                else:
                    case = {"text": text, "special": special, "ids": llama_ids(llama, text, special)}
                out.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"wrote {2 * len(texts)} cases to {args.out}")


if __name__ == "__main__":
    main()
