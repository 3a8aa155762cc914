"""The runtime's own share of a step at large vocabularies, on a simulated GPU machine.

A 7B-class target with a 0.5B draft on a consumer GPU (`GPU_PAIR`: a verify of up to 8
tokens costs one 20 ms step, a draft token 3 ms) at 49k / 152k / 262k vocabularies, with
rows that have a long tail (simulate.SimModel), through the real engine and decoder with
the adaptive controller and prompt lookup on (as by default; the simulated text seldom
repeats, so lookup mostly costs its index), at T = 0.8 (top_k 40; top_k off with min_p
0.05, or top-p alone) and greedy. At top_k 40 and greedy the rows come as their top 40
(`Heads`), as llama.cpp's backend top-k hands them over from a GPU (`LlamaModel.set_head`),
and with top_k off the draft's do (sampling.draft_params: the target's stay whole); the
fake models find them inside the eval's time, without writing a whole row. The share
is the generation's time outside both models' evals over its whole time: sampling both
models' rows, verification, the controller, bookkeeping. The fake models' own row filling
counts as theirs (it is inside the eval's cost, as a GPU's logits copy is). Each line is
measured twice: with the host spinning while a model evaluates (CUDA's default sync) and
asleep (Metal's, or a blocking sync), which wakes with cold caches: the same Python costs
more after a sleep.

`python -m edgespec.frontends.bench.python_share` prints the table; `make bench` runs it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace

from edgespec import Engine

from .simulate import Curve, Machine, pair, steady

GPU_PAIR = Machine("gpu-7b-0.5b", Curve(20e-3, 8, 0.1), Curve(3e-3, 8, 0.05))
TOP_K_40 = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
SETTINGS = {
    "top_k=40": TOP_K_40,
    # the same with whole rows, as from a CPU or a backend without top-k (Engine(heads=False))
    "top_k=40 whole rows": TOP_K_40,
    "top_k=0": {"temperature": 0.8, "top_k": 0, "top_p": 0.95, "min_p": 0.05},
    # top-p alone: the long tail keeps thousands of tokens, and each rejection's residual spans them
    "top_k=0 min_p=0": {"temperature": 0.8, "top_k": 0, "top_p": 0.95, "min_p": 0.0},
    "greedy": {"temperature": 0.0},
}
WHOLE_ROWS = {"top_k=40 whole rows"}
PROMPT = [1, *range(10, 26)]
WAITS = ("spins", "sleeps")  # how the host waits for a model's eval (Machine.spins)


def python_shares(
    vocabs: Sequence[int] = (49152, 151936, 262144),
    machine: Machine = GPU_PAIR,
    acceptance: float = 0.8,
    tokens: int = 128,
    repeats: int = 3,
    settings: Sequence[str] = tuple(SETTINGS),
    heads: bool = True,
    waits: Sequence[str] = WAITS,
) -> list[dict]:
    """One record per vocabulary size, way of waiting (`WAITS`) and setting: share (the median over `repeats`
    generations of the time outside both models over the whole), tok_s, k (the K of the
    last step). `heads`: rows at top_k > 0 and greedy come as their top-k (Engine(heads=...)),
    as llama.cpp's backend top-k returns them from a GPU, and at top_k 0 the draft's as its
    top 40, or 256 without min-p (sampling.draft_params)."""
    return [
        {**r, "host": wait}
        for vocab in vocabs
        for wait in waits
        for r in _shares(vocab, replace(machine, spins=wait == "spins"), acceptance, tokens, repeats, settings, heads)
    ]


def _shares(
    vocab: int, machine: Machine, acceptance: float, tokens: int, repeats: int, settings: Sequence[str], heads: bool
) -> list[dict]:
    target, draft = pair(machine, steady(acceptance), vocab=vocab)
    records = []
    for name in settings:
        for model in (target, draft):  # a new engine's caches start empty
            model.trim(0)
        # prompt lookup on, as by default
        engine = Engine(target, draft, name=machine.name, heads=heads and name not in WHOLE_ROWS)
        shares, speeds, k = [], [], 0
        engine.generate(PROMPT, max_tokens=tokens, **SETTINGS[name])  # the controller's warm-up
        for _ in range(max(1, repeats)):
            engine.reset()
            busy = target.busy_s + draft.busy_s
            stats = engine.generate(PROMPT, max_tokens=tokens, **SETTINGS[name]).stats
            inside = target.busy_s + draft.busy_s - busy
            shares.append(max(0.0, stats.elapsed_s - inside) / stats.elapsed_s)
            speeds.append(stats.tokens_per_s)
            k = stats.k
        records.append(
            {
                "setting": name,
                "vocab": vocab,
                "share": statistics.median(shares),
                "tok_s": statistics.median(speeds),
                "k": k,
            }
        )
    return records


def format_table(records: list[dict]) -> str:
    lines = [
        "| vocabulary | host | setting | runtime's share of the time | tokens/s | last K |",
        "|---:|:---|:---|---:|---:|---:|",
    ]
    for r in records:
        lines.append(
            f"| {r['vocab']} | {r['host']} | {r['setting']} | {100 * r['share']:.1f}% | {r['tok_s']:.1f} | {r['k']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(f"Runtime's share of the time on a simulated {GPU_PAIR.name} pair (T = 0.8 or greedy, acceptance 0.8):\n")
    print(format_table(python_shares()))
