"""Pure helpers for the chat app: safe text, draft/target splitting, status lines, Markdown.

Nothing here touches Textual, so it is easy to test; the widgets only render
what these functions return.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

# C0 controls (except newline and tab), DEL and C1 controls are shown as visible
# symbols: model output must never reach the terminal as a control sequence.
_CONTROL = {c: 0x2400 + c for c in range(0x20) if c not in (0x09, 0x0A)}
_CONTROL[0x7F] = 0x2421
_CONTROL.update({c: 0xFFFD for c in range(0x80, 0xA0)})


def visible(text: str) -> str:
    """`text` with control characters replaced by their visible symbols (ESC -> ␛)."""
    return text.translate(_CONTROL)


Segment = tuple[str, bool]  # (text, from the draft)


class StepSplitter:
    """Splits one step's text into what the accepted draft tokens and the target's tokens wrote.

    StreamEvent gives the step's text and a per-token `from_draft` flag (draft tokens
    come first). To colour them apart, this mirrors the engine's incremental UTF-8
    decoding of the same tokens with the target's `piece` function; if the result
    ever disagrees with the event's text (it should not), the step is shown as the
    target's own text. Call it from the generation thread (the piece buffer is not
    shared across threads).
    """

    def __init__(self, piece: Callable[[int], bytes] | None) -> None:
        self._piece = piece
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def split(self, text: str, tokens: Sequence[int], from_draft: Sequence[bool], final: bool = False) -> list[Segment]:
        n_draft = sum(1 for f in from_draft if f)
        if self._piece is not None:
            try:
                d = "".join(self._utf8.decode(self._piece(t)) for t in tokens[:n_draft])
                t = "".join(self._utf8.decode(self._piece(t)) for t in tokens[n_draft:])
                if final:
                    t += self._utf8.decode(b"", final=True)
            except Exception:  # noqa: BLE001 - colouring must never break the chat
                d, t = "", None  # type: ignore[assignment]
            if t is not None and d + t == text:
                return [(s, f) for s, f in ((d, True), (t, False)) if s]
            self._utf8.reset()
        if not text:
            return []
        return [(text, bool(tokens) and n_draft == len(tokens))]


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
            f"K={stats.k}",
            f"{stats.tokens_per_step:.2f} tok/step",
            f"speedup {fmt_num(stats.est_speedup if timings else None, '.2f', 'x')}",
        ]
    else:
        parts.append("plain decoding")
    parts.append(f"prefill {stats.n_prefilled}")
    return " · ".join(parts)


def gpu_line(info: dict[str, Any]) -> str:
    go = info.get("gpu_offload")
    if not go:
        return "GPU —"
    if not go.get("supported"):
        return "GPU: none (CPU build)"

    def one(n: Any) -> str:
        return f"{n} layers" if n else "CPU"

    out = f"GPU: target {one(go.get('target_layers'))}"
    if info.get("draft") is not None:
        out += f", draft {one(go.get('draft_layers'))}"
    return out


def info_text(engine: Any) -> str:
    """The model-info screen: both models' facts (as `edgespec inspect`), the pair verdict."""
    info = engine.info()
    lines = [
        f"engine: {engine.name or '—'}   context: {engine.n_ctx} tokens"
        + (f"   threads: {info['threads']}" if info.get("threads") else "")
    ]
    for role in ("target", "draft"):
        facts = info.get(role)
        lines.append("")
        if facts is None:
            lines.append(f"{role}: " + ("none (plain decoding)" if role == "draft" else "—"))
            continue
        lines.append(f"{role}:")
        for key, value in facts.items():
            shown = fmt_bytes(value) if key == "file_size" and isinstance(value, (int, float)) else value
            lines.append(f"  {key:16} {shown}")
    pair = info.get("pair")
    lines.append("")
    if pair is None:
        lines.append("pair: —")
    else:
        lines.append(f"pair: {'compatible' if pair.get('compatible') else 'NOT compatible'}")
        lines += [f"  - {m}" for m in [*pair.get("messages", []), *pair.get("warnings", [])]]
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
