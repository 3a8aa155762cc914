"""A fake backend: a tiny deterministic language model with a real KV-cache discipline.

`FakeModel` mimics llama.cpp's contract: the cache is append-only (eval must
start exactly where the cache ends), trim cuts [n, inf), logits are a view
that the next eval overwrites. The next-token logits depend on the last two
tokens through a fixed random table, so runs are reproducible. A draft is the
same table plus noise (`noise=0` gives draft == target).
Tokens map to text as "t<id> "; ids 0..2 are special (BOS=1, EOS=2).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from edgespec.api.engine import Engine
from edgespec.core.controller import Controller
from edgespec.core.decoder import Decoder
from edgespec.core.errors import EdgespecError
from edgespec.core.request import Request, Step
from edgespec.core.sampling import SamplingParams


class FakeModel:
    def __init__(
        self,
        n_vocab: int = 64,
        *,
        seed: int = 0,
        noise: float = 0.0,
        n_ctx: int = 512,
        eos_bias: float = -10.0,
        sharp: float = 3.0,
    ) -> None:
        rng = np.random.default_rng(seed)
        table = rng.normal(size=(n_vocab * n_vocab, n_vocab)) * sharp
        if noise:
            table = table + np.random.default_rng(seed + 1000).normal(size=table.shape) * noise
        table[:, 2] += eos_bias
        table[:, :2] = -1e9  # tokens 0 and 1 (BOS) are never generated
        self._table = table.astype(np.float32)
        self.n_vocab, self.n_ctx, self.n_batch = n_vocab, n_ctx, 64
        self.kv: list[int] = []
        self._out = np.zeros((80, n_vocab), dtype=np.float32)
        self.evals: list[tuple[int, int]] = []  # (pos, n_tokens) per eval
        self.add_bos, self.bos_id, self.eos_id = True, 1, 2
        self.fail_at_eval: int | None = None

    def _row(self, ctx: Sequence[int]) -> np.ndarray:
        a = ctx[-2] if len(ctx) > 1 else 0
        return self._table[a * self.n_vocab + ctx[-1]]

    def eval(self, tokens: Sequence[int], pos: int, logits_from: int | None = None) -> np.ndarray:
        assert pos == len(self.kv), f"eval at {pos} but the cache holds {len(self.kv)}"
        assert pos + len(tokens) <= self.n_ctx, "context overflow"
        if self.fail_at_eval is not None and len(self.evals) == self.fail_at_eval:
            self.kv.extend(tokens[:1])  # a failed decode may leave partial state behind
            raise RuntimeError("injected failure")
        self.evals.append((pos, len(tokens)))
        rows = []
        for i, t in enumerate(tokens):
            self.kv.append(int(t))
            if logits_from is not None and i >= logits_from:
                rows.append(self._row(self.kv))
        if not rows:
            return self._out[:0]
        self._out[: len(rows)] = rows  # overwritten by the next eval, like llama.cpp's buffer
        return self._out[: len(rows)]

    def trim(self, n_keep: int) -> None:
        del self.kv[n_keep:]

    def is_eog(self, token: int) -> bool:
        return token == self.eos_id

    # text side
    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        ids = [int(w[1:]) % self.n_vocab for w in text.split() if w.startswith("t") and w[1:].isdigit()]
        return ([self.bos_id] if add_special else []) + ids

    def piece(self, token: int, special: bool = False) -> bytes:
        return b"" if token < 3 and not special else f"t{token} ".encode()

    def token_text(self, token: int) -> str:
        return f"t{token} "

    def chat_template(self) -> str | None:
        return "{% for m in messages %}{{ m['content'] }} {% endfor %}"


def make_engine(
    noise: float = 0.5,
    *,
    n_vocab: int = 64,
    n_ctx: int = 512,
    eos_bias: float = -10.0,
    draft: bool = True,
    **kw: object,
) -> Engine:
    target = FakeModel(n_vocab, n_ctx=n_ctx, eos_bias=eos_bias)
    d = FakeModel(n_vocab, noise=noise, n_ctx=n_ctx, eos_bias=eos_bias) if draft else None
    return Engine(target, d, name="fake", **kw)  # type: ignore[arg-type]


class SlowFake(FakeModel):
    """A fake whose forward passes take `delay` s (a prefill, a pass over more than 3 tokens,
    `prefill_s` more). From eval number `hang_at` on, each pass takes an hour (native code that
    ignores a cancel); at eval number `abort_at` the whole process aborts (a native crash)."""

    def __init__(
        self,
        *args: object,
        delay: float = 0.0,
        hang_at: int | None = None,
        abort_at: int | None = None,
        tokenize_s: float = 0.0,
        prefill_s: float = 0.0,
        **kw: object,
    ) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.delay, self.hang_at, self.abort_at, self.tokenize_s = delay, hang_at, abort_at, tokenize_s
        self.prefill_s = prefill_s

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        time.sleep(self.tokenize_s)  # a long prompt
        return super().tokenize(text, add_special=add_special, parse_special=parse_special)

    def eval(self, tokens: Sequence[int], pos: int, logits_from: int | None = None) -> np.ndarray:
        n = len(self.evals)
        if self.abort_at is not None and n >= self.abort_at:
            os.write(2, b"ggml.c:1234: GGML_ASSERT(ne % 32 == 0) failed\n#1 0x7f in ggml_abort ()\n")  # as ggml dies
            os.abort()
        if self.hang_at is not None and n >= self.hang_at:
            time.sleep(3600)
        time.sleep(self.delay + (self.prefill_s if len(tokens) > 3 else 0.0))
        return super().eval(tokens, pos, logits_from)


def make_slow_engine(
    delay: float = 0.005,
    *,
    hang_at: int | None = None,
    abort_at: int | None = None,
    n_ctx: int = 4096,
    once: str | None = None,
    tokenize_s: float = 0.0,
    prefill_s: float = 0.0,
) -> Engine:
    """A fake pair for an isolated engine's child ("tests.fakes:make_slow_engine"). `once`: a
    file path; the first load creates it, every later load fails (a restart that cannot work)."""
    if once is not None:
        if Path(once).exists():
            raise EdgespecError("the models are gone (a test's doing)")
        Path(once).touch()
    target = SlowFake(
        64, n_ctx=n_ctx, delay=delay, hang_at=hang_at, abort_at=abort_at, tokenize_s=tokenize_s, prefill_s=prefill_s
    )
    return Engine(target, FakeModel(64, noise=0.5, n_ctx=n_ctx), name="fake")


def decode(
    dec: Decoder,
    prompt: Sequence[int],
    params: SamplingParams,
    controller: Controller,
    *,
    max_tokens: int,
    rng: np.random.Generator,
    cancel: threading.Event | None = None,
) -> Iterator[Step]:
    """`Decoder.run` with its request spelled out as keywords (the tests' shorthand)."""
    return dec.run(prompt, Request(params, controller, max_tokens, rng, cancel=cancel))


def exit_one() -> None:
    """A child's factory that exits with code 1 (a main module whose import fails in the child)."""
    os._exit(1)
