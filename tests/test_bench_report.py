"""The bench report's caveat on sampled cells: there when a cell ran above T = 0, absent otherwise."""

from __future__ import annotations

from edgespec.frontends.bench.report import UNPAIRED, sampled_note


def test_the_caveat_follows_the_temperatures_of_the_cells() -> None:
    greedy = {"cells": [{"temperature": 0.0}, {"temperature": 0.0}]}
    sampled = {"cells": [{"temperature": 0.0}, {"temperature": 0.8}]}
    assert sampled_note(greedy) == []
    note = sampled_note(sampled)
    assert note[0] == "" and note[1].startswith(UNPAIRED) and "virtual_costs.py" in note[1]
