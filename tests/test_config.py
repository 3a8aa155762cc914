from __future__ import annotations

from pathlib import Path

import pytest

from edgespec.core.errors import ConfigError
from edgespec.llama.config import load_config, parse, tomllib


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "models.toml"
    p.write_text(text)
    return p


def test_demo_pair_is_always_known(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, '[models.mine]\npath = "/x.gguf"\n'))
    assert cfg.pair("demo").draft == "smollm2-135m-q4_1" and cfg.model("mine").path == Path("/x.gguf")


@pytest.mark.parametrize(
    "text, key",
    [
        ("[models.a]\npath = 3\n", "models.a.path"),
        ('[models.a]\npath = "/a"\nwheel = "w"\n', "models.a"),
        ('[models.a]\nderive = "b"\nquantize = "Q8_0"\n[models.b]\nderive = "a"\nquantize = "F32"\n', "circle"),
        ('[pairs.p]\ntarget = "nope"\n', "pairs.p.target"),
        ('[pairs.p]\ntarget = "smollm2-135m-f32"\nk = 99\n', "pairs.p.k"),
        ('[pairs.p]\ntarget = "smollm2-135m-f32"\npmin = 0.1\n', "pairs.p.pmin"),
        ('models = "x"\n', "[models.NAME]"),
        ("[models\n", "TOML"),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        load_config(write(tmp_path, text))


def test_unknown_pair_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match="known: .*demo"):
        load_config().pair("nope")


def test_the_readmes_own_pair_of_models_parses() -> None:
    """The example a user copies first (names with dots) must be TOML that means what it says."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Your own models (models.toml)", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    cfg = parse(tomllib.loads(example), "README")
    assert cfg.pair("qwen").target == "qwen2.5-7b" and cfg.model("qwen2.5-0.5b").n_gpu_layers == 99


@pytest.mark.parametrize(
    "text, says",
    [
        ('[models.qwen2.5-7b]\npath = "/x.gguf"\n', '[models."qwen2.5-7b"]'),
        ('[models.e]\npath = ""\n', "models.e.path is empty"),
        ('[models.e]\npath = "/x.gguf"\nthreads = 0\n', "models.e.threads must be 1..512"),
        ('[models.e]\npath = "/x.gguf"\nthreads = 100000\n', "models.e.threads must be 1..512"),
        ('[models.e]\npath = "/x.gguf"\nrpc = "nonsense"\n', "models.e.rpc: RPC server 'nonsense'"),
        ('[models.e]\nwheel = "--index-url=http://x"\nfile = "a.gguf"\n', "models.e.wheel must be a requirement"),
    ],
)
def test_entries_a_user_gets_wrong_are_one_line_naming_the_key(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_relative_path_is_taken_from_the_config_files_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir("/")
    cfg = load_config(write(tmp_path, '[models.mine]\npath = "models/m.gguf"\n[models.abs]\npath = "/m.gguf"\n'))
    assert cfg.model("mine").path == tmp_path / "models" / "m.gguf" and cfg.model("abs").path == Path("/m.gguf")


def test_a_config_named_by_the_environment_that_is_not_there_is_an_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EDGESPEC_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="EDGESPEC_CONFIG names .*nope.toml, which is not a file"):
        load_config()
    monkeypatch.setenv("HOME", str(tmp_path))
    write(tmp_path, '[models.mine]\npath = "/m.gguf"\n')
    monkeypatch.setenv("EDGESPEC_CONFIG", "~/models.toml")  # as a shell leaves it when quoted
    assert "mine" in load_config().models


def test_a_config_path_that_is_a_directory_says_so(tmp_path: Path) -> None:
    from edgespec.llama.config import find_config

    with pytest.raises(ConfigError, match="is a directory, not a file"):  # it said "does not exist"
        find_config(tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        find_config(tmp_path / "models.toml")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        # the type error gained a second prefix ("m.toml: models.t.rpc: m.toml: models.t.rpc has ...")
        ("1", r"^\S*m.toml: models.t.rpc has the wrong type \(int\); see models.toml's header$"),
        # a key of the entry given a table was read as a dotted model name needing quotes
        ("{a = 1}", r"^\S*m.toml: models.t.rpc has the wrong type \(a table\); see models.toml's header$"),
    ],
)
def test_an_rpc_key_of_the_wrong_type_is_said_once_as_such(tmp_path: Path, value: str, says: str) -> None:
    (tmp_path / "m.toml").write_text(f'[models.t]\npath = "x.gguf"\nrpc = {value}\n')
    with pytest.raises(ConfigError, match=says):
        load_config(tmp_path / "m.toml")
