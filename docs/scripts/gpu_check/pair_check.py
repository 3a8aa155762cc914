"""The GPU check on a 7B-class pair made on the device (synth_gguf.py): a target's and a
draft's pass per batch size, the adaptive controller against every fixed K, and the runtime's
share of the time at a 262k vocabulary (issue 11's bars), offloaded, with rows as their top-k
from the GPU (LlamaModel.set_head) and with whole rows.

    REPS=3 python3 pair_check.py TARGET.gguf DRAFT.gguf     # one JSON line per part

The share is the generation's time outside llama.cpp's native calls (llama_decode,
llama_get_logits, which waits for the GPU, and the cache trims) over its whole time:
sampling, verification, the controller, lookup and the Python that fills each batch.
A scratch tool: it reaches into the engine's decoder for the per-batch timings, as tests do.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

from edgespec import Engine  # first: llama.cpp's libraries load before numpy (edgespec/__init__.py)
from edgespec.llama import backend

from check import pass_times  # noqa: E402  (beside this file)

REPS = int(os.environ.get("REPS", "3"))
TOKENS = int(os.environ.get("TOKENS", "128"))
KS = [int(k) for k in os.environ.get("KS", "1,2,3,4,6,8,12,16").split(",")]
SIZES = (1, 2, 4, 8, 12, 16, 24, 32)  # batch sizes timed
PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring."
SETTINGS = {  # as edgespec/frontends/bench/python_share.py
    "top_k=40": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05},
    "top_k=0": {"temperature": 0.8, "top_k": 0, "top_p": 0.95, "min_p": 0.05},
    "greedy": {"temperature": 0.0},
}
inside = [0.0]


def timed(fn):
    def wrapper(*args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            inside[0] += time.perf_counter() - t0

    return wrapper


# the rows as their top-k (LlamaModel.set_head): reading them waits for the GPU as llama_get_logits does
_SAMPLED = ("llama_get_sampled_logits_ith", "llama_get_sampled_candidates_ith", "llama_get_sampled_logits_count_ith")
for _name in ("llama_decode", "llama_get_logits", "llama_memory_seq_rm", *_SAMPLED):
    setattr(backend.llama_cpp, _name, timed(getattr(backend.llama_cpp, _name)))


def emit(part: str, row: dict) -> None:
    print(json.dumps({part: row}), flush=True)


def run(eng: Engine, seed: int, **kw):
    eng.reset()
    return eng.generate(PROMPT, max_tokens=TOKENS, seed=seed, **kw).stats


def sweep(eng: Engine, temp: float) -> dict:
    """Median tok/s over REPS seeds of plain, each fixed K and adaptive (lookup off and on)."""
    cols: dict[str, list] = {}
    for seed in range(REPS):  # columns interleaved: the machine's drift falls on all alike
        cols.setdefault("plain", []).append(run(eng, seed, temperature=temp, speculative=False))
        for k in KS:
            cols.setdefault(f"K={k}", []).append(run(eng, seed, temperature=temp, k=k))
        cols.setdefault("adaptive", []).append(run(eng, seed, temperature=temp))
    row = {name: round(statistics.median(s.tokens_per_s for s in runs), 1) for name, runs in cols.items()}
    fixed = [row[f"K={k}"] for k in KS]
    row["adaptive/best fixed"] = round(row["adaptive"] / max(fixed), 3)
    row["adaptive/median fixed"] = round(row["adaptive"] / statistics.median(fixed), 3)
    row["adaptive/plain"] = round(row["adaptive"] / row["plain"], 3)
    last = cols["adaptive"][-1]
    row["adaptive_last"] = {"k": last.k, "steps": last.steps, "drafted": last.n_drafted, "accepted": last.n_accepted}
    k1 = cols["K=1"][-1]
    row["acceptance_K1"] = round(k1.n_accepted / max(1, k1.n_drafted), 3)
    return row


def shares(eng: Engine) -> dict:
    out = {}
    for name, kw in SETTINGS.items():
        run(eng, 99, **kw)  # the controller's warm-up
        vals, speeds, k = [], [], 0
        for seed in range(max(REPS, 5)):
            before = inside[0]
            s = run(eng, seed, **kw)
            vals.append(max(0.0, s.elapsed_s - (inside[0] - before)) / s.elapsed_s)
            speeds.append(s.tokens_per_s)
            k = s.k
        out[name] = {
            "share": round(statistics.median(vals), 4),
            "shares": [round(v, 4) for v in vals],
            "tok_s": round(statistics.median(speeds), 1),
            "k_last": k,
        }
    return out


def main() -> None:
    target, draft = sys.argv[1], sys.argv[2]
    ngl = int(os.environ.get("NGL", "99"))
    t0 = time.perf_counter()
    eng = Engine.load(target, draft, n_ctx=2048, n_gpu_layers=ngl, lookup=False)
    info = eng.info()
    emit(
        "load",
        {
            "s": round(time.perf_counter() - t0, 1),
            "gpu": str(info.gpu),
            "pair": info.pair.as_dict() if info.pair else None,
        },
    )
    plain = eng.generate(PROMPT, temperature=0, max_tokens=TOKENS, speculative=False)
    eng.reset()
    spec = eng.generate(PROMPT, temperature=0, max_tokens=TOKENS)
    emit("greedy", {"identical": plain.tokens == spec.tokens, "tokens": len(plain.tokens)})
    dec = eng._decoder
    heads = {}  # the same seeded T = 0.8 text from rows' top-k as from whole rows (ties aside)
    for on in (True, False, True, False):
        dec.heads = on
        eng.reset()
        heads.setdefault(on, []).append(eng.generate(PROMPT, temperature=0.8, max_tokens=TOKENS, seed=3, k=4))
    emit(
        "heads",
        {
            "on_gpu": dec.target.model.heads,
            "identical": len({tuple(r.tokens) for rs in heads.values() for r in rs}) == 1,
            "tok_s_heads_whole": [[round(r.stats.tokens_per_s, 1) for r in heads[on]] for on in (True, False)],
        },
    )
    dec.heads = True
    emit(
        "pass_ms",
        {
            "target": pass_times(dec.target.model, len(dec.target.tokens), SIZES),
            "draft": pass_times(dec.draft.model, len(dec.draft.tokens), SIZES),
        },
    )
    emit("shares_model_only", shares(eng))
    dec.heads = False
    emit("shares_model_only_whole_rows", shares(eng))
    dec.heads = True
    for temp in (0.8, 0.0):
        emit(f"sweep_T{temp}", sweep(eng, temp))
    eng.close()
    eng = Engine.load(target, draft, n_ctx=2048, n_gpu_layers=ngl)  # lookup on, as by default
    emit("shares_default", shares(eng))
    eng.close()


if __name__ == "__main__":
    main()
