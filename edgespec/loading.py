"""Loading a pair: every check that can run before weights load runs first.

Order: both GGUF headers through our bounded reader (a malformed file never
reaches native code), tokenizer compatibility, memory preflight, the static
quantization-asymmetry warning, a GPU-offload note; only then llama.cpp loads
the target and the draft. A failure at any point leaves nothing half-loaded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import load_config
from .gguf_file import describe, read_gguf
from .pair import check_tokenizers, memory_preflight, pair_verdict, quantization_report

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("edgespec")


def load_pair(
    cls: type[Engine],
    target: str | Path,
    draft: str | Path | None,
    *,
    n_ctx: int = 4096,
    n_gpu_layers: int = 0,
    draft_n_gpu_layers: int | None = None,
    threads: int | None = None,
    k: int | None = None,
    p_min: float | None = None,
    name: str | None = None,
) -> Engine:
    t_info = read_gguf(target)
    d_info = read_gguf(draft) if draft is not None else None
    warnings: list[str] = []
    quant = None
    if d_info is not None:
        check_tokenizers(t_info, d_info)
        quant = quantization_report(t_info, d_info)
        warnings += quant.warnings
    draft_layers = n_gpu_layers if draft_n_gpu_layers is None else draft_n_gpu_layers
    memory_preflight(t_info, d_info, n_ctx, target_gpu_layers=n_gpu_layers, draft_gpu_layers=draft_layers)

    from . import backend  # native code only after every check passed

    note = backend.gpu_fallback_warning(max(n_gpu_layers, draft_layers))
    if note:
        warnings.append(note)
    t_model = backend.LlamaModel(target, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, threads=threads)
    try:
        d_model = (
            backend.LlamaModel(draft, n_ctx=n_ctx, n_gpu_layers=draft_layers, threads=threads)
            if draft is not None
            else None
        )
    except BaseException:
        t_model.close()
        raise
    info: dict[str, Any] = {
        "target": describe(t_info),
        "draft": describe(d_info) if d_info is not None else None,
        "pair": pair_verdict(t_info, d_info) if d_info is not None else None,
        "gpu_offload": {
            "supported": backend.supports_gpu_offload(),
            "target_layers": t_model.n_gpu_layers,
            "draft_layers": d_model.n_gpu_layers if d_model is not None else 0,
        },
        "n_ctx": t_model.n_ctx,
        "threads": t_model.threads,
    }
    return cls(
        t_model,
        d_model,
        name=name or Path(target).name,
        warnings=warnings,
        info=info,
        default_k=k,
        p_min=p_min if p_min is not None else 0.0,
        quant_report=quant,
    )


def load_named_pair(cls: type[Engine], name: str, config: str | Path | None = None) -> Engine:
    from .models import prepare_pair

    cfg = load_config(config)
    pair = cfg.pair(name)
    target, draft = prepare_pair(cfg, name)
    t_entry = cfg.model(pair.target)
    d_entry = cfg.model(pair.draft) if pair.draft else None
    return load_pair(
        cls,
        target,
        draft,
        n_ctx=pair.n_ctx,
        n_gpu_layers=t_entry.n_gpu_layers,
        draft_n_gpu_layers=d_entry.n_gpu_layers if d_entry else None,
        threads=t_entry.threads,
        k=pair.k,
        p_min=pair.p_min,
        name=name,
    )
