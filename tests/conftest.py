"""Shared fixtures.

Every test runs with EDGESPEC_HOME and EDGESPEC_CONFIG pointed at a temp folder, so no
test reads or writes a user's real models, config or native builds. Tests marked
`real` use the demo pair that `make test` prepared in the real home (found once, before
any isolation), and the checkout's models.toml.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgespec.llama.config import home, load_config

CHECKOUT_CONFIG = Path(__file__).resolve().parents[1] / "models.toml"
REAL_HOME = home()


def demo_paths() -> tuple[Path, Path] | None:
    """The prepared demo pair's files (target, draft) in the real home, or None."""
    saved = os.environ.get("EDGESPEC_HOME")
    os.environ["EDGESPEC_HOME"] = str(REAL_HOME)
    try:
        cfg = load_config(CHECKOUT_CONFIG)
        pair = cfg.pair("demo")
        assert pair.draft is not None
        target, draft = cfg.model(pair.target).location(), cfg.model(pair.draft).location()
    finally:
        if saved is None:
            del os.environ["EDGESPEC_HOME"]
        else:
            os.environ["EDGESPEC_HOME"] = saved
    return (target, draft) if target.is_file() and draft.is_file() else None


@pytest.fixture(autouse=True)
def isolated_home(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
    mp = pytest.MonkeyPatch()
    if request.node.get_closest_marker("real") is not None:
        mp.setenv("EDGESPEC_HOME", str(REAL_HOME))  # the prepared demo pair lives there
    else:
        mp.setenv("EDGESPEC_HOME", str(tmp_path_factory.mktemp("home")))
    mp.setenv("EDGESPEC_CONFIG", str(CHECKOUT_CONFIG))
    request.addfinalizer(mp.undo)


@pytest.fixture(scope="session")
def demo_draft() -> Path:
    """The demo draft's GGUF file (a real model file), or a skip."""
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared (run `edgespec models prepare demo`)")
    return paths[1]


@pytest.fixture(scope="session")
def demo_engine():
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared (run `edgespec models prepare demo`)")
    from edgespec import Engine

    engine = Engine.load(paths[0], paths[1], n_ctx=2048)
    yield engine
    engine.close()
