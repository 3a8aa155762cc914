"""The lookup section's targets: ratios over the copy prompts' cells, checked against the least each should be."""

from __future__ import annotations

from edgespec.frontends.bench.copying import target_ratios, targets_markdown


def _cell(prompt: str, temp: float, **cols: float) -> dict:
    return {"prompt": prompt, "temperature": temp, **cols}


CELLS = [
    # llama.cpp's n-gram and chained columns: the best of each family counts
    _cell("edit-code", 0.0, plain=30.0, draftless=40.0, model=40.0, hybrid=44.0, llama_plain=20.0,
          **{"llama_ngram-simple": 25.0, "llama_ngram-mod": 32.0, "llama_chained_4": 30.0, "llama_chained_8": 31.0}),
    _cell("rename", 0.0, plain=30.0, draftless=60.0, model=40.0, hybrid=64.0, llama_plain=30.0,
          **{"llama_ngram-simple": 40.0, "llama_ngram-mod": 30.0, "llama_chained_4": 40.0, "llama_chained_8": 32.0}),
    _cell("extract", 0.0, plain=30.0, draftless=90.0, model=40.0, hybrid=80.0, llama_plain=30.0,
          **{"llama_ngram-simple": 45.0, "llama_ngram-mod": 30.0, "llama_chained_4": 40.0, "llama_chained_8": 50.0}),
    _cell("prose", 0.0, plain=30.0, draftless=29.0, model=40.0, hybrid=38.0, llama_plain=30.0,
          **{"llama_ngram-simple": 30.0, "llama_chained_4": 40.0}),
]  # fmt: skip


def test_copy_prompts_give_the_median_of_their_ratios_and_prose_its_own() -> None:
    got = {(t["target"], t["temperature"]): t for t in target_ratios(CELLS)}
    plain = got[("draftless / llama.cpp plain", 0.0)]
    assert plain["ratio"] == 2.0 and plain["cells"] == 3 and plain["met"]  # 40/20, 60/30, 90/30
    ngram = got[("draftless / llama.cpp's best n-gram type", 0.0)]
    assert ngram["ratio"] == 1.5 and ngram["met"]  # 40/32, 60/40, 90/45
    hybrid = got[("hybrid / model-only", 0.0)]
    assert hybrid["ratio"] == 1.6 and hybrid["least"] == 1.5 and hybrid["met"]  # 1.1, 1.6, 2.0
    chained = got[("hybrid / llama.cpp's best chained type", 0.0)]
    assert chained["ratio"] == 1.6 and chained["met"]  # 44/31, 64/40, 80/50
    prose = got[("draftless / edgespec plain, prose", 0.0)]
    assert prose["cells"] == 1 and prose["ratio"] == 29.0 / 30.0 and prose["met"] is False  # 0.967 < 0.97
    assert got[("hybrid / model-only, prose", 0.0)]["ratio"] == 0.95


def test_a_missing_column_is_n_a_and_a_temperature_without_a_target_is_not_judged() -> None:
    cells = [_cell("rename", 0.8, plain=30.0, draftless=45.0, model=40.0, hybrid=48.0)]  # --no-native
    got = {t["target"]: t for t in target_ratios(cells)}
    assert got["draftless / llama.cpp plain"]["ratio"] is None and got["draftless / llama.cpp plain"]["met"] is None
    assert got["hybrid / model-only"]["ratio"] == 1.2 and got["hybrid / model-only"]["met"] is True  # >= 1.1 at 0.8
    table = targets_markdown(cells)
    assert "| draftless / llama.cpp plain | 0.8 | median of 1 copy prompts | n/a | - | - |" in table
    assert "| hybrid / model-only | 0.8 | median of 1 copy prompts | 1.20x | >= 1.10x | yes |" in table
    assert "prose" not in table.split("\n", 2)[2]  # no prose cell ran: no prose row
