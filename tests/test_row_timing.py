from __future__ import annotations

import time

from edgespec.frontends.bench.row_timing import ROWS, SETTINGS, format_table, row_timings


def test_row_timings_gives_one_record_per_size_row_and_setting_quickly() -> None:
    t0 = time.perf_counter()
    rows = row_timings(vocab_sizes=(16, 300), repeats=3)
    assert time.perf_counter() - t0 < 5.0
    assert len(rows) == 2 * len(ROWS) * len(SETTINGS)
    assert all(sorted(r) == ["kept", "ms", "n_vocab", "row", "setting"] for r in rows)
    assert all(r["ms"] > 0.0 and 1 <= r["kept"] <= r["n_vocab"] for r in rows)
    assert all(r["kept"] == 1 for r in rows if r["setting"] == "greedy")


def test_format_table_has_a_line_per_size_and_row_and_a_column_per_setting() -> None:
    lines = format_table(row_timings(vocab_sizes=(16, 300), repeats=1)).splitlines()
    assert len(lines) == 2 + 2 * len(ROWS)
    assert all(line.count("|") == 3 + len(SETTINGS) for line in lines)
    assert lines[2].startswith("| 16 | peaked | ")
