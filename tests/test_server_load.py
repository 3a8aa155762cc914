"""The server under load and failure: crashes, slow tokenizing, Retry-After, slow clients, K.

Same fake engine as test_server.py ("t<id> " text, a concatenating chat template).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import httpx
import openai
import pytest

from edgespec import defaults
from edgespec.api.engine import Engine
from edgespec.frontends.server.app import create_app
from edgespec.frontends.server.limits import uvicorn_config
from edgespec.frontends.server.running import serve_in_thread
from tests.fakes import FakeModel
from tests.test_server import SlowModel, client, fake_engine, wait_for


def metric_values(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))}


class Tracebacks(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.exc_info is not None


def test_a_crash_is_one_500_counted_in_metrics_and_logged_once() -> None:
    engine = fake_engine()
    with serve_in_thread(create_app(engine)) as url:
        tracebacks = Tracebacks()
        loggers = [logging.getLogger(n) for n in ("uvicorn", "edgespec")]  # all others propagate to these
        for lg in loggers:
            lg.addHandler(tracebacks)
        try:
            engine.target.fail_at_eval = len(engine.target.evals)  # the next forward pass raises
            r = httpx.post(f"{url}/v1/completions", json={"prompt": "t5", "max_tokens": 2})
            engine.target.fail_at_eval = None
        finally:
            for lg in loggers:
                lg.removeHandler(tracebacks)
        assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
        assert tracebacks.count == 1
        assert metric_values(url)['edgespec_requests_total{code="500"}'] == 1
        assert httpx.post(f"{url}/v1/completions", json={"prompt": "t5", "max_tokens": 2}).status_code == 200


class SlowTokenizer(SlowModel):
    """A fake target whose tokenizer holds any text with "t63" in it until `release` is set
    (and whose forward passes wait for `gate`, as SlowModel's)."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.entered, self.release = threading.Event(), threading.Event()
        self.calls = 0

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        self.calls += 1
        if "t63" in text:
            self.entered.set()
            self.release.wait(30)
        return super().tokenize(text, add_special=add_special, parse_special=parse_special)


def test_a_slow_prompt_tokenizes_beside_the_engine_and_other_requests_go_ahead() -> None:
    engine = Engine(SlowTokenizer(64), FakeModel(64, noise=0.5), name="fake")
    target = engine.target
    assert isinstance(target, SlowTokenizer)
    with serve_in_thread(create_app(engine)) as url:
        slow: dict[str, int] = {}
        body = {"prompt": "t5 t63", "max_tokens": 3}
        t = threading.Thread(
            target=lambda: slow.update(code=httpx.post(f"{url}/v1/completions", json=body).status_code)
        )
        t.start()
        try:
            assert target.entered.wait(10)
            fast = httpx.post(f"{url}/v1/completions", json={"prompt": "t5", "max_tokens": 3}, timeout=5)
            assert fast.status_code == 200  # served while the slow prompt is still being tokenized
        finally:
            target.release.set()
            t.join(10)
        assert slow == {"code": 200}


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_an_oversize_prompt_is_refused_before_tokenizing_and_without_waiting_for_a_turn(path: str) -> None:
    engine = Engine(SlowTokenizer(64, n_ctx=512), FakeModel(64, noise=0.5, n_ctx=512), name="fake")
    target = engine.target
    assert isinstance(target, SlowTokenizer)
    target.release.set()
    target.gate.clear()  # the first request holds the engine (and its turn) until the gate opens
    huge = "t5 " * (512 * defaults.PROMPT_CHARS_PER_TOKEN // 3 + 1)  # over the characters per context token bound
    long = "t5 " * 600  # few enough characters, but 600 tokens
    app = create_app(engine)
    with serve_in_thread(app) as url:
        first = threading.Thread(target=lambda: client(url).completions.create(model="m", prompt="t5", max_tokens=2))
        first.start()
        try:
            wait_for(lambda: app.state.queue.running)
            calls = target.calls
            for prompt, what in ((huge, "characters"), (long, "tokens")):
                message = {"role": "user", "content": prompt}
                body = {"prompt": prompt} if path == "/v1/completions" else {"messages": [message]}
                r = httpx.post(f"{url}{path}", json=body, timeout=5)
                err = r.json()["error"]
                assert r.status_code == 400 and err["code"] == "context_length_exceeded", r.text
                assert f"{what} but the context holds 512" in err["message"]
            assert target.calls == calls + 1  # the character bound answered without tokenizing
        finally:
            target.gate.set()
            first.join(10)


@pytest.mark.slow  # several seconds of processes or sleeps: `make test` runs it
def test_retry_after_follows_recent_requests_not_slow_ones_long_gone() -> None:
    engine = fake_engine()
    app = create_app(engine, max_queue=7)  # one running + seven waiting
    queue = app.state.queue
    gate = engine.target.gate

    def ask(url: str) -> None:
        client(url).completions.create(model="m", prompt="t5", max_tokens=2)

    with serve_in_thread(app) as url:
        gate.clear()
        slow = threading.Thread(target=ask, args=(url,))
        slow.start()
        time.sleep(2.0)  # one slow request...
        gate.set()
        slow.join(10)
        for _ in range(defaults.RETRY_AFTER_WINDOW):  # ...then the queue moves fast again
            ask(url)
        gate.clear()
        threads = []
        for i in range(8):
            threads.append(threading.Thread(target=ask, args=(url,)))
            threads[-1].start()
            wait_for(lambda i=i: queue.running and queue.waiting == i)
        try:
            with pytest.raises(openai.APIStatusError) as err:
                client(url).completions.create(model="m", prompt="t5", max_tokens=2)
            assert err.value.status_code == 503
            assert err.value.response.headers["retry-after"] == "1"  # 8 ahead at milliseconds each
        finally:
            gate.set()
            for t in threads:
                t.join(10)


def raw_exchange(url: str, data: bytes, wait_s: float) -> tuple[bytes, float]:
    """Send `data` on a fresh connection, then read until the server closes it (or `wait_s`)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    t0 = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        sock.sendall(data)
        got = b""
        try:
            while chunk := sock.recv(4096):
                got += chunk
        except TimeoutError:
            got += b"<still open>"
    return got, time.monotonic() - t0


def test_slow_headers_are_cut_off_and_a_trickled_body_gets_408() -> None:
    app = create_app(fake_engine(), body_timeout_s=0.5)
    with serve_in_thread(app, header_timeout_s=0.5) as url:
        got, took = raw_exchange(url, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n", wait_s=5)
        assert got == b"" and took < 3  # closed, headers unfinished
        head = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        got, took = raw_exchange(url, head + b"Content-Length: 100\r\n\r\n" + b'{"prompt": ', wait_s=5)
        assert got.startswith(b"HTTP/1.1 408") and b"request_timeout" in got and took < 3
        assert httpx.post(f"{url}/v1/completions", json={"prompt": "t5", "max_tokens": 1}).status_code == 200
        assert metric_values(url)['edgespec_requests_total{code="408"}'] == 1


def test_the_server_runs_with_bounded_connections_headers_and_keep_alive() -> None:
    config = uvicorn_config(create_app(fake_engine()), host="127.0.0.1", port=8080)
    assert config.timeout_keep_alive == defaults.KEEP_ALIVE_S
    assert config.limit_concurrency == defaults.MAX_CONNECTIONS
    assert config.h11_max_incomplete_event_size == defaults.MAX_HEADER_BYTES
    assert config.http.header_timeout_s == defaults.HEADER_TIMEOUT_S  # type: ignore[union-attr]


@pytest.mark.parametrize("stream", [False, True])
def test_speculation_k_is_the_k_the_controller_chose_not_the_clipped_draft(stream: bool) -> None:
    with serve_in_thread(create_app(fake_engine())) as url:
        body = {"prompt": "t5", "max_tokens": 3, "temperature": 0, "k": 5, "stream": stream}
        r = httpx.post(f"{url}/v1/completions", json=body)
        last = [line for line in r.text.split("\n\n") if line.startswith("data: {")][-1] if stream else None
        spec = (json.loads(last.removeprefix("data: ")) if last else r.json())["speculation"]
        # three tokens leave room for fewer than five drafts per step: the steps drafted less
        assert spec["draft_n"] < 5 * spec["steps"]
        assert spec["k"] == 5
        assert metric_values(url)["edgespec_current_k"] == 5
