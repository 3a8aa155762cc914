"""What speculation gains when the target runs on another machine (llama.cpp's RPC).

One rpc-server (`edgespec rpc-server`, a child process) holds the target's layers;
the draft stays in this process. Between them a `DelayRelay` adds a network's round
trip (0, 2, 5 and 10 ms by default). For each round trip, and on this machine alone
("local"), plain decoding (target only) and speculative decoding (adaptive K) run
the same greedy requests, interleaved, from a fresh context; the figure is the
decode phase's tokens per second, median over `--repeats`. A target step over RPC
pays several round trips (inputs, graph, logits), and speculation pays them once per
step instead of once per token: its gain over plain should grow with the delay.
Greedy output over RPC is checked against the local output token for token.

    python -m edgespec.frontends.bench.rpc [--rtt 0,2,5,10] [--repeats 3] [--max-tokens 128] [--threads 1]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from edgespec import Engine

from .relay import DelayRelay

PROMPTS = (
    "Explain how a hash table works, with an example in Python.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def rpc_server(threads: int | None) -> Iterator[int]:
    """`edgespec rpc-server` on a free loopback port, for as long as the block runs."""
    port = _free_port()
    cmd = [sys.executable, "-m", "edgespec.frontends.cli", "rpc-server", "--port", str(port)]
    proc = subprocess.Popen([*cmd, *(["--threads", str(threads)] if threads else [])], stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("edgespec rpc-server exited at start") from None
                time.sleep(0.2)
        yield port
    finally:
        proc.kill()
        proc.wait()


def _run(engine: Engine, prompt: str, speculative: bool, max_tokens: int) -> tuple[float, list[int]]:
    engine.reset()
    res = engine.generate(prompt, temperature=0, max_tokens=max_tokens, speculative=speculative)
    return res.stats.tokens_per_s, res.tokens


def measure(engine: Engine, repeats: int, max_tokens: int) -> dict[str, object]:
    plain: list[float] = []
    spec: list[float] = []
    tokens: dict[str, list[int]] = {}
    _run(engine, PROMPTS[0], True, 16)  # warm-up
    for _ in range(repeats):
        for prompt in PROMPTS:
            speed, tokens[f"plain {prompt}"] = _run(engine, prompt, False, max_tokens)
            plain.append(speed)
            speed, tokens[f"spec {prompt}"] = _run(engine, prompt, True, max_tokens)
            spec.append(speed)
    p, s = statistics.median(plain), statistics.median(spec)
    return {"plain": p, "spec": s, "gain": s / p, "tokens": tokens}


def compare(pair: str, rtts: Sequence[float], repeats: int, max_tokens: int, threads: int | None) -> list[dict]:
    rows = []
    with Engine.from_pair(pair, threads=threads) as local:
        base = measure(local, repeats, max_tokens)
    rows.append({"where": "local", **base, "same_tokens": True})
    print(f"local: plain {base['plain']:.1f} tok/s, speculative {base['spec']:.1f} tok/s", flush=True)
    with rpc_server(threads) as port:
        for rtt in rtts:
            with DelayRelay(("127.0.0.1", port), rtt) as relay:
                with Engine.from_pair(pair, threads=threads, rpc=relay.endpoint) as remote:
                    m = measure(remote, repeats, max_tokens)
            row = {"where": f"RPC, {rtt:g} ms round trip", **m, "same_tokens": m["tokens"] == base["tokens"]}
            rows.append(row)
            print(f"{row['where']}: plain {m['plain']:.1f} tok/s, speculative {m['spec']:.1f} tok/s", flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m edgespec.frontends.bench.rpc", description=__doc__)
    p.add_argument("--pair", default="demo")
    p.add_argument("--rtt", default="0,2,5,10", help="round trips to simulate, in ms")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=1, help="per model and for the rpc-server (default 1)")
    args = p.parse_args(argv)
    rtts = [float(x) for x in args.rtt.split(",")]
    rows = compare(args.pair, rtts, args.repeats, args.max_tokens, args.threads)
    local_gain = float(rows[0]["gain"])  # type: ignore[arg-type]
    print("\n| where | plain tok/s | speculative tok/s | gain | gain vs local gain | greedy = local |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        gain = float(r["gain"])  # type: ignore[arg-type]
        print(
            f"| {r['where']} | {r['plain']:.1f} | {r['spec']:.1f} | {gain:.2f}x | {gain / local_gain:.2f}x "
            f"| {'yes' if r['same_tokens'] else 'NO'} |"
        )
    return 0 if all(r["same_tokens"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
