"""The prompt-lookup section of `edgespec bench`: text that repeats the context.

Prompts where the answer copies from the context (edit pasted code, rename a
variable in it, extract sentences word for word, revise the previous answer in
a two-turn chat) beside a prose prompt that does not copy. Columns, each run
once per round so a slow minute touches one run of many columns: llama.cpp's
plain decoding (llama-bench with the prompt's length in the KV cache, `-d`, as
every other column decodes after the prompt; and from an empty context, the
figure llama-bench gives by default, for reference), its n-gram speculation types alone
(ngram-simple, ngram-map-k, ngram-mod; best of) and chained with its model
draft (ngram-mod,draft-simple at n_max 4 and 8; best of), and edgespec plain,
draftless (prompt lookup alone), model-only adaptive and hybrid (both sources,
adaptive). Medians over the repeats; ratios within one run. Each repeat's seed is the same
in every column: above T = 0 the edgespec columns then decode the same answer.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from edgespec import Engine

from .native import attempt

CODE = '''def moving_average(values, window):
    """Average of each window of `window` consecutive values."""
    if window <= 0:
        raise ValueError("window must be positive")
    total = 0.0
    out = []
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            out.append(total / window)
    return out


def running_max(values):
    best = None
    out = []
    for value in values:
        if best is None or value > best:
            best = value
        out.append(best)
    return out
'''

TEXT = (
    "The lighthouse stood on a rock a mile from the shore. Every evening the keeper climbed "
    "the hundred and twelve steps to light the lamp. Ships passing in the night saw its beam "
    "sweep across the water every eight seconds. In winter the waves broke over the gallery, "
    "and the keeper wrote in his log that the glass rang like a bell. When the light was "
    "automated in 1987, the last keeper left the island with his log books and a cat."
)

ANSWER = (
    "Photosynthesis is the process by which plants use sunlight, water and carbon dioxide to "
    "make glucose and oxygen. It happens in the chloroplasts, where chlorophyll absorbs light. "
    "The light reactions split water and make ATP and NADPH; the Calvin cycle then uses them to "
    "fix carbon dioxide into sugar."
)

PROMPTS: dict[str, list[dict[str, str]]] = {
    "edit-code": [
        {
            "role": "user",
            "content": f"```python\n{CODE}```\n\nAdd a docstring to running_max and return the whole "
            "file with nothing else changed.",
        }
    ],
    "rename": [
        {
            "role": "user",
            "content": f"```python\n{CODE}```\n\nRename `values` to `samples` everywhere. Return the whole code.",
        },  # fmt: skip
    ],
    "extract": [
        {
            "role": "user",
            "content": f"{TEXT}\n\nCopy out, word for word, every sentence of the text above that mentions the keeper.",
        },  # fmt: skip
    ],
    "revise": [
        {"role": "user", "content": "Explain photosynthesis in four sentences."},
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": "Repeat your answer, but replace 'glucose' with 'sugar'."},
    ],
    "prose": [{"role": "user", "content": "Write a short story about a robot who learns to paint."}],
}
PROSE = frozenset({"prose"})  # prompts whose answer does not copy the context; the rest are the copy prompts
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-mod")
CHAINED_N_MAX = (4, 8)
EDGESPEC_COLUMNS = ("plain", "draftless", "model", "hybrid")


def _once(engine: Engine, messages: list[dict[str, str]], temp: float, spec: bool, n: int, seed: int) -> dict:
    engine.reset()
    res = engine.generate(messages, temperature=temp, max_tokens=n, speculative=spec, seed=seed)
    return {"tokens_per_s": res.stats.tokens_per_s, "sources": res.stats.sources, "n": res.stats.n_generated}


def lookup_cells(
    paths: tuple[Path, Path],
    *,
    temps: list[float],
    prompts: list[str],
    tokens: int,
    repeats: int,
    native: Any,
    threads: int | None = None,
    log: Any = print,
) -> list[dict]:
    """One row per (prompt, temperature) with the median tokens/s of every column."""
    target, draft = paths
    engines = {
        "plain": Engine.load(target, None, n_ctx=2048, threads=threads, lookup=False),
        "draftless": Engine.load(target, None, n_ctx=2048, threads=threads),
        "model": Engine.load(target, draft, n_ctx=2048, threads=threads, lookup=False),
        "hybrid": Engine.load(target, draft, n_ctx=2048, threads=threads),
    }
    cells = []
    try:
        for name in prompts:
            messages = PROMPTS[name]
            text = engines["plain"].chat_text(messages)
            depth = len(engines["plain"].tokenize(messages))
            for temp in temps:
                runs: dict[str, list[dict]] = {}
                failed: set[str] = set()  # llama.cpp columns that failed in this cell
                for r in range(repeats):
                    seed = 1234 + r
                    for col, eng in engines.items():
                        runs.setdefault(col, []).append(_once(eng, messages, temp, col != "plain", tokens, seed))
                    if native is not None:
                        _native_round(native, runs, paths, text, depth, temp, tokens, seed, threads, failed)
                cell = {"prompt": name, "temperature": temp}
                cell.update({col: statistics.median(x["tokens_per_s"] for x in xs) for col, xs in runs.items()})
                cell["hybrid_sources"] = runs["hybrid"][-1]["sources"]
                # how much of the answer lookup supplied (median over the repeats): whether this model copied
                cell["copied"] = statistics.median(
                    x["sources"].get("lookup", {}).get("accepted", 0) / max(1, x["n"]) for x in runs["draftless"]
                )
                cells.append(cell)
                log(f"  lookup {name} T={temp}: " + ", ".join(f"{c}={cell[c]:.1f}" for c in runs))
    finally:
        for eng in engines.values():
            eng.close()
    return cells


def _native_round(
    native: Any,
    runs: dict,
    paths: tuple[Path, Path],
    text: str,
    depth: int,
    temp: float,
    n: int,
    seed: int,
    threads: int | None,
    failed: set[str],
) -> None:
    target, draft = paths

    def add(column: str, run: Callable[[], dict]) -> None:
        attempt(runs, failed, column, run)  # a failed run: the column goes without it

    # llama.cpp's plain decoding after the prompt (what every other column decodes after),
    # and from an empty context as llama-bench reports by default (faster: less to attend over)
    add("llama_plain", partial(native.run_llama_bench, target, n_gen=n, threads=threads, repeats=1, depth=depth))
    add("llama_plain_empty", partial(native.run_llama_bench, target, n_gen=n, threads=threads, repeats=1))
    for spec_type in NGRAM_TYPES:
        add(f"llama_{spec_type}", partial(
            native.run_speculative_simple, target, None, text, n_predict=n, temperature=temp, n_max=16, seed=seed,
            threads=threads, spec_type=spec_type,
        ))  # fmt: skip
    for n_max in CHAINED_N_MAX:
        add(f"llama_chained_{n_max}", partial(
            native.run_speculative_simple, target, draft, text, n_predict=n, temperature=temp, n_max=n_max,
            seed=seed, threads=threads, spec_type="ngram-mod,draft-simple",
        ))  # fmt: skip


FAMILIES = {  # the columns a "best of" is over: every one must have run, or it reads n/a
    "llama_ngram": [f"llama_{t}" for t in NGRAM_TYPES],
    "llama_chained": [f"llama_chained_{n}" for n in CHAINED_N_MAX],
}


def _best(cell: dict, prefix: str) -> float:
    """The best of a family of llama.cpp columns; 0.0 (n/a) where one of them has no run (a failed
    run would make the best of the rest an easier bar)."""
    if any(not isinstance(cell.get(col), float) for col in FAMILIES.get(prefix, [])):
        return 0.0
    return max((v for k, v in cell.items() if k.startswith(prefix) and isinstance(v, float)), default=0.0)


def ratio(a: float | None, b: float | None) -> str:
    """a / b as "1.23x", or "n/a" when either is missing (both bench reports use it)."""
    return f"{a / b:.2f}x" if a and b else "n/a"


def speed(x: float | None) -> str:
    """Tokens/s to one decimal, or "n/a" for a column not run (llama.cpp's with --no-native;
    both bench reports use it)."""
    return f"{x:.1f}" if x else "n/a"


def markdown(cells: list[dict]) -> str:
    head = (
        "| prompt | T | llama.cpp plain, empty context | llama.cpp plain | best n-gram | best chained | edgespec plain "
        "| draftless | model | hybrid | copied | draftless / llama plain | draftless / best n-gram "
        "| draftless / edgespec plain | hybrid / model | hybrid / best chained |\n|" + "---|" * 16
    )
    rows = [head]
    for c in cells:
        ngram, chained, plain = _best(c, "llama_ngram"), _best(c, "llama_chained"), c.get("llama_plain", 0.0)
        rows.append(
            f"| {c['prompt']} | {c['temperature']} | {speed(c.get('llama_plain_empty'))} | {speed(plain)} "
            f"| {speed(ngram)} | {speed(chained)} | {c['plain']:.1f} "
            f"| {c['draftless']:.1f} | {c['model']:.1f} | {c['hybrid']:.1f} | {c.get('copied', 0.0):.0%} "
            f"| {ratio(c['draftless'], plain)} "
            f"| {ratio(c['draftless'], ngram)} | {ratio(c['draftless'], c['plain'])} "
            f"| {ratio(c['hybrid'], c['model'])} | {ratio(c['hybrid'], chained)} |"
        )
    return "\n".join(rows) + "\n"


# The targets this section is read against (README, "Prompt lookup"): a ratio of two columns, over the
# copy prompts (the median of the per-prompt ratios) or on prose, and the least it should be at
# each temperature. A column name ending in "*" is the best of the columns it starts (llama.cpp's
# n-gram types, its chained types).
TARGETS: tuple[tuple[str, str, str, bool, dict[float, float]], ...] = (
    ("draftless / llama.cpp plain", "draftless", "llama_plain", False, {0.0: 1.8}),
    ("draftless / llama.cpp's best n-gram type", "draftless", "llama_ngram*", False, {0.0: 1.3}),
    ("hybrid / model-only", "hybrid", "model", False, {0.0: 1.5, 0.8: 1.1}),
    ("hybrid / llama.cpp's best chained type", "hybrid", "llama_chained*", False, {0.0: 1.4, 0.8: 1.6}),
    ("draftless / edgespec plain, prose", "draftless", "plain", True, {0.0: 0.97, 0.8: 0.97}),
    ("hybrid / model-only, prose", "hybrid", "model", True, {0.0: 0.97, 0.8: 0.97}),
)


def _column(cell: dict, name: str) -> float | None:
    value = _best(cell, name[:-1]) if name.endswith("*") else cell.get(name)
    return value or None


def target_ratios(cells: list[dict]) -> list[dict]:
    """Each target at each temperature the cells ran: the ratio (the median over the copy
    prompts' cells, or prose's), the least it should be (None: no target at that
    temperature), whether it is met (None: a column was not run, e.g. llama.cpp's with
    --no-native)."""
    out = []
    for label, top, bottom, prose, least in TARGETS:
        for temp in sorted({c["temperature"] for c in cells}):
            pairs = [
                (_column(c, top), _column(c, bottom))
                for c in cells
                if c["temperature"] == temp and (c["prompt"] in PROSE) == prose
            ]
            if not pairs:
                continue
            ratios = [a / b for a, b in pairs if a and b]
            value = statistics.median(ratios) if len(ratios) == len(pairs) else None
            bar = least.get(temp)
            ran = {c["prompt"] for c in cells if c["temperature"] == temp}
            whole = prose or ran >= set(PROMPTS) - PROSE  # a copy bar is over all the copy prompts
            met = None if value is None or bar is None or not whole else value >= bar
            out.append(
                {
                    "target": label,
                    "temperature": temp,
                    "prose": prose,
                    "cells": len(pairs),
                    "ratio": value,
                    "least": bar,
                    "met": met,
                }
            )
    return out


def targets_markdown(cells: list[dict]) -> str:
    """The table of `target_ratios`: what each mode gained, against what it should."""
    rows = ["| ratio | T | prompts | measured | target | met |", "|---|---|---|---|---|---|"]
    for t in target_ratios(cells):
        prompts = "prose" if t["prose"] else f"median of {t['cells']} copy prompts"
        measured = f"{t['ratio']:.3f}x" if t["ratio"] is not None else "n/a"  # (1.7997 is not 1.80)
        least = f">= {t['least']:.2f}x" if t["least"] is not None else "-"
        met = "-" if t["met"] is None else "yes" if t["met"] else "no"
        rows.append(f"| {t['target']} | {t['temperature']} | {prompts} | {measured} | {least} | {met} |")
    return "\n".join(rows) + "\n"
