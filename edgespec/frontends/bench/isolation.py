"""What running the engine in a child process costs: isolated vs in-process tokens per second.

Both engines load the same pair (the demo pair unless --target/--draft say
otherwise) and generate the same requests, interleaved (in-process, isolated,
in-process, ...) so that the machine's drift hits both alike, from a fresh
context each time (`reset()`), greedy and at T=0.8 with a fixed seed. The
figure is what a caller sees: generated tokens over the wall time from
`stream()` to the last event, including tokenizing the prompt and every event
crossing the pipe. Medians over `--repeats`; the ratio is isolated / in-process.

    python -m edgespec.frontends.bench.isolation [--repeats 5] [--max-tokens 256] [--threads N]

On a machine shared with other work, `--threads 1` keeps llama.cpp's thread barriers
from turning every descheduled thread into a stall for both engines alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

from edgespec import Engine

PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a hash table works, with an example in Python.",
)


def tokens_per_s(engine: Engine, prompt: str, temperature: float, max_tokens: int) -> float:
    engine.reset()
    t0 = time.perf_counter()
    n = 0
    with engine.stream(prompt, temperature=temperature, seed=1, max_tokens=max_tokens) as gen:
        for event in gen:
            n += len(event.tokens)
    return n / (time.perf_counter() - t0)


def compare(
    target: str, draft: str | None, repeats: int, max_tokens: int, n_ctx: int, threads: int | None = None
) -> dict[str, float]:
    engines = {
        "in-process": Engine.load(target, draft, n_ctx=n_ctx, threads=threads),
        "isolated": Engine.load(target, draft, n_ctx=n_ctx, threads=threads, isolated=True),
    }
    speeds: dict[str, list[float]] = {name: [] for name in engines}
    try:
        for engine in engines.values():  # warm-up: page the weights in, size the buffers
            tokens_per_s(engine, PROMPTS[0], 0.0, 16)
        for r in range(repeats):
            for prompt in PROMPTS:
                for temperature in (0.0, 0.8):
                    for name, engine in engines.items():
                        speeds[name].append(tokens_per_s(engine, prompt, temperature, max_tokens))
            row = ", ".join(f"{name} {statistics.median(v):.1f}" for name, v in speeds.items())
            print(f"after repeat {r + 1}: medians {row} tok/s", flush=True)
    finally:
        for engine in engines.values():
            engine.close()
    medians = {name: statistics.median(v) for name, v in speeds.items()}
    medians["ratio"] = medians["isolated"] / medians["in-process"]
    return medians


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m edgespec.frontends.bench.isolation", description=__doc__)
    p.add_argument("--target", help="target GGUF (default: the demo pair's)")
    p.add_argument("--draft", help="draft GGUF (default: the demo pair's)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--n-ctx", type=int, default=2048)
    p.add_argument("--threads", type=int, default=None, help="per engine (default: physical cores)")
    args = p.parse_args(argv)
    if args.target is None:
        from edgespec.llama.loading import pair_files

        target, draft, _ = pair_files("demo")
        args.target, args.draft = str(target), str(draft) if draft else None
    m = compare(args.target, args.draft, args.repeats, args.max_tokens, args.n_ctx, args.threads)
    print(f"in-process {m['in-process']:.1f} tok/s, isolated {m['isolated']:.1f} tok/s (medians)")
    print(f"isolated / in-process = {m['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
