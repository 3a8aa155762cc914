"""The speculative loop: draft -> verify -> commit, one step at a time.

KV invariant (asserted in tests, restored in `finally`):
  * `committed` is the prompt plus every token emitted so far.
  * Before each step the target cache holds exactly committed[:-1]; the step's
    verify batch is [committed[-1], x_1..x_K] with logits on every row, giving
    p_1..p_{K+1}. After `a` accepted tokens the target cache is cut back to
    committed[:-1] of the new list.
  * The draft cache always holds a prefix of committed (it is cut to the
    longest common prefix after each step). It is fed what it lacks, so when
    all K were accepted the next draft batch is [x_K, bonus] and no extra
    forward pass is paid. After plain or lookup steps it is fed what it missed
    in the next model draft's first batch (one call: on the demo pair's draft a
    separate call cost about 6 ms more; the step is timed without that part, which
    is reported as the catch-up), or when the controller asks for a scored
    catch-up (`Plan.score`), with a logits row per token to score them.
  * On cancel, error or an early close by the consumer, both caches are cut
    back to a prefix of committed, so the next request reuses them.

Prefill is the same "make the cache hold committed[:-1]" operation, done from
the longest common prefix with whatever the cache held before: a follow-up
prompt only evaluates what is new. K = 0 is plain decoding through this loop.
The decoder knows token ids only; text and stop strings live in detok.py.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from typing import NamedTuple

from . import shadow
from .cache import Cache, common_prefix
from .constraints import Constraints
from .controller import LOOKUP, MODEL, Controller, Plan, StepOutcome
from .errors import ContextFullError, EdgespecError
from .events import Stats
from .logprobs import token_logprob
from .lookup import LookupIndex
from .lookup_policy import L_MAX
from .model import Model
from .penalties import History
from .recent import Recent
from .request import Request, Step
from .sampling import Dist, Draws, Row, SamplingParams, confidence, draft_params, head_k, prob_of, to_dist, whole
from .step_stats import account, snapshot
from .target_rows import TargetRows
from .verify import verify

WINDOW = 24  # a check of a longer lag reads only its last WINDOW tokens, then takes them back
CONTEXT = 8  # the window's first tokens, read as context only (a row with little context scores low)


class Tail(NamedTuple):  # what a model draft needs to let prompt lookup finish it (_lookup_tail)
    lookup: LookupIndex
    cap: int  # the most draft tokens the step may verify (context and max_tokens)
    controller: Controller


class Drafted(NamedTuple):
    tokens: list[int]
    qs: list[Dist]
    sure: list[float]  # the draft's confidence in each of its own tokens (when the plan wants it)
    bonus: float | None  # the score of the last step's bonus token, when there is one
    extended: int = 0  # the last tokens were copied by prompt lookup (Tail), not drafted
    match: int = 0  # the matched n-gram length they followed
    feed_s: float = 0.0  # the draft's first call: what it lacked (a lag caught up in the same batch)


class Decoder:
    """Owns the two caches; one `run` at a time (the engine holds the lock)."""

    def __init__(self, target: Model, draft: Model | None = None, *, lookup: bool = False, heads: bool = True) -> None:
        self.target = Cache(target)
        self.heads = heads  # rows as the models' top-k (set_head) where a request's sampling allows
        self.draft = Cache(draft, foreign=draft.n_vocab < target.n_vocab) if draft is not None else None
        # prompt lookup's index over committed tokens, kept across requests like the caches
        self.index = LookupIndex() if lookup else None
        self.n_ctx = min(target.n_ctx, draft.n_ctx) if draft is not None else target.n_ctx
        self.n_vocab = min(target.n_vocab, draft.n_vocab) if draft is not None else target.n_vocab
        # a draft vocabulary may be larger (the pair check allows 128): q over the ids both have (p = 0 past them)
        self._shared = slice(self.n_vocab if draft is not None and draft.n_vocab > self.n_vocab else None)
        self.committed: list[int] = []
        self._px: dict[int, float] = {}  # p(x) of committed tokens the draft has not seen, by position
        self._all_accepted = False  # the last step was a model step whose drafts were all accepted
        self._feed_one = Recent()  # the draft's first call when it lacked one token (a lag's call less this)
        self._draft_params = SamplingParams()  # what the draft samples with in this run (_set_heads)

    def run(self, prompt: Sequence[int], req: Request) -> Generator[Step, None, None]:
        if not prompt:
            raise EdgespecError("the prompt is empty; give at least one token")
        if len(prompt) >= self.n_ctx:
            raise ContextFullError(
                f"the prompt is {len(prompt)} tokens but the context holds {self.n_ctx}; "
                "shorten it, start a new chat, or load with a larger n_ctx"
            )
        draft = self.draft if req.speculative else None
        index = self.index if req.speculative and req.lookup else None
        stats = Stats(n_prompt=len(prompt), speculative=draft is not None or index is not None)
        self.committed = list(prompt)
        self._px.clear()
        self._all_accepted = False
        self._set_heads(req)
        t0 = time.perf_counter()
        try:
            stats.n_prefilled = self.target.sync(self.committed[:-1], req.cancel)
            if draft is not None and req.controller.drafting():
                draft.sync(self.committed[:-1], req.cancel)
            elif draft is not None:  # not needed yet: it reads the rest when it is (a lag)
                draft.cut(common_prefix(draft.tokens, self.committed[:-1]))
            if index is not None:
                index.sync(self.committed, known_prefix=0)
            stats.prefill_s = time.perf_counter() - t0
            pen = req.params.penalties
            history = History(pen, self.target.model.n_vocab, self.committed) if pen.active else None
            hist = None
            if history is not None or req.grammar is not None:
                hist = Constraints(history, req.grammar, len(self.committed))
            yield from self._loop(req, draft, index, stats, hist)
        finally:
            self._restore()

    def _set_heads(self, req: Request) -> None:
        """Ask the models for rows as their top-k where the request's sampling starts with it or is greedy
        (sampling.head_k), the draft also where it does not (draft_params); never where whole rows are needed."""
        ok = self.heads and req.grammar is None and req.logprobs is None
        self.target.set_head(head_k(req.params, self.n_vocab) if ok else 0, self.n_vocab)
        own = draft_params(req.params)  # where its rows come as heads, the draft may keep its own top-k
        on = self.draft is not None and self.draft.set_head(head_k(own, self.n_vocab) if ok else 0, self.n_vocab)
        self._draft_params = own if on else req.params

    def _loop(
        self, req: Request, draft: Cache | None, index: LookupIndex | None, stats: Stats, hist: Constraints | None
    ) -> Generator[Step, None, None]:
        committed = self.committed
        while True:
            t_top = time.perf_counter()
            if req.cancel is not None and req.cancel.is_set():
                yield self._final(stats, "cancelled")
                return
            room = self.n_ctx - len(committed)
            left = req.max_tokens - stats.n_generated
            if room <= 0 or left <= 0:
                yield self._final(stats, "length")
                return
            plan, k, proposal = Plan(0), 0, None
            lag = len(committed) - 1 - len(draft.tokens) if draft is not None else 0  # for the draft to catch up
            if draft is not None or index is not None:
                proposal = index.propose(L_MAX) if index is not None else None
                plan = req.controller.plan(lag, proposal)
                k = max(0, min(plan.k, room - 1, left - 1))
            from_lookup = plan.source == LOOKUP and proposal is not None
            catch_up_s, catch_up_n, inside = 0.0, 0, 0.0
            scores: tuple[float, ...] = ()
            if draft is not None and plan.score and not k and lag > 0:
                # a check: the draft reads what it missed in plain or lookup steps, outside the step timed
                scores, catch_up_s, catch_up_n = self._catch_up(draft, self._draft_params, score=hist is None)
                stats.draft_s += catch_up_s
            t_step = time.perf_counter()
            drafts: list[int] = []
            qs: list[Dist] = []
            sure: list[float] = []
            bonus = None
            extended = extended_match = 0
            if from_lookup and k:
                assert proposal is not None
                drafts = self._upto_end(proposal.tokens[:k])
                if hist is not None:
                    drafts = drafts[: hist.valid_prefix(drafts)]  # never propose what the grammar forbids
                qs = [Dist.one_hot(x) for x in drafts]  # a deterministic proposal: q is one-hot
            elif draft is not None and k:
                tail = None
                if plan.extend and index is not None and hist is None:  # constraints: model drafts only
                    tail = Tail(index, min(room - 1, left - 1), req.controller)
                drafted = self._draft(draft, k, self._draft_params, req.rng, plan, hist, tail)
                drafts, qs, sure, bonus, extended, extended_match, feed_s = drafted
                if lag > 1:  # what the draft missed rode on its first call: that part is the catch-up's
                    one = self._feed_one
                    inside = max(0.0, feed_s - one.value) if one.n else feed_s * lag / (lag + 1)
                    catch_up_n, catch_up_s = lag, inside
                    stats.draft_s += inside
            t_verify = time.perf_counter()
            rows = self.target.extend([committed[-1], *drafts], logits_from=0)
            t_sample = time.perf_counter()
            p_rows = TargetRows(rows, req.params, hist, drafts)
            a, token = verify(drafts, qs, p_rows, req.rng, len(committed))
            new = [*drafts[:a], token]
            emit, finish = new, None
            for i, tok in enumerate(new):
                if self.target.model.is_eog(tok):
                    # the end-of-generation token is committed (it is in the history) but not emitted;
                    # anything accepted after it is discarded
                    emit, new, finish = new[:i], new[: i + 1], "stop"
                    break
            # read before the next eval overwrites the rows: row j predicted emitted token j
            lps = (
                None
                if req.logprobs is None
                else tuple(token_logprob(whole(rows[j]), t, req.logprobs) for j, t in enumerate(emit))
            )
            n_before = len(committed)
            if hist is not None:
                hist.truncate(n_before)
                hist.extend(new)
                hist.commit()
            committed.extend(new)
            self._all_accepted = bool(drafts) and not from_lookup and not extended and a == len(drafts)
            chained: tuple[tuple[int, int, int], ...] = ()
            if index is not None and proposal is not None and not (from_lookup or extended):
                chained = shadow.chain(index, proposal, new)  # appends `new`, scoring on the way
            elif index is not None:
                index.append(new)
            self.target.cut(min(n_before + a, len(committed) - 1))
            if draft is not None:
                draft.cut(min(common_prefix(draft.tokens, committed), len(committed) - 1))
                # keep p(x) of the tokens the draft has not seen, to score them when it catches up
                # (_catch_up): those of plain and lookup steps, and a model step's last
                if len(draft.tokens) >= n_before:
                    self._px.clear()  # the draft has seen every earlier token
                for i in range(max(0, len(draft.tokens) - n_before), len(new)):
                    self._px[n_before + i] = p_rows[i].prob(new[i])
            t_end = time.perf_counter()
            outcome = StepOutcome(
                k=len(drafts),
                n_accepted=a,
                draft_s=t_verify - t_step - inside,
                verify_s=t_sample - t_verify,
                step_s=t_end - t_step - inside,
                sure=tuple(sure),
                source=LOOKUP if from_lookup else MODEL,
                match=proposal.n if proposal is not None else 0,
                catch_up_s=catch_up_s,
                catch_up_n=catch_up_n,
                scores=scores,
                bonus=bonus,
                shadow=shadow.first(proposal, new) if proposal is not None and not from_lookup else (0, 0),
                extended=extended,
                extended_match=extended_match,
                chained=chained,
            )
            req.controller.observe(outcome)  # plain steps too: they keep T(0) fresh
            account(stats, plan, outcome, len(emit), time.perf_counter() - t_top)
            n_draft = min(a, len(emit))
            from_draft = (True,) * n_draft + (False,) * (len(emit) - n_draft)
            lookup_from = len(drafts) - extended if extended else None
            yield Step(tuple(emit), from_draft, snapshot(stats), finish, plan.k, outcome.source, lps, lookup_from)
            if finish is not None:
                return

    def _catch_up(self, draft: Cache, params: SamplingParams, score: bool) -> tuple[tuple[float, ...], float, int]:
        """Feed the draft the tokens it missed (committed[:-1]); when `score`, also return for
        each missed token x the probability that a model draft of it would have been accepted,
        E[min(1, q(x) / p(x))] = sum min(p, q) for x ~ p: the committed x is a sample of p (the
        decoding is lossless), so min(1, q(x) / p(x)) scores it without bias at any
        temperature (at T = 0: whether the draft's argmax is x). The evidence a plain stretch
        gives the controller, at the price of the catch-up alone. Also returns the seconds the
        catch-up took, scoring included, and the tokens the draft read.

        A lag past WINDOW is only sampled: the draft reads its last WINDOW tokens after what it
        holds, scores what each row predicts once CONTEXT were read (if no check scored it
        before; its context lacks the stretch before, so scores run a little low), and is cut
        back to a prefix of committed. Fed whole, a check cost what the plain steps since the
        last had fed (Q2_K draft, T = 1.0: 196 tokens, 734 ms); only a return pays the lag."""
        committed = self.committed
        n = len(committed)
        held = len(draft.tokens)
        t0 = time.perf_counter()
        if not score:
            draft.sync(committed[:-1])
            self._px.clear()
            return (), time.perf_counter() - t0, n - 1 - held
        # one batch with a row per token: no more rows than the model evaluates in one batch
        window = min(WINDOW, getattr(draft.model, "n_batch", WINDOW))
        start, first = (n - 1 - window, min(CONTEXT, window) - 1) if n - 1 - held > window else (held, 0)
        rows = draft.extend(committed[start : n - 1], logits_from=0)  # row j predicts committed[start + 1 + j]
        scores = []
        for j in range(first, n - 1 - start):
            px = self._px.get(start + 1 + j, 0.0)
            if px > 0.0:
                scores.append(self._score(rows[j], committed[start + 1 + j], px, params))
        if start > held:
            draft.cut(held)  # a window is taken back
        self._px.clear()  # every token so far was scored or is past scoring: the next check scores newer ones
        return tuple(scores), time.perf_counter() - t0, n - 1 - start

    def _score(self, row: Row, x: int, px: float, params: SamplingParams) -> float:
        """min(1, q(x) / p(x)): the chance a draft of the committed x would have been accepted."""
        return min(1.0, prob_of(row[self._shared], x, params) / px) if x < self.n_vocab else 0.0  # q = 0 past it

    def _draft(
        self,
        draft: Cache,
        k: int,
        params: SamplingParams,
        rng: Draws,
        plan: Plan,
        hist: Constraints | None,
        tail: Tail | None = None,
    ) -> Drafted:
        """Up to k draft tokens, the draft's confidence in each when the plan wants it, the
        score of the last step's bonus token (see below); with a `tail`, lookup may end it.

        Drafting stops after a token the draft is less sure of than `plan.stop_below` (that
        token is still verified). The rule looks only at the draft's side, never at the
        target, so the output stays the target's: verify only needs each x_i to be a sample
        of q_i. Confidence is q(x) of the token drawn, or at temperature 0 (one-hot q) the
        untempered probability of the argmax. With penalties, q_i is made with the history
        committed + drafts[:i] (pushed onto `hist` as drafted, taken back before returning).

        After a step whose drafts were all accepted the draft is fed [x_K, bonus]: its row
        after x_K is asked too, and the bonus scored as in `_catch_up` (the acceptance one
        more draft token would have had: evidence for position K + 1 at the price of a row)."""
        feed = self.committed[len(draft.tokens) :]
        bonus_next = self._all_accepted and len(feed) == 2 and hist is None  # feed: [x_K, bonus]
        px = self._px.get(len(self.committed) - 1, 0.0) if bonus_next else 0.0
        t0 = time.perf_counter()
        rows = draft.extend(feed, logits_from=len(feed) - (2 if px > 0.0 else 1))
        feed_s = time.perf_counter() - t0
        if len(feed) == 1:
            self._feed_one.add(feed_s)
        bonus = self._score(rows[0], self.committed[-1], px, params) if px > 0.0 else None
        row = rows[-1][self._shared]
        drafts: list[int] = []
        qs: list[Dist] = []
        sures: list[float] = []
        base = hist.n if hist is not None else 0
        pushed = 0  # drafts pushed onto the lookup index (tail), taken back before returning
        try:
            for i in range(k):
                if hist is not None:
                    row = hist.apply(whole(row))
                q = to_dist(row, params)
                x = q.sample(rng, len(self.committed) + i)
                drafts.append(x)
                qs.append(q)
                if hist is not None:
                    hist.push(x)
                if plan.want_sure:
                    sures.append(confidence(row, q, params) if params.greedy else q.prob(x))
                end = self.target.model.is_eog(x)
                if tail is not None and i + 1 < k and not end:
                    tail.lookup.append([x])
                    pushed += 1
                    extended, match = self._lookup_tail(tail, drafts, qs)
                    if extended:
                        return Drafted(drafts, qs, sures, bonus, extended, match, feed_s)
                if plan.want_sure and sures[-1] < plan.stop_below:
                    break
                if i + 1 < k and not end:  # nothing is verified past the end
                    row = draft.extend([x], logits_from=0)[0][self._shared]
                else:
                    break
        finally:
            if tail is not None and pushed:
                tail.lookup.truncate(len(tail.lookup) - pushed)
            if hist is not None:
                hist.truncate(base)
        return Drafted(drafts, qs, sures, bonus, feed_s=feed_s)

    def _lookup_tail(self, tail: Tail, drafts: list[int], qs: list[Dist]) -> tuple[int, int]:
        """Append lookup's proposal after the model's drafts (pushed onto the index) when the
        controller finds it worth it: (tokens appended, the n-gram length matched). Its q is
        one-hot, as in a lookup step (a function of the tokens before it): lossless."""
        room = min(tail.cap - len(drafts), L_MAX)
        if room <= 0:
            return 0, 0
        proposal = tail.lookup.propose(room)
        n = tail.controller.extension(proposal, len(drafts)) if proposal.tokens else 0
        copied = self._upto_end(proposal.tokens[:n])
        drafts.extend(copied)
        qs.extend(Dist.one_hot(x) for x in copied)
        return len(copied), proposal.n

    def _upto_end(self, tokens: Sequence[int]) -> list[int]:
        """A looked-up copy up to its first end-of-generation token (nothing after it is kept)."""
        for i, x in enumerate(tokens):
            if self.target.model.is_eog(x):
                return list(tokens[: i + 1])
        return list(tokens)

    def _final(self, stats: Stats, reason: str) -> Step:
        return Step((), (), snapshot(stats), reason)

    def reset(self) -> None:
        for cache in (self.target, self.draft):
            if cache is not None:
                cache.cut(0)
        if self.index is not None:
            self.index.truncate(0)
        self.committed = []

    def _restore(self) -> None:
        """Cut both caches back to a prefix of committed[:-1] (the step invariant)."""
        keep = self.committed[:-1]
        for cache in (self.target, self.draft):
            if cache is not None:
                cache.cut(common_prefix(cache.tokens, keep))
