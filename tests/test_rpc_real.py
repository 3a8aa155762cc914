"""The demo target over a real rpc-server (`edgespec rpc-server`, a child process), through the
delaying relay: greedy output identical to local decoding, plain and speculative."""

from __future__ import annotations

import pytest

from edgespec import Engine
from edgespec.frontends.bench.relay import DelayRelay
from edgespec.frontends.bench.rpc import rpc_server
from tests.conftest import demo_paths

pytestmark = pytest.mark.real
PROMPT = "Explain how a hash table works."


def test_greedy_output_over_rpc_is_the_local_output(demo_engine) -> None:
    paths = demo_paths()
    assert paths is not None
    local = {s: demo_engine.generate(PROMPT, temperature=0, max_tokens=48, speculative=s).tokens for s in (0, 1)}
    with rpc_server(threads=1) as port, DelayRelay(("127.0.0.1", port), rtt_ms=5) as relay:
        with Engine.load(paths[0], paths[1], n_ctx=2048, rpc=relay.endpoint) as remote:
            gpu = remote.info().gpu
            assert gpu.rpc == (relay.endpoint,) and gpu.target_layers > 0 and gpu.draft_layers == 0
            for spec in (0, 1):
                res = remote.generate(PROMPT, temperature=0, max_tokens=48, speculative=bool(spec))
                assert res.tokens == local[spec]
            assert res.stats.n_accepted > 0


def test_the_hello_is_the_one_a_real_rpc_server_answers_and_a_busy_one_is_named() -> None:
    """ggml-rpc's HELLO as `check_reachable` sends it (its constants read from the pinned
    llama.cpp): a free rpc-server answers it; one that serves a model of another process does not."""
    import subprocess
    import sys

    from edgespec.core.errors import ConfigError
    from edgespec.llama.rpc import check_reachable

    paths = demo_paths()
    assert paths is not None
    with rpc_server(threads=1) as port:
        check_reachable([f"127.0.0.1:{port}"])
        code = (
            "import sys, time\nfrom edgespec import Engine\n"
            f"e = Engine.load({str(paths[1])!r}, rpc='127.0.0.1:{port}', n_ctx=256)\n"
            "print('held', flush=True)\ntime.sleep(30)\n"
        )
        holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            with pytest.raises(ConfigError, match="serves one client at a time"):
                check_reachable([f"127.0.0.1:{port}"])
        finally:
            holder.kill()
            holder.wait(10)
