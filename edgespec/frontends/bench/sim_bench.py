"""`edgespec bench --simulate`: the adaptive controller against every fixed K on simulated
machines (simulate.py), through the real Engine and decoder, in seconds and without models.

Per machine x acceptance profile: one fresh engine; each round runs every fixed K and the
adaptive controller once on each of `texts` texts (greedy; the texts differ by their prompt),
so a slow moment on a shared machine touches one run of many columns; a round's figure is
its tokens over its time across the texts, and the result the median over rounds. The
adaptive controller keeps what it measured from text to text and round to round, as in a
running server.

Several texts, because one is a single draw of where the draft disagrees: at acceptance 0.9
a 256-token text has some 25 rejections, and one fixed K's steps happen to line up with
them better than its neighbours' (on one text, fixed K rows jump by up to 12% from one K to
the next). The best fixed K in hindsight on one text picks that luck, which no controller
can know; over a few texts it is the best K for the machine and the profile.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence

import edgespec.core.decoder as decoder_mod
from edgespec import EdgespecError, Engine
from edgespec.core import defaults

from .simulate import (
    MACHINES,
    PROFILES,
    TEXTS,
    VOCAB,
    Machine,
    Profile,
    VirtualClock,
    pair,
    random_graphs_machine,
    random_machine,
)

PROMPT = [1, *range(10, 26)]
MAX_TEXTS = VOCAB - 1 - PROMPT[-1]  # each text's prompt ends in another token id of the vocabulary


def prompts(texts: int) -> list[list[int]]:
    """`texts` prompts whose continuations differ (the simulated text hashes the previous
    token): PROMPT, then PROMPT with its last token changed."""
    if not 1 <= texts <= MAX_TEXTS:
        raise ValueError(f"texts must be 1..{MAX_TEXTS}")
    return [PROMPT[:-1] + [PROMPT[-1] + i] for i in range(texts)]


def speeds(
    machine: Machine,
    profile: Profile,
    ks: Sequence[int],
    *,
    tokens: int = 256,
    rounds: int = 3,
    seed: int = 0,
    clock: VirtualClock | None = None,
    texts: int = TEXTS,
) -> dict[str, float]:
    """Tokens/s of each fixed K ("0".."16") and of "adaptive" on one machine: per round, the
    tokens over the decode time of all `texts` texts; the median over rounds."""
    target, draft = pair(machine, profile, seed, clock)
    engine = Engine(target, draft, name=machine.name, lookup=False)
    runs: dict[str, list[float]] = {}
    for _ in range(rounds):
        done: dict[str, tuple[int, float]] = {}
        for prompt in prompts(texts):
            for k in [*ks, None]:
                engine.reset()
                res = engine.generate(prompt, temperature=0.0, max_tokens=tokens, k=k, speculative=k != 0)
                key = "adaptive" if k is None else str(k)
                n, t = done.get(key, (0, 0.0))
                done[key] = (n + res.stats.n_generated, t + res.stats.decode_s)
        for key, (n, t) in done.items():
            runs.setdefault(key, []).append(n / t if t > 0 else 0.0)
    return {key: statistics.median(xs) for key, xs in runs.items()}


def summary(row: dict[str, float]) -> dict[str, float]:
    fixed = {int(k): v for k, v in row.items() if k != "adaptive"}
    best = max(fixed, key=fixed.__getitem__)
    return {
        "best_k": best,
        "best": fixed[best],
        "median": statistics.median(fixed.values()),
        "vs_best": row["adaptive"] / fixed[best],
        "vs_median": row["adaptive"] / statistics.median(fixed.values()),
    }


def check_ks(csv: str, plain: bool = False) -> list[int]:
    """--ks as integers 0..K_LIMIT, at least one; `plain`: K = 0 and one K above it among them
    (make bench's tables compare each K with plain decoding)."""
    try:
        ks = [int(x) for x in csv.split(",") if x]
    except ValueError:
        raise EdgespecError(f"--ks takes comma-separated whole numbers, not {csv!r}") from None
    if any(not 0 <= k <= defaults.K_LIMIT for k in ks):
        raise EdgespecError(f"--ks values must be between 0 and {defaults.K_LIMIT}")
    if not ks:
        raise EdgespecError("--ks needs at least one K, e.g. --ks 0,4,8")
    if plain and (0 not in ks or not any(ks)):
        raise EdgespecError("--ks needs 0 (plain decoding) and at least one K above it, e.g. --ks 0,4,8")
    return ks


def check_counts(args: argparse.Namespace) -> None:
    if args.tokens < 1 or args.repeats < 1:
        raise EdgespecError("--tokens and --repeats must be at least 1")


def machines(names: str) -> list[Machine]:
    known = {m.name: m for m in MACHINES}
    out: list[Machine] = []
    for name in (x for x in names.split(",") if x):
        prefix, draw = ("seed", random_machine) if name.startswith("seed") else ("graphs", random_graphs_machine)
        first, _, last = name[len(prefix) :].partition("-")
        if name.startswith(prefix) and first.isdigit() and (not last or last.isdigit()):
            out.extend(draw(s) for s in range(int(first), int(last or first) + 1))  # seedA-B: a range
        elif name in known:
            out.append(known[name])
        else:
            raise EdgespecError(
                f"no simulated machine {name!r} (--machines); known: {', '.join(known)}, seedN or graphsN"
            )
    return out


def table(results: list[tuple[str, str, dict[str, float]]], ks: Sequence[int]) -> str:
    head = ["machine", "profile", "adaptive", *[f"K={k}" for k in ks], "best fixed", "/best", "/median"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, prof, row in results:
        s = summary(row)
        cells = [name, prof, f"{row['adaptive']:.0f}", *[f"{row[str(k)]:.0f}" for k in ks]]
        cells += [f"K={s['best_k']:.0f}", f"{s['vs_best']:.2f}x", f"{s['vs_median']:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cmd_simulate(args: argparse.Namespace) -> int:
    if not args.virtual_clock:
        return _simulate(args, None)
    # the decoder times its steps on the simulation's own clock: the decisions alone, deterministic
    clock, real = VirtualClock(), decoder_mod.time
    decoder_mod.time = clock  # type: ignore[assignment]
    try:
        return _simulate(args, clock)
    finally:
        decoder_mod.time = real


def _simulate(args: argparse.Namespace, clock: VirtualClock | None) -> int:
    ks = check_ks(args.ks) if args.ks else list(range(17))
    check_counts(args)
    try:
        prompts(args.texts)  # its range check, before any machine runs
    except ValueError as e:
        raise EdgespecError(f"--{e}") from None
    profiles = [x for x in args.profiles.split(",") if x]
    for prof in profiles:
        if prof not in PROFILES:
            raise EdgespecError(f"no acceptance profile {prof!r} (--profiles); known: {', '.join(PROFILES)}")
    results = []
    for m in machines(args.machines):
        for prof in profiles:
            row = speeds(m, PROFILES[prof], ks, tokens=args.tokens, rounds=args.repeats, clock=clock, texts=args.texts)
            s = summary(row)
            print(f"  {m.name} {prof}: adaptive {s['vs_best']:.2f}x best fixed (K={s['best_k']:.0f})",
                  file=sys.stderr, flush=True)  # fmt: skip
            results.append((m.name, prof, row))
    print("Tokens/s on simulated machines (greedy; adaptive vs every fixed K):\n")
    print(table(results, ks))
    print()
    for prof in dict.fromkeys(p for _, p, _ in results):
        ratios = [summary(row)["vs_best"] for _, p, row in results if p == prof]
        print(f"{prof}: adaptive / best fixed K median {statistics.median(ratios):.3f}x, min {min(ratios):.3f}x")
    return 0
