"""Rows served as heads (each row's top-k, as llama.cpp's backend top-k returns them on a
GPU): the same distributions as whole rows, the same generations through the engine, and
whole rows wherever something before top-k needs them."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec import Engine
from edgespec.core.penalties import make_penalties
from edgespec.core.sampling import (
    DRAFT_HEAD,
    DRAFT_HEAD_UNCUT,
    GREEDY_HEAD,
    Head,
    Heads,
    SamplingParams,
    confidence,
    draft_params,
    head_k,
    prob_of,
    to_dist,
)
from edgespec.frontends.bench.simulate import Curve, Machine, pair, steady
from tests.conftest import demo_paths

SETTINGS = [
    SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    SamplingParams(temperature=1.3, top_k=5, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=0.5, top_k=1),
    SamplingParams(temperature=0.8, top_k=100, top_p=0.5, min_p=0.0),
]


def head_of(row: np.ndarray, k: int, rng: np.random.Generator) -> Head:
    """The row's k largest logits in a shuffled order (a backend promises no order)."""
    ids = rng.permutation(np.argpartition(row, -k)[-k:]).astype(np.int32)
    return Head(ids, row[ids])


@pytest.mark.parametrize("params", SETTINGS)
def test_a_head_gives_the_whole_rows_distribution(params: SamplingParams) -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        row = (rng.normal(size=5000) * rng.uniform(0.5, 4)).astype(np.float32)
        head = head_of(row, params.top_k, rng)
        want, got = to_dist(row, params), to_dist(head, params)
        assert np.array_equal(want.ids, got.ids)
        assert np.array_equal(want.probs, got.probs)
        x = int(row.argmax())
        assert prob_of(head, x, params) == prob_of(row, x, params)


@pytest.mark.parametrize("min_p", [0.05, 0.5, 1.0, 1e-250])
def test_a_head_whose_second_token_min_p_cuts_is_one_hot_as_the_definition(min_p: float) -> None:
    """sampling._alone: a head whose next token lies below min-p's cut gives the one-hot Dist
    without the cut's arithmetic; the definition's Dist (the full sort, tests/test_sampling_exact.py)
    on either side of the shortcut's margin (1e-6 in logit) and at the cut itself, in float64."""
    from tests.test_sampling_exact import reference_to_dist

    rng = np.random.default_rng(11)
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=min_p)
    cut = np.log(min_p) if min_p < 1 else -1e-5  # (min_p 1: every gap below 0 is past the cut)
    alone = 0
    for d in (-5.0, -2e-6, -1.01e-6, -0.99e-6, -1e-9, 0.0, 1e-7):
        for _ in range(5):
            row = cut - 1.0 - np.abs(rng.normal(size=5000))  # every other token below the second
            row[rng.choice(5000, size=2, replace=False)] = 0.0, cut + d  # the top, the second
            for extra in (None, -np.inf, np.nan):
                if extra is not None:
                    row[rng.integers(5000)] = extra
                head = head_of(row, 40, rng)
                want, got = reference_to_dist(row, params), to_dist(head, params)
                assert np.array_equal(want.ids, got.ids), (d, extra)
                assert np.array_equal(want.probs, got.probs, equal_nan=True), (d, extra)
                alone += got.ids.size == 1
    assert alone >= 15  # the one-hot case did occur


def test_a_greedy_head_gives_the_argmax_and_the_heads_own_confidence() -> None:
    """At T = 0 a head serves the argmax (ties by id, as np.argmax's first index) and the
    draft's confidence over the head: the whole row's exactly where the rest weighs nothing."""
    rng = np.random.default_rng(5)
    greedy = SamplingParams(temperature=0.0)
    for _ in range(50):
        row = (rng.normal(size=3000) * 2).astype(np.float32)
        head = head_of(row, GREEDY_HEAD, rng)
        assert to_dist(head, greedy).ids.tolist() == [int(row.argmax())]
        x = int(row.argmax())
        assert prob_of(head, x, greedy) == prob_of(row, x, greedy) == 1.0
        vals = np.sort(row.astype(np.float64))[::-1][:GREEDY_HEAD]
        assert confidence(head, to_dist(head, greedy), greedy) == pytest.approx(1.0 / np.exp(vals - vals[0]).sum())
    tied = Head(np.array([9, 4, 7], dtype=np.int32), np.array([3.0, 3.0, -200.0], dtype=np.float32))
    assert to_dist(tied, greedy).ids.tolist() == [4]
    row = np.full(100, -200.0, dtype=np.float32)
    row[[4, 9]] = 3.0
    assert confidence(tied, to_dist(tied, greedy), greedy) == confidence(row, to_dist(row, greedy), greedy) == 0.5


def test_a_head_cut_to_a_smaller_vocabulary_keeps_the_ids_below_it() -> None:
    head = Head(np.array([3, 9000, 5], dtype=np.int32), np.array([1.0, 9.0, 2.0], dtype=np.float32))
    cut = head[:100]
    assert cut.ids.tolist() == [3, 5] and cut.vals.tolist() == [1.0, 2.0]
    assert head[:10_000] is head and head[:] is head
    with pytest.raises(TypeError):
        head[1:]


def test_ties_in_a_head_go_by_id_whatever_the_backends_order() -> None:
    head = Head(np.array([30, 10, 20], dtype=np.int32), np.array([1.0, 2.0, 1.0], dtype=np.float32))
    d = to_dist(head, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    assert d.ids.tolist() == [10, 20]


def test_a_head_cannot_serve_top_k_off() -> None:
    head = Head(np.array([1, 2], dtype=np.int32), np.array([1.0, 2.0], dtype=np.float32))
    with pytest.raises(ValueError):
        to_dist(head, SamplingParams(temperature=0.8, top_k=0))


def test_heads_are_asked_for_only_where_sampling_starts_with_top_k_or_is_greedy() -> None:
    base = SamplingParams(temperature=0.8, top_k=40)
    assert head_k(base, 50_000) == 40
    assert head_k(SamplingParams(temperature=0.0, top_k=0), 50_000) == GREEDY_HEAD  # whatever top_k says
    assert head_k(SamplingParams(temperature=0.0), 20) == 19
    pen = make_penalties(0.0, 0.5, 1.0, 64, None, 50_000)
    assert head_k(SamplingParams(temperature=0.0, penalties=pen), 50_000) == 0
    assert head_k(SamplingParams(temperature=0.8, top_k=0), 50_000) == 0
    assert head_k(SamplingParams(temperature=0.8, top_k=1000), 50_000) == 0  # past HEAD_MAX
    assert head_k(SamplingParams(temperature=0.8, top_k=40, penalties=pen), 50_000) == 0
    bias = make_penalties(0.0, 0.0, 1.0, 64, {5: 3.0}, 50_000)
    assert head_k(SamplingParams(temperature=0.8, top_k=40, penalties=bias), 50_000) == 0


def test_the_draft_keeps_a_longer_head_where_no_min_p_cuts_its_tail() -> None:
    off = SamplingParams(temperature=0.8, top_k=0, top_p=0.95, min_p=0.05)
    assert draft_params(off).top_k == DRAFT_HEAD and draft_params(off).min_p == 0.05
    assert draft_params(SamplingParams(temperature=0.8, top_k=0, top_p=0.95, min_p=0.0)).top_k == DRAFT_HEAD_UNCUT
    assert draft_params(SamplingParams(temperature=0.8, top_k=1000, min_p=0.05)).top_k == DRAFT_HEAD  # past HEAD_MAX
    for same in (SamplingParams(temperature=0.8, top_k=40), SamplingParams(temperature=0.0, top_k=0)):
        assert draft_params(same) is same


MACHINE = Machine("heads-test", Curve(1e-4, 8, 0.1), Curve(2e-5, 8, 0.05))


def sim_engine(heads: bool) -> tuple[Engine, list]:
    target, draft = pair(MACHINE, steady(0.8), vocab=20_000)
    return Engine(target, draft, name="sim", heads=heads), [target, draft]


@pytest.mark.parametrize("k", [0, 3, None])
@pytest.mark.parametrize("temperature", [0.9, 0.0])
def test_the_engine_generates_the_same_tokens_from_heads(k: int | None, temperature: float) -> None:
    """Sampled and greedy, plain, fixed K and adaptive (greedy: its stop rule reads the draft's
    confidence from the head, which may change the steps but never the tokens)."""
    (on, models), (off, _) = sim_engine(True), sim_engine(False)
    options = dict(temperature=temperature, top_k=40, top_p=0.95, min_p=0.05, seed=11, max_tokens=64)
    spec = dict(speculative=False) if k == 0 else dict(k=k)
    a = on.generate([1, *range(10, 20)], **options, **spec)
    assert all(m.head_k == 40 for m in models), "the engine did not ask for heads"
    b = off.generate([1, *range(10, 20)], **options, **spec)
    assert a.tokens == b.tokens and len(a.tokens) == 64
    assert k == 0 or a.stats.n_drafted > 0
    # a request that needs whole rows switches the models back
    on.generate([1, 5], temperature=0.9, top_k=40, frequency_penalty=0.5, max_tokens=4, seed=1)
    assert all(m.head_k == 0 for m in models)


def test_at_top_k_off_only_the_draft_is_asked_for_heads() -> None:
    """The target keeps whole rows (its sampling needs them); the draft proposes from its top
    DRAFT_HEAD (sampling.draft_params), and the engine still drafts and generates."""
    (on, models), (off, off_models) = sim_engine(True), sim_engine(False)
    options = dict(temperature=0.9, top_k=0, top_p=0.95, min_p=0.05, seed=4, max_tokens=48, k=3)
    a = on.generate([1, *range(10, 20)], **options)
    assert (models[0].head_k, models[1].head_k) == (0, DRAFT_HEAD)
    assert len(a.tokens) == 48 and a.stats.n_accepted > 0
    b = off.generate([1, *range(10, 20)], **options)
    assert (off_models[0].head_k, off_models[1].head_k) == (0, 0) and len(b.tokens) == 48
    on.generate([1, 5], temperature=0.9, top_k=0, frequency_penalty=0.5, max_tokens=4, seed=1)
    assert (models[0].head_k, models[1].head_k) == (0, 0)  # penalties: whole rows for both


@pytest.mark.real
def test_llama_cpps_backend_top_k_gives_the_whole_rows_distribution() -> None:
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared (run `edgespec models prepare demo`)")
    from edgespec.llama.backend import LlamaModel

    whole, heads = LlamaModel(paths[1], n_ctx=256), LlamaModel(paths[1], n_ctx=256, heads=True)
    try:
        assert not whole.set_head(40), "a CPU model should keep whole rows unless asked"
        assert heads.set_head(40)
        tokens = [1, 504, 3458, 282, 4649, 314, 253, 1345, 30, 378, 2014, 28, 33]
        rows = np.array(whole.eval(tokens, 0, logits_from=2))
        got = heads.eval(tokens, 0, logits_from=2)
        assert isinstance(got, Heads) and len(got) == len(rows)
        for params in [*SETTINGS[:2], SamplingParams(temperature=0.0)]:
            for i in range(len(rows)):
                want, have = to_dist(rows[i], params), to_dist(got[i], params)
                assert np.array_equal(want.ids, have.ids) and np.array_equal(want.probs, have.probs)
        assert heads.set_head(0)
        assert isinstance(heads.eval([7], len(tokens), logits_from=0), np.ndarray)
    finally:
        whole.close()
        heads.close()


@pytest.mark.real
def test_the_real_pair_says_the_same_from_heads_greedy_and_sampled() -> None:
    """The demo pair with llama.cpp's backend top-k forced on (as on a GPU) against whole rows,
    through the engine: the same tokens at T = 0 with the adaptive controller (the stop rule
    reads the draft's confidence from its head) and at T = 0.8 with a seed at K = 3."""
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared (run `edgespec models prepare demo`)")
    from edgespec.llama.backend import LlamaModel

    out = []
    for heads in (True, False):
        models = [LlamaModel(p, n_ctx=512, heads=heads) for p in paths]
        engine = Engine(models[0], models[1], name="demo", heads=heads)
        try:
            prompt = models[0].tokenize("def mean(xs):\n    return", add_special=True, parse_special=False)
            greedy = engine.generate(prompt, temperature=0.0, max_tokens=24)  # adaptive: K from the clock
            assert all((m._head_k > 0) == heads for m in models)
            sampled = engine.generate(prompt, temperature=0.8, seed=3, k=3, max_tokens=24)  # (K moves the draws)
            got = [greedy, sampled]
            out.append([g.tokens for g in got])
        finally:
            engine.close()
    assert out[0] == out[1] and all(len(t) == 24 for t in out[0])


@pytest.mark.real
def test_the_real_drafts_head_serves_a_request_with_top_k_off() -> None:
    """The demo pair with llama.cpp's backend top-k forced on: at top_k 0 the target's rows
    stay whole and the draft's come as heads of DRAFT_HEAD; the engine drafts from them, and a
    request with top_k 40 afterwards takes heads on both."""
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared (run `edgespec models prepare demo`)")
    from edgespec.llama.backend import LlamaModel

    models = [LlamaModel(p, n_ctx=512, heads=True) for p in paths]
    engine = Engine(models[0], models[1], name="demo", heads=True)
    try:
        prompt = models[0].tokenize("def mean(xs):\n    return", add_special=True, parse_special=False)
        out = engine.generate(prompt, temperature=0.8, top_k=0, top_p=0.95, min_p=0.05, seed=3, k=3, max_tokens=24)
        assert (models[0]._head_k, models[1]._head_k) == (0, DRAFT_HEAD)
        assert len(out.tokens) == 24 and out.stats.n_drafted > 0
        engine.generate(prompt, temperature=0.8, top_k=40, seed=3, k=3, max_tokens=4)
        assert (models[0]._head_k, models[1]._head_k) == (40, 40)
    finally:
        engine.close()


def test_a_head_shorter_than_top_k_is_refused() -> None:
    head = Head(np.arange(5, dtype=np.int32), np.arange(5, dtype=np.float32))
    with pytest.raises(ValueError):
        to_dist(head, SamplingParams(temperature=0.8, top_k=6))


def test_a_draft_with_a_larger_vocabulary_is_asked_for_a_longer_head() -> None:
    """Its ids past the shared vocabulary may sit in its top-k; cut off, the head must still
    hold top_k shared ids, as the whole row cut first would."""
    (on, models), (off, _) = sim_engine(True), sim_engine(False)
    for engine in (on, off):
        engine._decoder.draft.model.n_vocab += 5  # the decoder reads the shared vocabulary at load
    on._decoder.n_vocab = off._decoder.n_vocab = models[0].n_vocab
    options = dict(temperature=0.9, top_k=40, seed=3, max_tokens=48, k=3)
    a, b = on.generate([1, 7, 8, 9], **options), off.generate([1, 7, 8, 9], **options)
    assert (models[0].head_k, models[1].head_k) == (40, 45)
    assert a.tokens == b.tokens


class FakeLlama:
    """llama_cpp's sampler calls, with a device that can or cannot run top-k."""

    def __init__(self, runs: bool) -> None:
        self.runs, self.attached, self.freed = runs, [], []

    def llama_sampler_chain_default_params(self):
        return None

    def llama_sampler_chain_init(self, params):
        return ["chain"]

    def llama_sampler_init_top_k(self, k):
        return f"top-k {k}"

    def llama_sampler_chain_add(self, chain, smpl):
        chain.append(smpl)

    def llama_set_sampler(self, ctx, seq, chain):
        self.attached.append(chain)
        return True  # llama.cpp's answer even where the device cannot run the chain

    def llama_sampler_chain_get(self, chain, i):
        return chain[i + 1]

    def llama_sampler_name(self, smpl):
        return b"+top-k" if self.runs else b"-top-k"

    def llama_sampler_free(self, chain):
        self.freed.append(chain)


def test_a_top_k_the_device_cannot_run_is_detached_and_freed() -> None:
    from edgespec.llama.native_abi import attach_top_k

    ok = FakeLlama(runs=True)
    chain = attach_top_k(ok, None, 40)
    assert chain == ["chain", "top-k 40"] and ok.attached == [chain] and not ok.freed
    bad = FakeLlama(runs=False)
    assert attach_top_k(bad, None, 40) is None
    assert bad.attached[-1] is None and bad.freed == [["chain", "top-k 40"]]
    assert attach_top_k(ok, None, 0) is None and ok.attached[-1] is None


def test_a_context_that_cannot_be_made_is_a_clear_error(monkeypatch) -> None:
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared (run `edgespec models prepare demo`)")
    from edgespec.core.errors import BackendError
    from edgespec.llama import backend

    monkeypatch.setattr(backend.llama_cpp, "llama_init_from_model", lambda model, params: None)
    with pytest.raises(BackendError, match="could not create a context"):
        backend.LlamaModel(paths[1], n_ctx=256)


@pytest.mark.real
def test_rows_across_chunks_come_back_whole_and_in_order() -> None:
    """An eval longer than n_batch puts every row asked for in its last chunk (rows that
    straddled two chunks came back short); more rows than ROWS_MAX is a clear error."""
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared (run `edgespec models prepare demo`)")
    from edgespec.core.errors import BackendError
    from edgespec.llama.backend import LlamaModel

    tokens = [1, 504, 3458, 282, 4649, 314, 253, 1345, 30, 378, 2014, 28]
    big, small = LlamaModel(paths[1], n_ctx=256), LlamaModel(paths[1], n_ctx=256, n_batch=8, heads=True)
    try:
        want = np.array(big.eval(tokens, 0, logits_from=6))
        got = np.array(small.eval(tokens, 0, logits_from=6))
        assert got.shape == want.shape == (6, big.n_vocab)
        assert (got.argmax(axis=1) == want.argmax(axis=1)).all() and np.allclose(got, want, atol=1e-3)
        small.trim(0)
        assert small.set_head(40)
        heads = small.eval(tokens, 0, logits_from=6)
        assert len(heads) == 6 and all(set(heads[i].ids) == set(np.argsort(-got[i])[:40]) for i in range(6))
        with pytest.raises(BackendError, match="rows asked"):
            big.eval(list(range(10, 80)), len(tokens), logits_from=0)
    finally:
        big.close()
        small.close()


def test_whole_rows_can_be_asked_for_from_the_command_line_and_the_api() -> None:
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared (run `edgespec models prepare demo`)")
    import argparse

    from edgespec.frontends import options

    parser = argparse.ArgumentParser()
    options.add_model_args(parser)
    args = parser.parse_args(["--target", str(paths[0]), "--draft", str(paths[1]), "--whole-rows", "--n-ctx", "256"])
    args.no_spec, args.k = False, None
    engine = options.engine_from_args(args)
    try:
        assert engine._decoder.heads is False
    finally:
        engine.close()
    with Engine.from_pair("demo", n_ctx=256) as default:
        assert default._decoder.heads is True


def test_the_rows_one_eval_may_return_cover_every_eval_the_decoder_makes() -> None:
    """LlamaModel makes its context for defaults.ROWS_MAX output rows (llama.cpp aborts past
    them): a verify of K_LIMIT drafts finished by lookup's longest tail, and a catch-up window."""
    from edgespec.core import decoder, defaults
    from edgespec.core.lookup_policy import L_MAX

    assert defaults.K_LIMIT + L_MAX + 1 <= defaults.ROWS_MAX
    assert decoder.WINDOW <= defaults.ROWS_MAX
