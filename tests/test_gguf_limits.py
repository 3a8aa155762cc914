"""Headers llama.cpp's loader would abort the process on (a GGML_ASSERT, an uncaught C++
exception) are refused by the reader in one line. Each case aborted `Engine.load` or the
first generation before (a fuzz of a small valid model's metadata, stop 58)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf_corpus import (
    ARRAY,
    BOOL,
    F32,
    FLOAT32,
    I32,
    INT32,
    Q8_0,
    STRING,
    UINT32,
    default_tokens,
    gguf_bytes,
    gstr,
    small_model,
    small_model_of,
    tokenizer_kvs,
    u32,
    u64,
)

from edgespec.core.errors import ModelFileError
from edgespec.llama.gguf_file import describe, read_gguf
from edgespec.llama.gguf_limits import MAX_LAYERS, _rwkv_unescape

SPM_BYTES = [f"<0x{b:02X}>" for b in range(256)]


def _read(tmp_path: Path, data: bytes) -> object:
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    return read_gguf(path)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (small_model(n_layer=0), "llama.block_count is 0 (1 to 512)"),
        (small_model(n_layer=MAX_LAYERS + 1), "llama.block_count is 513"),
        (small_model(extra=[("llama.nextn_predict_layers", UINT32, 5)]), "nextn_predict_layers is 5, more than the 2"),
        (small_model(extra=[("llama.expert_count", UINT32, 64)]), "expert_count is 64 but expert_used_count is 0"),
        (small_model(extra=[("llama.expert_count", UINT32, 2000)]), "expert_count is 2000 (at most 1024)"),
        (
            small_model(extra=[("llama.expert_count", UINT32, 4), ("llama.expert_used_count", UINT32, 8)]),
            "expert_used_count is 8, more than the 4 experts",
        ),
        (
            small_model(
                extra=[("llama.expert_count", UINT32, 4), ("llama.expert_used_count", ARRAY, (UINT32, [1, 9]))]
            ),
            "expert_used_count is 9",  # per layer: the most of them
        ),
        (small_model(extra=[("llama.expert_group_count", UINT32, 1)]), "expert_group_count is 1 with 0 experts"),
        (
            small_model(
                extra=[
                    ("llama.expert_count", UINT32, 4),
                    ("llama.expert_used_count", UINT32, 1),
                    ("llama.expert_group_count", UINT32, 3),
                ]
            ),
            "4 experts in 3 groups",
        ),
        (small_model(extra=[("llama.rope.scaling.type", STRING, "bogus")]), "rope.scaling.type is 'bogus'"),
        (small_model(tokens=["a", "b", "a", *default_tokens()[3:]]), "tokens 0 and 2 are both 'a'"),
        (small_model(tokenizer={"model": "llama"}), "no token for byte 0x00"),
        # found by a fuzz of a real model (stop 60), each a SIGABRT before
        (small_model(tokens=["a", "b", "a\0t", *default_tokens()[3:]]), "tokens 0 and 2 are both 'a'"),
        (small_model(extra=[("llama.attention.layer_norm_rms_epsilon", FLOAT32, -1.0)]), "epsilon is -1.0"),
        (small_model(extra=[("llama.attention.layer_norm_rms_epsilon", FLOAT32, float("nan"))]), "epsilon is nan"),
        (small_model(tokenizer={"model": "none"}), "tokenizer.ggml.model is 'none'"),
        (small_model_of("smallthinker"), "smallthinker needs experts: expert_count 0"),
    ],
    ids=lambda x: x[:40] if isinstance(x, str) else "",
)
def test_a_header_llama_cpp_would_abort_on_is_refused_in_one_line(tmp_path: Path, data: bytes, says: str) -> None:
    with pytest.raises(ModelFileError) as err:
        _read(tmp_path, data)
    message = str(err.value)
    assert says in message and "would abort llama.cpp" in message and "\n" not in message


def test_headers_within_the_limits_are_read(tmp_path: Path) -> None:
    tokens = ["", "", *SPM_BYTES, "hello"]  # empty tokens are told apart as llama.cpp does ([EMPTY_i])
    assert _read(tmp_path, small_model(tokens=tokens, tokenizer={"model": "llama"}))
    moe = [
        ("llama.expert_count", UINT32, 8),
        ("llama.expert_used_count", UINT32, 2),
        ("llama.expert_group_count", UINT32, 4),
        ("llama.expert_group_used_count", UINT32, 2),
        ("llama.rope.scaling.type", STRING, "yarn"),
    ]
    assert _read(tmp_path, small_model(extra=moe, n_layer=MAX_LAYERS))
    # an expert count of 1 means none in Hunyuan's dense models: llama.cpp clears it there
    hunyuan = [("general.architecture", STRING, "hunyuan-dense"), ("hunyuan-dense.expert_count", UINT32, 1)]
    assert _read(tmp_path, gguf_bytes(hunyuan, []))
    # a value of the wrong type is llama.cpp's to refuse (cleanly): not judged here
    assert _read(tmp_path, small_model(extra=[("llama.expert_count", STRING, "64")]))


def test_text_that_is_not_utf8_is_shown_replaced(tmp_path: Path) -> None:
    data = small_model().replace(b"tiny test model", b"tiny test m\xe9del")
    facts = describe(_read(tmp_path, data))  # type: ignore[arg-type]
    assert facts["name"] == "tiny test m\ufffddel"
    facts["name"].encode("utf-8")  # printable on a strict UTF-8 terminal


def test_llama_cpps_own_reason_for_refusing_a_file_is_the_error_line(tmp_path: Path) -> None:
    # the reason reached only the debug log (ggml's log levels were read one off), and the
    # error said "check it is a complete GGUF model file" whatever the defect
    from edgespec.llama.backend import LlamaModel

    path = tmp_path / "m.gguf"
    path.write_bytes(small_model().replace(u64(5) + b"llama", u64(5) + b"nolma", 1))
    assert read_gguf(path)  # well formed: llama.cpp is the one that knows its architectures
    with pytest.raises(ModelFileError, match=r"could not load .*m\.gguf: unknown model architecture: 'nolma'"):
        LlamaModel(path, n_ctx=64)


def _header(extra: list, tensors: list, alignment: int = 32) -> bytes:
    kvs = [("general.architecture", STRING, "llama"), ("llama.block_count", UINT32, 2)]
    return gguf_bytes(kvs + tokenizer_kvs(default_tokens()) + extra, tensors, alignment=alignment)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        # a key with a NUL shadows the real one in llama.cpp (its reader stops at the NUL)
        (_header([("llama.block_count\0", UINT32, 100000)], []), "holds a NUL byte"),
        (_header([], [("norm.weight", I32, (64,))]), "tensor 'norm.weight' has integer type I32"),
        (_header([], [("w", F32, (576, 0, 2**62))]), "whose size overflows"),  # ggml asserts on the product
        (_header([], [("w", F32, (3, 0, 3074457345618258602))]), "whose size overflows"),  # ggml's own test
        (_header([], [("w", Q8_0, ())]), "rows of 1 do not fill Q8_0 blocks"),  # a rank-0 tensor: no traceback
    ],
    ids=lambda x: x[:40] if isinstance(x, str) else "",
)
def test_a_tensor_table_llama_cpp_would_abort_on_is_refused_in_one_line(tmp_path: Path, data: bytes, says: str) -> None:
    with pytest.raises(ModelFileError) as err:
        _read(tmp_path, data)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_integer_index_tables_and_shapes_ggml_accepts_are_read(tmp_path: Path) -> None:
    tensors = [("blk.0.ffn_gate_tid2eid.weight", I32, (64,)), ("d2t", I32, (64,)), ("w", F32, (0, 2**62, 4))]
    assert _read(tmp_path, _header([], tensors))  # DeepSeek-V4's and EAGLE3's integer tables


def test_tensor_data_must_start_on_32_bytes_whatever_alignment_the_file_declares(tmp_path: Path) -> None:
    seen = set()
    for pad in range(8):  # the header's length decides where an 8-aligned data section starts
        extra = [("general.alignment", UINT32, 8), ("x", STRING, "y" * pad)]
        data = _header(extra, [("w", F32, (64,))], alignment=8)
        try:
            _read(tmp_path, data)
            seen.add("read")
        except ModelFileError as err:
            assert "not a multiple of 32" in str(err)
            seen.add("refused")
    assert seen == {"read", "refused"}  # 32-aligned starts are fine, the others are refused


def _vocab_of(etype: int, values: list) -> bytes:
    """A small llama model whose tokenizer.ggml.tokens is an array of `etype`."""
    kvs = [
        ("general.architecture", STRING, "llama"),
        ("llama.block_count", UINT32, 2),
        ("llama.context_length", UINT32, 2048),
        ("llama.embedding_length", UINT32, 64),
        ("llama.attention.head_count", UINT32, 4),
    ]
    vocab = [(k, t, (etype, values) if k == "tokenizer.ggml.tokens" else v) for k, t, v in tokenizer_kvs(["a"])]
    return gguf_bytes(kvs + vocab, [("token_embd.weight", F32, (64, 4))])


@pytest.mark.parametrize(("etype", "values"), [(UINT32, list(range(300))), (BOOL, [True] * 300)])
def test_a_vocabulary_that_is_not_strings_is_refused_in_one_line(tmp_path: Path, etype: int, values: list) -> None:
    # (the reader's own check took its elements for strings: AttributeError in run, inspect, models list)
    with pytest.raises(ModelFileError, match=r"tokenizer.ggml.tokens is not an array of strings"):
        _read(tmp_path, _vocab_of(etype, values))


RWKV_BYTES = [f"\\x{b:02x}" for b in range(256)]  # every byte alone, escaped as RWKV's vocabulary is


@pytest.mark.parametrize(
    ("tokens", "says"),
    [
        # C3 BF ("ÿ") made llama.cpp's RWKV tokenizer append token 0 for ever: no token on its path
        (["\\xc3\\xbf", "a"], r"no token for byte 0xC3 alone \(token 0 starts with it\)"),
        ([*RWKV_BYTES[:0x41], *RWKV_BYTES[0x42:], "AB"], "no token for byte 0x41 alone"),
        # an empty token (or one a NUL empties) is named [EMPTY_i] by llama.cpp, and tokenizing "[" aborted
        ([*RWKV_BYTES[:0x5B], *RWKV_BYTES[0x5C:], ""], "no token for byte 0x5B alone"),
        ([*RWKV_BYTES[:0x5B], *RWKV_BYTES[0x5C:], "\0abc"], "no token for byte 0x5B alone"),
    ],
)
def test_an_rwkv_vocabulary_whose_tokenizer_would_never_end_is_refused(tmp_path: Path, tokens: list, says: str) -> None:
    data = small_model(tokens=tokens, tokenizer={"model": "rwkv"})
    with pytest.raises(ModelFileError, match=says):
        _read(tmp_path, data)


def test_an_rwkv_vocabulary_with_every_byte_is_read(tmp_path: Path) -> None:
    tokens = [*RWKV_BYTES, "\\xc3\\xbf", "hello", "\\\\n", "\\t\\t"]
    assert _read(tmp_path, small_model(tokens=tokens, tokenizer={"model": "rwkv"}))


@pytest.mark.parametrize(
    ("escaped", "raw"),
    [
        (b"abc", b"abc"),
        (b"\\t\\n\\r", b"\t\n\r"),
        (b"\\x41\\xff", b"A\xff"),
        (b"\\\\", b"\\"),
        (b"\\q", b"q"),  # any other escaped character stands for itself
        (b"\\xZZ", bytes([((ord("Z") - 48) * 16 + ord("Z") - 48) & 0xFF])),  # no check of the digits, as there
        (b"\\x\xc3\xbf", bytes([((0xC3 - 48) * 16 + 0xBF - 48) & 0xFF])),  # a byte past 0x7F is a negative char
    ],
)
def test_rwkv_tokens_unescape_as_llama_cpp_reads_them(escaped: bytes, raw: bytes) -> None:
    assert _rwkv_unescape(escaped) == raw


def test_a_negative_context_length_is_named_as_the_files(tmp_path: Path) -> None:
    data = small_model().replace(
        gstr("llama.context_length") + u32(UINT32) + u32(2048),
        gstr("llama.context_length") + u32(INT32) + u32(2**32 - 5),
    )
    with pytest.raises(ModelFileError, match=r"llama.context_length is -5, not a number of tokens"):
        _read(tmp_path, data)
