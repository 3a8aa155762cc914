"""Turn a bench result (bench.json) into the Markdown table and the PNG chart.

Ratios are between figures measured in the same run. "Ideal" is docs/controller.md's
formula fed with the costs this run measured: acceptance a (solved from the
mean tokens per step), draft cost per token c_d, verify cost v(K+1) and v(1):
ideal = E(K) * v(1) / (K * c_d + v(K+1)), with no Python time at all.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .copying import markdown as copying_markdown
from .copying import ratio, speed, targets_markdown


def _fixed(cell: dict, plain: bool = True) -> dict[int, float]:
    """Tokens/s per fixed K run, K = 0 (plain decoding, a fixed K too: the bar's "K from 0")
    among them unless `plain` is False."""
    return {int(k): v["tokens_per_s"] for k, v in cell["edgespec"].items() if k.isdigit() and (plain or int(k) > 0)}


def _native_plain(result: dict, cell: dict) -> float | None:
    """The cell's own native plain runs (interleaved with its other columns) when it has
    them, else the run-wide measurement."""
    own = (cell.get("native_plain") or {}).get("tokens_per_s")
    return own or (result.get("native_plain") or {}).get("tokens_per_s")


def _median_run(entry: dict) -> dict:
    runs = sorted(entry["runs"], key=lambda r: r["tokens_per_s"])
    return runs[len(runs) // 2]


def held_out_ratio(cell: dict) -> float | None:
    """Adaptive over a fixed K picked without this round's luck: round by round (the columns of a
    round ran back to back), the K with the best median over the other rounds, and the median of
    the rounds' adaptive / that K ratios. The best of many noisy medians is above the best K's
    own speed (its luck helped pick it), so "adaptive / best fixed" reads low on a noisy machine;
    this reads high where a round's pick misses the best K. The truth lies between the two
    (docs/bench-history.md, stop 36). None with fewer than two rounds."""
    runs = {int(k): [r["tokens_per_s"] for r in v["runs"]] for k, v in cell["edgespec"].items() if k.isdigit()}
    adaptive = [r["tokens_per_s"] for r in cell["edgespec"]["adaptive"]["runs"]]
    rounds = min([len(adaptive), *(len(v) for v in runs.values())])
    if rounds < 2 or not runs:
        return None
    ratios = []
    for r in range(rounds):
        others = {k: statistics.median(v[:r] + v[r + 1 : rounds]) for k, v in runs.items()}
        k = max(others, key=others.__getitem__)
        ratios.append(adaptive[r] / runs[k][r] if runs[k][r] > 0 else 0.0)
    return statistics.median(ratios)


def solve_acceptance(tokens_per_step: float, k: int) -> float:
    """a such that (1 - a^(K+1)) / (1 - a) equals the measured tokens per step (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        e = sum(mid**i for i in range(k + 1))
        lo, hi = (mid, hi) if e < tokens_per_step else (lo, mid)
    return (lo + hi) / 2


def ideal_speedup(cell: dict, k: int) -> dict[str, float]:
    run, plain = _median_run(cell["edgespec"][str(k)]), _median_run(cell["edgespec"]["0"])
    a = solve_acceptance(run["tokens_per_step"], k)
    c_d = run["draft_s"] / max(run["n_drafted"], 1)
    v_k = run["verify_s"] / max(run["steps"], 1)
    v_1 = plain["verify_s"] / max(plain["steps"], 1)
    e = sum(a**i for i in range(k + 1))
    ideal = e * v_1 / (k * c_d + v_k)
    achieved = cell["edgespec"][str(k)]["tokens_per_s"] / cell["edgespec"]["0"]["tokens_per_s"]
    return {
        "a": a,
        "c_d_ms": 1e3 * c_d,
        "v1_ms": 1e3 * v_1,
        "vk_ms": 1e3 * v_k,
        "ideal": ideal,
        "achieved": achieved,
        "achieved_over_ideal": achieved / ideal if ideal else 0.0,
    }


def summarize(result: dict) -> list[dict[str, Any]]:
    rows = []
    for cell in result["cells"]:
        native_plain = _native_plain(result, cell)
        fixed = _fixed(cell)
        best_k = max(fixed, key=lambda k: fixed[k])
        drafting = _fixed(cell, plain=False)
        best_drafting = max(drafting, key=lambda k: drafting[k])
        spec = {int(n): v["tokens_per_s"] for n, v in cell["native_spec"].items()}
        best_n = max(spec, key=lambda n: spec[n]) if spec else None
        adaptive = cell["edgespec"]["adaptive"]
        arun = _median_run(adaptive)
        row = {
            "prompt": cell["prompt"],
            "T": cell["temperature"],
            "native_plain": native_plain,
            "native_spec_best": spec.get(best_n) if best_n else None,
            "native_spec_n_max": best_n,
            "edgespec_k0": cell["edgespec"]["0"]["tokens_per_s"],
            "best_fixed": fixed[best_k],
            "best_k": best_k,
            "median_fixed": statistics.median(fixed.values()),
            "held_out": held_out_ratio(cell),
            "adaptive": adaptive["tokens_per_s"],
            "adaptive_accept": arun["acceptance_rate"],
            "python_share": arun["python_s"] / max(arun["decode_s"], 1e-9),
            "ideal": ideal_speedup(cell, best_drafting),
            "best_drafting_k": best_drafting,
        }
        rows.append(row)
    return rows


def markdown(result: dict) -> str:
    rows = summarize(result)
    out = [
        f"# edgespec bench: pair `{result['pair']}`, {result['tokens']} tokens, median of {result['repeats']}",
        "",
        "Tokens/s (decode phase, after prefill). Native = llama.cpp binaries from the same source. "
        f"Fixed K: {', '.join(k for k in (result['cells'] or [{'edgespec': {}}])[0]['edgespec'] if k != 'adaptive')} "
        "(K = 0 is plain decoding; best and median fixed K are over all of them). The model cells run "
        "without prompt lookup, adaptive and fixed K alike (the hybrid: the prompt-lookup section).",
        "",
        "| prompt | T | native plain | native spec best (n_max) | edgespec K=0 | best fixed K | adaptive "
        "| adaptive / native plain | adaptive / native spec | best fixed / native plain | best fixed / native spec "
        "| adaptive / best fixed | adaptive / best fixed, held out | adaptive / median fixed | Python share |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ns = f"{r['native_spec_best']:.1f} ({r['native_spec_n_max']})" if r["native_spec_best"] else "n/a"
        out.append(
            f"| {r['prompt']} | {r['T']} | {speed(r['native_plain'])} | {ns} | {r['edgespec_k0']:.1f} "
            f"| {r['best_fixed']:.1f} (K={r['best_k']}) | {r['adaptive']:.1f} "
            f"| {ratio(r['adaptive'], r['native_plain'])} | {ratio(r['adaptive'], r['native_spec_best'])} "
            f"| {ratio(r['best_fixed'], r['native_plain'])} | {ratio(r['best_fixed'], r['native_spec_best'])} "
            f"| {ratio(r['adaptive'], r['best_fixed'])} | {ratio(r['held_out'], 1.0)} "
            f"| {ratio(r['adaptive'], r['median_fixed'])} "
            f"| {100 * r['python_share']:.0f}% |"
        )
    out += sampled_note(result)
    out += [
        "",
        "## Formula vs achieved (the best fixed K > 0 of each cell)",
        "",
        "| prompt | T | K | a | c_d ms | v(1) ms | v(K+1) ms | ideal speedup | achieved | achieved / ideal |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        i = r["ideal"]
        out.append(
            f"| {r['prompt']} | {r['T']} | {r['best_drafting_k']} | {i['a']:.2f} | {i['c_d_ms']:.1f} "
            f"| {i['v1_ms']:.1f} "
            f"| {i['vk_ms']:.1f} | {i['ideal']:.2f}x | {i['achieved']:.2f}x | {100 * i['achieved_over_ideal']:.0f}% |"
        )
    out += [
        "",
        "## Per K (tokens/s)",
        "",
        "| prompt | T | " + " | ".join(result["cells"][0]["edgespec"]) + " |",
        "|---|---|" + "---|" * len(result["cells"][0]["edgespec"]),
    ]
    for c in result["cells"]:
        out.append(
            f"| {c['prompt']} | {c['temperature']} | "
            + " | ".join(f"{v['tokens_per_s']:.1f}" for v in c["edgespec"].values())
            + " |"
        )
    if result.get("p_min"):
        values = list(result["p_min"][0]["p_min"])
        out += [
            "",
            "## A fixed p_min (K=8, story prompt; tokens/s and acceptance)",
            "",
            "| T | " + " | ".join(f"p_min {v}" for v in values) + " |",
            "|---|" + "---|" * len(values),
        ]
        for row in result["p_min"]:
            cells = []
            for v in values:
                run = _median_run(row["p_min"][v])
                cells.append(f"{row['p_min'][v]['tokens_per_s']:.1f} ({run['acceptance_rate']:.2f})")
            out.append(f"| {row['temperature']} | " + " | ".join(cells) + " |")
    if result.get("quantization"):
        out += [
            "",
            "## Draft quantization under the same target (acceptance, K=4)",
            "",
            "| draft | T=0 | T=0.8 | static warning |",
            "|---|---|---|---|",
        ]
        for q in result["quantization"]:
            warn = "; ".join(w for w in q["warnings"] if "quantiz" in w.lower() or "bit" in w.lower()) or "none"
            out.append(f"| {q['draft']} | {q['acceptance_T0.0']:.2f} | {q['acceptance_T0.8']:.2f} | {warn} |")
    bp = result.get("bad_pair")
    if bp:
        out += [
            "",
            f"## Bad pair `{bp['pair']}` at T=1.0",
            "",
            "| prompt | plain | adaptive | K=4 | adaptive / plain |",
            "|---|---|---|---|---|",
        ]
        for name, v in bp["prompts"].items():
            p, a, k4 = v["plain"]["tokens_per_s"], v["adaptive"]["tokens_per_s"], v["k4"]["tokens_per_s"]
            out.append(f"| {name} | {p:.1f} | {a:.1f} | {k4:.1f} | {ratio(a, p)} |")
        out += ["", f"{ROUNDS} {DECISIONS}"]
    return "\n".join(out) + "\n"


ROUNDS = (  # what the columns of a round share above T = 0, and what a median carries
    "Above T = 0 the edgespec columns of a round decode one answer (its seed draws each token with "
    'noise keyed by position, so K does not change it: README, "How decoding works"), and llama.cpp\'s '
    "each sample their own text; rounds differ in length and in how well the draft agrees with "
    "their answers, and a median carries that luck."
)
BEST_OF = (
    "The best fixed K, the best of several columns, carries more of the machine's noise than the median fixed K; "
    "the held-out ratio picks each round's K from the other rounds' medians (no luck picks it, "
    "but a pick may miss the best K): the truth lies between the two."
)
DECISIONS = (
    "The controller's decisions alone, without the machine's noise: docs/scripts/virtual_costs.py "
    "with many seeds (docs/bench-history.md)."
)


def sampled_note(result: dict) -> list[str]:
    """The caveat under the cells table when some cell was sampled (T > 0); none at T = 0 alone."""
    if not any(c["temperature"] > 0 for c in result["cells"]):
        return []
    return ["", f"{ROUNDS} {BEST_OF} {DECISIONS}"]


def chart(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = result["cells"]
    fig, axes = plt.subplots(1, len(cells), figsize=(3.2 * len(cells), 3.4), sharey=True, squeeze=False)
    for ax, cell in zip(axes[0], cells):
        native_plain = _native_plain(result, cell)
        ks = sorted(int(k) for k in cell["edgespec"] if k.isdigit())
        ax.plot(ks, [cell["edgespec"][str(k)]["tokens_per_s"] for k in ks], "o-", label="edgespec fixed K")
        ax.axhline(cell["edgespec"]["adaptive"]["tokens_per_s"], color="C2", ls="--", label="edgespec adaptive")
        if native_plain:
            ax.axhline(native_plain, color="gray", ls=":", label="llama.cpp plain")
        spec = [v["tokens_per_s"] for v in cell["native_spec"].values()]
        if spec:
            ax.axhline(max(spec), color="C3", ls="-.", label="llama.cpp spec (best n_max)")
        ax.set_title(f"{cell['prompt']}, T={cell['temperature']}", fontsize=9)
        ax.set_xlabel("K")
    axes[0][0].set_ylabel("tokens/s")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


LOOKUP_NOTE = (
    "\nAbove T = 0 the edgespec columns (plain, draftless, model, hybrid) decode the same answer in a "
    "round (one seed, each token drawn with noise keyed by position), so their ratios compare one text; "
    "llama.cpp's columns each sample their own.\n"
)


def write_reports(result: dict, out: Path) -> None:
    parts = [markdown(result)] if result.get("cells") else []
    if result.get("lookup"):
        parts.append("## Prompt lookup (tokens/s, median)\n\n" + copying_markdown(result["lookup"]) + LOOKUP_NOTE)
        parts.append("### The lookup section against its targets\n\n" + targets_markdown(result["lookup"]))
    (out / "bench.md").write_text("\n".join(parts))
    if result.get("cells"):
        chart(result, out / "bench.png")
