"""Every default is defined once (edgespec/core/defaults.py) and read everywhere."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

from edgespec import Engine, SamplingParams, defaults
from edgespec.frontends.options import add_model_args, add_sampling_args
from edgespec.frontends.server.app import DEFAULTS as SERVER_DEFAULTS
from edgespec_tui.app import ChatOptions

README = Path(__file__).resolve().parents[1] / "README.md"


def test_argparse_the_server_the_chat_and_the_api_share_the_sampling_defaults() -> None:
    p = argparse.ArgumentParser()
    add_model_args(p)
    add_sampling_args(p)
    args = p.parse_args([])
    stream = inspect.signature(Engine.stream).parameters
    chat = ChatOptions()
    for name, value in {**defaults.SAMPLING, **defaults.PENALTIES, "max_tokens": defaults.MAX_TOKENS}.items():
        assert getattr(args, name) == value, name
        assert SERVER_DEFAULTS[name] == value, name
        assert getattr(chat, name) == (None if name == "max_tokens" else value), name  # a chat reply runs to its end
        assert stream[name].default == value, name
    for name, value in defaults.SAMPLING.items():
        assert getattr(SamplingParams(), name) == value
    assert inspect.signature(Engine.load).parameters["n_ctx"].default == defaults.N_CTX


def test_the_readme_table_shows_the_defaults() -> None:
    text = README.read_text()
    table = dict(re.findall(r"^\| ([A-Za-z_ ]+?) \| ([0-9.]+(?:\.\.[0-9]+)?) \|$", text, re.M))
    want = {
        **{k: str(v) for k, v in defaults.SAMPLING.items()},
        "max_tokens": str(defaults.MAX_TOKENS),
        "n_ctx": str(defaults.N_CTX),
        "largest fixed K": str(defaults.K_LIMIT),
        "adaptive K range": f"0..{defaults.K_MAX}",
        "max_tokens cap": str(defaults.MAX_TOKENS_CAP),
        "server header timeout s": str(defaults.HEADER_TIMEOUT_S),
        "server body timeout s": str(defaults.BODY_TIMEOUT_S),
        "server keep alive s": str(defaults.KEEP_ALIVE_S),
        "server connections": str(defaults.MAX_CONNECTIONS),
        "prompt characters per context token": str(defaults.PROMPT_CHARS_PER_TOKEN),
        **{k: str(v) for k, v in defaults.PENALTIES.items()},
    }
    assert {k: table.get(k) for k in want} == want
