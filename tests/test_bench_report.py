"""The bench report: the caveat on sampled cells (there when a cell ran above T = 0, absent
otherwise), and the adaptive / best fixed K ratio with the best K held out."""

from __future__ import annotations

import pytest

from edgespec.frontends.bench.report import ROUNDS, _fixed, held_out_ratio, sampled_note


def test_the_caveat_follows_the_temperatures_of_the_cells() -> None:
    greedy = {"cells": [{"temperature": 0.0}, {"temperature": 0.0}]}
    sampled = {"cells": [{"temperature": 0.0}, {"temperature": 0.8}]}
    assert sampled_note(greedy) == []
    note = sampled_note(sampled)
    assert note[0] == "" and note[1].startswith(ROUNDS) and "virtual_costs.py" in note[1]


def _cell(adaptive: list[float], **fixed: list[float]) -> dict:
    es = {k[1:]: {"runs": [{"tokens_per_s": x} for x in v]} for k, v in fixed.items()}
    es["adaptive"] = {"runs": [{"tokens_per_s": x} for x in adaptive]}
    es["0"] = {"runs": [{"tokens_per_s": 30.0}] * len(adaptive)}
    return {"edgespec": es}


def test_the_held_out_ratio_picks_each_rounds_k_from_the_other_rounds() -> None:
    # K = 4 had one lucky round: the rounds it was picked in (from the others) show its speed
    cell = _cell([40.0, 40.0, 40.0], k4=[48.0, 40.0, 40.0], k8=[41.0, 41.0, 41.0])
    # round 0 picks K = 8 (40 / 41), rounds 1 and 2 pick K = 4 on its lucky round (40 / 40)
    assert held_out_ratio(cell) == pytest.approx(1.0)
    # a K that is faster in every round is found in every round
    cell = _cell([40.0, 40.0, 40.0], k4=[42.0, 41.0, 43.0], k8=[50.0, 48.0, 52.0])
    assert held_out_ratio(cell) == pytest.approx(40.0 / 50.0)
    assert held_out_ratio(_cell([40.0], k4=[42.0])) is None  # one round: nothing to hold out


def test_plain_decoding_is_one_of_the_fixed_k_when_it_is_the_fastest() -> None:
    """Best and median fixed K left K = 0 out, so adaptive at 0.92x plain read 1.05x "best fixed"
    (the simulated bench and the issue's bar count K from 0)."""
    cell = _cell([46.0, 46.0, 46.0], k4=[40.0] * 3, k8=[44.0] * 3)
    cell["edgespec"]["0"] = {"runs": [{"tokens_per_s": 50.0}] * 3}
    assert held_out_ratio(cell) == pytest.approx(46.0 / 50.0)
    assert (
        max(_fixed({"edgespec": {k: {"tokens_per_s": 50.0 if k == "0" else 44.0} for k in ("0", "4", "8")}}).values())
        == 50.0
    )
