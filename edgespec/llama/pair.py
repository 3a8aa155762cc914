"""Checks on a target/draft pair that run before any weights load.

Contract: every function here reads only `GGUFInfo` headers (see gguf_file) and
numbers; none loads a model. `check_tokenizers` raises PairError when the draft
cannot propose tokens in the target's vocabulary (llama.cpp's
`common_speculative_are_compatible` is the floor); `quantization_warnings`
returns advice when the draft is much lower-bit than the target (a static guess
the engine confirms or retracts from live acceptance); `memory_preflight`
raises MemoryPreflightError when weights + KV caches + compute buffers will not
fit. `pair_verdict` gathers all of it for `edgespec inspect TARGET DRAFT`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core import defaults
from ..core.errors import ConfigError, MemoryPreflightError, PairError
from ..core.info import LiveVerdict, PairVerdict
from .ggml_types import GGML_TYPE_BY_NAME
from .gguf_info import GGUFInfo

VOCAB_MAX_SIZE_DIFFERENCE = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE in llama.cpp
VOCAB_CHECK_START_ID = 5  # SPEC_VOCAB_CHECK_START_TOKEN_ID: ids below are often special
_SAME_FAMILY = "use a draft from the same model family, with the same tokenizer as the target"

# Measured on SmolLM2-135M with an F32 target: Q8_0 a=0.98, Q4_1 a=0.97, Q2_K a=0.71.
# So ~4-5 bit drafts are fine and 2-3 bit drafts are not.
LOW_BIT_DRAFT_BPW = 4.0
LOW_BIT_LABELS = ("Q2_K", "Q3_K", "IQ1", "IQ2", "IQ3", "TQ1", "TQ2", "Q1_0", "Q2_0")
MIN_BPW_GAP = 1.5  # warn only when the target is clearly higher-bit than the draft
LOW_BIT_KV_TYPES = ("q4_0", "q4_1", "iq4_nl")

GIB = 1024**3
COMPUTE_BASE_BYTES = 192 * 1024**2  # per model: graph and scratch buffers
# logits rows an eval returns (LlamaModel caps llama.cpp's outputs there), each 4 floats wide: the
# row and, with rows served as their top-k (set_head), llama.cpp's sampled logits, probs and ids
LOGITS_ROWS = defaults.ROWS_MAX * 4
GPU_HINT = "use a smaller n_ctx, a smaller model or quantization, or offload layers to a GPU"


def check_tokenizers(target: GGUFInfo, draft: GGUFInfo) -> None:
    """Raise PairError unless the draft's vocabulary can stand in for the target's."""
    for role, info in (("target", target), ("draft", draft)):
        if info.tokens is None or info.vocab_type is None:
            raise PairError(
                f"the {role} model {info.path.name} has no tokenizer in its GGUF metadata; "
                "re-convert it with llama.cpp's convert_hf_to_gguf.py"
            )
    if target.vocab_type != draft.vocab_type:
        _mismatch(f"vocab types differ (target {target.vocab_type}, draft {draft.vocab_type})")
    _check_special("BOS", target.add_bos, draft.add_bos, target.bos_id, draft.bos_id)
    _check_special("EOS", target.add_eos, draft.add_eos, target.eos_id, draft.eos_id)
    t_tokens, d_tokens = target.tokens or [], draft.tokens or []
    diff = abs(len(t_tokens) - len(d_tokens))
    if diff > VOCAB_MAX_SIZE_DIFFERENCE:
        _mismatch(
            f"vocab sizes differ by {diff} (target {len(t_tokens)}, draft {len(d_tokens)}; "
            f"at most {VOCAB_MAX_SIZE_DIFFERENCE} allowed)"
        )
    for i in range(VOCAB_CHECK_START_ID, min(len(t_tokens), len(d_tokens))):
        if t_tokens[i] != d_tokens[i]:
            _mismatch(f"token {i} differs (target {_show(t_tokens[i])}, draft {_show(d_tokens[i])})")


def _mismatch(what: str) -> None:
    raise PairError(f"target and draft tokenizers do not match: {what}; {_SAME_FAMILY}")


def _show(token: str) -> str:
    text = repr(token)  # repr escapes newlines and undecodable bytes: one safe line
    return text if len(text) <= 40 else text[:37] + "..."


def _check_special(what: str, t_add: bool | None, d_add: bool | None, t_id: int | None, d_id: int | None) -> None:
    # As llama.cpp: the add flags must agree, and the ids must agree when the token
    # is added. A flag absent from the header is left to the loader's defaults,
    # which depend on the (already equal) vocab type, so it is not compared.
    if t_add is not None and d_add is not None and t_add != d_add:
        adds, skips = ("target", "draft") if t_add else ("draft", "target")
        _mismatch(f"the {adds} adds a {what} token to a prompt and the {skips} does not")
    if (t_add or d_add) and t_id is not None and d_id is not None and t_id != d_id:
        _mismatch(f"{what} token ids differ (target {t_id}, draft {d_id})")


@dataclass(frozen=True)
class QuantReport:
    target_quant: str
    draft_quant: str
    target_bpw: float
    draft_bpw: float
    draft_kv_type: str
    warnings: tuple[str, ...]
    low_bit: bool = False  # the draft's bit width or label is a low one, whatever the target's


def quantization_report(target: GGUFInfo, draft: GGUFInfo, draft_kv_type: str = "f16") -> QuantReport:
    """Bits per weight of both models and the static asymmetry warnings."""
    kv = draft_kv_type.lower()
    if kv.upper() not in GGML_TYPE_BY_NAME:
        raise ConfigError(f"unknown draft KV cache type {draft_kv_type!r}; use f16, bf16, f32, q8_0 or q4_0")
    t_bpw, d_bpw = target.bits_per_weight, draft.bits_per_weight
    t_q, d_q = target.quantization, draft.quantization
    warnings: list[str] = []
    low_bit = d_bpw < LOW_BIT_DRAFT_BPW or d_q.upper().startswith(LOW_BIT_LABELS)
    if low_bit and t_bpw - d_bpw >= MIN_BPW_GAP:
        warnings.append(
            f"the draft ({d_q}, {d_bpw:.1f} bits/weight) is much lower-bit than the target "
            f"({t_q}, {t_bpw:.1f} bits/weight), which usually lowers acceptance and speedup; "
            "use a Q8_0 or Q4_K_M draft"
        )
    if kv in LOW_BIT_KV_TYPES:
        warnings.append(f"a {kv} draft KV cache lowers acceptance; use an f16 or q8_0 draft KV cache")
    return QuantReport(t_q, d_q, t_bpw, d_bpw, kv, tuple(warnings), low_bit)


def quantization_warnings(target: GGUFInfo, draft: GGUFInfo, draft_kv_type: str = "f16") -> list[str]:
    """Static warnings about quantization asymmetry (empty when the pair looks fine)."""
    return list(quantization_report(target, draft, draft_kv_type).warnings)


@dataclass(frozen=True)
class MemoryEstimate:
    target_weights: int
    draft_weights: int
    target_kv: int
    draft_kv: int
    compute: int
    available: int

    @property
    def total(self) -> int:
        return self.target_weights + self.draft_weights + self.target_kv + self.draft_kv + self.compute

    @property
    def fits(self) -> bool:
        return self.total <= self.available


def kv_cache_bytes(info: GGUFInfo, n_ctx: int, kv_type: str = "f16") -> int:
    """K and V for every layer and position; missing keys fall back to safe guesses."""
    block, size = GGML_TYPE_BY_NAME.get(kv_type.upper(), (1, 2))
    n_embd = info.embedding_length or 4096
    n_head = info.head_count or 1
    n_head_kv = info.head_count_kv or n_head
    head_dim = n_embd // n_head
    k_dim = _int_or(info.arch_value("attention.key_length"), head_dim)
    v_dim = _int_or(info.arch_value("attention.value_length"), head_dim)
    n_layer = info.block_count or 32
    elements = n_layer * n_ctx * n_head_kv * (k_dim + v_dim)
    return elements * size // block


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def compute_bytes(info: GGUFInfo) -> int:
    # llama.cpp keeps float logits rows for the most rows an eval returns; the rest is a margin.
    return COMPUTE_BASE_BYTES + (info.vocab_size or 32_000) * LOGITS_ROWS * 4


def memory_preflight(
    target: GGUFInfo,
    draft: GGUFInfo | None,
    n_ctx: int,
    available_bytes: int | None = None,
    *,
    target_kv_type: str = "f16",
    draft_kv_type: str = "f16",
    target_gpu_layers: int = 0,
    draft_gpu_layers: int = 0,
) -> MemoryEstimate:
    """Estimate host memory for the pair (draft None: target alone); raise if it won't fit.

    Layers offloaded to a GPU take their share of weights and KV cache off the host;
    device memory itself is not checked here.
    """
    if n_ctx <= 0:
        raise ConfigError(f"n_ctx must be a positive number of tokens, got {n_ctx}")
    if available_bytes is None:
        import psutil  # lazy: only the preflight needs it

        available_bytes = int(psutil.virtual_memory().available)
    t_host = _host_share(target, target_gpu_layers)
    d_host = _host_share(draft, draft_gpu_layers) if draft is not None else 0.0
    est = MemoryEstimate(
        target_weights=int(target.file_size * t_host),
        draft_weights=int(draft.file_size * d_host) if draft is not None else 0,
        target_kv=int(kv_cache_bytes(target, n_ctx, target_kv_type) * t_host),
        draft_kv=int(kv_cache_bytes(draft, n_ctx, draft_kv_type) * d_host) if draft is not None else 0,
        compute=compute_bytes(target) + (compute_bytes(draft) if draft is not None else 0),
        available=available_bytes,
    )
    if not est.fits:
        raise MemoryPreflightError(
            f"the models need about {est.total / GIB:.2f} GiB of memory (weights "
            f"{(est.target_weights + est.draft_weights) / GIB:.2f}, KV caches at n_ctx={n_ctx} "
            f"{(est.target_kv + est.draft_kv) / GIB:.2f}, compute {est.compute / GIB:.2f}) "
            f"but only {est.available / GIB:.2f} GiB is available; {GPU_HINT}"
        )
    return est


def remote_memory_check(target: GGUFInfo, n_ctx: int, gpu_layers: int, free: Mapping[str, int]) -> int:
    """The bytes the target's offloaded layers need on the RPC servers (weights and KV cache);
    raise if more than the servers have free in all. `free`: endpoint -> free bytes."""
    share = 1.0 - _host_share(target, gpu_layers)
    need = int((target.file_size + kv_cache_bytes(target, n_ctx, "f16")) * share)
    if need > sum(free.values()):
        have = ", ".join(f"{e}: {b / GIB:.2f} GiB free" for e, b in free.items())
        raise MemoryPreflightError(
            f"the target needs about {need / GIB:.2f} GiB on the RPC servers ({have}); "
            "add a server, lower --n-gpu-layers to keep some layers here, or lower --n-ctx"
        )
    return need


def _host_share(info: GGUFInfo, gpu_layers: int) -> float:
    # llama.cpp offloads n_gpu_layers of block_count + 1 (the output layer) layers.
    n = (info.block_count or 32) + 1
    return 1.0 - min(max(gpu_layers, 0), n) / n


def pair_verdict(target: GGUFInfo, draft: GGUFInfo) -> PairVerdict:
    """What `edgespec inspect TARGET DRAFT` reports: compatible, messages, warnings."""
    messages: list[str] = []
    try:
        check_tokenizers(target, draft)
    except PairError as err:
        messages.append(str(err))
    warnings = quantization_warnings(target, draft)
    if target.eos_id is not None and draft.eos_id is not None and target.eos_id != draft.eos_id:
        # Allowed (llama.cpp compares EOS ids only when EOS is added): generation
        # stops on the target's EOS, so this only affects how far the draft runs.
        warnings.append(
            f"EOS ids differ (target {target.eos_id}, draft {draft.eos_id}); generation "
            "stops on the target's EOS, prefer a draft with the same special tokens"
        )
    note = architecture_note(target, draft)
    if note is not None:
        warnings.append(note)
    return PairVerdict(not messages, tuple(messages), tuple(warnings))


def architecture_note(target: GGUFInfo, draft: GGUFInfo) -> str | None:
    """The verdict's note on a draft of another architecture, or None."""
    if target.architecture == draft.architecture:
        return None
    return (
        f"architectures differ (target {target.architecture}, draft {draft.architecture}); "
        "acceptance may be low, prefer a draft from the same model family"
    )


LIVE_MIN_DRAFTED = 64
LIVE_LOW_ACCEPTANCE = 0.8  # same-model drafts at Q4 and up measure 0.9-0.99 (docs/bench.md)


def live_quantization_verdict(report: QuantReport, n_drafted: int, n_accepted: int) -> LiveVerdict | None:
    """Confirm or retract the static asymmetry warning from measured acceptance.

    None until enough draft tokens were seen, and for pairs without an asymmetry warning,
    except that a low-bit draft (Q2_K, Q3_K, ...) whose drafts are seldom accepted is
    reported whatever the headers said: its file's bits per weight may not show a gap (a
    small model's embedding weighs most of it, and llama.cpp quantizes rows K-quants cannot
    hold to other types), so a Q2_K draft under a Q4_1 target went unreported at 36%.
    """
    if not (report.warnings or report.low_bit) or n_drafted < LIVE_MIN_DRAFTED:
        return None
    rate = n_accepted / n_drafted
    if not report.warnings and rate >= LIVE_LOW_ACCEPTANCE:
        return None  # nothing was said: nothing to retract
    if rate < LIVE_LOW_ACCEPTANCE:
        said = "confirmed: " if report.warnings else ""
        return LiveVerdict(
            True,
            f"{said}the {report.draft_quant} draft accepts only {100 * rate:.0f}% of {n_drafted} draft "
            f"tokens under the {report.target_quant} target; use a higher-bit draft of the same model "
            "(Q8_0 or Q4_K_M) for more speed",
        )
    return LiveVerdict(
        False,
        f"the {report.draft_quant} draft accepts {100 * rate:.0f}% of {n_drafted} draft tokens: "
        "its low bit width is not hurting this pair",
    )
