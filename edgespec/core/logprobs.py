"""Log probabilities of emitted tokens, as OpenAI reports them: the log-softmax of the
target's raw logits row (before bias, penalties and temperature), for the token and for
the row's `top` most likely tokens. Computed only when a request asks; the decoder calls
it before its next eval, while llama.cpp's logits buffer still holds the row. Pure numpy.

One pass for the normaliser (exp in the row's own precision, summed in float64), and the
top tokens found without partitioning the row: the k-th largest of a few thousand column
maxima is a bar that at least k logits reach, so only the few above it are sorted."""

from __future__ import annotations

import math

import numpy as np

from .events import TokenLogprob

_GROUP = 64  # rows of the column view: n // 64 columns, whose maxima bound the top


def token_logprob(row: np.ndarray, token: int, top: int) -> TokenLogprob:
    peak = float(row.max())
    if not math.isfinite(peak):  # an all -inf, +inf or NaN row: leave it to float64 as it comes
        x = row.astype(np.float64)
        norm = peak + float(np.log(np.exp(x - peak).sum()))
    else:
        norm = peak + math.log(float(np.exp(row - peak).sum(dtype=np.float64)))
    alts: tuple[tuple[int, float], ...] = ()
    if top > 0:
        ids = _top_ids(row, min(top, row.shape[0]))
        alts = tuple((int(t), float(row[t]) - norm) for t in ids)
    return TokenLogprob(int(token), float(row[token]) - norm, alts)


def _top_ids(row: np.ndarray, k: int) -> np.ndarray:
    """The ids of the k largest logits, best first, ties by id."""
    n = row.shape[0]
    cols = n // _GROUP
    cand = None
    if cols >= 4 * k:
        col_max = row[: _GROUP * cols].reshape(_GROUP, cols).max(axis=0)
        bar = np.partition(col_max, cols - k)[cols - k]  # k distinct columns reach it
        if bar > -np.inf:
            cand = np.flatnonzero(row >= bar)
            if cand.size > 64 * k + 1024:
                cand = None  # many ties at the bar: partition the row instead
    if cand is None:
        cand = np.argpartition(row, n - k)[n - k :] if k < n else np.arange(n)
        # ties at the k-th value: take every id that reaches it, so the id order decides
        cand = np.flatnonzero(row >= row[cand].min()) if k < n else cand
    return cand[np.lexsort((cand, -row[cand].astype(np.float64)))][:k]
