"""Tool calls on the real demo pair (a template with no tools: the generic layout), through the
engine and the openai client: forced calls follow an unseen function's schema, a result is
answered, streamed deltas add up to the same calls, and speculation changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import openai
import pytest

from edgespec.frontends.server.app import create_app
from edgespec.frontends.server.running import serve_in_thread

pytestmark = pytest.mark.real

BOOK = {
    "type": "function",
    "function": {
        "name": "book_table",
        "description": "Book a table at a restaurant.",
        "parameters": {
            "type": "object",
            "properties": {
                "restaurant": {"type": "string", "maxLength": 40},
                "people": {"type": "integer", "minimum": 1, "maximum": 12},
                "time": {"type": "string", "enum": ["18:00", "19:00", "20:00", "21:00"]},
                "notes": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 30}},
            },
            "required": ["restaurant", "people", "time"],
            "additionalProperties": False,
        },
    },
}
CONVERT = {
    "type": "function",
    "function": {
        "name": "convert_currency",
        "parameters": {
            "type": "object",
            "properties": {
                "amount": {"type": "integer", "minimum": 0, "maximum": 100000},
                "to": {"type": "string", "enum": ["EUR", "USD", "JPY"]},
            },
            "required": ["amount", "to"],
        },
    },
}
ASK = [{"role": "user", "content": "Book a table for four at Luigi's tonight at eight."}]


def test_a_forced_call_follows_the_functions_schema_with_drafts_accepted(demo_engine) -> None:
    tools = demo_engine.tools([BOOK, CONVERT], "required")
    accepted = 0
    for seed in range(3):
        # a fixed K: on a loaded machine the adaptive controller may rightly decode plainly, and
        # this test is about drafts under the tool grammar, not about when they pay
        res = demo_engine.generate(ASK, temperature=0.8, max_tokens=160, seed=seed, tools=tools, k=4)
        assert res.finish_reason == "tool_calls" and res.tool_calls, res.text
        for call in res.tool_calls:
            spec = BOOK if call.name == "book_table" else CONVERT
            jsonschema.validate(json.loads(call.arguments), spec["function"]["parameters"])
        accepted += res.stats.n_accepted
    assert accepted > 0


def test_greedy_calls_are_the_same_with_and_without_speculation(demo_engine) -> None:
    tools = demo_engine.tools([BOOK], {"type": "function", "function": {"name": "book_table"}})
    spec = demo_engine.generate(ASK, temperature=0, max_tokens=160, tools=tools, k=4)  # drafts, whatever the load
    plain = demo_engine.generate(ASK, temperature=0, max_tokens=160, tools=tools, speculative=False)
    assert spec.tokens == plain.tokens and spec.stats.n_drafted > 0
    assert [c.name for c in spec.tool_calls] == ["book_table"]


@pytest.fixture(scope="module")
def api(demo_engine) -> Iterator[openai.OpenAI]:
    with serve_in_thread(create_app(demo_engine)) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)


def test_openai_client_required_call_then_the_result_is_answered(api: openai.OpenAI) -> None:
    r = api.chat.completions.create(
        model="demo", messages=ASK, tools=[BOOK], tool_choice="required", temperature=0.8, seed=3, max_tokens=160
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "book_table"
    jsonschema.validate(json.loads(call.function.arguments), BOOK["function"]["parameters"])
    history = [
        *ASK,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"booked": true, "table": 12}'},
    ]
    answer = api.chat.completions.create(model="demo", messages=history, tools=[BOOK], temperature=0, max_tokens=60)
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls
    assert answer.usage.prompt_tokens > r.usage.prompt_tokens  # the call and its result were in the prompt


def test_streamed_tool_call_deltas_add_up_to_the_same_call(api: openai.OpenAI) -> None:
    kwargs = {"model": "demo", "messages": ASK, "tools": [BOOK], "tool_choice": "required", "temperature": 0}
    whole = api.chat.completions.create(max_tokens=160, **kwargs).choices[0].message.tool_calls
    calls: dict[int, dict[str, str]] = {}
    finish = None
    chunks = list(api.chat.completions.create(max_tokens=160, stream=True, **kwargs))
    assert chunks[0].choices[0].delta.content is None  # a forced call: no text, as OpenAI's (the answer's is null)
    for chunk in chunks:
        delta = chunk.choices[0].delta
        for d in delta.tool_calls or []:
            entry = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += d.id or ""
            entry["name"] += d.function.name or ""
            entry["arguments"] += d.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and len(calls) == len(whole) == 1
    assert calls[0]["name"] == whole[0].function.name and calls[0]["id"].startswith("call_")
    assert json.loads(calls[0]["arguments"]) == json.loads(whole[0].function.arguments)


def test_auto_and_none_answer_and_a_bad_tool_is_a_400(api: openai.OpenAI) -> None:
    for choice in ("auto", "none"):
        r = api.chat.completions.create(
            model="demo", messages=ASK, tools=[BOOK], tool_choice=choice, temperature=0, max_tokens=40
        )
        message = r.choices[0].message
        assert message.content or message.tool_calls
        if choice == "none":
            assert not message.tool_calls
    with pytest.raises(openai.BadRequestError) as err:
        api.chat.completions.create(
            model="demo", messages=ASK, tools=[{"type": "function", "function": {"name": "no spaces"}}]
        )
    assert "the name must be" in err.value.body["message"]
