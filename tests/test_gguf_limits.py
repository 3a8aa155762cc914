"""Headers llama.cpp's loader would abort the process on (a GGML_ASSERT, an uncaught C++
exception) are refused by the reader in one line. Each case aborted `Engine.load` or the
first generation before (a fuzz of a small valid model's metadata, stop 58)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf_corpus import ARRAY, STRING, UINT32, default_tokens, gguf_bytes, small_model, u64

from edgespec.core.errors import ModelFileError
from edgespec.llama.gguf_file import describe, read_gguf
from edgespec.llama.gguf_limits import MAX_LAYERS

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
    ],
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
