"""The chi-square checks the sampled-law tests share: the exact law of a target's first two
sampled tokens, and the p-value of counts against it (sparse cells pooled into one)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.stats as sps

from edgespec.core.sampling import SamplingParams, to_dist
from tests.fakes import FakeModel


def target_joint(target: FakeModel, prompt: Sequence[int], params: SamplingParams, n_vocab: int) -> np.ndarray:
    """joint[a, b]: the probability that the target alone samples a, then b, after `prompt`."""

    def dist(ctx: list[int]) -> np.ndarray:
        return to_dist(target._row(ctx).copy(), params).dense(n_vocab)

    p1 = dist(list(prompt))
    joint = np.zeros((n_vocab, n_vocab))
    for t1 in np.flatnonzero(p1):
        joint[t1] = p1[t1] * dist([*prompt, int(t1)])
    return joint


def pvalue(counts: np.ndarray, joint: np.ndarray) -> float:
    """Chi-square of `counts` against `joint` (a law over the same cells); fails outright on a
    count where the law gives probability 0. Cells expecting under 5 are pooled into one."""
    expected = joint * counts.sum()
    assert counts[expected == 0].sum() == 0, "emitted a pair the target gives probability 0"
    big = expected >= 5
    obs, exp = counts[big], expected[big]
    if (~big & (expected > 0)).any():
        obs, exp = np.append(obs, counts[~big].sum()), np.append(exp, expected[~big].sum())
    return float(sps.chisquare(obs, exp).pvalue)
