"""Bad input through the real command line: exit code 2, one line on stderr, no traceback, fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gguf_corpus import small_model, write_corpus

from edgespec.frontends import cli
from tests.conftest import demo_paths

EDGESPEC = [sys.executable, "-m", "edgespec.frontends.cli"]


def run_cli(*args: str, timeout: float = 60) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    p = subprocess.run([*EDGESPEC, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def assert_one_line_error(rc: int, err: str, elapsed: float = 0.0, limit: float = 30.0) -> None:
    """Exit code 2, one line, no traceback, and no minutes of loading before the refusal
    (the limit is generous: a process start on a loaded 2-core machine can take seconds)."""
    assert rc == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgespec: error: "), err
    assert "Traceback" not in err
    assert elapsed < limit, f"took {elapsed:.1f}s"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("corpus")
    files = write_corpus(d)
    (d / "a_directory").mkdir()
    files["directory"] = d / "a_directory"
    files["missing"] = d / "does-not-exist.gguf"
    return files


def test_every_malformed_file_is_refused_in_one_line(
    corpus: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(corpus) >= 10
    for name, path in corpus.items():
        rc = cli.main(["run", "--target", str(path), "--prompt", "hi"])
        err = capsys.readouterr().err
        assert_one_line_error(rc, err)
        assert str(path.name) in err or "GGUF" in err or "exist" in err, (name, err)


@pytest.mark.slow
def test_every_malformed_file_is_refused_by_a_fresh_process(corpus: dict[str, Path]) -> None:
    """The same corpus through a real process each: nothing native is reached, nothing crashes."""
    for name, path in corpus.items():
        rc, _, err, elapsed = run_cli("run", "--target", str(path), "--prompt", "hi")
        assert_one_line_error(rc, err, elapsed)
        assert str(path.name) in err or "GGUF" in err or "exist" in err, (name, err)


def test_inspect_refuses_a_malformed_file_too(corpus: dict[str, Path]) -> None:
    rc, _, err, elapsed = run_cli("inspect", str(corpus["empty"]) if "empty" in corpus else str(corpus["missing"]))
    assert_one_line_error(rc, err, elapsed)


def test_incompatible_vocabularies_name_the_differing_token(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    tokens = [f"tok{i}" for i in range(300)]
    a.write_bytes(small_model(tokens=tokens))
    b.write_bytes(small_model(tokens=tokens[:7] + ["other"] + tokens[8:]))
    rc, _, err, elapsed = run_cli("run", "--target", str(a), "--draft", str(b))
    assert_one_line_error(rc, err, elapsed)
    assert "7" in err


def test_not_enough_memory_is_refused_with_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import psutil

    model = tmp_path / "m.gguf"
    model.write_bytes(small_model())

    class Tiny:
        available = 1024

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Tiny())
    rc = cli.main(["run", "--target", str(model), "--prompt", "hi"])
    err = capsys.readouterr().err
    assert rc == 2 and "GiB" in err and len(err.strip().splitlines()) == 1, err


def test_usage_errors_are_one_line() -> None:
    rc, _, err, elapsed = run_cli("run", "--draft", "x.gguf")
    assert_one_line_error(rc, err, elapsed)
    # argparse's own errors too (its usage block came first, the top level's for a subcommand)
    for args, says in (
        (("inspect", "a.gguf", "b.gguf", "c.gguf"), "unrecognized arguments: c.gguf (see `edgespec inspect --help`)"),
        (("run", "--bogus"), "unrecognized arguments: --bogus (see `edgespec run --help`)"),
        (("run", "--no-spec", "--k", "4"), "give either --no-spec or --k, not both"),  # --k was ignored
        (("run", "--k", "abc"), "invalid int value: 'abc' (see `edgespec run --help`)"),
        (("bogus",), "invalid choice: 'bogus'"),
    ):
        rc, _, err, elapsed = run_cli(*args)
        assert_one_line_error(rc, err, elapsed)
        assert says in err


def test_models_alone_lists_them() -> None:
    rc, out, err, _ = run_cli("models")  # it said "the following arguments are required: action, names"
    assert rc == 0 and "demo" in out, err


def test_models_prepare_takes_its_names_after_an_option() -> None:
    # `models prepare --config F demo` was "unrecognized arguments: demo" (argparse matched both
    # positionals before the option)
    config = str(Path(__file__).parent.parent / "models.toml")
    for args in (("prepare", "--config", config, "demo"), ("prepare", "--verbose", "demo")):
        rc, out, err, _ = run_cli("models", *args)
        assert rc == 0 and out.startswith("demo: target "), err
    rc, _, err, _ = run_cli("models", "list", "--config", config, "demo")
    assert rc == 2 and "models list takes no names" in err


def test_bad_sampling_options_are_refused_before_any_model_loads(tmp_path: Path) -> None:
    # the chat loaded the models, opened, then failed every message on --temperature -1
    missing = str(tmp_path / "never-read.gguf")  # checked before the model path is even looked at
    for command in (("run", "--prompt", "hi"), ("chat",)):
        rc, _, err, elapsed = run_cli(*command, "--target", missing, "--temperature", "-1")
        assert_one_line_error(rc, err, elapsed)
        assert "temperature must be >= 0" in err
    rc, _, err, elapsed = run_cli("chat", "--target", missing, "--top-p", "5")
    assert_one_line_error(rc, err, elapsed)
    assert "top_p must be in [0, 1]" in err


@pytest.mark.real
def test_a_prompt_that_is_not_utf8_is_one_line() -> None:
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared")
    p = subprocess.run(
        [*EDGESPEC, "run", "--target", str(paths[0]), "--prompt", "-", "--max-tokens", "4"],
        input=b"\xff\xfe bad \x80",
        capture_output=True,
        timeout=120,
    )
    assert_one_line_error(p.returncode, p.stderr.decode(), 0.0, limit=1e9)
    assert b"not valid UTF-8" in p.stderr


@pytest.mark.real
def test_prompt_longer_than_context_is_refused() -> None:
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared")
    rc, _, err, _ = run_cli(
        "run", "--target", str(paths[0]), "--draft", str(paths[1]), "--n-ctx", "256", "--prompt", "word " * 600
    )
    assert_one_line_error(rc, err, 0.0, limit=1e9)
    assert "context" in err


@pytest.mark.real
def test_a_context_below_llama_cpps_least_is_said() -> None:
    from edgespec import Engine

    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared")
    with Engine.load(paths[0], n_ctx=64, threads=1) as eng:  # llama.cpp made 256 of it without a word
        assert eng.n_ctx == 256 and "n_ctx 64 is below what llama.cpp makes; the context holds 256" in eng.warnings


@pytest.mark.real
def test_a_context_past_the_models_is_said_once_with_what_it_holds() -> None:
    from edgespec import Engine

    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared")
    with Engine.load(paths[0], n_ctx=16384, threads=1) as eng:  # the demo model was trained for 8192
        said = [w for w in eng.warnings if "n_ctx" in w]
        assert eng.n_ctx == 8192 and said == [
            "n_ctx 16384 is more than smollm2-135m-f32.gguf was trained for; the context holds 8192"
        ]


@pytest.mark.real
def test_run_json_prints_one_object_with_stats() -> None:
    if demo_paths() is None:
        pytest.skip("demo pair not prepared")
    env = dict(os.environ)
    p = subprocess.run(
        [*EDGESPEC, "run", "--pair", "demo", "--json", "--max-tokens", "16", "--temperature", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) == {"text", "tokens", "finish_reason", "stats", "warnings"}
    assert out["stats"]["n_generated"] == len(out["tokens"]) and out["stats"]["n_drafted"] > 0


@pytest.mark.parametrize("threads", ["0", "-1", "100000"])
def test_threads_out_of_ggmls_range_are_one_line_before_any_file_is_read(threads: str, capsys) -> None:
    """ggml keeps 512 threads' state in fixed arrays: 100000 segfaulted in the first decode."""
    assert cli.main(["run", "--target", "/no/such.gguf", "--threads", threads, "--max-tokens", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"edgespec: error: threads must be 1..512, got {threads} (leave it out for the physical cores)"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["models", "list", "demo"], "models list takes no names"),
        (["run", "--target", "/no/such.gguf", "--n-ctx", "0"], "n_ctx must be at least 64 tokens (got 0)"),
        (["run", "--pair", "demo", "--n-ctx", "16"], "n_ctx must be at least 64 tokens (got 16)"),
    ],
)
def test_options_a_user_gets_wrong_are_one_line(args: list[str], says: str, capsys) -> None:
    """`--n-ctx 0` with --target became 4096 while --pair refused it; `models list demo` ignored demo."""
    assert cli.main(args) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"edgespec: error: {says}"
        + ("" if "models" not in args else " (to prepare pairs: edgespec models prepare demo)")
    ]


def test_a_prompt_that_needs_no_model_to_refuse_is_refused_before_any_load(tmp_path: Path) -> None:
    # a prompt that is not UTF-8, or an empty one, was refused only after both models loaded
    missing = str(tmp_path / "never-read.gguf")  # the model's own error would come first after a load
    p = subprocess.run(
        [*EDGESPEC, "run", "--target", missing, "--prompt", "-"], input=b"caf\xe9\n", capture_output=True, timeout=60
    )
    err = p.stderr.decode()
    assert_one_line_error(p.returncode, err)
    assert "the prompt is not valid UTF-8" in err
    for raw in (["--raw"], []):  # a chat message too (it was refused only with --raw)
        rc, _, err, elapsed = run_cli("run", "--target", missing, *raw, "--prompt", "")
        assert_one_line_error(rc, err, elapsed)
        assert "the prompt is empty" in err
    p = subprocess.run(
        [*EDGESPEC, "run", "--target", missing, "--prompt", "-"], input=b"", capture_output=True, timeout=60
    )
    assert_one_line_error(p.returncode, p.stderr.decode())
    assert "the prompt is empty" in p.stderr.decode()


def test_a_full_disk_a_closed_stderr_and_an_ascii_terminal_are_no_traceback(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:  # `> /dev/full`: a disk that filled up under the output
        p = subprocess.run([*EDGESPEC, "models"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode == 1 and p.stderr.strip() == "edgespec: error: No space left on device", p.stderr
    # `2>&-`: print(file=None) put the error (and run's stats) on stdout, into a --json reader's input
    missing = str(tmp_path / "caf\u00e9.gguf")
    p = subprocess.run(
        [*EDGESPEC, "inspect", missing], capture_output=True, text=True, timeout=60, preexec_fn=lambda: os.close(2)
    )
    assert p.returncode == 2 and p.stdout == "", p.stdout
    # a terminal whose encoding lacks a character of the output: a "?" for it, not a traceback
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    p = subprocess.run([*EDGESPEC, "inspect", missing], capture_output=True, text=True, timeout=60, env=env)
    assert_one_line_error(p.returncode, p.stderr)
    assert "caf?.gguf" in p.stderr


def test_structured_output_mistakes_are_one_line_in_the_commands_own_words(tmp_path: Path) -> None:
    listed, lark = tmp_path / "arr.json", tmp_path / "g.lark"
    listed.write_text("[1,\n 2]\n")  # the file's newlines ended up in the message: two lines
    lark.write_text('start: "a"\n')
    missing = str(tmp_path / "never-read.gguf")
    for extra, says in (
        (("--json-schema", str(listed)), "a JSON schema is an object (a dict), not list: [1, 2]"),
        (("--json-schema", str(listed), "--grammar", str(lark)), "give either --json-schema or --grammar, not both"),
    ):
        rc, _, err, elapsed = run_cli("run", "--target", missing, "--prompt", "hi", *extra)
        assert_one_line_error(rc, err, elapsed)
        assert says in err, err


def test_inspect_exits_1_when_the_pair_is_not_compatible(tmp_path: Path) -> None:
    from tests.gguf_corpus import default_tokens, small_model

    tokens = default_tokens()
    other = [*tokens[:7], "seven", *tokens[8:]]
    a, b, c = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    a.write_bytes(small_model(tokens=tokens))
    b.write_bytes(small_model(tokens=tokens))
    c.write_bytes(small_model(tokens=other))
    assert run_cli("inspect", str(a), str(b))[0] == 0
    for extra in ((), ("--json",)):  # a script could not tell from the exit code (it was 0)
        rc, out, _, _ = run_cli("inspect", str(a), str(c), *extra)
        assert rc == 1 and ("NOT compatible" in out or '"compatible": false' in out), out


def test_the_chat_module_s_usage_is_the_command_that_runs_it() -> None:
    # it said "python -m edgespec_tui chat [-h] ...", and that command fails ("unrecognized arguments: chat")
    p = subprocess.run([sys.executable, "-m", "edgespec_tui", "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("usage: python -m edgespec_tui [-h]"), p.stdout[:200]
