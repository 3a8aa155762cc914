"""The bench runs every column of a cell once per round (no models: the runs are recorded)."""

from __future__ import annotations

import argparse

import pytest

import edgespec.frontends.bench.run as bench


class _Engine:
    def chat_text(self, messages: list[dict]) -> str:
        return messages[0]["content"]


def test_columns_run_once_per_round_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str | int | None, int]] = []

    def once(engine, prompt, temp, k, spec, n, seed):
        calls.append(("adaptive" if k is None else k, seed))
        return {"tokens_per_s": float(seed)}

    monkeypatch.setattr(bench, "_edgespec_once", once)
    args = argparse.Namespace(ks="0,2,4", prompts="code", temps="0", repeats=3, tokens=8, threads=None, n_max="2")
    (cell,) = bench.bench_cells(args, _Engine(), ("t", "d"), native=None)
    columns = [0, 2, 4, "adaptive"]
    assert calls == [(c, 1234 + r) for r in range(3) for c in columns]  # round by round, not column by column
    assert cell["edgespec"]["adaptive"]["tokens_per_s"] == 1235.0  # the median of the three rounds
