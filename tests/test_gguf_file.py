"""The bounded GGUF reader: valid files parse, every malformed file is refused fast."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from gguf_corpus import (
    ARRAY,
    F32,
    INT32,
    Q2_K,
    Q4_1,
    STRING,
    UINT8,
    UINT32,
    UINT64,
    default_tokens,
    gguf_bytes,
    gstr,
    header,
    small_model,
    u32,
    u64,
    write_corpus,
)

from edgespec.core.errors import ModelFileError
from edgespec.llama.gguf_file import (
    GGML_TYPES,
    MAX_ARRAY_STRINGS,
    MAX_KV,
    MAX_TENSORS,
    SkippedArray,
    describe,
    read_gguf,
)


def _write(tmp_path: Path, data: bytes, name: str = "m.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _refuse_fast(path: Path) -> str:
    start = time.perf_counter()
    with pytest.raises(ModelFileError) as err:
        read_gguf(path)
    assert time.perf_counter() - start < 2.0
    message = str(err.value)
    assert "\n" not in message and "\r" not in message
    return message


def test_valid_synthetic_model_reads_all_facts(tmp_path: Path) -> None:
    info = read_gguf(_write(tmp_path, small_model()))
    assert info.version == 3
    assert info.architecture == "llama"
    assert info.name == "tiny test model"
    assert info.vocab_type == "gpt2"
    assert info.vocab_size == 300
    assert info.tokens is not None and info.tokens[5] == "tok5"
    assert (info.bos_id, info.eos_id, info.add_bos, info.add_eos) == (1, 2, False, None)
    assert (info.block_count, info.embedding_length) == (2, 64)
    assert (info.head_count, info.head_count_kv, info.context_length) == (4, 2, 2048)
    assert info.has_chat_template and "messages" in (info.chat_template or "")
    assert [t.name for t in info.tensors] == ["token_embd.weight", "norm.weight"]
    assert info.parameter_count == 256 * 4 + 64
    assert info.quantization == "F32"
    assert info.bits_per_weight == pytest.approx(32.0)
    last = info.tensors[-1]
    assert last.offset + last.n_bytes <= info.file_size


def test_describe_lists_the_inspect_facts(tmp_path: Path) -> None:
    facts = describe(read_gguf(_write(tmp_path, small_model())))
    assert set(facts) >= {
        "architecture",
        "name",
        "parameters",
        "quantization",
        "bits_per_weight",
        "vocab_type",
        "vocab_size",
        "context_length",
        "chat_template",
        "file_size",
    }
    assert facts["chat_template"] is True and facts["vocab_size"] == 300


def test_quantization_falls_back_to_dominant_tensor_type(tmp_path: Path) -> None:
    info = read_gguf(_write(tmp_path, small_model(ttype=Q4_1, file_type=None)))
    assert info.quantization == "Q4_1"
    # 1024 Q4_1 weights at 5 bits plus 64 F32 norms at 32 bits
    assert info.bits_per_weight == pytest.approx((1024 * 5 + 64 * 32) / 1088)


def test_file_type_label_wins_over_tensor_types(tmp_path: Path) -> None:
    info = read_gguf(_write(tmp_path, small_model(ttype=Q2_K, file_type=10)))
    assert info.quantization == "Q2_K"


def test_gguf_v2_and_custom_alignment_are_accepted(tmp_path: Path) -> None:
    kvs = [("general.alignment", UINT32, 64), ("general.architecture", STRING, "llama")]
    data = gguf_bytes(kvs, [("a", F32, (3,)), ("b", F32, (5,))], version=2, alignment=64)
    info = read_gguf(_write(tmp_path, data))
    assert info.version == 2 and info.alignment == 64
    assert info.data_offset % 64 == 0 and info.tensors[1].offset % 64 == 0


@pytest.mark.parametrize("vtype", [UINT64, INT32])
def test_an_alignment_llama_cpp_would_not_read_is_refused_here(tmp_path: Path, vtype: int) -> None:
    # llama.cpp refuses any type but uint32 ("must be of type u32"), which edgespec said only as
    # "check it is a complete GGUF model file"
    kvs = [("general.alignment", vtype, 32), ("general.architecture", STRING, "llama")]
    with pytest.raises(
        ModelFileError, match=r"general.alignment is stored as u?int(64|32); llama.cpp reads only a uint32"
    ):
        read_gguf(_write(tmp_path, gguf_bytes(kvs, [("a", F32, (3,))])))


def test_large_arrays_are_validated_but_not_kept(tmp_path: Path) -> None:
    merges = [f"a b{i}" for i in range(5000)]
    data = small_model(
        extra=[
            ("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
            ("scores", ARRAY, (UINT8, [1] * 5000)),
            ("small", ARRAY, (UINT32, [1, 2, 3])),
        ]
    )
    info = read_gguf(_write(tmp_path, data))
    assert info.metadata["tokenizer.ggml.merges"] == SkippedArray("string", 5000)
    assert info.metadata["scores"] == SkippedArray("uint8", 5000)
    assert info.metadata["small"] == [1, 2, 3]


def test_token_text_keeps_invalid_utf8_distinct(tmp_path: Path) -> None:
    raw = header(0, 1) + gstr("tokenizer.ggml.tokens") + u32(ARRAY) + u32(STRING) + u64(2)
    raw += u64(1) + b"\xff" + u64(1) + b"\xfe"
    info = read_gguf(_write(tmp_path, raw))
    assert info.tokens is not None and info.tokens[0] != info.tokens[1]


def test_missing_path_and_directory_are_refused(tmp_path: Path) -> None:
    assert "does not exist" in _refuse_fast(tmp_path / "nope.gguf")
    assert "not a file" in _refuse_fast(tmp_path)


CORPUS_CASES = [
    "empty",
    "one_byte",
    "text",
    "truncated",
    "truncated_header",
    "bad_version",
    "version_1",
    "big_endian",
    "tensor_count_2_63",
    "kv_count_2_63",
    "key_length_2_63",
    "string_value_2_63",
    "array_uint8_2_63",
    "array_string_2_63",
    "array_string_item_2_63",
    "nested_array",
    "unknown_value_type",
    "unknown_array_type",
    "duplicate_key",
    "bad_alignment",
    "tensor_past_end",
    "tensor_5_dims",
    "tensor_dims_overflow",
    "tensor_unknown_type",
    "tensor_bad_offset",
    "tensor_name_too_long",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def test_corpus_lists_every_case(corpus: dict[str, Path]) -> None:
    assert sorted(corpus) == sorted(CORPUS_CASES)


@pytest.mark.parametrize("case", CORPUS_CASES)
def test_malformed_file_is_refused_quickly_in_one_line(corpus: dict[str, Path], case: str) -> None:
    message = _refuse_fast(corpus[case])
    assert corpus[case].name in message
    assert "re-download" in message  # says what to do


def test_messages_name_the_defect(corpus: dict[str, Path]) -> None:
    assert "empty" in _refuse_fast(corpus["empty"])
    assert "magic" in _refuse_fast(corpus["text"])
    assert "version 99" in _refuse_fast(corpus["bad_version"])
    assert "past the end" in _refuse_fast(corpus["tensor_past_end"])
    assert "unknown value type 99" in _refuse_fast(corpus["unknown_value_type"])


def test_counts_just_over_the_caps_are_refused(tmp_path: Path) -> None:
    pad = b"\0" * 64
    for n_tensors, n_kv in ((MAX_TENSORS + 1, 0), (0, MAX_KV + 1)):
        path = _write(tmp_path, header(n_tensors, n_kv) + pad * 100_000)
        assert "more than" in _refuse_fast(path)


def test_string_array_at_the_cap_still_reads_fast(tmp_path: Path) -> None:
    head = header(0, 1) + gstr("big") + u32(ARRAY) + u32(STRING)
    ok = _write(tmp_path, head + u64(MAX_ARRAY_STRINGS) + u64(0) * MAX_ARRAY_STRINGS, "ok.gguf")
    start = time.perf_counter()
    assert read_gguf(ok).metadata["big"] == SkippedArray("string", MAX_ARRAY_STRINGS)
    assert time.perf_counter() - start < 2.0
    over = head + u64(MAX_ARRAY_STRINGS + 1) + u64(0) * (MAX_ARRAY_STRINGS + 1)
    assert "limit" in _refuse_fast(_write(tmp_path, over, "over.gguf"))


def test_untrusted_names_cannot_break_the_message_line(tmp_path: Path) -> None:
    data = gguf_bytes([("bad\nkey", UINT8, 1), ("bad\nkey", UINT8, 1)])
    assert "bad\\nkey" in _refuse_fast(_write(tmp_path, data))


def test_type_table_matches_the_gguf_package() -> None:
    gguf = pytest.importorskip("gguf")
    for qtype, (block, size) in gguf.GGML_QUANT_SIZES.items():
        if qtype.name == "Q8_1":
            # gguf 0.19.0 still says 4 + 4 + 32; ggml's block_q8_1 is two halves + 32
            # (static_assert in ggml-common.h), as the newer constants.py says.
            assert GGML_TYPES[int(qtype)] == ("Q8_1", 32, 2 + 2 + 32)
            continue
        assert GGML_TYPES[int(qtype)] == (qtype.name, block, size)


def test_synthetic_writer_agrees_with_the_gguf_package(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    path = _write(tmp_path, small_model(tokens=default_tokens(40)))
    theirs = gguf.GGUFReader(path)
    ours = read_gguf(path)
    assert len(theirs.tensors) == len(ours.tensors)
    assert [t.data_offset for t in theirs.tensors] == [t.offset for t in ours.tensors]
    assert len(theirs.fields) == len(ours.metadata) + 3  # + version, tensor and KV counts


@pytest.mark.real
def test_demo_model_facts(demo_draft: Path) -> None:
    info = read_gguf(demo_draft)
    assert info.architecture == "llama"
    assert info.quantization == "Q4_1"
    assert info.vocab_size == 49152
    assert info.has_chat_template
    assert 130e6 < info.parameter_count < 140e6
    assert 4.5 < info.bits_per_weight < 6.5
    assert info.tensors[-1].offset + info.tensors[-1].n_bytes <= info.file_size


@pytest.mark.real
def test_demo_model_reads_fast_and_its_truncation_is_refused(demo_draft: Path, tmp_path: Path) -> None:
    start = time.perf_counter()
    read_gguf(demo_draft)
    assert time.perf_counter() - start < 2.0
    with demo_draft.open("rb") as f:
        head = f.read(3_000_000)  # the full header and part of the tensor data
    assert "past the end" in _refuse_fast(_write(tmp_path, head))


@pytest.mark.real
def test_demo_model_agrees_with_the_gguf_package(demo_draft: Path) -> None:
    gguf = pytest.importorskip("gguf")
    theirs = gguf.GGUFReader(demo_draft)
    ours = read_gguf(demo_draft)
    assert len(theirs.tensors) == len(ours.tensors)
    for key in ("general.architecture", "tokenizer.ggml.model", "tokenizer.chat_template"):
        assert theirs.fields[key].contents() == ours.metadata[key]
    for key in ("llama.block_count", "llama.context_length", "tokenizer.ggml.eos_token_id"):
        assert theirs.fields[key].contents() == ours.metadata[key]
    assert len(theirs.fields["tokenizer.ggml.tokens"].data) == ours.vocab_size
    their_tensor = {t.name: t for t in theirs.tensors}
    for t in ours.tensors[:5]:
        assert their_tensor[t.name].data_offset == t.offset
        assert their_tensor[t.name].n_bytes == t.n_bytes
        assert their_tensor[t.name].tensor_type.name == t.type_name
