"""The server over an isolated engine whose child process gets killed: the request in flight
ends with an error, /health says "restarting" then "ok", the next request is served, and the
server's own process never notices.

Fake models (tests.fakes, built in the child) for most; one test runs `edgespec serve` on
the real demo pair as a separate process and kills its engine with SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from edgespec import IsolatedEngine
from edgespec.api.isolated import ChildSpec
from edgespec.frontends.server.app import create_app
from edgespec.frontends.server.running import serve_in_thread
from tests.conftest import demo_paths

CHAT = [{"role": "user", "content": "t5 t6 t7"}]


@pytest.fixture
def served() -> Iterator[tuple[str, IsolatedEngine]]:
    engine = IsolatedEngine(ChildSpec(factory="tests.fakes:make_slow_engine", kwargs={"delay": 0.02}))
    try:
        with serve_in_thread(create_app(engine)) as url:
            yield url, engine
    finally:
        engine.close()


def kill(pid: int | None) -> None:
    assert pid is not None and pid != os.getpid()
    os.kill(pid, signal.SIGKILL)


def wait_healthy(url: str, within_s: float = 60) -> list[int]:
    """Poll /health until it says ok; the status codes seen on the way."""
    seen, t0 = [], time.monotonic()
    while True:
        r = httpx.get(f"{url}/health", timeout=10)
        seen.append(r.status_code)
        if r.status_code == 200:
            assert r.json() == {"status": "ok"}
            return seen
        assert r.status_code == 503 and r.json()["status"] == "restarting" and "retry-after" in r.headers
        assert time.monotonic() - t0 < within_s, "the engine did not come back"
        time.sleep(0.05)


def stream_and_kill(url: str, pid: int | None, body: dict) -> tuple[list[dict], float]:
    """Stream a request, kill the engine after its first text; the events and how long the
    stream took to end after the kill."""
    events: list[dict] = []
    killed_at = 0.0
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            events.append(json.loads(line[6:]))
            if not killed_at and events[-1].get("choices", [{}])[0].get("delta", {}).get("content"):
                kill(pid)
                killed_at = time.monotonic()
    return events, time.monotonic() - killed_at


def test_sigkill_mid_stream_ends_it_with_an_error_and_the_server_recovers(served) -> None:
    url, engine = served
    pid, server_pid = engine.pid, os.getpid()
    body = {"model": "m", "messages": CHAT, "max_tokens": 2000, "temperature": 0, "stream": True}
    events, took = stream_and_kill(url, pid, body)
    assert took < 5
    assert events[-2]["choices"][0]["finish_reason"] == "error"
    error = events[-1]["error"]
    assert error["code"] == "engine_crashed" and "SIGKILL" in error["message"]
    wait_healthy(url)
    r = httpx.post(f"{url}/v1/chat/completions", json={"messages": CHAT, "max_tokens": 8}, timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
    assert engine.pid != pid and os.getpid() == server_pid


def test_a_crash_before_anything_was_sent_is_a_503_with_retry_after(served) -> None:
    url, engine = served
    pid = engine.pid
    threading.Timer(0.5, kill, args=(pid,)).start()
    body = {"messages": CHAT, "max_tokens": 2000, "temperature": 0}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
    assert r.json()["error"]["code"] == "engine_crashed"
    wait_healthy(url)


def test_health_says_restarting_while_a_new_child_loads_and_requests_get_503(served) -> None:
    url, engine = served
    kill(engine.pid)
    while engine.state == "ok":
        time.sleep(0.005)
    r = httpx.post(f"{url}/v1/chat/completions", json={"messages": CHAT, "max_tokens": 4}, timeout=30)
    if engine.state == "restarting":  # a fake child loads in a fraction of a second
        assert r.status_code == 503 and "retry-after" in r.headers
    seen = wait_healthy(url)
    assert seen[-1] == 200
    assert httpx.post(f"{url}/v1/completions", json={"prompt": "t5", "max_tokens": 4}, timeout=30).status_code == 200


def test_other_connections_stay_up_while_the_engine_restarts(served) -> None:
    url, engine = served
    with httpx.Client(base_url=url, timeout=30) as other:
        assert other.get("/v1/models").status_code == 200
        kill(engine.pid)
        assert other.get("/v1/models").status_code == 200  # same connection, served during the restart
        assert other.get("/metrics").status_code == 200
        wait_healthy(url)
        assert other.post("/v1/completions", json={"prompt": "t5", "max_tokens": 4}).status_code == 200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def engine_child(server: psutil.Process) -> psutil.Process:
    """The server's engine process (multiprocessing may start a helper too)."""
    for child in server.children():
        if "resource_tracker" not in " ".join(child.cmdline()):
            return child
    raise AssertionError("no engine process")


@contextlib.contextmanager
def real_server() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`edgespec serve` on the demo pair in a process of its own, once it answers /health; (process, URL)."""
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-c", "from edgespec.frontends.cli import main; main()", "serve"]
    cmd += ["--target", str(paths[0]), "--draft", str(paths[1]), "--n-ctx", "2048", "--port", str(port)]
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)  # a group of its own
    try:
        t0 = time.monotonic()
        while True:
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            assert time.monotonic() - t0 < 120
            time.sleep(0.2)
        yield server, url
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()


@pytest.mark.real
def test_real_pair_serve_survives_sigkill_of_its_engine() -> None:
    with real_server() as (server, url):
        child = engine_child(psutil.Process(server.pid))
        body = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 2000}
        events, took = stream_and_kill(url, child.pid, {**body, "stream": True, "temperature": 0})
        assert took < 5
        assert events[-2]["choices"][0]["finish_reason"] == "error"
        assert events[-1]["error"]["code"] == "engine_crashed"
        wait_healthy(url, 60)
        r = httpx.post(f"{url}/v1/chat/completions", json={**body, "max_tokens": 8}, timeout=120)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
        assert server.poll() is None and engine_child(psutil.Process(server.pid)).pid != child.pid


@pytest.mark.real
@pytest.mark.parametrize(("sig", "group"), [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)])
def test_real_pair_serve_stops_at_once_with_streams_open_and_requests_waiting(sig: signal.Signals, group: bool) -> None:
    # group: as systemd stops a service, every process gets it (the engine's child too)
    body = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 1500, "stream": True}
    got: list[object] = []

    def client() -> None:
        try:
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
                lines = [x for x in r.iter_lines() if x]
                got.append((r.status_code, lines[-1] if lines else ""))
        except httpx.HTTPError as err:
            got.append(err)

    with real_server() as (server, url):
        child = engine_child(psutil.Process(server.pid))
        stderr_file = next(f.path for f in child.open_files() if "edgespec-engine-" in f.path)
        clients = [threading.Thread(target=client) for _ in range(3)]  # one generating, two waiting
        for c in clients:
            c.start()
            time.sleep(0.3)
        time.sleep(1)
        os.killpg(server.pid, sig) if group else server.send_signal(sig)
        t0 = time.monotonic()
        code = server.wait(20)
        took = time.monotonic() - t0
        for c in clients:
            c.join(20)
        err = server.stderr.read() if server.stderr else ""
        assert code == 0 and took < 10, err  # it hung 33 s and exited 2 ("held this engine for 30 s")
        assert "Traceback" not in err and "Error" not in err and "restart" not in err, err
        assert len(got) == 3 and all(isinstance(g, tuple) for g in got), got  # none cut off mid-body
        for status, last in got:  # type: ignore[misc]  (a short story may end before the signal)
            assert last == "data: [DONE]" if status == 200 else "server_shutting_down" in last
        assert not psutil.pid_exists(child.pid) or child.status() == psutil.STATUS_ZOMBIE
        assert not os.path.exists(stderr_file)  # freed on SIGTERM too: the engine was closed, not killed
