"""The HTTP server over a fake engine: the official openai client, queueing, disconnects, security.

Every test talks to a real uvicorn server on a free loopback port (`serve_in_thread`).
The fake engine renders token ids as "t<id> " and its chat template concatenates the
message contents, so "t5 t6" is the prompt [BOS, 5, 6].
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from edgespec.api.engine import Engine
from edgespec.core.errors import EdgespecError
from edgespec.frontends.server.app import create_app
from edgespec.frontends.server.command import add_parser
from edgespec.frontends.server.guard import MAX_BODY, host_name
from edgespec.frontends.server.running import serve_in_thread
from tests.fakes import FakeModel

CHAT = [{"role": "user", "content": "t5 t6 t7"}]


class SlowModel(FakeModel):
    """A fake target whose every forward pass waits for `gate` and then `delay` seconds."""

    def __init__(self, *args: object, delay: float = 0.0, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.delay = delay
        self.gate = threading.Event()
        self.gate.set()

    def eval(self, tokens, pos, logits_from=None):
        self.gate.wait(30)
        time.sleep(self.delay)
        return super().eval(tokens, pos, logits_from)


class RecordingEngine(Engine):
    """Notes each generation's prompt (the server passes token ids) and start time, in the order
    the server starts them."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.started: list[tuple[object, float]] = []

    def stream(self, prompt, **kw):
        self.started.append((prompt, time.monotonic()))
        return super().stream(prompt, **kw)


def fake_engine(delay: float = 0.0, n_ctx: int = 512) -> RecordingEngine:
    target = SlowModel(64, n_ctx=n_ctx, delay=delay)
    return RecordingEngine(target, FakeModel(64, noise=0.5, n_ctx=n_ctx), name="fake")


def reference(prompt: object, **kw: object) -> str:
    """What an identical fresh engine answers (greedy, so the same for any K)."""
    return fake_engine().generate(prompt, temperature=0, **kw).text  # type: ignore[arg-type]


def client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, RecordingEngine]]:
    engine = fake_engine()
    with serve_in_thread(create_app(engine)) as url:
        yield url, engine


# -- the openai client -----------------------------------------------------------------
def test_chat_non_streamed_matches_the_engine_and_carries_usage_and_stats(served) -> None:
    url, _ = served
    r = client(url).chat.completions.create(model="anything", messages=CHAT, max_tokens=12, temperature=0)
    assert r.choices[0].message.content == reference(CHAT, max_tokens=12)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == 4 and r.usage.completion_tokens == 12
    spec = r.model_extra["speculation"]
    assert spec["draft_n"] > 0 and 0 <= spec["draft_n_accepted"] <= spec["draft_n"] and spec["steps"] > 0
    assert r.model == "fake"


def test_chat_streamed_equals_non_streamed_and_last_chunk_has_usage(served) -> None:
    url, _ = served
    chunks = list(
        client(url).chat.completions.create(model="m", messages=CHAT, max_tokens=20, temperature=0, stream=True)
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reference(CHAT, max_tokens=20)
    assert chunks[0].choices[0].delta.role == "assistant"
    last = chunks[-1]
    assert last.choices[0].finish_reason == "length" and last.usage.completion_tokens == 20
    assert set(last.model_extra["speculation"]) >= {
        "draft_n",
        "draft_n_accepted",
        "steps",
        "acceptance",
    }
    assert all(c.usage is None for c in chunks[:-1])


def test_include_usage_adds_openais_last_chunk_with_usage_and_no_choices(served) -> None:
    # OpenAI's clients read the usage from a chunk with no choices: `if not chunk.choices: usage = chunk.usage`
    url, _ = served
    options = {"model": "m", "messages": CHAT, "max_tokens": 5, "stream": True}
    chunks = list(client(url).chat.completions.create(**options, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert chunks[-2].choices[0].finish_reason == "length"
    without = list(client(url).chat.completions.create(**options))
    assert all(c.choices for c in without) and without[-1].usage.completion_tokens == 5


def test_completions_streamed_and_not_use_the_raw_prompt(served) -> None:
    url, _ = served
    c = client(url)
    want = reference("t9 t10", raw=True, max_tokens=10)
    whole = c.completions.create(model="m", prompt="t9 t10", max_tokens=10, temperature=0)
    assert whole.choices[0].text == want and whole.usage.prompt_tokens == 3
    parts = list(c.completions.create(model="m", prompt="t9 t10", max_tokens=10, temperature=0, stream=True))
    assert "".join(p.choices[0].text for p in parts) == want
    assert parts[-1].usage.completion_tokens == 10
    ids = c.completions.create(model="m", prompt=[1, 9, 10], max_tokens=10, temperature=0)
    assert ids.choices[0].text == want


def test_stream_is_sse_ending_with_done(served) -> None:
    url, _ = served
    r = httpx.post(f"{url}/v1/chat/completions", json={"messages": CHAT, "max_tokens": 3, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [line for line in r.text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)


def test_sampling_fields_and_speculation_overrides_reach_the_engine(served) -> None:
    url, _ = served
    c = client(url)

    def ask(**kw: object):
        return c.chat.completions.create(model="m", messages=CHAT, max_tokens=16, **kw)

    # a seed reproduces a sampled answer when K is fixed (an adaptive K follows measured timings)
    seeded = [ask(temperature=1.0, seed=7, extra_body={"k": 3}).choices[0].message.content for _ in range(2)]
    assert seeded[0] == seeded[1]
    plain = ask(temperature=0, extra_body={"speculative": False})
    assert plain.model_extra["speculation"]["draft_n"] == 0
    assert plain.choices[0].message.content == reference(CHAT, max_tokens=16)
    fixed = ask(temperature=0, extra_body={"k": 2, "top_k": 5, "min_p": 0.1, "unknown_field": 1})
    assert fixed.model_extra["speculation"]["k"] <= 2
    stop_at = reference(CHAT, max_tokens=16).split()[3]
    stopped = ask(temperature=0, stop=[stop_at])
    assert stopped.choices[0].finish_reason == "stop" and stop_at not in stopped.choices[0].message.content


def test_a_resent_conversation_reuses_the_cached_prefix(served) -> None:
    url, _ = served
    c = client(url)
    first = c.chat.completions.create(model="m", messages=CHAT, max_tokens=8, temperature=0)
    turn2 = [
        *CHAT,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "t11 t12"},
    ]
    second = c.chat.completions.create(model="m", messages=turn2, max_tokens=8, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= second.usage.prompt_tokens - 3  # only the new turn (and the last token) is prefilled


def test_max_tokens_above_the_context_is_clamped_with_length(served) -> None:
    url, _ = served
    r = client(url).completions.create(model="m", prompt="t5 " * 500, max_tokens=10**9, temperature=0)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens + r.usage.completion_tokens <= 512


def test_a_prompt_of_many_characters_a_token_that_fits_is_answered(served) -> None:
    # pasted JSON indented by 8 runs about 11 characters a token: a bound of 8 refused it unread
    url, _ = served
    prompt = ("t5" + " " * 20) * 300  # 300 tokens of 22 characters, in a context of 512
    assert len(prompt) > 512 * 8
    r = client(url).completions.create(model="m", prompt=prompt, max_tokens=2)
    assert r.usage.prompt_tokens <= 301 and r.choices[0].text


def test_a_full_context_is_a_400_and_the_server_keeps_serving(served) -> None:
    url, _ = served
    c = client(url)
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "t5 " * 600}])
    body = err.value.body
    assert body["code"] == "context_length_exceeded" and "context holds 512" in body["message"]
    assert body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as err:
        c.completions.create(model="m", prompt="t5 " * 600)
    assert err.value.body["param"] == "prompt"
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError):
            c.completions.create(model="m", prompt="t5 " * 600, stream=stream)
    assert c.chat.completions.create(model="m", messages=CHAT, max_tokens=2).choices[0].message.content


@pytest.mark.parametrize(
    "body",
    [
        {"messages": CHAT, "temperature": "hot"},
        {"messages": CHAT, "max_tokens": 0},
        {"messages": CHAT, "top_p": -0.1},
        {"messages": CHAT, "temperature": 2.5},
        {"messages": CHAT, "k": 99},
        {"messages": CHAT, "n": 2},
        {"messages": []},
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}],
                }
            ]
        },
        {"messages": "t5"},
        {},
    ],
)
def test_bad_fields_are_400_in_openai_error_shape(served, body) -> None:
    url, _ = served
    r = httpx.post(f"{url}/v1/chat/completions", json=body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"


def test_not_json_and_unknown_paths_get_openai_errors(served) -> None:
    url, _ = served
    r = httpx.post(f"{url}/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()
    r = httpx.get(f"{url}/v1/engines")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_models_health_and_metrics(served) -> None:
    url, _ = served
    assert [m.id for m in client(url).models.list()] == ["fake"]
    assert httpx.get(f"{url}/health").json() == {"status": "ok"}
    client(url).completions.create(model="m", prompt="t3", max_tokens=4)
    text = httpx.get(f"{url}/metrics").text
    metrics = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert float(metrics["edgespec_generated_tokens_total"]) >= 4
    assert float(metrics['edgespec_requests_total{code="200"}']) >= 1
    for name in (
        "drafted_tokens_total",
        "accepted_tokens_total",
        "acceptance_rate",
        "current_k",
        "queue_depth",
        "seconds_per_token",
    ):
        assert f"edgespec_{name}" in metrics


# -- one generation at a time ----------------------------------------------------------
def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_eight_clients_are_served_in_arrival_order_and_a_ninth_gets_503() -> None:
    engine = fake_engine()
    app = create_app(engine, max_queue=7)  # one running + seven waiting = eight
    queue = app.state.queue
    engine.target.gate.clear()  # the first request holds the engine until we open the gate
    prompts = [[{"role": "user", "content": f"t{10 + i} t{20 + i}"}] for i in range(8)]
    answers: dict[int, str] = {}

    def ask(i: int, url: str) -> None:
        c = client(url)
        if i % 2:
            chunks = c.chat.completions.create(
                model="m", messages=prompts[i], max_tokens=12, temperature=0, stream=True
            )
            answers[i] = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        else:
            r = c.chat.completions.create(model="m", messages=prompts[i], max_tokens=12, temperature=0)
            answers[i] = r.choices[0].message.content

    with serve_in_thread(app) as url:
        threads = []
        for i in range(8):
            threads.append(threading.Thread(target=ask, args=(i, url)))
            threads[-1].start()
            wait_for(lambda i=i: queue.running and queue.waiting == i)
        metrics = httpx.get(f"{url}/metrics").text
        assert "edgespec_queue_depth 7" in metrics and "edgespec_busy 1" in metrics
        with pytest.raises(openai.APIStatusError) as err:
            client(url).chat.completions.create(model="m", messages=CHAT, max_tokens=4)
        assert err.value.status_code == 503 and int(err.value.response.headers["retry-after"]) >= 1
        engine.target.gate.set()
        for t in threads:
            t.join(30)
    assert [p for p, _ in engine.started] == [engine.tokenize(p) for p in prompts]  # tokenized beforehand
    assert answers == {i: reference(prompts[i], max_tokens=12) for i in range(8)}


def test_a_dropped_stream_frees_the_engine_for_the_next_request_within_one_step() -> None:
    step_s = 0.02
    engine = fake_engine(delay=step_s)
    app = create_app(engine)
    queue = app.state.queue
    with serve_in_thread(app) as url:
        done: dict[str, object] = {}
        body = {"prompt": "t5", "max_tokens": 400, "temperature": 0, "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=body) as r:
            lines = r.iter_lines()
            for _ in range(6):
                next(lines)
            waiter = threading.Thread(
                target=lambda: done.update(
                    r=client(url).chat.completions.create(model="m", messages=CHAT, max_tokens=4, temperature=0)
                )
            )
            waiter.start()
            wait_for(lambda: queue.waiting == 1)
            t_drop = time.monotonic()
        waiter.join(10)
        assert done["r"].choices[0].message.content == reference(CHAT, max_tokens=4)
    started_next = engine.started[-1][1] - t_drop
    assert started_next < 10 * step_s, f"the next request started {started_next:.3f}s after the drop"
    assert len(engine.target.evals) < 100  # the dropped stream did not run on to 400 tokens


def test_a_client_that_leaves_while_queued_is_skipped() -> None:
    engine = fake_engine()
    app = create_app(engine)
    queue = app.state.queue
    engine.target.gate.clear()
    with serve_in_thread(app) as url:
        first = threading.Thread(target=lambda: client(url).completions.create(model="m", prompt="t5", max_tokens=3))
        first.start()
        wait_for(lambda: queue.running)
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{url}/v1/completions", json={"prompt": "t6", "max_tokens": 3}, timeout=0.3)
        engine.target.gate.set()
        first.join(10)
        wait_for(lambda: not queue.running and queue.waiting == 0)
    assert [p for p, _ in engine.started] == [engine.tokenize("t5", raw=True)]


# -- security ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def keyed() -> Iterator[str]:
    with serve_in_thread(create_app(fake_engine(), api_key="s3cret", cors_origin="http://app.example")) as url:
        yield url


def test_a_key_is_required_when_set(keyed: str) -> None:
    with pytest.raises(openai.AuthenticationError):
        client(keyed, "wrong").models.list()
    r = httpx.post(f"{keyed}/v1/completions", json={"prompt": "t5"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert client(keyed, "s3cret").completions.create(model="m", prompt="t5", max_tokens=2).choices
    assert httpx.get(f"{keyed}/health").status_code == 200  # liveness probes need no key


def test_foreign_host_headers_get_403(served) -> None:
    url, _ = served
    for host in ("evil.example", "evil.example:8080", "127.0.0.2", ""):
        r = httpx.get(f"{url}/v1/models", headers={"host": host})
        assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
    for host in ("localhost", "LOCALHOST:1234", "127.0.0.1:80", "[::1]:8080"):
        assert httpx.get(f"{url}/v1/models", headers={"host": host}).status_code == 200


def test_host_names_are_parsed_without_port() -> None:
    assert host_name("Example.com:8080") == "example.com" and host_name("[::1]:80") == "[::1]"
    assert host_name(None) == "" and host_name("localhost") == "localhost"


def test_bodies_over_one_mib_get_413_by_length_and_by_streamed_size(served) -> None:
    url, _ = served
    big = b'{"prompt": "' + b"t5 " * (MAX_BODY // 3) + b'"}'
    r = httpx.post(f"{url}/v1/completions", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunked() -> Iterator[bytes]:  # no Content-Length: the server must count what arrives
        yield big[: MAX_BODY // 2]
        yield big[MAX_BODY // 2 :]

    r = httpx.post(f"{url}/v1/completions", content=chunked(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert httpx.post(f"{url}/v1/completions", json={"prompt": "t5", "max_tokens": 1}).status_code == 200


def test_cors_is_off_by_default_and_limited_to_the_named_origin(served, keyed: str) -> None:
    url, _ = served
    r = httpx.get(f"{url}/health", headers={"origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers
    pre = {
        "origin": "http://app.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization,content-type",
    }
    r = httpx.options(f"{keyed}/v1/chat/completions", headers=pre)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://app.example"
    r = httpx.options(f"{keyed}/v1/chat/completions", headers={**pre, "origin": "http://evil.example"})
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    # OpenAI's JavaScript SDK sends x-stainless-* headers with every call: its preflight must pass
    sdk = {**pre, "access-control-request-headers": "authorization,content-type,x-stainless-os,x-stainless-lang"}
    r = httpx.options(f"{keyed}/v1/chat/completions", headers=sdk)
    assert r.status_code == 200 and "x-stainless-os" in r.headers["access-control-allow-headers"].lower()


def test_binding_beyond_loopback_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = fake_engine()
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.com"):
        with pytest.raises(EdgespecError, match="without an API key"):
            create_app(engine, host=host)
    create_app(engine, host="0.0.0.0", api_key="k")
    create_app(engine, host="::1")
    monkeypatch.delenv("EDGESPEC_API_KEY", raising=False)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--host", "0.0.0.0"])
    with pytest.raises(EdgespecError, match="without an API key") as err:
        args.func(args)  # refused before any model loads
    assert "\n" not in str(err.value)
    assert (args.port, args.queue, args.api_key) == (8080, 8, None)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--queue", "-1"], "--queue must be >= 0"),
        (["--max-tokens-cap", "0"], "--max-tokens-cap must be >= 1"),
        (["--host", "192.0.2.1", "--api-key", "k"], "cannot serve at 192.0.2.1:"),
        (["--host", "no.such.host.invalid", "--api-key", "k"], "check --host"),
    ],
)
def test_bad_server_options_are_refused_before_any_model_loads(flags: list[str], says: str) -> None:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--target", "/nonexistent/model.gguf", "--port", "18999", *flags])
    with pytest.raises(EdgespecError, match=re.escape(says)) as err:
        args.func(args)  # a load would say the model is missing instead
    assert "\n" not in str(err.value)


def test_a_port_in_use_is_one_line_before_any_model_loads() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        parser = argparse.ArgumentParser()
        add_parser(parser.add_subparsers())
        port = str(taken.getsockname()[1])
        args = parser.parse_args(["serve", "--target", "/nonexistent/model.gguf", "--port", port])
        with pytest.raises(EdgespecError, match="Address already in use .another server is there; pick another --port"):
            args.func(args)


def test_a_server_told_to_stop_ends_the_stream_in_flight_and_answers_those_waiting() -> None:
    engine = fake_engine(delay=0.02)
    app = create_app(engine)
    with serve_in_thread(app) as url:
        body = {"messages": [{"role": "user", "content": "t5 t6"}], "max_tokens": 400, "temperature": 0}
        lines: list[str] = []
        waiting: list[httpx.Response] = []

        def wait_in_line(stream: bool) -> None:
            waiting.append(httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": stream}, timeout=30))

        with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=30) as r:
            it = r.iter_lines()
            lines += [next(it) for _ in range(4)]  # generating
            engine.target.gate.clear()  # it waits in its next step until the others wait in line
            others = [threading.Thread(target=wait_in_line, args=(s,)) for s in (True, False)]
            for t in others:
                t.start()
            deadline = time.monotonic() + 20
            while app.state.queue.waiting < 2:
                assert time.monotonic() < deadline, "the two requests never queued"
                time.sleep(0.01)
            app.state.queue.stop_soon()  # what Ctrl-C or SIGTERM does to `edgespec serve`
            engine.target.gate.set()
            lines += list(it)
        for t in others:
            t.join(30)
        events = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
        assert [x for x in lines if x][-1] == "data: [DONE]" and events[-2]["choices"][0]["finish_reason"] == "error"
        assert events[-1]["error"]["code"] == "server_shutting_down"
        assert [w.status_code for w in waiting] == [503, 503]
        assert all(w.json()["error"]["code"] == "server_shutting_down" and w.headers["retry-after"] for w in waiting)
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)  # a keep-alive client's next request
        assert r.status_code == 503 and r.json()["error"]["code"] == "server_shutting_down"
        r = httpx.get(f"{url}/health")
        assert r.status_code == 503 and r.json() == {"status": "stopping"}


def test_a_stream_the_server_stops_before_its_first_token_is_a_503() -> None:
    engine = fake_engine()
    app = create_app(engine)
    with serve_in_thread(app) as url:
        engine.target.gate.clear()  # its prefill waits
        got: list[httpx.Response] = []
        body = {"messages": [{"role": "user", "content": "t5 t6"}], "max_tokens": 50, "stream": True}
        asker = threading.Thread(target=lambda: got.append(httpx.post(f"{url}/v1/chat/completions", json=body)))
        asker.start()
        deadline = time.monotonic() + 20
        while not app.state.queue.running:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        app.state.queue.stop_soon()
        engine.target.gate.set()
        asker.join(20)
        assert got[0].status_code == 503 and got[0].json()["error"]["code"] == "server_shutting_down"


def test_serve_in_thread_keeps_its_old_home_and_runs_an_app_mounted_in_another() -> None:
    from fastapi import FastAPI

    from edgespec.frontends.server import app as app_module

    assert app_module.serve_in_thread is serve_in_thread
    outer = FastAPI()
    inner = create_app(fake_engine())
    outer.mount("/llm", inner)  # the inner app's lifespan never runs
    with serve_in_thread(outer) as url:
        r = httpx.post(f"{url}/llm/v1/completions", json={"prompt": "t5", "max_tokens": 2}, timeout=30)
        assert r.status_code == 200 and r.json()["choices"][0]["text"]
        inner.state.queue.stop_soon()  # an embedder stopping its own server
        r = httpx.post(f"{url}/llm/v1/completions", json={"prompt": "t5", "max_tokens": 2}, timeout=30)
        assert r.status_code == 503 and r.json()["error"]["code"] == "server_shutting_down"


@pytest.mark.parametrize(
    "extra, says",
    [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}}}, "foo"),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "g", "parameters": {"properties": {"a": {"type": "foo"}}}},
                    }
                ]
            },
            "tools[0] (g): parameters",
        ),
    ],
)
def test_a_schema_that_cannot_be_used_is_a_400_without_waiting_for_the_queue(extra: dict, says: str) -> None:
    """It waited its turn behind every generation in progress (and got a 503 on a full queue)."""
    engine = fake_engine()
    app = create_app(engine)
    queue = app.state.queue
    engine.target.gate.clear()  # the generation in progress holds the engine
    with serve_in_thread(app) as url:
        first = threading.Thread(target=lambda: client(url).completions.create(model="m", prompt="t5", max_tokens=3))
        first.start()
        wait_for(lambda: queue.running)
        try:
            r = httpx.post(f"{url}/v1/chat/completions", json={"messages": CHAT, **extra}, timeout=5)
            assert r.status_code == 400 and says in r.json()["error"]["message"]
        finally:
            engine.target.gate.set()
            first.join(10)


def test_a_slow_tools_call_holds_no_other_request() -> None:
    """An isolated engine's `tools` is a round trip to its process; called on the event loop, a
    stuck engine froze every endpoint, /health included, for 120 s a request."""

    class SlowTools(RecordingEngine):
        def tools(self, *args, **kw):
            time.sleep(3)
            return super().tools(*args, **kw)

    engine = SlowTools(SlowModel(64, n_ctx=512), FakeModel(64, noise=0.5, n_ctx=512), name="fake")
    weather = {"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}
    with serve_in_thread(create_app(engine)) as url:
        body = {"messages": CHAT, "max_tokens": 2, "tools": [weather]}
        asking = threading.Thread(target=lambda: httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10))
        asking.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        assert time.monotonic() - t0 < 2  # not behind the 3 s the tools call takes
        asking.join(10)


def test_a_bad_schema_is_a_400_even_when_the_queue_is_full() -> None:
    engine = fake_engine()
    app = create_app(engine, max_queue=0)  # the one running takes the engine; none may wait
    queue = app.state.queue
    engine.target.gate.clear()
    with serve_in_thread(app) as url:
        body = {"prompt": "t5", "max_tokens": 3}
        first = threading.Thread(target=lambda: httpx.post(f"{url}/v1/completions", json=body, timeout=10))
        first.start()
        wait_for(lambda: queue.running)
        try:
            bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}}
            r = httpx.post(f"{url}/v1/chat/completions", json={"messages": CHAT, "response_format": bad}, timeout=5)
            assert r.status_code == 400 and "foo" in r.json()["error"]["message"]
        finally:
            engine.target.gate.set()
            first.join(10)
