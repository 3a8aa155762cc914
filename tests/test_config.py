from __future__ import annotations

from pathlib import Path

import pytest

from edgespec.core.errors import ConfigError
from edgespec.llama.config import load_config


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
