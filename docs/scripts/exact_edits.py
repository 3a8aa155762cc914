"""Prompt lookup on answers that edit their context faithfully: what replacement rules give.

The demo model rewrites where it is asked to rename (none of its answers is a faithful
rename), so this script scripts the answer instead: the bench's rename and revise prompts
(edgespec/frontends/bench/copying.py) answered with the exact edited text, tokenized by the
demo target's tokenizer. Two measures, each with replacement rules off and on
(`LookupIndex(replace=...)`, edgespec/core/replacements.py):

- target passes when every lookup proposal of up to 16 tokens is verified, teacher-forced
  over those answers and over the demo model's own greedy answers to the bench's prompts
  (which rules must leave as they were);
- draftless decoding of the exact answers through the real decoder and adaptive controller,
  the target a script that writes them, each call costing the demo target's time on this
  machine (30.6 + 5.65 (n - 1) ms for n tokens, as docs/scripts/virtual_costs.py): tokens/s.

    .venv/bin/python docs/scripts/exact_edits.py

A scratch tool: it reaches into the decoder's clock as tests do.
"""

from __future__ import annotations

import types

import numpy as np

import edgespec.core.decoder as decoder_mod
from edgespec import Engine
from edgespec.core.controller import AdaptiveK, FixedK
from edgespec.core.decoder import Decoder
from edgespec.core.lookup import LookupIndex
from edgespec.core.request import Request
from edgespec.core.sampling import SamplingParams
from edgespec.frontends.bench.copying import ANSWER, CODE, PROMPTS
from edgespec.frontends.bench.run import PROMPTS as CHAT_PROMPTS
from edgespec.llama.config import load_config
from edgespec.llama.models import prepare_pair

EXACT = {
    "rename, one name": ("rename", "```python\n" + CODE.replace("values", "samples") + "```"),
    "rename, two names": (
        "rename",
        "```python\n" + CODE.replace("values", "series").replace("window", "width") + "```",
    ),
    "revise": ("revise", ANSWER.replace("glucose", "sugar")),
}
clock = types.SimpleNamespace(now=0.0, perf_counter=lambda: clock.now)


def passes(prompt: list[int], answer: list[int], replace: bool) -> int:
    idx = LookupIndex(replace=replace)
    idx.sync(prompt, known_prefix=0)
    i = n = 0
    while i < len(answer):
        p = idx.propose(16)
        a = 0
        while a < len(p.tokens) and i + a < len(answer) and p.tokens[a] == answer[i + a]:
            a += 1
        step = min(a + 1, len(answer) - i)
        idx.append(answer[i : i + step])
        i, n = i + step, n + 1
    return n


class Scripted:
    """A target that writes `script` after the prompt, each call costing the demo target's time."""

    add_bos, bos_id, eos_id = True, 1, 2

    def __init__(self, n_vocab: int, prompt_len: int, script: list[int]) -> None:
        self.n_vocab, self.n_ctx, self.n_batch = n_vocab, 4096, 512
        self.kv: list[int] = []
        self.prompt_len, self.script = prompt_len, script

    def eval(self, tokens, pos, logits_from=None):  # type: ignore[no-untyped-def]
        clock.now += (30.6 + 5.65 * (len(tokens) - 1)) / 1000
        rows = []
        for i, t in enumerate(tokens):
            self.kv.append(int(t))
            if logits_from is not None and i >= logits_from:
                row = np.full(self.n_vocab, -10.0, dtype=np.float32)
                row[self.script[min(len(self.kv) - self.prompt_len, len(self.script) - 1)]] = 10.0
                rows.append(row)
        return np.array(rows, dtype=np.float32).reshape(len(rows), self.n_vocab)

    def trim(self, n_keep: int) -> None:
        del self.kv[n_keep:]

    def is_eog(self, token: int) -> bool:
        return token == self.eos_id


def decode(prompt: list[int], answer: list[int], n_vocab: int, controller, replace: bool) -> float:  # type: ignore[no-untyped-def]
    """Tokens/s of the second of two runs (the first warms the controller up)."""
    for _ in range(2):
        model = Scripted(n_vocab, len(prompt), [*answer, Scripted.eos_id])
        dec = Decoder(model, lookup=True)  # type: ignore[arg-type]
        dec.index = LookupIndex(replace=replace)
        out, last = [], None
        for step in dec.run(
            prompt, Request(SamplingParams(temperature=0.0), controller, 400, np.random.default_rng(0))
        ):
            out += step.tokens
            last = step
        assert out == answer and last is not None
    return last.stats.tokens_per_s


def main() -> None:
    target, _ = prepare_pair(load_config(None), "demo")
    engine = Engine.load(target, None, n_ctx=4096, lookup=False)
    print("target passes, every proposal verified (rules off -> on):")
    for name, messages in {**PROMPTS, **CHAT_PROMPTS}.items():
        prompt = engine.tokenize(messages)
        answer = [
            t for s in engine.stream(messages, temperature=0, max_tokens=256, speculative=False) for t in s.tokens
        ]
        print(f"  {name} (the demo model's answer): {passes(prompt, answer, False)} -> {passes(prompt, answer, True)}")
    exact = {}
    for name, (prompt_name, text) in EXACT.items():
        prompt = engine.tokenize(PROMPTS[prompt_name])
        answer = engine.tokenize(text, raw=True)
        exact[name] = (prompt, answer[1:] if answer[:1] == [engine.target.bos_id] else answer)
        print(f"  {name} (exact): {passes(*exact[name], False)} -> {passes(*exact[name], True)}")
    decoder_mod.time = clock  # type: ignore[assignment]
    n_vocab = engine.target.n_vocab
    print("draftless on the exact answers, tokens/s on the demo target's costs (rules off -> on):")
    for name, (prompt, answer) in exact.items():
        for label, make in (("adaptive", lambda: AdaptiveK(model=False)), ("K = 16", lambda: FixedK(16, model=False))):
            off, on = (decode(prompt, answer, n_vocab, make(), replace) for replace in (False, True))
            print(f"  {name}, {label}: {off:.1f} -> {on:.1f}")


if __name__ == "__main__":
    main()
