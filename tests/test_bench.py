"""`edgespec bench` end to end on the demo pair, tiny: every column gets one run per round,
and the report files are written from them (llama.cpp's own binaries are skipped here;
tests/test_native.py runs those when they are built)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgespec.frontends.bench.copying import markdown
from edgespec.frontends.cli import main
from tests.conftest import demo_paths

pytestmark = pytest.mark.real


def test_bench_interleaves_columns_and_writes_reports(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    if demo_paths() is None:
        pytest.skip("demo pair not prepared")
    out = tmp_path / "bench"
    args = ["bench", "--no-native", "--out", str(out), "--tokens", "12", "--repeats", "2", "--ks", "0,2"]
    args += ["--temps", "0,0.8", "--prompts", "code", "--bad-pair", "", "--quant-drafts", "", "--lookup-prompts", ""]
    assert main(args) == 0
    result = json.loads((out / "bench.json").read_text())
    assert [(c["prompt"], c["temperature"]) for c in result["cells"]] == [("code", 0.0), ("code", 0.8)]
    for cell in result["cells"]:
        assert sorted(cell["edgespec"]) == ["0", "2", "adaptive"]
        for column in cell["edgespec"].values():
            assert len(column["runs"]) == 2
            speeds = sorted(r["tokens_per_s"] for r in column["runs"])
            assert column["tokens_per_s"] == pytest.approx(sum(speeds) / 2)  # the median of two
            assert all(r["n_generated"] > 0 for r in column["runs"])
        assert cell["edgespec"]["0"]["runs"][0]["n_drafted"] == 0
        assert cell["edgespec"]["2"]["runs"][0]["n_drafted"] > 0
    p_min = {row["temperature"]: row["p_min"] for row in result["p_min"]}
    assert sorted(p_min) == [0.0, 0.8] and all(sorted(v) == ["0.0", "0.3", "0.6"] for v in p_min.values())
    md = (out / "bench.md").read_text()
    assert "| code | 0.0 |" in md and "adaptive" in md and "p_min 0.6" in md
    assert "the edgespec columns of a round decode one answer" in md  # a T = 0.8 cell ran
    assert (out / "bench.png").stat().st_size > 1000
    assert "edgespec bench" in capsys.readouterr().out


def test_bench_lookup_section_runs_every_column_and_reports_ratios(tmp_path: Path) -> None:
    if demo_paths() is None:
        pytest.skip("demo pair not prepared")
    out = tmp_path / "bench"
    args = ["bench", "--no-native", "--only-lookup", "--out", str(out), "--tokens", "24", "--repeats", "1"]
    args += ["--temps", "0", "--lookup-prompts", "rename,prose"]
    assert main(args) == 0
    result = json.loads((out / "bench.json").read_text())
    assert [c["prompt"] for c in result["lookup"]] == ["rename", "prose"]
    for cell in result["lookup"]:
        assert all(cell[col] > 0 for col in ("plain", "draftless", "model", "hybrid"))
    md = (out / "bench.md").read_text()
    assert "## Prompt lookup" in md and "| rename | 0.0 |" in md and "draftless / edgespec plain" in md
    # the targets table: llama.cpp's columns were not run (n/a), edgespec's are judged
    assert "| draftless / llama.cpp plain | 0.0 | median of 1 copy prompts | n/a | >= 1.80x | - |" in md
    assert "| hybrid / model-only, prose | 0.0 | prose |" in md


def test_bench_names_an_unknown_quantization_draft(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    if demo_paths() is None:
        pytest.skip("demo pair not prepared")
    args = ["bench", "--no-native", "--no-p-min", "--out", str(tmp_path), "--tokens", "4", "--repeats", "1"]
    args += ["--ks", "0", "--temps", "0", "--prompts", "code", "--bad-pair", "", "--quant-drafts", "no-such-model"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-model" in err[0]


@pytest.mark.parametrize(
    "option, value, words",
    [
        ("--prompts", "poem", "poem"),
        ("--ks", "1,x", "--ks"),
        ("--temps", "-1", "--temps"),
        ("--bad-pair", "nope", "nope"),
        ("--tokens", "0", "--tokens"),
        ("--lookup-prompts", "haiku", "haiku"),
        ("--ks", "0", "needs 0 (plain decoding) and at least one K above it"),  # the report's ratios need both
        ("--ks", "0,40", "between 0 and 32"),
        ("--temps", "nan", "--temps"),
        ("--n-max", "0", "--n-max"),
        ("--out", "/proc/edgespec-bench", "cannot write the reports to /proc/edgespec-bench"),
    ],
)
def test_bench_refuses_bad_options_before_running(option: str, value: str, words: str, capsys) -> None:
    assert main(["bench", "--no-native", "--out", "/proc/never", option, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--ks", "a"], "--ks takes comma-separated whole numbers"),
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--machines", "cpu,nope"], "no simulated machine 'nope' (--machines)"),
        (["--profiles", "steady-0.9,nope"], "no acceptance profile 'nope' (--profiles)"),
    ],
)
def test_the_simulated_bench_refuses_bad_options_in_one_line(args: list[str], words: str, capsys) -> None:
    assert main(["bench", "--simulate", "--virtual-clock", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_the_lookup_table_says_n_a_for_llama_cpp_columns_not_run() -> None:
    cell = {"prompt": "rename", "temperature": 0.0, "plain": 37.4, "draftless": 50.1, "model": 43.4,
            "hybrid": 43.6, "copied": 0.45}  # fmt: skip
    row = markdown([cell]).splitlines()[-1]
    assert row.startswith("| rename | 0.0 | n/a | n/a | n/a | n/a | 37.4 | 50.1 | 43.4 | 43.6 | 45% | n/a | n/a |")
    ngram = {"llama_ngram-simple": 39.0, "llama_ngram-map-k": 30.0, "llama_ngram-mod": 35.0}
    native = {**cell, "llama_plain": 38.0, "llama_plain_empty": 44.0, **ngram}
    row = markdown([native]).splitlines()[-1]
    assert "| rename | 0.0 | 44.0 | 38.0 | 39.0 | n/a | 37.4 |" in row


def test_a_pair_without_a_draft_model_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "models.toml"
    cfg.write_text('[models.t]\npath = "/m.gguf"\n[pairs.lk]\ntarget = "t"\ndraft = "lookup"\n')
    assert main(["bench", "--config", str(cfg), "--pair", "lk", "--quant-drafts", "", "--bad-pair", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pair 'lk' has no draft model" in err[0]
