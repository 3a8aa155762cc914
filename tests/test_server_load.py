"""The server under load and failure: crashes, slow tokenizing, Retry-After, slow clients, K.

Same fake engine as test_server.py ("t<id> " text, a concatenating chat template).
"""

from __future__ import annotations

import logging

import httpx

from edgespec.frontends.server.app import create_app, serve_in_thread
from tests.test_server import fake_engine


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
