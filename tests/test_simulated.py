"""The simulated machine (edgespec/frontends/bench/simulate.py) and the adaptive controller
judged on it, through the real Engine and decoder, on machines it was not tuned on.

HELD_OUT machines are drawn by `random_machine` from seeds that nothing was tuned on (the
tuning table is simulate.MACHINES); the controller is judged there against every fixed
K = 0..16 on the virtual clock (decisions only, deterministic), and loosely on the real
clock (a shared machine is noisy). `edgespec bench --simulate --machines seed1001,...`
prints the real-clock figures.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import edgespec.core.decoder as decoder_mod
from edgespec import Engine
from edgespec.core.controller import FixedK
from edgespec.core.decoder import Decoder
from edgespec.core.sampling import SamplingParams
from edgespec.frontends.bench.sim_bench import MAX_TEXTS, PROMPT, prompts, speeds, summary
from edgespec.frontends.bench.simulate import (
    MACHINES,
    PROFILES,
    VOCAB,
    Curve,
    VirtualClock,
    pair,
    random_machine,
    steady,
)
from tests.fakes import decode

HELD_OUT = (1001, 1002, 1003, 1004)


def test_an_eval_takes_the_time_its_curve_says() -> None:
    m = MACHINES[3]  # GPU-like: flat up to 4 tokens
    target, _ = pair(m, steady(0.9))
    target.eval(PROMPT, 0)
    for n, want in ((1, m.target(1)), (4, m.target(4)), (8, m.target(8))):
        t0 = time.perf_counter()
        target.eval(list(range(3, 3 + n)), len(target.kv), logits_from=0)
        assert time.perf_counter() - t0 >= want
    assert Curve(1.0, 4, 0.5)(4) == 1.0 and Curve(1.0, 4, 0.5)(6) == 2.0


def test_the_draft_agrees_as_the_profile_says_and_its_confidence_hints_at_it() -> None:
    target, draft = pair(MACHINES[0], steady(0.7))
    world = target.world
    agree, sure_when = [], {True: [], False: []}
    for pos in range(20, 2020):
        token, sure = world.draft_token(pos, pos % 50)
        ok = token == world.target_token(pos, pos % 50)
        agree.append(ok)
        sure_when[ok].append(sure)
    assert abs(np.mean(agree) - 0.7) < 0.04
    assert np.mean(sure_when[True]) > np.mean(sure_when[False]) + 0.3


def test_a_draft_reading_a_window_past_a_skipped_stretch_predicts_it_as_in_place() -> None:
    # a check of a long lag (Decoder._window) puts later text right after what the draft holds:
    # the fake predicts from the text it read, as a real model does, not from the cache index
    clock = VirtualClock()
    target, draft = pair(MACHINES[0], PROFILES["switch-96"], clock=clock)
    text = [1, *(target.world.target_token(i, 0) for i in range(1, 200))]
    target.eval(text, 0)
    in_place = draft.eval(text, 0, logits_from=150).copy()
    draft.trim(10)
    window = draft.eval(text[150:], 10, logits_from=0)
    assert np.array_equal(window, in_place)
    draft.trim(10)
    assert draft.at == list(range(10))
    skipped = draft.eval([5, 6, 7], 10, logits_from=0)  # text the target never read: at the cache index
    assert draft.at[-3:] == [10, 11, 12] and skipped.shape == (3, draft.n_vocab)


@pytest.mark.parametrize("k", [1, 4, 12])
def test_greedy_speculation_on_a_simulated_machine_is_plain_decoding(k: int) -> None:
    greedy = SamplingParams(0.0)
    target, _ = pair(MACHINES[0], PROFILES["switch-96"])
    plain = [t for s in decode(Decoder(target), PROMPT, greedy, FixedK(0), max_tokens=60,
                               rng=np.random.default_rng(0)) for t in s.tokens]  # fmt: skip
    dec = Decoder(*pair(MACHINES[0], PROFILES["switch-96"]))
    spec = [t for s in decode(dec, PROMPT, greedy, FixedK(k), max_tokens=60, rng=np.random.default_rng(0))
            for t in s.tokens]  # fmt: skip
    assert spec == plain


def test_the_engine_runs_on_a_simulated_pair() -> None:
    engine = Engine(*pair(MACHINES[4], steady(0.9)), lookup=False)
    res = engine.generate(PROMPT, temperature=0.0, max_tokens=40)
    assert len(res.tokens) == 40 and res.stats.n_accepted > 0


@pytest.mark.slow
def test_adaptive_is_near_the_best_fixed_k_on_one_held_out_machine_on_the_real_clock() -> None:
    row = speeds(random_machine(HELD_OUT[0]), steady(0.9), [0, 2, 4, 8, 12, 16], tokens=160, texts=1)
    # loose: on a busy shared machine a short run measured 0.79-1.0x (the controller's own
    # ~0.1 ms a step is a few % of these 2-5 ms steps, and hiccups hit columns unevenly)
    assert summary(row)["vs_best"] >= 0.75, row


@pytest.fixture
def virtual(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    """The decoder's clock replaced by the simulated machines' own: the decisions judged,
    deterministic, without the host's noise (and without the controller's own cost)."""
    clock = VirtualClock()
    monkeypatch.setattr(decoder_mod, "time", clock)
    return clock


# a little under what the held-out machines reach on the virtual clock over the bench's four
# texts per round (steady 0.96-0.99x the best fixed K, switching 1.09-1.13x): a guard against
# regressions, not the goal (0.95x steady, 1.10x switching; the latter not reached everywhere)
BARS = {"steady-0.9": 0.95, "steady-0.6": 0.95, "switch-96": 1.07}


@pytest.mark.parametrize("seed", HELD_OUT[:2])
def test_adaptive_against_every_fixed_k_on_held_out_machines(virtual: VirtualClock, seed: int) -> None:
    for profile in ("steady-0.9", "switch-96"):
        row = speeds(random_machine(seed), PROFILES[profile], range(17), clock=virtual)
        assert summary(row)["vs_best"] >= BARS[profile], (profile, row)


@pytest.mark.slow
@pytest.mark.parametrize("seed", HELD_OUT)
@pytest.mark.parametrize("profile", BARS)
def test_adaptive_against_every_fixed_k_on_all_held_out_machines(
    virtual: VirtualClock, seed: int, profile: str
) -> None:
    row = speeds(random_machine(seed), PROFILES[profile], range(17), clock=virtual)
    assert summary(row)["vs_best"] >= BARS[profile], row


def test_bench_simulate_prints_the_table(capsys: pytest.CaptureFixture) -> None:
    import argparse

    from edgespec.frontends.bench.run import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = ["bench", "--simulate", "--machines", "gpu-knee8,seed7", "--profiles", "steady-0.9"]
    args = parser.parse_args([*args, "--ks", "0,4", "--tokens", "30", "--repeats", "1"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "| gpu-knee8 | steady-0.9 |" in out and "| seed7-" in out and "K=4" in out
    assert "steady-0.9: adaptive / best fixed K median" in out


def test_bench_simulate_on_the_virtual_clock_is_deterministic(capsys: pytest.CaptureFixture) -> None:
    import argparse
    import time as real_time

    from edgespec.frontends.bench.run import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    argv = ["bench", "--simulate", "--virtual-clock", "--machines", "seed3-4", "--profiles", "switch-96"]
    argv += ["--ks", "0,2", "--tokens", "60", "--repeats", "1"]
    outs = []
    for _ in range(2):
        args = parser.parse_args(argv)
        assert args.func(args) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and "| seed3-" in outs[0] and "| seed4-" in outs[0]  # a range of seeds
    assert decoder_mod.time is real_time  # the real clock is back


def test_the_bench_measures_each_machine_on_several_texts() -> None:
    # one text is one draw of where the draft disagrees; the bench's prompts give different ones
    engine = Engine(*pair(MACHINES[0], steady(0.9)), lookup=False)
    outs = [tuple(engine.generate(p, temperature=0.0, max_tokens=24, k=0).tokens) for p in prompts(3)]
    assert len(set(outs)) == 3 and prompts(1) == [PROMPT]
    assert max(t for p in prompts(MAX_TEXTS) for t in p) < VOCAB  # every prompt is in the vocabulary
    with pytest.raises(ValueError):
        prompts(MAX_TEXTS + 1)
