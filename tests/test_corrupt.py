"""Hundreds of corrupted SmolLM2 vocabularies through the whole loader: each loads or is refused.

Then small well-formed files whose tokenizer makes no sense (hypothesis): refused clearly or usable.

Issue 2's promise: a truncated, corrupt or hostile file gives a ValueError subclass (a
:class:`bpetok.BpetokError`) naming what is wrong, never an IndexError, KeyError,
UnicodeDecodeError, RecursionError, MemoryError or a hang, wherever in bpetok the damage is
noticed (the GGUF reader, the vocabulary loader, the overrides, the BPE tables). The variants are
deterministic (a seeded generator), so a failure names a variant that can be rebuilt.
"""

from __future__ import annotations

import contextlib
import gzip
import random
import signal
import struct
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bpetok
from bpetok.vocab.gguf import GGUFValueType
from ggufbuild import HEADER_SIZE, build, layout
from helpers import SMOLLM2

T = GGUFValueType
HANG_SECONDS = 30  # per variant: far above a full load (about 0.5 s), only there to catch hangs
LIES = [0, 1, 2**31, 2**32 - 1, 2**62, 2**63, 2**64 - 1]


@pytest.fixture(scope="module")
def smollm2_bytes() -> bytes:
    with gzip.open(SMOLLM2, "rb") as f:
        return f.read()


def overwrite(data: bytes, offset: int, raw: bytes) -> bytes:
    return data[:offset] + raw + data[offset + len(raw) :]


def flip(data: bytes, offset: int, bit: int) -> bytes:
    return overwrite(data, offset, bytes([data[offset] ^ (1 << bit)]))


def variants(data: bytes):
    """(name, bytes) of each corrupted variant, always the same ones."""
    rng = random.Random(20261129)
    lay = layout(data)
    spans = {key: (start, value_start, end) for key, start, value_start, end in lay.spans}
    tokens_start = spans["tokenizer.ggml.tokens"][0]
    token_strings = lay.strings["tokenizer.ggml.tokens"]
    merge_strings = lay.strings["tokenizer.ggml.merges"]
    type_values = spans["tokenizer.ggml.token_type"][1] + 12  # after the array's type and count

    # Truncations: the header, the small keys, then spread over the token and merge arrays.
    for cut in sorted({*range(0, HEADER_SIZE + 1, 4), *rng.sample(range(HEADER_SIZE, tokens_start), 20)}):
        yield f"truncated at {cut}", data[:cut]
    for cut in sorted(rng.sample(range(tokens_start, len(data)), 30)):
        yield f"truncated at {cut}", data[:cut]
    yield "last byte missing", data[:-1]

    # Bit flips in the header and the small key/values before the token strings.
    for offset in sorted(rng.sample(range(tokens_start + 16), 50)):
        bit = rng.randrange(8)
        yield f"bit {bit} of byte {offset} flipped", flip(data, offset, bit)

    # Bit flips inside token strings and merge strings (including the bytes that make a token special).
    for key, strings, n in (("token", token_strings, 15), ("merge", merge_strings, 15)):
        for index in sorted(rng.sample(range(len(strings)), n)):
            offset, length = strings[index]
            if length:
                at, bit = offset + rng.randrange(length), rng.randrange(8)
                yield f"bit {bit} flipped in {key} {index} (byte {at})", flip(data, at, bit)

    # Lengths, counts and types overwritten: every field of the small keys, sampled string lengths.
    small = [f for f in lay.fields if f.offset < tokens_start or f.what != "string length"]
    for field in small:
        lies = LIES if field.size == 8 else [0, 8, 9, 13, 2**32 - 1]
        for lie in rng.sample(lies, 2):
            yield f"{field.what} of {field.key!r} at {field.offset} set to {lie}", overwrite(
                data, field.offset, lie.to_bytes(field.size, "little")
            )
    for key, strings in (("tokenizer.ggml.tokens", token_strings), ("tokenizer.ggml.merges", merge_strings)):
        for index in sorted(rng.sample(range(len(strings)), 6)):
            prefix = strings[index][0] - 8
            lie = rng.choice(LIES + [strings[index][1] + 1])
            yield f"string {index} of {key!r} has length {lie}", overwrite(data, prefix, lie.to_bytes(8, "little"))

    # The tokenizer keys' types swapped for other types (scalars, arrays of other element types).
    for key in (
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.add_bos_token",
    ):
        type_offset = spans[key][1] - 4
        for vtype in (T.UINT32, T.STRING, T.BOOL, T.INT32, T.UINT64):
            yield f"type of {key!r} set to {vtype.name}", overwrite(data, type_offset, struct.pack("<I", vtype))
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"):
        elem_offset = spans[key][1]
        for vtype in (T.UINT8, T.INT32, T.UINT32, T.STRING, T.ARRAY, T.FLOAT64):
            yield f"element type of {key!r} set to {vtype.name}", overwrite(data, elem_offset, struct.pack("<I", vtype))

    # Token types and special ids set to values the file should never hold.
    for token_id in rng.sample(range(len(token_strings)), 4):
        for value in (-1, 3, 2**31 - 1):
            yield f"token_type[{token_id}] set to {value}", overwrite(
                data, type_values + 4 * token_id, struct.pack("<i", value)
            )
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id"):
        for value in (len(token_strings), 2**32 - 1, 0):
            yield f"{key} set to {value}", overwrite(data, spans[key][1], struct.pack("<I", value))


@contextlib.contextmanager
def hang_guard(seconds: int):
    """Turn a call still running after ``seconds`` into a TimeoutError (where SIGALRM exists)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def hang(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_corrupted_smollm2_variants_load_or_raise_value_errors(tmp_path, smollm2_bytes):
    path = tmp_path / "corrupt.gguf"
    outcomes: Counter[str] = Counter()
    problems, slowest = [], (0.0, "")
    for name, data in variants(smollm2_bytes):
        if data == smollm2_bytes:
            continue  # an overwrite with the value already there (the tokens' type is ARRAY)
        path.write_bytes(data)
        start = time.perf_counter()
        try:
            with hang_guard(HANG_SECONDS):
                bpetok.from_gguf(path)
            outcomes["loaded"] += 1
        except ValueError as e:
            outcomes[type(e).__name__] += 1
            if not isinstance(e, bpetok.BpetokError):
                problems.append(f"{name}: a bare {type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - the point of the test
            problems.append(f"{name}: {type(e).__name__}: {e}")
        slowest = max(slowest, (time.perf_counter() - start, name))
    total = sum(outcomes.values()) + len(problems)
    print(f"{total} variants: {dict(outcomes)}; slowest {slowest[0]:.2f} s ({slowest[1]})")
    assert not problems, "\n".join(problems)
    assert total >= 300, total
    # Both kinds occur: damage the loader cannot notice (a flipped bit in a rare token) loads.
    assert outcomes["loaded"] > 10 and outcomes["GGUFError"] > 100, outcomes


# -- small hostile vocabularies: well-formed GGUF, nonsense tokenizer ------------------------------

TEXTS = [b"<|im_end|>", b"<|endoftext|>", b"</s>", b"<|end|>", b"<|return|>", b"<|call|>", b"<|fim_pad|>",
         b"<mask>", b"<unk>", b"<s>", b"<|tool_response>", b"<think>", b"\xc4\xa0", b"a", b"b", b"ab", b"\xff", b""]
SPECIAL_ID_KEYS = ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                   "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.prefix_token_id"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tokens=st.lists(st.one_of(st.sampled_from(TEXTS), st.binary(max_size=6), st.text(max_size=4).map(str.encode)),
                    max_size=30),
    merges=st.lists(st.one_of(st.binary(max_size=6), st.sampled_from([b"a b", b"\xc4\xa0 a", b" a", b"a  b"])),
                    max_size=10),
    types=st.one_of(st.none(), st.lists(st.integers(-2, 8), max_size=35)),
    pre=st.sampled_from([b"qwen2", b"smollm"]),
    ids=st.lists(st.tuples(st.sampled_from(SPECIAL_ID_KEYS), st.integers(0, 40)), max_size=3,
                 unique_by=lambda kv: kv[0]),
    add_bos=st.one_of(st.none(), st.booleans()),
    name=st.sampled_from([b"x", b"phi-3", b"modern-bert"]),
    text=st.text(max_size=20),
)
def test_hypothesis_vocabularies_load_or_raise_value_errors(
    tmp_path, tokens, merges, types, pre, ids, add_bos, name, text
):
    """Tokens, merges, types and special ids that make no sense: refused clearly, or usable."""
    kvs = [
        ("general.name", T.STRING, name),
        ("tokenizer.ggml.model", T.STRING, b"gpt2"),
        ("tokenizer.ggml.pre", T.STRING, pre),
        ("tokenizer.ggml.tokens", T.ARRAY, (T.STRING, tokens)),
        ("tokenizer.ggml.merges", T.ARRAY, (T.STRING, merges)),
        *[(key, T.UINT32, value) for key, value in ids],
    ]
    if types is not None:
        kvs.append(("tokenizer.ggml.token_type", T.ARRAY, (T.INT32, types)))
    if add_bos is not None:
        kvs.append(("tokenizer.ggml.add_bos_token", T.BOOL, add_bos))
    path = tmp_path / "vocab.gguf"
    path.write_bytes(build(kvs).data)
    try:
        tok = bpetok.from_gguf(path)
    except bpetok.BpetokError:
        return
    for parse_special in (True, False):
        for add_special in (True, False):
            try:
                encoded = tok.encode(text + "<|im_end|></s>", parse_special=parse_special, add_special=add_special)
            except bpetok.BpetokError:  # add_special without a BOS/EOS token
                continue
            assert all(0 <= i < tok.n_tokens for i in encoded)
            tok.decode(encoded)
    for token_id in range(tok.n_tokens):
        tok.piece(token_id), tok.token_bytes(token_id), tok.token_type(token_id), tok.token_attributes(token_id)


def _byte_typed_vocabulary(tmp_path, tokens):
    path = tmp_path / "byte.gguf"
    path.write_bytes(build([
        ("tokenizer.ggml.model", T.STRING, b"gpt2"),
        ("tokenizer.ggml.pre", T.STRING, b"qwen2"),
        ("tokenizer.ggml.tokens", T.ARRAY, (T.STRING, tokens)),
        ("tokenizer.ggml.merges", T.ARRAY, (T.STRING, [])),
        ("tokenizer.ggml.token_type", T.ARRAY, (T.INT32, [6] * len(tokens))),
    ]).data)
    return path


def test_byte_token_too_short_to_name_its_byte_is_refused_at_load(tmp_path):
    # llama.cpp renders every piece while loading; token_to_byte's substr(3, 2) throws on a
    # two-byte text, so the file never loads there either (found by the hypothesis test above).
    path = _byte_typed_vocabulary(tmp_path, [b"<0x41>", b"\xc4\xa0"])
    with pytest.raises(bpetok.VocabularyError, match=r"token 1 b'\\xc4\\xa0' has type BYTE.*tokenizer\.ggml\.token_type"):
        bpetok.from_gguf(path)


def test_byte_token_naming_its_byte_renders_that_byte(tmp_path):
    tok = bpetok.from_gguf(_byte_typed_vocabulary(tmp_path, [b"<0x41>", b"<0x0A>"]))
    assert [tok.piece(0), tok.piece(1)] == [b"A", b"\n"]
