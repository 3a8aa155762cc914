"""Log probabilities of emitted tokens, as OpenAI reports them: the log-softmax of the
target's raw logits row (before bias, penalties and temperature), for the token and for
the row's `top` most likely tokens. Computed only when a request asks; the decoder calls
it before its next eval, while llama.cpp's logits buffer still holds the row. Pure numpy."""

from __future__ import annotations

import numpy as np

from .events import TokenLogprob


def token_logprob(row: np.ndarray, token: int, top: int) -> TokenLogprob:
    x = row.astype(np.float64)
    peak = float(x.max())
    norm = peak + float(np.log(np.exp(x - peak).sum()))
    alts: tuple[tuple[int, float], ...] = ()
    if top > 0:
        n = x.shape[0]
        top = min(top, n)
        ids = np.argpartition(x, n - top)[n - top :]
        ids = ids[np.lexsort((ids, -x[ids]))]  # best first, ties by id
        alts = tuple((int(t), float(x[t] - norm)) for t in ids)
    return TokenLogprob(int(token), float(x[token] - norm), alts)
