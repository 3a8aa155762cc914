"""Request fields at the server's edge: what is accepted, and the 400s for what is not.

A 400 must say what was wrong and what to send instead, in OpenAI's error shape. The
fake target here tokenizes as llama.cpp does (through UTF-8), so text that cannot be
encoded would reach it as it would reach a real model.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from edgespec.api.engine import Engine
from edgespec.frontends.server.app import create_app, serve_in_thread
from tests.fakes import FakeModel
from tests.test_server import CHAT, client


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
