"""Penalties, logit bias and log probabilities at the server (fake models): the fields reach
the engine and change the answer as the engine's own options do, out-of-range values are a
400 in OpenAI's shape, and logprobs come back in OpenAI's shapes, streamed and not."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest

from edgespec.core.events import TokenLogprob
from edgespec.frontends.server.app import create_app
from edgespec.frontends.server.running import serve_in_thread
from edgespec.frontends.server.schema import TextFormat
from tests.test_server import CHAT, client, fake_engine


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve_in_thread(create_app(fake_engine())) as base:
        yield base


def error_of(r: httpx.Response) -> dict:
    assert r.status_code == 400, r.text
    return r.json()["error"]


def test_penalties_and_bias_reach_the_engine(url: str) -> None:
    c = client(url)
    for fields in ({"frequency_penalty": 1.5}, {"presence_penalty": 2.0}, {"logit_bias": {"50": 5}}):
        extra = {"repeat_penalty": 1.3, "repeat_last_n": 8}
        got = c.chat.completions.create(model="m", messages=CHAT, max_tokens=24, temperature=0, **fields,
                                        extra_body=extra)  # fmt: skip
        engine_fields = {**fields, "logit_bias": {50: 5}} if "logit_bias" in fields else fields
        want = fake_engine().generate(CHAT, temperature=0, max_tokens=24, **engine_fields, **extra)
        plain = fake_engine().generate(CHAT, temperature=0, max_tokens=24)
        assert got.choices[0].message.content == want.text != plain.text


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        ("/v1/chat/completions", {"presence_penalty": 2.5}, "presence_penalty"),
        ("/v1/chat/completions", {"frequency_penalty": -2.1}, "frequency_penalty"),
        ("/v1/completions", {"repeat_penalty": 0}, "repeat_penalty"),
        ("/v1/completions", {"repeat_last_n": -2}, "repeat_last_n"),
        ("/v1/chat/completions", {"logit_bias": {"x": 1}}, "logit_bias"),
        ("/v1/chat/completions", {"logit_bias": {"5": 100.5}}, "logit_bias"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
        ("/v1/completions", {"logprobs": 6}, "logprobs"),
    ],
)
def test_out_of_range_values_are_a_400_naming_the_field(url: str, path: str, extra: dict, param: str) -> None:
    base = {"messages": CHAT} if "chat" in path else {"prompt": "t5"}
    assert error_of(httpx.post(f"{url}{path}", json={**base, **extra}))["param"] == param


def test_a_bias_on_a_token_outside_the_vocabulary_is_a_400(url: str) -> None:
    err = error_of(httpx.post(f"{url}/v1/completions", json={"prompt": "t5", "logit_bias": {"64": 1}}))
    assert "token id 64 is not in the vocabulary" in err["message"]


def check_entries(content: list, n_top: int) -> None:
    for entry in content:
        top = entry["top_logprobs"]
        assert len(top) == n_top and [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        assert (entry["token"] in [t["token"] for t in top]) == (entry["logprob"] >= top[-1]["logprob"])
        assert entry["logprob"] <= 0 and sum(math.exp(t["logprob"]) for t in top) <= 1 + 1e-9
        assert bytes(entry["bytes"]).decode() == entry["token"]


def test_chat_logprobs_with_top_3_streamed_and_not(url: str) -> None:
    c = client(url)
    ask = dict(model="m", messages=CHAT, max_tokens=12, temperature=0, logprobs=True, top_logprobs=3)
    whole = c.chat.completions.create(**ask)
    content = [e.model_dump() for e in whole.choices[0].logprobs.content]
    assert len(content) == whole.usage.completion_tokens
    assert "".join(e["token"] for e in content) == whole.choices[0].message.content
    check_entries(content, 3)
    streamed = []
    for chunk in c.chat.completions.create(**ask, stream=True):
        if chunk.choices and chunk.choices[0].logprobs is not None:
            streamed += [e.model_dump() for e in chunk.choices[0].logprobs.content]
    assert streamed == content
    plain = c.chat.completions.create(model="m", messages=CHAT, max_tokens=12, temperature=0)
    assert plain.choices[0].logprobs is None


def test_completion_logprobs_in_the_legacy_shape(url: str) -> None:
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "t5 t9", "max_tokens": 8, "temperature": 0, "logprobs": 2})
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    assert "".join(lp["tokens"]) == choice["text"] and len(lp["tokens"]) == len(lp["token_logprobs"]) == 8
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(8)]
    for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert top[token] == value and 2 <= len(top) <= 3  # the two best, and the chosen token


def test_legacy_logprobs_of_a_character_split_across_tokens() -> None:
    """👋 is four bytes in three tokens: each part is its own "bytes:" key (as text they were all
    U+FFFD, one key for five alternatives), and text_offset counts whole characters, in chunks too."""
    pieces = {
        10: b"\xf0\x9f",
        11: b"\x91",
        12: b"\x8b",
        13: b" hello",
        14: b"\x8e",
        15: b"\x8c",
        16: b" \xf0\x9f\x8e\x89",
    }
    fmt = TextFormat("m", lambda t: pieces[t])
    first = fmt.logprobs(
        [TokenLogprob(10, -0.1, ((10, -0.1), (13, -3.0))), TokenLogprob(11, -0.2, ((11, -0.2), (14, -2.0), (15, -2.5)))]
    )
    rest = fmt.logprobs(
        [TokenLogprob(12, -0.3, ((12, -0.3),)), TokenLogprob(13, -0.4, ((13, -0.4),)), TokenLogprob(16, -0.5)]
    )
    assert first is not None and rest is not None
    assert first["tokens"] == ["bytes:\\xf0\\x9f", "bytes:\\x91"] and rest["tokens"] == ["bytes:\\x8b", " hello", " 🎉"]
    assert first["top_logprobs"][1] == {"bytes:\\x91": -0.2, "bytes:\\x8e": -2.0, "bytes:\\x8c": -2.5}
    assert first["text_offset"] + rest["text_offset"] == [
        0,
        0,
        0,
        1,
        7,
    ]  # text "👋 hello 🎉": " hello" at 1, " 🎉" at 7
