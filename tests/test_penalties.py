"""Penalties and logit bias (edgespec/core/penalties.py) against their definition: each row
recounted from the whole history, for every mix of settings, through random pushes and
rollbacks; llama.cpp's and OpenAI's semantics on hand-made rows; the checks on user values."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.core.errors import EdgespecError
from edgespec.core.penalties import History, Penalties, make_penalties


def reference(row: np.ndarray, pen: Penalties, history: list[int], n_prompt: int) -> np.ndarray:
    """The definition, recounted from scratch: bias, then repeat (last N of the context), then
    presence/frequency (generated tokens only)."""
    out = row.astype(np.float64).copy()
    for t, b in pen.logit_bias:
        if t < out.size:
            out[t] += b
    if pen.repeat_last_n != 0:
        window = history if pen.repeat_last_n < 0 else history[max(0, len(history) - pen.repeat_last_n) :]
        for t in set(window):
            if t < out.size:
                out[t] = out[t] / pen.repeat if out[t] > 0 else out[t] * pen.repeat
    generated = history[n_prompt:]
    for t in set(generated):
        if t < out.size:
            out[t] -= pen.presence + pen.frequency * generated.count(t)
    return out


SETTINGS = [
    Penalties(presence=0.7),
    Penalties(frequency=-1.3),
    Penalties(presence=1.5, frequency=0.4),
    Penalties(repeat=1.3),
    Penalties(repeat=0.8, repeat_last_n=5),
    Penalties(repeat=1.1, repeat_last_n=-1),
    Penalties(logit_bias=((3, -100.0), (7, 5.5))),
    Penalties(presence=0.5, frequency=1.0, repeat=1.2, repeat_last_n=8, logit_bias=((0, 2.0), (19, -3.0))),
]


@pytest.mark.parametrize("pen", SETTINGS)
def test_incremental_counts_match_a_recount_through_pushes_and_rollbacks(pen: Penalties) -> None:
    rng = np.random.default_rng(0)
    n_vocab = 20
    prompt = [int(t) for t in rng.integers(0, n_vocab, 12)]
    hist = History(pen, n_vocab, prompt)
    tokens = list(prompt)
    for _ in range(400):
        if rng.random() < 0.3 and len(tokens) > len(prompt):
            keep = int(rng.integers(len(prompt), len(tokens) + 1))
            hist.truncate(keep)
            del tokens[keep:]
        else:
            t = int(rng.integers(0, n_vocab // 2))  # a small alphabet: many repeats
            hist.push(t)
            tokens.append(t)
        assert hist.tokens().tolist() == tokens
        row = rng.normal(size=n_vocab).astype(np.float32) * 3
        want = reference(row, pen, tokens, len(prompt))
        assert np.allclose(hist.apply(row), want, atol=1e-5)
        short = row[: n_vocab - 4]  # a draft row over the ids both models share
        assert np.allclose(hist.apply(short), want[: n_vocab - 4], atol=1e-5)


def test_the_row_itself_is_left_untouched() -> None:
    row = np.arange(6, dtype=np.float32)
    hist = History(Penalties(frequency=1.0, logit_bias=((2, 3.0),)), 6, [1])
    hist.extend([1, 1, 4])
    out = hist.apply(row)
    assert row.tolist() == [0, 1, 2, 3, 4, 5]
    assert out.tolist() == [0, 1 - 2, 2 + 3, 3, 4 - 1, 5]  # the prompt's 1 does not count


def test_repeat_divides_positive_logits_and_multiplies_the_others_over_the_last_n_prompt_included() -> None:
    row = np.array([2.0, -2.0, 2.0, 0.0, 4.0])
    hist = History(Penalties(repeat=2.0, repeat_last_n=3), 5, [4, 0, 1])
    assert hist.apply(row).tolist() == [1.0, -4.0, 2.0, 0.0, 2.0]  # 4 and 0 come from the prompt
    hist.push(3)  # the window is now [0, 1, 3]: 4 has left it
    assert hist.apply(row).tolist() == [1.0, -4.0, 2.0, 0.0, 4.0]
    hist.truncate(3)
    assert hist.apply(row).tolist() == [1.0, -4.0, 2.0, 0.0, 2.0]


def test_presence_and_frequency_follow_openai_over_generated_tokens_only() -> None:
    row = np.zeros(4)
    hist = History(Penalties(presence=0.5, frequency=0.25), 4, [2, 2, 2])
    hist.extend([1, 1, 1, 3])
    assert hist.apply(row).tolist() == [0.0, -(0.5 + 0.75), 0.0, -(0.5 + 0.25)]


def test_a_bias_of_minus_100_bans_the_token_in_practice() -> None:
    from edgespec.core.sampling import SamplingParams, to_dist

    row = np.array([5.0, 4.9, 1.0, 0.0])
    hist = History(Penalties(logit_bias=((0, -100.0),)), 4, [1])
    dist = to_dist(hist.apply(row), SamplingParams(1.0, top_k=0, top_p=1.0, min_p=0.0))
    assert dist.prob(0) < 1e-40
    assert to_dist(hist.apply(row), SamplingParams(0.0)).ids.tolist() == [1]  # greedy too


def test_the_defaults_are_off_and_keep_no_history() -> None:
    assert not Penalties().active
    assert not Penalties(repeat=1.5, repeat_last_n=0).active
    assert all(p.active for p in SETTINGS)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"presence": 2.5}, "presence_penalty must be between -2 and 2"),
        ({"frequency": -2.01}, "frequency_penalty must be between -2 and 2"),
        ({"frequency": float("nan")}, "frequency_penalty"),
        ({"repeat": 0.0}, "repeat_penalty must be between"),
        ({"repeat": 5e-324}, "repeat_penalty must be between 0.01 and 100"),  # a subnormal would give inf logits
        ({"repeat": 1e300}, "repeat_penalty must be between"),
        ({"repeat": float("nan")}, "repeat_penalty must be between"),
        ({"repeat_last_n": -2}, "repeat_last_n must be >= -1"),
        ({"logit_bias": {100: 1.0}}, "token id 100 is not in the vocabulary (0..99)"),
        ({"logit_bias": {"5": 1.0}}, "token id '5'"),
        ({"logit_bias": {5: 101.0}}, "between -100 and 100"),
    ],
)
def test_bad_values_are_one_line_errors_that_say_what_is_wrong(kwargs: dict, says: str) -> None:
    args = {"presence": 0.0, "frequency": 0.0, "repeat": 1.0, "repeat_last_n": 64, "logit_bias": None, **kwargs}
    with pytest.raises(EdgespecError, match=None) as err:
        make_penalties(n_vocab=100, **args)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_zero_biases_are_dropped() -> None:
    assert not make_penalties(0.0, 0.0, 1.0, 64, {5: 0.0}, 100).active
