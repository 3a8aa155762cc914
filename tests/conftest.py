"""Shared fixtures: the real demo pair (prepared by `make test`), loaded once per session."""

from __future__ import annotations

import pytest

from edgespec.llama.config import load_config


def demo_paths():  # noqa: ANN201
    cfg = load_config()
    pair = cfg.pair("demo")
    target, draft = cfg.model(pair.target).location(), cfg.model(pair.draft).location()
    return (target, draft) if target.is_file() and draft.is_file() else None


@pytest.fixture(scope="session")
def demo_engine():  # noqa: ANN201
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared (run `edgespec models prepare demo`)")
    from edgespec import Engine

    engine = Engine.load(paths[0], paths[1], n_ctx=2048)
    yield engine
    engine.close()
