"""The lookup section's targets: ratios over the copy prompts' cells, checked against the least each should be."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgespec.frontends.bench.copying import target_ratios, targets_markdown

FAMILY_FLOOR = {"llama_ngram-simple": 1.0, "llama_ngram-map-k": 1.0, "llama_ngram-mod": 1.0,
                "llama_chained_4": 1.0, "llama_chained_8": 1.0}  # fmt: skip


def _cell(prompt: str, temp: float, **cols: float) -> dict:
    """A cell; llama.cpp's columns, where it has some, complete with every type (a best of is
    judged only over all of them)."""
    native = FAMILY_FLOOR if any(k.startswith("llama_") for k in cols) else {}
    return {"prompt": prompt, "temperature": temp, **native, **cols}


CELLS = [
    # llama.cpp's n-gram and chained columns: the best of each family counts
    _cell("edit-code", 0.0, plain=30.0, draftless=40.0, model=40.0, hybrid=44.0, llama_plain=20.0,
          **{"llama_ngram-simple": 25.0, "llama_ngram-mod": 32.0, "llama_chained_4": 30.0, "llama_chained_8": 31.0}),
    _cell("rename", 0.0, plain=30.0, draftless=60.0, model=40.0, hybrid=64.0, llama_plain=30.0,
          **{"llama_ngram-simple": 40.0, "llama_ngram-mod": 30.0, "llama_chained_4": 40.0, "llama_chained_8": 32.0}),
    _cell("extract", 0.0, plain=30.0, draftless=90.0, model=40.0, hybrid=80.0, llama_plain=30.0,
          **{"llama_ngram-simple": 45.0, "llama_ngram-mod": 30.0, "llama_chained_4": 40.0, "llama_chained_8": 50.0}),
    _cell("revise", 0.0, plain=30.0, draftless=50.0, model=40.0, hybrid=60.0, llama_plain=25.0,
          **{"llama_ngram-simple": 40.0, "llama_chained_4": 40.0}),
    _cell("prose", 0.0, plain=30.0, draftless=29.0, model=40.0, hybrid=38.0, llama_plain=30.0,
          **{"llama_ngram-simple": 30.0, "llama_chained_4": 40.0}),
]  # fmt: skip


def test_copy_prompts_give_the_median_of_their_ratios_and_prose_its_own() -> None:
    got = {(t["target"], t["temperature"]): t for t in target_ratios(CELLS)}
    plain = got[("draftless / llama.cpp plain", 0.0)]
    assert plain["ratio"] == 2.0 and plain["cells"] == 4 and plain["met"]  # 40/20, 60/30, 90/30, 50/25
    ngram = got[("draftless / llama.cpp's best n-gram type", 0.0)]
    assert ngram["ratio"] == 1.375 and ngram["met"]  # 40/32, 60/40, 90/45, 50/40: the middle two's mean
    hybrid = got[("hybrid / model-only", 0.0)]
    assert hybrid["ratio"] == pytest.approx(1.55) and hybrid["least"] == 1.5 and hybrid["met"]  # 1.1, 1.6, 2.0, 1.5
    chained = got[("hybrid / llama.cpp's best chained type", 0.0)]
    assert chained["ratio"] == pytest.approx(1.55) and chained["met"]  # 44/31, 64/40, 80/50, 60/40
    prose = got[("draftless / edgespec plain, prose", 0.0)]
    assert prose["cells"] == 1 and prose["ratio"] == 29.0 / 30.0 and prose["met"] is False  # 0.967 < 0.97
    assert got[("hybrid / model-only, prose", 0.0)]["ratio"] == 0.95


def test_a_copy_bar_over_some_of_the_copy_prompts_is_not_judged() -> None:
    """`--lookup-prompts extract,prose` marked every copy bar met on one prompt."""
    got = {(t["target"], t["temperature"]): t for t in target_ratios([CELLS[2], CELLS[4]])}
    assert (
        got[("draftless / llama.cpp plain", 0.0)]["ratio"] == 3.0
        and got[("draftless / llama.cpp plain", 0.0)]["met"] is None
    )
    assert got[("draftless / edgespec plain, prose", 0.0)]["met"] is False  # prose is judged on its own


def test_a_missing_column_is_n_a_and_a_temperature_without_a_target_is_not_judged() -> None:
    cells = [_cell("rename", 0.8, plain=30.0, draftless=45.0, model=40.0, hybrid=48.0)]  # --no-native
    got = {t["target"]: t for t in target_ratios(cells)}
    assert got["draftless / llama.cpp plain"]["ratio"] is None and got["draftless / llama.cpp plain"]["met"] is None
    assert got["hybrid / model-only"]["ratio"] == 1.2 and got["hybrid / model-only"]["met"] is None  # one of four
    table = targets_markdown(cells)
    assert "| draftless / llama.cpp plain | 0.8 | median of 1 copy prompts | n/a | - | - |" in table
    assert "| hybrid / model-only | 0.8 | median of 1 copy prompts | 1.200x | >= 1.10x | - |" in table
    assert "prose" not in table.split("\n", 2)[2]  # no prose cell ran: no prose row


def test_a_failed_llama_cpp_run_leaves_its_column_short_not_the_bench_lost() -> None:
    """One timeout of llama-speculative-simple (1800 s) raised through every section: after up to
    74 minutes nothing was written."""
    from edgespec.frontends.bench.copying import _native_round
    from edgespec.frontends.bench.native import NativeError

    class Native:
        def run_llama_bench(self, *_: object, **__: object) -> dict:
            return {"tokens_per_s": 50.0}

        def run_speculative_simple(self, *_: object, spec_type: str = "", **__: object) -> dict:
            if spec_type == "ngram-mod":
                raise NativeError("llama-speculative-simple timed out after 1800 s")
            return {"tokens_per_s": 60.0}

    runs: dict = {}
    failed: set[str] = set()
    native = Native()
    calls = []
    native.run_speculative_simple = lambda *a, _f=native.run_speculative_simple, **k: calls.append(k) or _f(*a, **k)
    for _ in range(3):  # three rounds of one cell
        _native_round(native, runs, (Path("t"), Path("d")), "text", 10, 0.0, 8, 1, None, failed)
    assert "llama_ngram-mod" not in runs and runs["llama_ngram-simple"] == [{"tokens_per_s": 60.0}] * 3
    assert len(runs["llama_plain"]) == 3 and len(runs["llama_chained_4"]) == 3
    assert [k["spec_type"] for k in calls].count("ngram-mod") == 1  # a failed column is not run again in the cell


def test_a_best_of_with_a_column_missing_and_a_prompt_run_twice_are_not_judged() -> None:
    """A failed llama.cpp type made "best n-gram" the best of the rest (an easier bar); four runs
    of one prompt passed for the four copy prompts."""
    cells = [dict(c) for c in CELLS]
    del cells[0]["llama_ngram-mod"]
    got = {(t["target"], t["temperature"]): t for t in target_ratios(cells)}
    assert got[("draftless / llama.cpp's best n-gram type", 0.0)]["ratio"] is None
    assert got[("draftless / llama.cpp plain", 0.0)]["met"] is True  # the rest still judged
    twice = [CELLS[1], dict(CELLS[1]), dict(CELLS[1]), dict(CELLS[1])]
    assert all(t["met"] is None for t in target_ratios(twice))
