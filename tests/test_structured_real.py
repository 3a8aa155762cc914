"""Structured output on the real demo pair: schemas the project never saw, sampled and greedy,
through the engine, the openai client and the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import openai
import pytest

from edgespec.frontends import cli
from edgespec.frontends.server.app import create_app
from edgespec.frontends.server.running import serve_in_thread

pytestmark = pytest.mark.real

TRIP = {
    "type": "object",
    "properties": {
        "destination": {"type": "string", "maxLength": 40},
        "season": {"type": "string", "enum": ["spring", "summer", "autumn", "winter"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 30},
        "stops": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 40}, "free": {"type": "boolean"}},
                "required": ["name", "free"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["destination", "season", "days", "stops"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Plan a short trip. Answer in JSON."}]


def test_sampled_answers_follow_an_unseen_schema_with_drafts_accepted(demo_engine) -> None:
    accepted = 0
    for seed in range(4):
        # room for the longest answer the schema allows: 160 characters of strings, and a
        # sampled string may be emoji of up to 4 tokens each (at 300 a valid answer ran out)
        res = demo_engine.generate(ASK, temperature=0.8, max_tokens=800, json_schema=TRIP, seed=seed)
        assert res.finish_reason == "stop", res.text
        jsonschema.validate(json.loads(res.text), TRIP)
        accepted += res.stats.n_accepted
    assert accepted > 0


def test_greedy_answer_under_a_schema_is_the_same_with_and_without_speculation(demo_engine) -> None:
    spec = demo_engine.generate(ASK, temperature=0, max_tokens=300, json_schema=TRIP)
    plain = demo_engine.generate(ASK, temperature=0, max_tokens=300, json_schema=TRIP, speculative=False)
    assert spec.tokens == plain.tokens and spec.stats.n_drafted > 0
    jsonschema.validate(json.loads(spec.text), TRIP)


def test_an_empty_schema_and_openais_tool_list_still_constrain_the_answer(demo_engine) -> None:
    """`json_schema={}` (any JSON value) was taken as no schema, and OpenAI's `tools` list passed to
    `generate` as it is raised AttributeError."""
    res = demo_engine.generate(ASK, temperature=0, max_tokens=40, json_schema={})
    assert res.text[:1] in '{["-0123456789tfn'  # JSON, not the prose the model answers unconstrained
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}  # fmt: skip
    ask, opts = [{"role": "user", "content": "Weather in Paris?"}], {"temperature": 0, "max_tokens": 12}
    as_list = demo_engine.generate(ask, tools=[weather], **opts)
    assert as_list.tokens == demo_engine.generate(ask, tools=demo_engine.tools([weather]), **opts).tokens
    assert as_list.tokens != demo_engine.generate(ask, **opts).tokens  # offered, not dropped


@pytest.fixture(scope="module")
def api(demo_engine) -> Iterator[openai.OpenAI]:
    with serve_in_thread(create_app(demo_engine)) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)


def test_openai_client_json_schema_and_json_mode(api: openai.OpenAI) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "trip", "schema": TRIP, "strict": True}}
    for seed in range(2):
        r = api.chat.completions.create(
            model="demo", messages=ASK, temperature=0.8, max_tokens=300, seed=seed, response_format=fmt
        )
        jsonschema.validate(json.loads(r.choices[0].message.content), TRIP)
    colour = [{"role": "user", "content": 'Name one colour as JSON, like {"colour": "blue"}.'}]
    r = api.chat.completions.create(
        model="demo", messages=colour, temperature=0, max_tokens=200, response_format={"type": "json_object"}
    )
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_cli_json_schema_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema = tmp_path / "trip.json"
    schema.write_text(json.dumps(TRIP))
    args = ["run", "--pair", "demo", "--json", "--temperature", "0", "--max-tokens", "300"]
    assert cli.main([*args, "--json-schema", str(schema), "--prompt", "Plan a short trip as JSON."]) == 0
    out = json.loads(capsys.readouterr().out)
    jsonschema.validate(json.loads(out["text"]), TRIP)
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "nonsense"}')
    assert cli.main(["run", "--pair", "demo", "--json-schema", str(bad)]) == 2
    assert "JSON schema" in capsys.readouterr().err
