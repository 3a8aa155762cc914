"""Request fields at the server's edge: what is accepted, and the 400s for what is not.

A 400 must say what was wrong and what to send instead, in OpenAI's error shape. The
fake target here tokenizes as llama.cpp does (through UTF-8), so text that cannot be
encoded would reach it as it would reach a real model.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from edgespec import defaults
from edgespec.api.engine import Engine
from edgespec.core.errors import EdgespecError
from edgespec.frontends.server.app import create_app
from edgespec.frontends.server.running import serve_in_thread
from tests.fakes import FakeModel
from tests.test_server import CHAT, client, reference


class Utf8Model(FakeModel):
    """A fake target whose tokenizer encodes to UTF-8 first, like llama_tokenize."""

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        text.encode("utf-8")
        return super().tokenize(text, add_special=add_special, parse_special=parse_special)


def utf8_engine() -> Engine:
    return Engine(Utf8Model(64), FakeModel(64, noise=0.5), name="fake")


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve_in_thread(create_app(utf8_engine())) as base:
        yield base


def post(url: str, path: str, body: bytes | dict, **headers: str) -> httpx.Response:
    if isinstance(body, dict):
        return httpx.post(f"{url}{path}", json=body, headers=headers)
    return httpx.post(f"{url}{path}", content=body, headers={"content-type": "application/json", **headers})


def error_of(r: httpx.Response) -> dict:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    return err


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", rb'{"messages": [{"role": "user", "content": "t5 \ud800"}]}', "messages"),
        (
            "/v1/chat/completions",
            rb'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]}',
            "messages",
        ),
        ("/v1/chat/completions", rb'{"messages": [{"role": "user", "content": "t5"}], "stop": ["\ud83d"]}', "stop"),
        ("/v1/completions", rb'{"prompt": "t5 \ud800 t6"}', "prompt"),
        ("/v1/completions", b'{"prompt": "t5 \xed\xa0\x80"}', "prompt"),  # a surrogate as raw bytes
    ],
)
def test_a_lone_surrogate_in_any_text_field_is_a_400_that_says_so(url: str, path: str, body: bytes, param: str) -> None:
    err = error_of(post(url, path, body))
    assert "lone UTF-16 surrogate" in err["message"] and err["param"] == param
    paired = rb'{"messages": [{"role": "user", "content": "t5 \ud83d\ude00"}], "max_tokens": 2}'
    assert post(url, "/v1/chat/completions", paired).status_code == 200


def test_seed_minus_one_is_random_and_any_big_seed_reproduces_its_answer(url: str) -> None:
    c = client(url)

    def ask(seed: int) -> str:
        r = c.chat.completions.create(
            model="m", messages=CHAT, max_tokens=16, temperature=1.0, seed=seed, extra_body={"k": 3}
        )
        return r.choices[0].message.content or ""

    assert ask(-1)  # llama.cpp's "random seed"
    for big in (2**63, 2**64 + 7, 10**30, -(2**70)):
        assert ask(big) == ask(big)


# -- 400s that say what to send instead ------------------------------------------------------
def test_misleading_400s_now_say_what_is_wrong(url: str) -> None:
    chat = "/v1/chat/completions"
    err = error_of(post(url, chat, {"messages": CHAT, "stop": [f"s{i}" for i in range(100)]}))
    assert err["message"] == "at most 16 stop strings are allowed (got 100)" and err["param"] == "stop"
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    err = error_of(
        post(url, chat, {"messages": [{"role": "user", "content": [{"type": "text", "text": "t5"}, image]}]})
    )
    assert err["message"].startswith("images are not supported") and err["param"] == "messages"
    r = httpx.post(f"{url}{chat}", content=b'{"messages": [{"role": "user", "content": "t5"}]}')  # no Content-Type
    assert "Content-Type: application/json" in error_of(r)["message"]
    r = post(url, chat, b'{"messages": [\n  {"role": "user" "content": "t5"}]}')
    assert error_of(r)["message"] == "the body is not valid JSON: expecting ',' delimiter at line 2, column 19"
    assert error_of(post(url, chat, b"[1, 2]"))["message"] == "the body must be a JSON object of the request's fields"
    r = post(url, chat, b'{"messages": [\n  {"role": "user", "content": "caf\xe9"}]}')  # Latin-1, not UTF-8
    assert error_of(r)["message"] == (
        "the body is not valid UTF-8: byte 0xe9 at line 2, column 35; send the JSON encoded as UTF-8"
    )
    assert post(url, chat, {"messages": CHAT, "max_tokens": 2}).status_code == 200  # and it keeps serving


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("max_tokens", "5", "valid integer"),
        ("max_tokens", True, "valid integer"),
        ("max_tokens", 5.5, "valid integer"),
        ("stream", "yes", "valid boolean"),
        ("speculative", 0, "valid boolean"),
        ("temperature", "0", "valid number"),
        ("seed", "42", "valid integer"),
    ],
)
def test_a_wrong_type_is_a_400_not_coerced(url: str, field: str, value: object, says: str) -> None:
    # as OpenAI's API: a string, a bool or a fraction where an integer is wanted is not read as one
    err = error_of(post(url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, field: value}))
    assert says in err["message"] and err["param"] == field
    ok = post(url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "temperature": 0, "top_p": 1})
    assert ok.status_code == 200, ok.text  # an integer is a number


TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("messages", "extra", "says", "param"),
    [
        ([*CHAT, {"role": "tool", "content": "42"}], {}, "needs the tool_call_id", "messages"),
        ([*CHAT, {"role": "tool", "content": "42", "tool_call_id": "call_x"}], {}, "no earlier assistant", "messages"),
        ([{"role": "user", "content": None}], {}, "a user message needs its content", "messages"),
        ([*CHAT, {"role": "assistant"}], {}, "an assistant's may be its tool_calls alone", "messages"),
        ([{"role": "user", "content": []}], {}, "non-empty list of text parts", "messages"),
        ([{"role": "user", "content": [{"type": "text"}]}], {}, "its text is missing", "messages"),
        ([{"role": "user", "content": 5}], {}, "valid string (at messages.0.content)", "messages"),
        ([*CHAT, {"role": "assistant", "tool_calls": [{**TOOL_CALL, "id": None}]}], {}, "valid string", "messages"),
        (CHAT, {"temperature": 2.5}, "less than or equal to 2", "temperature"),
        (CHAT, {"user": 5}, "valid string", "user"),
        (CHAT, {"stream_options": {"include_usage": True}}, "only allowed when stream is true", "stream_options"),
        (CHAT, {"stream": True, "stream_options": {"include_usage": "x"}}, "valid boolean", "stream_options"),
    ],
)
def test_openais_rules_on_messages_and_fields_are_400s(
    url: str, messages: list, extra: dict, says: str, param: str
) -> None:
    err = error_of(post(url, "/v1/chat/completions", {"messages": messages, "max_tokens": 2, **extra}))
    assert says in err["message"] and err["param"] == param
    assert ".str" not in err["message"]  # pydantic's name for a union's member is not a field


def test_what_openai_accepts_is_answered(url: str) -> None:
    called = {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}
    history = [*CHAT, called, {"role": "tool", "content": "42", "tool_call_id": "call_1"}]
    for body in (
        {"messages": history},
        {"messages": CHAT, "top_p": 0, "user": "u-1"},  # top_p 0: the likeliest token only
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "t5"}]}], "temperature": 2},
    ):
        r = post(url, "/v1/chat/completions", {**body, "max_tokens": 2})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("response_format", "says"),
    [
        ({"type": "xml"}, "json_object or json_schema"),
        ({"type": "json_schema", "json_schema": "nope"}, "'schema' object"),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}, "JSON schema"),
    ],
)
def test_a_bad_response_format_is_a_400_before_generating(url: str, response_format: dict, says: str) -> None:
    r = post(url, "/v1/chat/completions", {"messages": CHAT, "response_format": response_format})
    err = error_of(r)
    assert says in err["message"] and err["param"] == "response_format"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "no spaces"}}]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "nope"}, "tool_choice"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            "tool_choice",
        ),
    ],
)
def test_the_engines_400s_name_the_field_they_are_about(url: str, extra: dict, param: str) -> None:
    assert error_of(post(url, "/v1/chat/completions", {"messages": CHAT, **extra}))["param"] == param


@pytest.mark.parametrize(
    ("extra", "param", "says"),
    [
        ({"n": 2}, "n", "one choice per request"),
        ({"functions": [{"name": "f"}]}, "functions", "legacy form of tools"),
        ({"function_call": "f"}, "function_call", "legacy form of tool_choice"),
        ({"modalities": ["text", "audio"]}, "modalities", "text only"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio", "text only"),
        ({"web_search_options": {}}, "web_search_options", "web"),
    ],
)
def test_chat_fields_the_server_cannot_honour_are_a_400_that_says_so(
    url: str, extra: dict, param: str, says: str
) -> None:
    err = error_of(post(url, "/v1/chat/completions", {"messages": CHAT, **extra}))
    assert err["param"] == param and says in err["message"] and "not supported" in err["message"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"echo": True}, "echo"),
        ({"best_of": 3}, "best_of"),
        ({"suffix": "t9"}, "suffix"),
    ],
)
def test_completion_fields_the_server_cannot_honour_are_a_400(url: str, extra: dict, param: str) -> None:
    err = error_of(post(url, "/v1/completions", {"prompt": "t5", **extra}))
    assert err["param"] == param and "not supported" in err["message"]
    err = error_of(post(url, "/v1/completions", {"prompt": ["t5", "t6"]}))
    assert err["param"] == "prompt" and "batch" in err["message"]


def test_neutral_values_of_unsupported_fields_are_accepted(url: str) -> None:
    neutral = {
        "n": 1,
        "response_format": {"type": "text"},
        "tools": [],
        "tool_choice": "none",
        "logprobs": False,
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "logit_bias": {},
        "user": "someone",
        "modalities": ["text"],
    }
    r = post(url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "temperature": 0, **neutral})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == reference(CHAT, max_tokens=4)


# -- roles, models, HEAD, the max_tokens cap ---------------------------------------------------
def test_unknown_roles_are_a_400_naming_the_role_and_developer_is_a_system_message(url: str) -> None:
    bad = [{"role": "user", "content": "t5"}, {"role": "narrator", "content": "t6"}]
    err = error_of(post(url, "/v1/chat/completions", {"messages": bad}))
    assert "'narrator'" in err["message"] and "messages.1" in err["message"] and err["param"] == "messages"
    call = {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}
    for role in ("system", "user", "assistant", "tool", "developer"):
        message = {"role": role, "content": "t7", **({"tool_call_id": "call_1"} if role == "tool" else {})}
        messages = [*([call] if role == "tool" else []), message, {"role": "user", "content": "t5"}]
        assert post(url, "/v1/chat/completions", {"messages": messages, "max_tokens": 1}).status_code == 200


def test_head_and_the_model_route_answer_as_openai_does(url: str) -> None:
    for path in ("/health", "/v1/models", "/v1/models/fake"):
        r = httpx.head(f"{url}{path}")
        assert r.status_code == 200 and r.content == b"", path
    assert client(url).models.retrieve("fake").id == "fake"
    with pytest.raises(openai.NotFoundError) as err:
        client(url).models.retrieve("gpt-4o")
    assert err.value.body["code"] == "model_not_found" and "gpt-4o" in err.value.body["message"]
    assert set(err.value.body) == {"message", "type", "param", "code"}


def test_max_tokens_is_capped_on_the_server_side() -> None:
    with serve_in_thread(create_app(utf8_engine(), max_tokens_cap=5)) as base:
        c = client(base)
        r = c.chat.completions.create(model="m", messages=CHAT, max_tokens=400, temperature=0)
        assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"
        r = c.chat.completions.create(model="m", messages=CHAT, max_completion_tokens=400, temperature=0)
        assert r.usage.completion_tokens == 5
        t = c.completions.create(model="m", prompt="t5", max_tokens=400, temperature=0)
        assert t.usage.completion_tokens == 5
        assert (
            c.completions.create(model="m", prompt="t5", temperature=0).usage.completion_tokens == 5
        )  # the default too
    with pytest.raises(EdgespecError, match="--max-tokens-cap"):
        create_app(utf8_engine(), max_tokens_cap=0)
    assert defaults.MAX_TOKENS <= defaults.MAX_TOKENS_CAP < defaults.N_CTX
