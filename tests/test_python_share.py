"""The large-vocabulary simulated pair and the runtime's-share bench built on it."""

from __future__ import annotations

import time

import numpy as np

import edgespec.core.target_rows as target_rows_mod
from edgespec.core.sampling import SamplingParams, to_dist
from edgespec.frontends.bench import python_share
from edgespec.frontends.bench.python_share import SETTINGS, format_table, python_shares
from edgespec.frontends.bench.simulate import MACHINES, Curve, Machine, pair, steady

FAST = Machine("fast", Curve(2e-3, 8, 0.1), Curve(0.3e-3, 8, 0.05))


def test_large_vocabulary_rows_have_a_tail_and_keep_the_profile() -> None:
    """Past the default vocabulary the other logits are noise, yet the target's token is its
    argmax and the draft's softmax at its token is its confidence, as at 64 tokens."""
    target, draft = pair(MACHINES[0], steady(0.7), vocab=5000)
    world = target.world
    prompt = [1, 10, 11, 12]
    t_row = target.eval(prompt, 0, logits_from=3)[0].copy()
    d_row = draft.eval(prompt, 0, logits_from=3)[0].copy()
    want = world.target_token(4, 12)
    token, sure = world.draft_token(4, 12)
    assert t_row.shape == (5000,) and int(np.argmax(t_row)) == want
    assert np.count_nonzero(t_row) > 4000  # a tail, not zeros
    w = np.exp(d_row.astype(np.float64) - d_row.max())
    assert abs(w[token] / w.sum() - sure) < 1e-5
    assert draft.busy_s > 0.0 and target.busy_s >= MACHINES[0].target(4)


def test_the_share_is_the_time_outside_both_models(monkeypatch) -> None:
    """The target's rows (one per step at least, whatever K) transformed 2 ms slower must show."""
    base = python_shares(vocabs=[2000], machine=FAST, tokens=24, repeats=1, settings=["top_k=40"])[0]
    slow_s = 2e-3

    def slow_to_dist(row: np.ndarray, params: SamplingParams):
        time.sleep(slow_s)
        return to_dist(row, params)

    monkeypatch.setattr(target_rows_mod, "to_dist", slow_to_dist)
    slow = python_shares(vocabs=[2000], machine=FAST, tokens=24, repeats=1, settings=["top_k=40"])[0]
    assert 0.0 <= base["share"] < 0.5
    assert slow["share"] > base["share"] + 0.1
    assert slow["tok_s"] < base["tok_s"]


def test_the_table_has_a_line_per_setting() -> None:
    records = python_shares(vocabs=[300], machine=FAST, tokens=8, repeats=1)
    lines = format_table(records).splitlines()
    assert len(lines) == 2 + 2 * len(SETTINGS)
    assert lines[2].startswith("| 300 | spins | top_k=40 | ")
    assert lines[2 + len(SETTINGS)].startswith("| 300 | sleeps | top_k=40 | ")
    assert python_share.GPU_PAIR.target(8) == python_share.GPU_PAIR.target(1)  # a GPU: flat to its knee


def test_a_spinning_host_waits_out_the_eval_without_sleeping(monkeypatch) -> None:
    """Machine.spins: the eval takes its cost on the wall clock, the host never asleep (CUDA's
    default sync); otherwise it sleeps (Metal's). The share bench measures both."""
    import edgespec.frontends.bench.simulate as simulate

    slept: list[float] = []
    monkeypatch.setattr(simulate.time, "sleep", lambda s: slept.append(s))
    spinning = Machine("spin", Curve(3e-3, 8, 0.1), Curve(1e-3, 8, 0.05), spins=True)
    target, _ = pair(spinning, steady(0.8), vocab=300)
    t0 = time.perf_counter()
    target.eval([1, 10, 11], 0, logits_from=2)
    assert time.perf_counter() - t0 >= 3e-3 and not slept
    target, _ = pair(FAST, steady(0.8), vocab=300)
    target.eval([1, 10, 11], 0, logits_from=2)
    assert slept and slept[0] > 1e-3


def test_a_simulated_head_is_the_top_k_of_the_whole_row_without_writing_it() -> None:
    """set_head: each row's k largest logits, the same as the whole row's, to the bit; the
    whole-row buffer is not touched (with a GPU's backend top-k no row reaches the host)."""
    for who in (0, 1):
        models = pair(MACHINES[0], steady(0.7), vocab=5000)
        model = models[who]
        prompt = [1, 10, 11, 12, 13]
        whole = model.eval(prompt, 0, logits_from=2).copy()
        model.trim(0)
        model._out[:] = -1.0
        model.set_head(40)
        heads = model.eval(prompt, 0, logits_from=2)
        assert (model._out == -1.0).all()
        for i in range(len(whole)):
            top = np.sort(whole[i])[::-1][:40]
            assert np.array_equal(np.sort(heads.vals[i])[::-1], top)
            assert np.array_equal(whole[i][heads.ids[i]], heads.vals[i])
