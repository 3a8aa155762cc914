"""RPC without a server: endpoints parsed and reached before native code, the option paths,
the delaying relay the bench measures through. Over a real rpc-server: tests/test_rpc_real.py."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from gguf_corpus import small_model
from test_cli import assert_one_line_error, run_cli

from edgespec.core.errors import ConfigError
from edgespec.frontends.bench.relay import DelayRelay
from edgespec.llama.config import load_config
from edgespec.llama.rpc import check_reachable, parse_endpoints


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once the socket closes


def test_endpoints_are_parsed_and_bad_ones_named() -> None:
    assert parse_endpoints("10.0.0.2:50052, gpu-box:7000") == ("10.0.0.2:50052", "gpu-box:7000")
    with pytest.raises(ConfigError, match="IPv4"):
        parse_endpoints(["[::1]:50052"])
    for bad in ("10.0.0.2", "host:port", ":50052", "host:70000", "", "127.0.0.1:5\u00b2"):  # (² passed isdigit)
        with pytest.raises(ConfigError, match="HOST:PORT"):
            parse_endpoints(bad)


def test_an_unreachable_server_is_one_line_that_says_what_to_do() -> None:
    port = closed_port()
    with pytest.raises(ConfigError) as err:
        check_reachable([f"127.0.0.1:{port}"], timeout_s=2)
    assert f"127.0.0.1:{port}" in str(err.value) and "edgespec rpc-server --port" in str(err.value)


def test_run_with_an_unreachable_rpc_server_exits_2_before_loading(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(small_model())
    rc, _, err, elapsed = run_cli("run", "--target", str(model), "--rpc", f"127.0.0.1:{closed_port()}")
    assert_one_line_error(rc, err, elapsed)
    assert "cannot reach the RPC server" in err
    rc, _, err, elapsed = run_cli("run", "--target", str(model), "--rpc", "nonsense")
    assert_one_line_error(rc, err, elapsed)


@pytest.mark.parametrize("where", ["--target", "--pair"])
def test_an_empty_rpc_is_said_not_run_here_without_a_word(tmp_path: Path, where: str) -> None:
    # --rpc "$UNSET" decoded on this machine, even over a models.toml entry's own rpc servers
    model = tmp_path / "m.gguf"
    model.write_bytes(small_model())
    config = tmp_path / "models.toml"
    config.write_text(f'[models.t]\npath = "{model}"\nrpc = ["127.0.0.1:{closed_port()}"]\n[pairs.p]\ntarget = "t"\n')
    chosen = ["--target", str(model)] if where == "--target" else ["--pair", "p", "--config", str(config)]
    rc, _, err, elapsed = run_cli("run", *chosen, "--rpc", "", "--prompt", "hi")
    assert_one_line_error(rc, err, elapsed)
    assert "RPC server '' is not HOST:PORT" in err


def test_gpu_layers_past_llama_cpps_int32_or_below_minus_one_are_one_line() -> None:
    from edgespec.llama.loading import ALL_LAYERS, LoadOptions, _layers

    for bad in (2**32, 2**31, -5, 1.5):  # 2**32 wrapped to 0 layers: nothing went to the RPC servers
        with pytest.raises(Exception, match="n_gpu_layers must be"):
            LoadOptions(n_gpu_layers=bad)  # type: ignore[arg-type]
        with pytest.raises(Exception, match="draft_n_gpu_layers must be"):
            LoadOptions(draft_n_gpu_layers=bad)  # type: ignore[arg-type]
    assert LoadOptions(n_gpu_layers=-1).n_gpu_layers == -1 and _layers(-1) == ALL_LAYERS and _layers(7) == 7


def test_rpc_server_on_a_port_in_use_is_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        rc, _, err, elapsed = run_cli("rpc-server", "--port", str(taken.getsockname()[1]))
    assert_one_line_error(rc, err, elapsed)
    assert "cannot listen on" in err


def test_a_model_entry_names_its_rpc_servers(tmp_path: Path) -> None:
    p = tmp_path / "models.toml"
    p.write_text('[models.big]\npath = "/x.gguf"\nrpc = ["10.0.0.2:50052", "10.0.0.3:50052"]\n')
    assert load_config(p).model("big").rpc == ("10.0.0.2:50052", "10.0.0.3:50052")
    p.write_text('[models.big]\npath = "/x.gguf"\nrpc = "nowhere"\n')
    with pytest.raises(ConfigError, match="HOST:PORT"):
        load_config(p)


def echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def round_trip(port: int, payload: bytes) -> tuple[bytes, float]:
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.monotonic()
        c.sendall(payload)
        got = b""
        while len(got) < len(payload):
            got += c.recv(65536)
        return got, time.monotonic() - t0


@pytest.mark.parametrize("rtt_ms", [0, 40])
def test_the_relay_passes_every_byte_and_adds_its_round_trip(rtt_ms: float) -> None:
    server, port = echo_server()
    with server, DelayRelay(("127.0.0.1", port), rtt_ms) as relay:
        payload = bytes(range(256)) * 4096  # 1 MiB: chunks flow while earlier ones wait
        got, elapsed = round_trip(relay.port, payload)
    assert got == payload
    assert elapsed >= rtt_ms / 1000 * 0.95
    assert elapsed < rtt_ms / 1000 + 2.0  # latency, not a bandwidth cap


def fake_rpc_server(answer: bytes | None) -> tuple[socket.socket, int, list[bytes]]:
    """A listener that reads one hello and sends `answer` (None: nothing, as a busy rpc-server or
    another service does); what it read is appended to the list."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    heard: list[bytes] = []

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            heard.append(conn.recv(1 + 8 + 24))
            if answer is not None:
                conn.sendall(answer)
            time.sleep(2)

    threading.Thread(target=serve, daemon=True).start()
    return srv, int(srv.getsockname()[1]), heard


HELLO_OK = (4 + 24).to_bytes(8, "little") + bytes([7, 0, 0, 0]) + bytes(24)


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (None, "did not answer in 0.5 s: an rpc-server serves one client at a time"),
        (b"HTTP/1.0 400 Bad request\r\n\r\n", "answered, but not as llama.cpp's rpc-server does"),
        ((4 + 24).to_bytes(8, "little") + bytes([3, 1, 0, 0]) + bytes(24), "protocol 3.1.0, this build 7.x"),
    ],
)
def test_a_server_that_cannot_serve_us_is_one_line_not_a_hang(monkeypatch, answer: bytes | None, says: str) -> None:
    """llama.cpp's client waits for the hello's answer with no timeout: a busy rpc-server (it serves
    one client at a time) or an HTTP server on the port hung `run` and `serve` with no word."""
    monkeypatch.setattr("edgespec.llama.rpc.HELLO_TIMEOUT_S", 0.5)
    srv, port, heard = fake_rpc_server(answer)
    with srv, pytest.raises(ConfigError, match=says.replace(".", r"\.").replace("(", r"\(")):
        check_reachable([f"127.0.0.1:{port}"])
    assert heard and heard[0][0] == 14 and heard[0][1:9] == (24).to_bytes(8, "little")  # ggml-rpc's HELLO


def test_a_host_name_that_cannot_be_encoded_is_one_line() -> None:
    with pytest.raises(ConfigError, match="cannot reach the RPC server at bad..name:50052"):
        check_reachable(["bad..name:50052"])


def test_a_server_that_says_hello_passes_and_one_named_twice_is_refused() -> None:
    srv, port, heard = fake_rpc_server(HELLO_OK)
    with srv:
        check_reachable([f"127.0.0.1:{port}"])
    srv, port, _ = fake_rpc_server(HELLO_OK)
    with srv, pytest.raises(ConfigError, match="are the same RPC server; name it once"):
        check_reachable([f"127.0.0.1:{port}", f"localhost:{port}"])
    srv, port, heard = fake_rpc_server(None)
    with srv:  # one this process already uses is busy with us: connected to, not greeted
        check_reachable([f"127.0.0.1:{port}"], known=[f"127.0.0.1:{port}"])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--port", "70000"], "port must be 1..65535"),
        (["--host", ""], "host is empty"),
        (["--host", "bad..name"], "cannot resolve 'bad..name'"),
    ],
)
def test_rpc_server_options_out_of_range_are_one_line(args: list[str], says: str) -> None:
    rc, _, err, elapsed = run_cli("rpc-server", *args)  # --port 70000 was a traceback
    assert_one_line_error(rc, err, elapsed)
    assert says in err
