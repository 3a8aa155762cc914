"""Pair checks on synthetic headers: tokenizers, quantization asymmetry, memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gguf_corpus import F32 as F32_TYPE
from gguf_corpus import Q2_K, Q4_1, Q8_0, default_tokens, small_model, small_model_of

from edgespec import PairVerdict
from edgespec.core.errors import ConfigError, MemoryPreflightError, PairError
from edgespec.llama.gguf_file import GGUFInfo, read_gguf
from edgespec.llama.pair import (
    check_tokenizers,
    kv_cache_bytes,
    memory_preflight,
    pair_verdict,
    quantization_report,
    quantization_warnings,
    remote_memory_check,
)

GIB = 1024**3

MakeInfo = Callable[..., GGUFInfo]


@pytest.fixture
def make(tmp_path: Path) -> MakeInfo:
    counter = iter(range(1000))

    def build(**kwargs: Any) -> GGUFInfo:
        path = tmp_path / f"m{next(counter)}.gguf"
        path.write_bytes(small_model(**kwargs))
        return read_gguf(path)

    return build


def test_identical_tokenizers_pass(make: MakeInfo) -> None:
    check_tokenizers(make(), make(ttype=Q4_1, file_type=3))


def test_first_differing_token_is_named(make: MakeInfo) -> None:
    tokens = default_tokens()
    other = list(tokens)
    other[7], other[9] = "seven", "nine"
    with pytest.raises(PairError) as err:
        check_tokenizers(make(tokens=tokens), make(tokens=other))
    message = str(err.value)
    assert "token 7 " in message and "'tok7'" in message and "'seven'" in message
    assert "same model family" in message and "\n" not in message


def test_tokens_below_id_5_are_not_compared(make: MakeInfo) -> None:
    other = default_tokens()
    other[3] = "<different special>"
    check_tokenizers(make(), make(tokens=other))


def test_vocab_sizes_within_128_pass_and_200_fail(make: MakeInfo) -> None:
    base = default_tokens(1000)
    check_tokenizers(make(tokens=base), make(tokens=base[:872]))
    with pytest.raises(PairError, match="differ by 200"):
        check_tokenizers(make(tokens=base), make(tokens=base[:800]))


def test_vocab_type_must_match(make: MakeInfo) -> None:
    spm = [*default_tokens(), *(f"<0x{b:02X}>" for b in range(256))]  # SentencePiece's byte pieces
    with pytest.raises(PairError, match="vocab types differ"):
        check_tokenizers(make(tokens=spm), make(tokens=spm, tokenizer={"model": "llama"}))


def test_add_bos_and_bos_id_must_match(make: MakeInfo) -> None:
    with pytest.raises(PairError, match="the target adds a BOS token to a prompt and the draft does not"):
        check_tokenizers(make(tokenizer={"add_bos": True}), make(tokenizer={"add_bos": False}))
    with pytest.raises(PairError, match="the draft adds a BOS token to a prompt and the target does not"):
        check_tokenizers(make(tokenizer={"add_bos": False}), make(tokenizer={"add_bos": True}))
    with pytest.raises(PairError, match="BOS token ids differ"):
        check_tokenizers(make(tokenizer={"add_bos": True, "bos": 1}), make(tokenizer={"add_bos": True, "bos": 0}))
    # as llama.cpp: a BOS that is never added may differ
    check_tokenizers(make(tokenizer={"bos": 1}), make(tokenizer={"bos": 0}))


def test_eos_id_differs_only_warns_when_eos_is_not_added(make: MakeInfo) -> None:
    verdict = pair_verdict(make(), make(tokenizer={"eos": 0}))
    assert verdict.compatible is True
    assert any("EOS ids differ" in w for w in verdict.warnings)
    with pytest.raises(PairError, match="EOS token ids differ"):
        check_tokenizers(make(tokenizer={"add_eos": True}), make(tokenizer={"add_eos": True, "eos": 0}))


def test_q2k_draft_under_f32_target_warns(make: MakeInfo) -> None:
    warnings = quantization_warnings(make(), make(ttype=Q2_K, file_type=10))
    assert len(warnings) == 1
    assert "Q2_K" in warnings[0] and "Q8_0 or Q4_K_M" in warnings[0]


def test_q4_1_and_q8_0_drafts_under_f32_target_do_not_warn(make: MakeInfo) -> None:
    target = make()
    assert quantization_warnings(target, make(ttype=Q4_1, file_type=3)) == []
    assert quantization_warnings(target, make(ttype=Q8_0, file_type=7)) == []


def test_low_bit_draft_under_equally_low_target_does_not_warn(make: MakeInfo) -> None:
    assert quantization_warnings(make(ttype=Q2_K, file_type=10), make(ttype=Q2_K, file_type=10)) == []


def test_q4_draft_kv_cache_warns_and_unknown_kv_type_is_refused(make: MakeInfo) -> None:
    target, draft = make(), make(ttype=Q8_0, file_type=7)
    assert any("q4_0" in w for w in quantization_warnings(target, draft, "q4_0"))
    assert quantization_warnings(target, draft, "q8_0") == []
    with pytest.raises(ConfigError, match="'q3'"):
        quantization_warnings(target, draft, "q3")


def test_quantization_report_carries_the_numbers(make: MakeInfo) -> None:
    report = quantization_report(make(), make(ttype=Q4_1, file_type=3))
    assert report.target_quant == "F32" and report.draft_quant == "Q4_1"
    assert report.target_bpw == pytest.approx(32.0)
    assert report.draft_bpw < 10


def test_kv_cache_size_follows_the_formula(make: MakeInfo) -> None:
    info = make(n_layer=2, n_embd=64, n_head=4, n_head_kv=2)
    # 2 (K and V) * layers * n_ctx * kv heads * head_dim * 2 bytes (f16)
    assert kv_cache_bytes(info, 1000) == 2 * 2 * 1000 * 2 * 16 * 2
    assert kv_cache_bytes(info, 1000, "f32") == 2 * kv_cache_bytes(info, 1000)
    assert kv_cache_bytes(info, 1024, "q8_0") == 2 * 2 * 1024 * 2 * 16 * 34 // 32


def test_memory_preflight_refuses_with_numbers(make: MakeInfo) -> None:
    target, draft = make(), make(ttype=Q4_1, file_type=3)
    with pytest.raises(MemoryPreflightError) as err:
        memory_preflight(target, draft, n_ctx=4096, available_bytes=100 * 1024**2)
    message = str(err.value)
    assert "GiB" in message and "0.10 GiB is available" in message
    assert "n_ctx=4096" in message and "smaller n_ctx" in message and "\n" not in message


def test_memory_preflight_returns_the_estimate_when_it_fits(make: MakeInfo) -> None:
    target, draft = make(), make(ttype=Q4_1, file_type=3)
    est = memory_preflight(target, draft, n_ctx=2048, available_bytes=64 * GIB)
    assert est.fits and est.available == 64 * GIB
    assert est.total == (target.file_size + draft.file_size + est.target_kv + est.draft_kv + est.compute)
    assert est.target_kv == kv_cache_bytes(target, 2048)


def test_memory_preflight_without_a_draft_counts_the_target_only(make: MakeInfo) -> None:
    target = make()
    est = memory_preflight(target, None, n_ctx=512, available_bytes=64 * GIB)
    assert est.draft_weights == est.draft_kv == 0
    assert est.total == target.file_size + est.target_kv + est.compute


def test_gpu_offload_takes_weights_and_cache_off_the_host(make: MakeInfo) -> None:
    target, draft = make(n_layer=2), make(n_layer=2)
    host = memory_preflight(target, draft, n_ctx=4096, available_bytes=64 * GIB)
    offloaded = memory_preflight(
        target,
        draft,
        n_ctx=4096,
        available_bytes=64 * GIB,
        target_gpu_layers=99,
        draft_gpu_layers=99,
    )
    assert offloaded.target_weights == offloaded.target_kv == offloaded.draft_kv == 0
    assert offloaded.total == host.compute < host.total


def test_rpc_servers_must_hold_the_offloaded_target(make: MakeInfo) -> None:
    target = make(n_layer=2)
    need = remote_memory_check(target, 4096, 99, {"a:1": GIB})
    assert need == target.file_size + kv_cache_bytes(target, 4096)
    assert remote_memory_check(target, 4096, 1, {"a:1": GIB}) == need // 3  # 1 of 3 layers remote
    with pytest.raises(MemoryPreflightError) as err:
        remote_memory_check(target, 4096, 99, {"a:1": need // 2, "b:2": need // 3})
    assert "a:1: " in str(err.value) and "b:2: " in str(err.value) and "add a server" in str(err.value)


def test_memory_preflight_reads_available_memory_by_default(make: MakeInfo) -> None:
    pytest.importorskip("psutil")
    est = memory_preflight(make(), make(), n_ctx=256)
    assert est.available > 0


def test_memory_preflight_refuses_a_non_positive_context(make: MakeInfo) -> None:
    with pytest.raises(ConfigError, match="n_ctx"):
        memory_preflight(make(), make(), n_ctx=0, available_bytes=GIB)


def test_pair_verdict_reports_incompatibility_without_raising(make: MakeInfo) -> None:
    other = default_tokens()
    other[7] = "seven"
    verdict = pair_verdict(make(), make(tokens=other, ttype=Q2_K, file_type=10))
    assert verdict.compatible is False
    assert "token 7" in verdict.messages[0]
    assert any("Q2_K" in w for w in verdict.warnings)


@pytest.mark.real
def test_demo_model_is_compatible_with_itself(demo_draft: Path) -> None:
    info = read_gguf(demo_draft)
    check_tokenizers(info, info)
    assert pair_verdict(info, info) == PairVerdict(True)
    est = memory_preflight(info, info, n_ctx=2048, available_bytes=64 * GIB)
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 -> 23,040 bytes of f16 KV per token
    assert est.target_kv == 30 * 2048 * 3 * 64 * 2 * 2


def test_a_load_says_what_inspect_notes_about_a_pair(tmp_path: Path) -> None:
    # EOS ids and architectures that differ were shown by `edgespec inspect` only: a draft of
    # another family ran at 0% acceptance with no word to the user
    from edgespec.llama.loading import pair_notes

    def info(name: str, data: bytes = b"", **kw: Any) -> GGUFInfo:
        path = tmp_path / f"{name}.gguf"
        path.write_bytes(data or small_model(**kw))
        return read_gguf(path)

    target = info("t", ttype=F32_TYPE, file_type=0)
    low = info("d", ttype=Q2_K, file_type=10, tokenizer={"eos": 1})  # a low-bit draft with another EOS id
    quant, verdict, warnings = pair_notes(target, low)
    assert quant.warnings and set(quant.warnings) <= set(verdict.warnings)  # said by both: once here
    assert warnings[: len(quant.warnings)] == list(quant.warnings)
    assert len(warnings) == len(set(warnings)) and any("EOS ids differ" in w for w in warnings)
    # another architecture with the same vocabulary (qwen3moe drafted by qwen3) is a pair as it should be
    other = info("q", data=small_model_of("qwen3"))
    assert any("architectures differ" in w for w in pair_verdict(target, other).warnings)  # inspect says it
    assert not any("architectures differ" in w for w in pair_notes(target, other)[2])
    words = info("w", data=small_model_of("qwen3", tokens=["x", "y", "z", *default_tokens()[3:]]))
    assert any("architectures differ" in w for w in pair_notes(target, words)[2])
