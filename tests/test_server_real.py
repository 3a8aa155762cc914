"""The server over the real demo pair (SmolLM2-135M F32 + Q4_1 draft), through the openai client.

Skipped unless the demo pair is prepared (`edgespec models prepare`, or EDGESPEC_HOME
pointing at a prepared cache). Greedy decoding is lossless, so a streamed answer must
equal the non-streamed one token for token.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from edgespec.api.engine import Engine
from edgespec.frontends.server.app import create_app
from edgespec.frontends.server.running import serve_in_thread
from edgespec.llama.config import load_config

pytestmark = pytest.mark.real

CHAT = [{"role": "user", "content": "Name three colours."}]


def demo_ready() -> bool:
    cfg = load_config()
    return all(cfg.model(m).location().exists() for m in ("smollm2-135m-f32", "smollm2-135m-q4_1"))


@pytest.fixture(scope="module")
def api() -> Iterator[openai.OpenAI]:
    if not demo_ready():
        pytest.skip("the demo pair is not prepared (run `edgespec models prepare`)")
    engine = Engine.from_pair("demo")
    try:
        with serve_in_thread(create_app(engine)) as url:
            yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
    finally:
        engine.close()


def test_chat_streamed_equals_non_streamed_with_speculation_stats(api: openai.OpenAI) -> None:
    whole = api.chat.completions.create(model="demo", messages=CHAT, max_tokens=8, temperature=0)
    text = whole.choices[0].message.content
    assert text and whole.choices[0].finish_reason in ("length", "stop")
    assert whole.usage.completion_tokens <= 8 and whole.model == "demo"
    spec = whole.model_extra["speculation"]
    assert spec["draft_n"] >= spec["draft_n_accepted"] >= 0 and spec["steps"] >= 1
    chunks = list(api.chat.completions.create(model="demo", messages=CHAT, max_tokens=8, temperature=0, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert "draft_n_accepted" in chunks[-1].model_extra["speculation"]


def test_completions_streamed_and_not(api: openai.OpenAI) -> None:
    prompt = "The capital of France is"
    whole = api.completions.create(model="demo", prompt=prompt, max_tokens=6, temperature=0)
    parts = list(api.completions.create(model="demo", prompt=prompt, max_tokens=6, temperature=0, stream=True))
    assert whole.choices[0].text and "".join(p.choices[0].text for p in parts) == whole.choices[0].text
    assert "Paris" in whole.choices[0].text


def test_a_resent_conversation_prefills_only_the_new_turn(api: openai.OpenAI) -> None:
    first = api.chat.completions.create(model="demo", messages=CHAT, max_tokens=6, temperature=0)
    turn2 = [
        *CHAT,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And three animals?"},
    ]
    second = api.chat.completions.create(model="demo", messages=turn2, max_tokens=4, temperature=0)
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 2


def test_a_prompt_over_the_context_is_a_400_and_serving_goes_on(api: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        api.chat.completions.create(model="demo", messages=[{"role": "user", "content": "word " * 5000}], max_tokens=4)
    assert err.value.body["code"] == "context_length_exceeded"
    assert api.chat.completions.create(model="demo", messages=CHAT, max_tokens=2, temperature=0).choices
