"""What a seeded request's draws cost in acceptance (edgespec/core/coupling.py).

For each position of the target's own sampled answers to make bench's prompts (and the
copy prompt rename), the target's and the draft's rows go through the request's sampling
(T, top-k 40, top-p 0.95, min-p 0.05), and two figures are averaged over positions:

- rejection: sum_x min(p(x), q(x)), the chance the rejection rule keeps a draft token
  (what unseeded requests do);
- keyed: the chance argmax(log p + g) == argmax(log q + g) with the same Gumbel noise g,
  exactly: sum_x 1 / sum_y max(p(y) / p(x), q(y) / q(x)) over the tokens both rows hold
  (what seeded requests do).

    .venv/bin/python docs/scripts/coupling_acceptance.py            # the demo pair
    PAIR=demo-bad .venv/bin/python docs/scripts/coupling_acceptance.py

A scratch tool: it reads both models directly through the backend.
"""

from __future__ import annotations

import os

import numpy as np

from edgespec import Engine
from edgespec.core.sampling import Dist, SamplingParams, to_dist
from edgespec.frontends.bench.copying import PROMPTS as COPYING
from edgespec.frontends.bench.run import PROMPTS as CHAT
from edgespec.llama.backend import LlamaModel
from edgespec.llama.config import load_config
from edgespec.llama.models import prepare_pair

TOKENS = 120
CHUNK = 32  # rows asked of one eval


def keyed_match(p: Dist, q: Dist) -> float:
    ids = np.union1d(p.ids, q.ids)
    pp, qq = np.zeros(ids.size), np.zeros(ids.size)
    pp[np.searchsorted(ids, p.ids)], qq[np.searchsorted(ids, q.ids)] = p.probs, q.probs
    both = np.flatnonzero((pp > 0) & (qq > 0))
    return float(sum(1.0 / np.maximum(pp / pp[j], qq / qq[j]).sum() for j in both))


def rows(path: str, tokens: list[int], start: int) -> np.ndarray:
    """The model's logits rows predicting tokens[start + 1:]."""
    model = LlamaModel(path, n_ctx=2048)
    try:
        model.eval(tokens[:start], 0)
        out = []
        for a in range(start, len(tokens) - 1, CHUNK):
            out += [np.array(r) for r in model.eval(tokens[a : min(a + CHUNK, len(tokens) - 1)], a, logits_from=0)]
        return np.array(out)
    finally:
        model.close()


def main() -> None:
    target, draft = prepare_pair(load_config(None), os.environ.get("PAIR", "demo"))
    engine = Engine.load(target, None, n_ctx=2048)
    prompts = {**CHAT, "rename": COPYING["rename"]}
    for temp in (0.8, 1.0):
        params = SamplingParams(temperature=temp)
        rejection, keyed = [], []
        for prompt in prompts.values():
            answer = engine.generate(prompt, temperature=temp, max_tokens=TOKENS, seed=5, speculative=False)
            tokens = engine.tokenize(prompt) + answer.tokens
            start = len(tokens) - 1 - len(answer.tokens)
            p_rows, q_rows = rows(str(target), tokens, start), rows(str(draft), tokens, start)
            n_vocab = p_rows.shape[1]
            for pr, qr in zip(p_rows, q_rows):
                p, q = to_dist(pr, params), to_dist(qr[:n_vocab], params)
                rejection.append(float(np.minimum(p.dense(n_vocab), q.dense(n_vocab)).sum()))
                keyed.append(keyed_match(p, q))
        print(f"T={temp}: rejection {np.mean(rejection):.4f}, keyed {np.mean(keyed):.4f} ({len(keyed)} positions)")
    engine.close()


if __name__ == "__main__":
    main()
