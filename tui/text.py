"""Pure helpers for the chat app: safe text, status lines, the model-info text, Markdown.

Nothing here touches Textual, so it is easy to test; the widgets only render
what these functions return.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from edgespec import EngineInfo

# C0 controls (except newline and tab), DEL and C1 controls are shown as visible
# symbols: model output must never reach the terminal as a control sequence.
_CONTROL = {c: 0x2400 + c for c in range(0x20) if c not in (0x09, 0x0A)}
_CONTROL[0x7F] = 0x2421
_CONTROL.update({c: 0xFFFD for c in range(0x80, 0xA0)})


def visible(text: str) -> str:
    """`text` with control characters replaced by their visible symbols (ESC -> ␛)."""
    return text.translate(_CONTROL)


def fmt_num(value: float | None, spec: str, suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB", "MB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"  # pragma: no cover


def stats_line(stats: Any, *, timings: bool = True) -> str:
    """One line of speculation stats (the same names as `edgespec run`)."""
    if stats is None:
        return "no generation yet"
    parts = [f"{stats.n_generated} tok"]
    parts.append(f"{stats.tokens_per_s:.1f} tok/s" if timings else "— tok/s")
    if stats.speculative:
        parts += [
            f"accept {100 * stats.acceptance_rate:.0f}%",
            *(
                f"{name} {c['accepted']}/{c['drafted']}"
                for name, c in sorted(getattr(stats, "sources", {}).items())
                if len(stats.sources) > 1
            ),
            f"K={stats.k}",
            f"{stats.tokens_per_step:.2f} tok/step",
            f"speedup {fmt_num(stats.est_speedup if timings else None, '.2f', 'x')}",
        ]
    else:
        parts.append("plain decoding")
    parts.append(f"prefill {stats.n_prefilled}")
    return " · ".join(parts)


def gpu_line(info: EngineInfo) -> str:
    go = info.gpu
    if not go.supported:
        return "GPU: none (CPU build)"

    def one(n: int) -> str:
        return f"{n} layers" if n else "CPU"

    out = f"GPU: target {one(go.target_layers)}"
    if info.draft is not None:
        out += f", draft {one(go.draft_layers)}"
    return out


def info_text(engine: Any) -> str:
    """The model-info screen: both models' facts (as `edgespec inspect`), the pair verdict."""
    info: EngineInfo = engine.info()
    lines = [
        f"engine: {engine.name or '—'}   context: {engine.n_ctx} tokens"
        + (f"   threads: {info.threads}" if info.threads else "")
    ]
    for role, facts in (("target", info.target or None), ("draft", info.draft)):
        lines.append("")
        if facts is None:
            draftless = "none (prompt lookup drafts)" if getattr(engine, "lookup", False) else "none (plain decoding)"
            lines.append(f"{role}: " + (draftless if role == "draft" else "—"))
            continue
        lines.append(f"{role}:")
        for key, value in facts.items():
            shown = fmt_bytes(value) if key == "file_size" and isinstance(value, (int, float)) else value
            lines.append(f"  {key:16} {shown}")
    pair = info.pair
    lines.append("")
    if pair is None:
        lines.append("pair: —")
    else:
        lines.append(f"pair: {'compatible' if pair.compatible else 'NOT compatible'}")
        lines += [f"  - {m}" for m in [*pair.messages, *pair.warnings]]
    lines += ["", gpu_line(info)]
    if engine.warnings:
        lines += ["", "warnings:"] + [f"  - {w}" for w in engine.warnings]
    return visible("\n".join(lines))


def to_markdown(
    history: Sequence[dict[str, str]],
    *,
    name: str = "",
    settings: str = "",
    now: datetime | None = None,
) -> str:
    """The conversation as Markdown (what /save writes)."""
    when = (now or datetime.now()).strftime("%Y-%m-%d %H:%M")
    out = [
        f"# edgespec chat{f' — {name}' if name else ''}",
        "",
        f"_{when}{f' · {settings}' if settings else ''}_",
        "",
    ]
    for m in history:
        out += [
            f"## {'You' if m['role'] == 'user' else m['role'].capitalize()}",
            "",
            m["content"].rstrip(),
            "",
        ]
    return "\n".join(out)
