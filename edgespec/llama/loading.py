"""Loading a pair: every check that can run before weights load runs first.

Order: both GGUF headers through our bounded reader (a malformed file never
reaches native code), tokenizer compatibility, memory preflight, the static
quantization-asymmetry warning, a GPU-offload note; only then llama.cpp loads
the target and the draft. A failure at any point leaves nothing half-loaded.
`Engine.load` and `Engine.from_pair` are the public doors to this module;
`pair_files` resolves a models.toml pair (preparing its files) into the same
`LoadOptions` that `Engine.load` builds from its keywords.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import defaults
from ..core.errors import ConfigError, require_integer
from ..core.info import EngineInfo, GpuOffload, PairVerdict
from .config import MIN_N_CTX, check_threads, load_config
from .gguf_file import describe, read_gguf
from .gguf_info import GGUFInfo
from .pair import (
    QuantReport,
    architecture_note,
    check_tokenizers,
    memory_preflight,
    pair_verdict,
    quantization_report,
    remote_memory_check,
)
from .rpc import check_reachable, parse_endpoints

if TYPE_CHECKING:
    from .backend import LlamaModel

log = logging.getLogger("edgespec")
LLAMA_LEAST_CTX = 256  # the least context llama.cpp makes (and the multiple it rounds a larger one up to)
ALL_LAYERS = 999  # n_gpu_layers beyond any model's layer count: all of them
MAX_LAYERS_ASKED = 1_000_000  # the most n_gpu_layers may say (all of them, within llama.cpp's int32)


@dataclass(frozen=True)
class LoadOptions:
    """How to load a pair, and the speculation options it starts with."""

    n_ctx: int = defaults.N_CTX
    n_gpu_layers: int = 0
    draft_n_gpu_layers: int | None = None  # None: as the target
    threads: int | None = None  # None: physical cores
    k: int | None = None  # fixed draft length; None: adaptive
    p_min: float = 0.0
    name: str | None = None
    lookup: bool = True  # prompt lookup drafts
    rpc: tuple[str, ...] = ()  # rpc-servers ("host:port") for the target's layers; the draft stays here
    heads: bool = True  # rows as their top-k from a GPU's backend where sampling allows (Engine(heads=...))

    def __post_init__(self) -> None:  # before a child is started or a file read
        check_threads(self.threads)
        for name, layers in (("n_gpu_layers", self.n_gpu_layers), ("draft_n_gpu_layers", self.draft_n_gpu_layers)):
            if layers is not None:  # (llama.cpp's field is an int32: 2**32 wrapped to 0 layers, unsaid)
                require_integer(name, layers)
                if not -1 <= layers <= MAX_LAYERS_ASKED:
                    raise ConfigError(
                        f"{name} must be a number of layers from 0 to {MAX_LAYERS_ASKED}, or -1 for all (got {layers})"
                    )
        require_integer("n_ctx", self.n_ctx)
        if self.n_ctx < MIN_N_CTX:
            raise ConfigError(f"n_ctx must be at least {MIN_N_CTX} tokens (got {self.n_ctx!r})")


@dataclass
class LoadedPair:
    target: LlamaModel
    draft: LlamaModel | None
    name: str
    warnings: list[str]
    info: EngineInfo
    quant: QuantReport | None
    options: LoadOptions


# targets of this process whose layers are on RPC servers: ggml-rpc keeps one connection per
# server while a model uses it, and an rpc-server serves one client at a time, so a hello of
# ours to a server a live model of ours uses would wait for ourselves
_rpc_models: weakref.WeakKeyDictionary[LlamaModel, tuple[str, ...]] = weakref.WeakKeyDictionary()


def _rpc_in_use() -> set[str]:
    return {e for model, endpoints in list(_rpc_models.items()) if model.loaded for e in endpoints}


def pair_notes(t_info: GGUFInfo, d_info: GGUFInfo) -> tuple[QuantReport, PairVerdict, list[str]]:
    """Refuse a draft whose vocabulary cannot stand in for the target's; else the pair's static
    quantization report, `edgespec inspect`'s verdict and the warnings a load gives: the report's
    and the verdict's notes (EOS ids; architectures, where the vocabularies differ too: a draft of
    another family ran at 0% unsaid, while Qwen3-30B-A3B, qwen3moe, drafted by Qwen3-0.6B, qwen3,
    shares its tokenizer and is a pair as it should be)."""
    check_tokenizers(t_info, d_info)
    quant = quantization_report(t_info, d_info)
    verdict = pair_verdict(t_info, d_info)
    unsaid = architecture_note(t_info, d_info) if t_info.tokens == d_info.tokens else None
    notes = [w for w in verdict.warnings if w not in quant.warnings and w != unsaid]
    return quant, verdict, [*quant.warnings, *notes]


def load_pair(target: str | Path, draft: str | Path | None, options: LoadOptions) -> LoadedPair:
    o = options
    t_info = read_gguf(target)
    d_info = read_gguf(draft) if draft is not None else None
    warnings: list[str] = []
    quant = None
    verdict = None
    if d_info is not None:
        quant, verdict, warnings = pair_notes(t_info, d_info)
    draft_layers = _layers(o.n_gpu_layers if o.draft_n_gpu_layers is None else o.draft_n_gpu_layers)
    # over RPC every target layer goes to the servers unless n_gpu_layers says how many
    t_layers = _layers(o.n_gpu_layers) or (ALL_LAYERS if o.rpc else 0)
    if o.rpc:
        draft_layers = _layers(o.draft_n_gpu_layers or 0)  # the draft stays on this machine
        check_reachable(o.rpc, known=_rpc_in_use())
    n_ctx = min(o.n_ctx, t_info.context_length or o.n_ctx)  # llama.cpp makes no larger a context
    memory_preflight(t_info, d_info, n_ctx, target_gpu_layers=t_layers, draft_gpu_layers=draft_layers)

    from . import backend  # native code only after every check passed

    servers = {endpoint: backend.rpc_devices(endpoint) for endpoint in o.rpc}
    remote = [d for devices in servers.values() for d in devices] or None
    if remote is not None:
        free = {e: sum(backend.device_memory(d)[0] for d in devices) for e, devices in servers.items()}
        remote_memory_check(t_info, n_ctx, t_layers, free)
    note = backend.gpu_fallback_warning(max(0 if o.rpc else t_layers, draft_layers))
    if note:
        warnings.append(note)
    t_model = backend.LlamaModel(target, n_ctx=o.n_ctx, n_gpu_layers=t_layers, threads=o.threads, devices=remote)
    if o.rpc:
        _rpc_models[t_model] = o.rpc
    try:
        d_model = (
            # (no devices given: this machine's own, RPC servers left out)
            backend.LlamaModel(draft, n_ctx=o.n_ctx, n_gpu_layers=draft_layers, threads=o.threads)
            if draft is not None
            else None
        )
    except BaseException:
        t_model.close()
        raise
    # one word on the context made, if it is not the one asked for (a model trained for less gets
    # its own without a word where n_ctx was not set; below llama.cpp's least it makes that, and
    # above it rounds up to a multiple of 256, which gives room and needs no word)
    if t_model.n_ctx < o.n_ctx != defaults.N_CTX:
        warnings.append(
            f"n_ctx {o.n_ctx} is more than {t_info.path.name} was trained for; the context holds {t_model.n_ctx}"
        )
    elif t_model.n_ctx > o.n_ctx and o.n_ctx < LLAMA_LEAST_CTX:
        warnings.append(f"n_ctx {o.n_ctx} is below what llama.cpp makes; the context holds {t_model.n_ctx}")
    info = EngineInfo(
        target=describe(t_info),
        draft=describe(d_info) if d_info is not None else None,
        pair=verdict,
        gpu=GpuOffload(
            supported=backend.supports_gpu_offload(),
            target_layers=t_model.n_gpu_layers,
            draft_layers=d_model.n_gpu_layers if d_model is not None else 0,
            rpc=o.rpc,
        ),
        n_ctx=t_model.n_ctx,
        threads=t_model.threads,
    )
    return LoadedPair(t_model, d_model, o.name or Path(target).name, warnings, info, quant, o)


def _layers(n: int) -> int:
    """n_gpu_layers as llama.cpp takes it, -1 (all, as llama.cpp's own tools say it) spelled out."""
    return ALL_LAYERS if n < 0 else n


def pair_files(
    name: str,
    config: str | Path | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    **overrides: Any,
) -> tuple[Path, Path | None, LoadOptions]:
    """The pair `name` of models.toml, prepared: its files and its load options, with
    `overrides` (LoadOptions fields; None means "as the pair says") on top."""
    from .models import prepare_pair

    cfg = load_config(config)
    pair = cfg.pair(name)
    t_entry = cfg.model(pair.target)
    d_entry = cfg.model(pair.draft) if pair.draft else None
    options = LoadOptions(
        n_ctx=pair.n_ctx,
        n_gpu_layers=t_entry.n_gpu_layers,
        draft_n_gpu_layers=d_entry.n_gpu_layers if d_entry else None,
        threads=t_entry.threads,
        k=pair.k,
        p_min=pair.p_min if pair.p_min is not None else 0.0,
        name=name,
        lookup=pair.lookup,
        rpc=t_entry.rpc,
    )
    known = {f.name for f in dataclasses.fields(LoadOptions)}
    unknown = set(overrides) - known
    if unknown:
        raise TypeError(f"unknown load option {sorted(unknown)[0]!r}")
    if overrides.get("rpc") is not None:  # ("" too: a --rpc "$UNSET" ran on this machine without a word)
        overrides["rpc"] = parse_endpoints(overrides["rpc"])
    options = dataclasses.replace(options, **{k: v for k, v in overrides.items() if v is not None})
    # checked (LoadOptions' own checks) before minutes of downloading or quantizing
    target, draft = prepare_pair(cfg, name, **({"progress": progress} if progress else {}))
    return target, draft, options
