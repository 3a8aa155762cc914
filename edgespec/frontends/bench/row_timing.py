"""What one logits row costs to turn into its sampling distribution, per vocabulary size.

The sampling transform runs once per draft token and once per verified target
row, in Python, between two model calls; at 150k-260k vocabularies it is the
part of a step that grows with the vocabulary. `row_timings` measures it on
synthetic float32 rows (llama.cpp's logits dtype) shaped like real ones:

- "peaked": normal noise plus 40 strong tokens (a confident step); min-p keeps
  the strong ones, top-p alone tens to thousands (the noise's share of the mass
  grows with the vocabulary);
- "flat": wider normal noise alone (an open step); min-p keeps tens, top-p
  alone thousands to tens of thousands.

Settings: top_k=40 (llama.cpp's default chain), top_k=0 (top_p 0.95 and min_p
0.05 only), top_k=0 with min_p=0 (top_p alone), and greedy (the argmax plus
`confidence`, as the draft loop computes them with p_min on). Each figure is
the median of `repeats` calls on the same row, in milliseconds. Pure numpy and
time.perf_counter; no model needed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from edgespec.core.sampling import Dist, SamplingParams, confidence, to_dist

SETTINGS: dict[str, SamplingParams] = {
    "top_k=40": SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    "top_k=0": SamplingParams(temperature=0.8, top_k=0, top_p=0.95, min_p=0.05),
    "top_k=0 min_p=0": SamplingParams(temperature=0.8, top_k=0, top_p=0.95, min_p=0.0),
    "greedy": SamplingParams(temperature=0.0),
}
ROWS = ("peaked", "flat")


def sample_row(n_vocab: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """A float32 logits row of the given kind ("peaked" or "flat", see the module docstring)."""
    if kind == "flat":
        return (rng.normal(size=n_vocab) * 3.0).astype(np.float32)
    row = rng.normal(size=n_vocab) * 2.0
    strong = rng.choice(n_vocab, size=min(40, n_vocab), replace=False)
    row[strong] = 11.0 + rng.uniform(0.0, 3.0, size=strong.size)
    return row.astype(np.float32)


def row_timings(
    vocab_sizes: Sequence[int] = (49152, 151936, 262144),
    repeats: int = 100,
    transform: Callable[[np.ndarray, SamplingParams], Dist] = to_dist,
) -> list[dict]:
    """One record per (vocabulary size, row kind, setting): n_vocab, row, setting, ms (median
    per row), kept (tokens in the distribution). `transform` lets a copy of another version of
    to_dist be measured in the same run."""
    records = []
    for n_vocab in vocab_sizes:
        for kind in ROWS:
            row = sample_row(n_vocab, kind, np.random.default_rng(n_vocab))
            for name, params in SETTINGS.items():
                call = _greedy_call(row, params, transform) if params.greedy else _call(row, params, transform)
                kept = call().ids.size
                records.append(
                    {"n_vocab": n_vocab, "row": kind, "setting": name, "ms": _median_ms(call, repeats), "kept": kept}
                )
    return records


def _call(row: np.ndarray, params: SamplingParams, transform: Callable) -> Callable[[], Dist]:
    return lambda: transform(row, params)


def _greedy_call(row: np.ndarray, params: SamplingParams, transform: Callable) -> Callable[[], Dist]:
    def call() -> Dist:
        dist = transform(row, params)
        confidence(row, dist, params)
        return dist

    return call


def _median_ms(call: Callable[[], object], repeats: int) -> float:
    call()  # warm: first-touch allocations and caches are not the steady state
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def format_table(rows: list[dict]) -> str:
    """A Markdown table: one line per (vocabulary, row kind), one column per setting, each cell
    "ms (tokens kept)"."""
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    cells: dict[tuple[int, str], dict[str, dict]] = {}
    for r in rows:
        cells.setdefault((r["n_vocab"], r["row"]), {})[r["setting"]] = r
    lines = [
        "| vocabulary | row | " + " | ".join(f"{s} ms (kept)" for s in settings) + " |",
        "|---:|:---|" + "---:|" * len(settings),
    ]
    for (n_vocab, kind), by_setting in cells.items():
        shown = [_cell(by_setting.get(s)) for s in settings]
        lines.append(f"| {n_vocab} | {kind} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def _cell(record: dict | None) -> str:
    return "" if record is None else f"{record['ms']:.3f} ({record['kept']})"


if __name__ == "__main__":
    print(format_table(row_timings()))
