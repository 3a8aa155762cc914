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
