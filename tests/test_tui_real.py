"""The chat app on the real demo pair (SmolLM2-135M F32 target, Q4_1 draft), headless."""

from __future__ import annotations

import pytest

from edgespec.llama.config import load_config

pytestmark = [pytest.mark.real, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def engine():
    if not load_config().model("smollm2-135m-f32").location().is_file():
        pytest.skip("demo pair not prepared (run `edgespec models prepare demo`)")
    from edgespec import Engine

    eng = Engine.from_pair("demo")
    yield eng
    eng.close()


async def test_a_reply_arrives_with_stats(engine) -> None:
    from edgespec_tui.app import ChatOptions, create_app

    app = create_app(engine, options=ChatOptions(max_tokens=24, temperature=0.0, seed=0))
    async with app.run_test(size=(120, 40)) as pilot:
        app.query_one("#prompt").value = "What is the capital of France?"
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        reply = app.messages("assistant")[0]
        assert reply.text.strip(), "no reply text"
        assert not app.messages("error")
        stats = app.last_stats
        assert stats.n_generated > 0 and stats.steps > 0
        assert stats.speculative and stats.n_drafted > 0
        assert "tok/s" in reply.meta and "accept" in reply.meta
        status = app.status.content.plain
        assert "accept" in status and "mem " in status and "GPU" in status
        assert "Paris" in reply.text
        # the follow-up reuses the cached prefix: only the new turn is prefilled
        app.query_one("#prompt").value = "And of Italy?"
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.last_stats.n_prefilled < app.last_stats.n_prompt / 2
