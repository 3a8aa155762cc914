"""Synthetic GGUF files for tests: a tiny valid writer and a malformed-file corpus.

`gguf_bytes()` writes a valid GGUF v3 file from typed KVs and tensor shapes (the
tensor data is zeros); `small_model()` gives a llama-like header with a
tokenizer; `write_corpus(dir)` writes the malformed files every reader must
reject quickly (crafted counts and lengths of 2^63, truncation, bad types).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# GGUF value types
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL = range(8)
STRING, ARRAY, UINT64, INT64, FLOAT64 = 8, 9, 10, 11, 12
_FMT = {
    UINT8: "B",
    INT8: "b",
    UINT16: "H",
    INT16: "h",
    UINT32: "I",
    INT32: "i",
    FLOAT32: "f",
    BOOL: "?",
    UINT64: "Q",
    INT64: "q",
    FLOAT64: "d",
}
# ggml tensor types used here: id -> (block size, bytes per block)
F32, F16, Q4_1, Q8_0, Q2_K, I32 = 0, 1, 3, 8, 10, 26
_TENSOR_SIZES = {F32: (1, 4), F16: (1, 2), Q4_1: (32, 20), Q8_0: (32, 34), Q2_K: (256, 84), I32: (1, 4)}
BIG = 2**63

KV = tuple[str, int, Any]  # (key, value type, value); arrays: (ARRAY, (elem type, list))
Tensor = tuple[str, int, tuple[int, ...]]  # (name, ggml type, shape)


def u32(n: int) -> bytes:
    return struct.pack("<I", n)


def u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def gstr(s: str) -> bytes:
    raw = s.encode()
    return u64(len(raw)) + raw


def _value(vtype: int, value: Any) -> bytes:
    if vtype == STRING:
        return gstr(value)
    if vtype == ARRAY:
        etype, items = value
        return u32(etype) + u64(len(items)) + b"".join(_value(etype, v) for v in items)
    return struct.pack("<" + _FMT[vtype], value)


def tensor_nbytes(ttype: int, shape: tuple[int, ...]) -> int:
    block, size = _TENSOR_SIZES[ttype]
    n = 1
    for d in shape:
        n *= d
    return n // block * size


def gguf_bytes(kvs: Sequence[KV], tensors: Sequence[Tensor] = (), *, version: int = 3, alignment: int = 32) -> bytes:
    """A valid GGUF file: header, KVs, tensor infos, padding, zeroed tensor data."""
    out = bytearray(b"GGUF" + u32(version) + u64(len(tensors)) + u64(len(kvs)))
    for key, vtype, value in kvs:
        out += gstr(key) + u32(vtype) + _value(vtype, value)
    offset, sizes = 0, []
    for name, ttype, shape in tensors:
        out += gstr(name) + u32(len(shape)) + b"".join(u64(d) for d in shape)
        out += u32(ttype) + u64(offset)
        n = tensor_nbytes(ttype, shape)
        sizes.append(n)
        offset += -(-n // alignment) * alignment
    if tensors:
        out += b"\0" * (-len(out) % alignment)
    for n in sizes:
        out += b"\0" * n + b"\0" * (-n % alignment)
    return bytes(out)


def tokenizer_kvs(
    tokens: list[str],
    *,
    model: str = "gpt2",
    bos: int = 1,
    eos: int = 2,
    add_bos: bool | None = False,
    add_eos: bool | None = None,
) -> list[KV]:
    kvs: list[KV] = [
        ("tokenizer.ggml.model", STRING, model),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        ("tokenizer.ggml.bos_token_id", UINT32, bos),
        ("tokenizer.ggml.eos_token_id", UINT32, eos),
    ]
    if add_bos is not None:
        kvs.append(("tokenizer.ggml.add_bos_token", BOOL, add_bos))
    if add_eos is not None:
        kvs.append(("tokenizer.ggml.add_eos_token", BOOL, add_eos))
    return kvs


def default_tokens(n: int = 300) -> list[str]:
    return ["<|endoftext|>", "<s>", "</s>"] + [f"tok{i}" for i in range(3, n)]


def small_model(
    *,
    tokens: list[str] | None = None,
    ttype: int = F32,
    file_type: int | None = 0,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    tokenizer: dict[str, Any] | None = None,
    extra: Sequence[KV] = (),
) -> bytes:
    """A llama-like header with a tokenizer and two small tensors of type `ttype`."""
    kvs: list[KV] = [
        ("general.architecture", STRING, "llama"),
        ("general.name", STRING, "tiny test model"),
        ("llama.block_count", UINT32, n_layer),
        ("llama.context_length", UINT32, 2048),
        ("llama.embedding_length", UINT32, n_embd),
        ("llama.attention.head_count", UINT32, n_head),
        ("llama.attention.head_count_kv", UINT32, n_head_kv),
        ("tokenizer.chat_template", STRING, "{{ messages[0]['content'] }}"),
    ]
    if file_type is not None:
        kvs.append(("general.file_type", UINT32, file_type))
    kvs += tokenizer_kvs(tokens or default_tokens(), **(tokenizer or {}))
    kvs += list(extra)
    tensors: list[Tensor] = [("token_embd.weight", ttype, (256, 4)), ("norm.weight", F32, (64,))]
    return gguf_bytes(kvs, tensors)


def small_model_of(arch: str, tokens: list[str] | None = None) -> bytes:
    """`small_model` of architecture `arch` (its keys renamed from llama's)."""
    data = small_model(tokens=tokens).replace(u64(5) + b"llama", u64(len(arch)) + arch.encode())
    for key in (b"block_count", b"context_length", b"embedding_length", b"attention.head_count"):
        old = b"llama." + key
        data = data.replace(u64(len(old)) + old, u64(len(arch) + 1 + len(key)) + arch.encode() + b"." + key)
    return data


def header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + u32(version) + u64(n_tensors) + u64(n_kv)


def _kv_head(key: str, vtype: int) -> bytes:
    return gstr(key) + u32(vtype)


def _tensor_past_end() -> bytes:
    data = gguf_bytes([("general.architecture", STRING, "llama")], [("big.weight", F32, (64, 64))])
    return data[: len(data) - 1024]  # header intact, tensor data cut short


def _malformed() -> dict[str, bytes]:
    valid = small_model()
    pad = b"\0" * 64  # a few bytes so only the declared counts are wrong
    return {
        "empty": b"",
        "one_byte": b"G",
        "text": b"this is not a model, just some text\n" * 4,
        "truncated": valid[: len(valid) // 3],
        "truncated_header": valid[:10],
        "bad_version": header(0, 0, version=99) + pad,
        "version_1": header(0, 0, version=1) + pad,
        "big_endian": b"GGUF" + struct.pack(">I", 3) + pad,
        "tensor_count_2_63": header(BIG, 0) + pad,
        "kv_count_2_63": header(0, BIG) + pad,
        "key_length_2_63": header(0, 1) + u64(BIG) + pad,
        "string_value_2_63": header(0, 1) + _kv_head("general.name", STRING) + u64(BIG) + pad,
        "array_uint8_2_63": header(0, 1) + _kv_head("a", ARRAY) + u32(UINT8) + u64(BIG) + pad,
        "array_string_2_63": header(0, 1) + _kv_head("tokenizer.ggml.tokens", ARRAY) + u32(STRING) + u64(BIG) + pad,
        "array_string_item_2_63": header(0, 1)
        + _kv_head("tokenizer.ggml.tokens", ARRAY)
        + u32(STRING)
        + u64(2)
        + u64(BIG)
        + pad,
        "nested_array": header(0, 1) + _kv_head("a", ARRAY) + u32(ARRAY) + u64(1) + pad,
        "unknown_value_type": header(0, 1) + _kv_head("a", 99) + pad,
        "unknown_array_type": header(0, 1) + _kv_head("a", ARRAY) + u32(77) + u64(1) + pad,
        "duplicate_key": gguf_bytes([("a", UINT8, 1), ("a", UINT8, 2)]),
        "bad_alignment": gguf_bytes([("general.alignment", UINT32, 24)], [("t", F32, (8,))]),
        "tensor_past_end": _tensor_past_end(),
        "tensor_5_dims": header(1, 0) + gstr("t") + u32(5) + u64(1) * 5 + u32(F32) + u64(0) + pad,
        "tensor_dims_overflow": header(1, 0) + gstr("t") + u32(4) + u64(2**40) * 4 + u32(F32) + u64(0) + pad,
        "tensor_unknown_type": header(1, 0) + gstr("t") + u32(1) + u64(32) + u32(200) + u64(0) + pad,
        "tensor_bad_offset": header(1, 0) + gstr("t") + u32(1) + u64(8) + u32(F32) + u64(BIG) + pad + b"\0" * 64,
        "tensor_name_too_long": header(1, 0) + gstr("x" * 100) + u32(1) + u64(8) + u32(F32) + u64(0) + pad,
    }


def write_corpus(directory: str | Path) -> dict[str, Path]:
    """Write every malformed case into `directory`; return name -> path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, data in _malformed().items():
        path = directory / f"{name}.gguf"
        path.write_bytes(data)
        paths[name] = path
    return paths
