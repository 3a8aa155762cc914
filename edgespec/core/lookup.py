"""Prompt lookup: draft tokens copied from earlier in the context, no model needed.

`LookupIndex` covers one token sequence (the prompt plus everything generated)
and answers `propose(k)`: take the longest n in [n_max..n_min] whose last n
tokens occurred earlier, take the most recent earlier occurrence, and propose
the k tokens that followed it. The copy may run into the current suffix and on
past the end (a match d tokens back proposes a sequence with period d), as an
overlapping LZ77 copy does: that is what a model stuck in a loop will say next.

Where nothing matches, the copy may have just been edited: a word replaced ("values"
by "samples"), inserted or dropped. Then for s = 1..RESYNC_SKIP the index takes the
longest n-gram ending s tokens back (before the edit), finds its latest earlier
occurrence, and looks in the RESYNC_WINDOW tokens that followed it for the last token
written; found, it proposes what came after it there (`n` = 1 in the proposal: a
one-token match, near a copy). Measured offline on the demo model's greedy answers
(every proposal verified, K = 16): target passes 126 -> 117 (its rename answer), 15 ->
12 (extract), 14 -> 11 (revise); on an exact rename of the bench's code (every `values`
now `samples`) 28 -> 19.

An edit seen at two places (the same source span, the same tokens written instead: a
rename) becomes a rule that later copies make (`Replacements`, edgespec/core/replacements.py),
so the rest of a rename is proposed through instead of breaking the copy at each occurrence.

The proposal is deterministic, so the draft row q is one-hot on each proposed
token and verification is the ordinary rule with q = `Dist.one_hot(x)`: accept
with probability p(x), on rejection emit from p with x removed. Lossless at any
temperature, whatever the index proposes: a stale or wrong index costs speed,
never correctness.

Costs. Each position e holds one occurrence per n (the n tokens before e, which
the token at e followed): a dict from the n-gram to its latest position and a
back-link array to the previous one, so adding a token is one dict update per
n (O(n_max^2) element work with the tuple keys, all in C), removing the latest
tokens pops them, and a proposal is one lookup per n plus a walk of at most
VOTES back-links (where nothing matches, up to RESYNC_SKIP more lookups per n and a
scan of RESYNC_WINDOW tokens each).

Memory is bounded by `max_tokens`: only a window of the most recent tokens is
kept and indexed (between max_tokens and max_tokens + a small slack once the
sequence is longer). Older tokens are forgotten, so a repetition further back
than the window is not found; recent context is what a copy usually follows.

Keeping it in step with the decoder: `append` and `truncate` are exact and
cheap; `sync(tokens)` makes the index cover `tokens` and documents what it
assumes to stay cheap. The intended wiring: at the start of a request
`sync(prompt, known_prefix=0)` (exact; compares the kept window, about 1 ms per
100k tokens, then redoes only what differs), after each step `sync(committed)`
or `append(new_tokens)`. Pure Python: no model, no clock, no I/O.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from .replacements import Replacements

# Measured with 3 gram sizes: ~410 bytes per kept token when every gram is new (random tokens),
# ~60 on repetitive text; so at most ~55 MB, and a 128k context is covered whole.
DEFAULT_MAX_TOKENS = 1 << 17
VOTES = 8  # earlier occurrences looked at to say how much they agree (a bounded walk)
TAIL = 16  # covered tokens sync compares when it is given no known common prefix
EVICT_MAX = 1024  # the most tokens dropped from the window at once: bounds one step's pause
RESYNC_SKIP = 4  # new tokens an edit of the copy may have written before it resumes
RESYNC_WINDOW = 8  # source tokens an edit may have replaced (where the last token is looked for)
MATCH_MAX = 16  # how far back a match is measured (LookupPolicy keeps records up to 16 and more)


@dataclass(frozen=True)
class Proposal:
    """What the index proposes, and how much to trust it.

    `tokens` continues the current context (empty when nothing matched); `n` is the
    length of the match: the matched n-gram, and where that is the longest gram indexed
    as far back as the context before `source` agrees with the current one, up to
    MATCH_MAX (0 if none; 1 for a copy resumed after an edit, see the module
    docstring); `source` the position the copy starts
    at (the token that followed the chosen occurrence); `seen` how many earlier
    occurrences of the n-gram were looked at, the chosen one included (at most VOTES);
    `agree` how many of those were followed by `tokens[0]` (1 <= agree <= seen).
    A long match, a recent source and agree == seen all make acceptance likelier.
    """

    tokens: tuple[int, ...] = ()
    n: int = 0
    source: int = -1
    seen: int = 0
    agree: int = 0


NO_PROPOSAL = Proposal()


class LookupIndex:
    """An n-gram index over one growing token sequence (see the module docstring)."""

    def __init__(
        self,
        n_min: int = 2,
        n_max: int = 4,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        resync: int = RESYNC_SKIP,
        replace: bool = True,
    ) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
        if max_tokens <= n_max:
            raise ValueError(f"max_tokens ({max_tokens}) must exceed n_max ({n_max})")
        self.n_min, self.n_max, self.max_tokens = n_min, n_max, max_tokens
        self.resync = resync  # RESYNC_SKIP; 0: no resumed copies
        # Drop in chunks, not one token per step: deleting the front of a list moves the rest.
        self._slack = max(1, min(EVICT_MAX, max_tokens // 8))
        self._base = 0  # absolute position of self._toks[0]
        self._toks: list[int] = []  # the window: positions base .. len(self) - 1
        # Per gram size n (index n - n_min). Occurrence (n, e) exists iff base <= e - n and
        # e < len(self): the n tokens before e, followed by the token at e. `_head` maps a gram
        # to its latest occurrence, `_prev[e - base]` links an occurrence to the one before
        # (-1: none, or a link to an occurrence since forgotten: check `e - n >= base`).
        self._head: list[dict[tuple[int, ...], int]] = [{} for _ in self._sizes()]
        self._prev: list[array[int]] = [array("q") for _ in self._sizes()]
        self.rules = Replacements(replace)  # learnt from copies resumed after an edit (`_resumed`)
        # _match by cut: a function of the tokens before the cut and the base, so kept while those
        # stay (each proposal looks for a match at the end and at the `resync` cuts before it)
        self._matched: dict[int, tuple[int, int]] = {}

    def __len__(self) -> int:
        return self._base + len(self._toks)

    @property
    def start(self) -> int:
        """The first position still kept: matches are searched in [start, len(self))."""
        return self._base

    def _sizes(self) -> range:
        return range(self.n_min, self.n_max + 1)

    # -- keeping in step ---------------------------------------------------------------------

    def append(self, tokens: Sequence[int]) -> None:
        """Extend the covered sequence by `tokens`."""
        if len(tokens) >= self.max_tokens:
            # Everything kept would come from `tokens`: skip indexing what would be evicted.
            end = len(self) + len(tokens)
            self._reset(end - self.max_tokens)
            tokens = tokens[len(tokens) - self.max_tokens :]
        first = len(self)
        if len(self._matched) > 4 * self.resync + 4:  # only the last few cuts are looked at again
            self._matched = {c: m for c, m in self._matched.items() if c >= first - self.resync}
        self._toks.extend(tokens)
        self._index_from(first)
        if self.rules:
            self.rules.drop(self._written(first), written_from=first)
        if len(self._toks) > self.max_tokens + self._slack:
            self._evict(len(self) - self.max_tokens)

    def truncate(self, n: int) -> None:
        """Cover only the first `n` tokens. Below `start` everything kept goes, and the
        window refills from what is appended next (`sync` refills it from its argument)."""
        if n >= len(self):
            return
        self.rules.forget_after(n)  # what was learnt from the tokens that go
        for cut in [c for c in self._matched if c > n]:
            del self._matched[cut]
        if n <= self._base:
            self._reset(max(n, 0))
            return
        for e in range(len(self) - 1, n - 1, -1):
            self._unindex_latest(e)
        del self._toks[n - self._base :]

    def sync(self, tokens: Sequence[int], known_prefix: int | None = None) -> None:
        """Make the index cover `tokens` (append what is new, drop what differs).

        Cheap by assumption: with `known_prefix=None`, when `tokens` is at least as long
        as what is covered and agrees with it on the last TAIL covered tokens, the whole
        covered sequence is assumed to be a prefix of `tokens` and only the new part is
        read (the decoder's committed list only grows within a request). An edit further
        back that keeps those TAIL tokens is then missed; pass `known_prefix` when that
        can happen: the caller vouches that tokens[:known_prefix] is unchanged and the
        rest of the window is compared (O(len(self) - known_prefix); 0 compares it all).
        When less than half a window would be kept, the window is rebuilt from `tokens`.
        """
        if known_prefix is None and len(tokens) >= len(self) and self._tail_agrees(tokens) and not self._starved():
            self.append(tokens[len(self) :])
            return
        keep = self._common_prefix(tokens, known_prefix or 0)
        if self._starved(keep - self._base, len(tokens)):
            self.rules.forget_after(keep)  # (truncate does this on the other path)
            self._reset(max(0, len(tokens) - self.max_tokens))  # cheaper than unindexing most of it
        else:
            self.truncate(keep)
        self.append(tokens[len(self) :])

    def _starved(self, kept: int | None = None, length: int | None = None) -> bool:
        """Whether a window of `kept` tokens (the current one by default) holds less than half
        of what it could for a sequence of `length` tokens (only after cutting into it)."""
        kept = len(self._toks) if kept is None else kept
        could = min(len(self) if length is None else length, self.max_tokens)
        return kept < could // 2

    def _tail_agrees(self, tokens: Sequence[int]) -> bool:
        end = len(self)
        m = min(TAIL, len(self._toks))
        return list(tokens[end - m : end]) == self._toks[len(self._toks) - m :]

    def _common_prefix(self, tokens: Sequence[int], known: int) -> int:
        """The longest common prefix of `tokens` and the covered sequence, trusting the first
        `known` positions (and those before the window: forgotten, so never compared)."""
        i = max(self._base, known)
        end = min(len(self), len(tokens))
        # Compare in blocks (C speed), then token by token inside the first block that differs.
        block = 4096
        while i < end:
            j = min(i + block, end)
            if list(tokens[i:j]) != self._toks[i - self._base : j - self._base]:
                while tokens[i] == self._toks[i - self._base]:
                    i += 1
                return i
            i = j
        return end

    # -- the index itself --------------------------------------------------------------------

    def _index_from(self, first: int) -> None:
        """Add the occurrences ending at positions first .. len(self) - 1."""
        toks, base = self._toks, self._base
        tables = list(zip(self._sizes(), self._head, self._prev))
        for e in range(first, len(self)):
            i = e - base
            longest = tuple(toks[max(0, i - self.n_max) : i])  # shorter grams are its suffixes
            for n, head, prev in tables:
                if len(longest) < n:
                    prev.append(-1)  # the gram would start before the window: no occurrence
                    continue
                gram = longest[-n:]
                prev.append(head.get(gram, -1))
                head[gram] = e

    def _unindex_latest(self, e: int) -> None:
        """Remove the occurrences ending at e, the latest position covered."""
        base = self._base
        for n, head, prev in zip(self._sizes(), self._head, self._prev):
            before = prev.pop()
            if e - n < base:
                continue  # no occurrence of this size at e
            gram = tuple(self._toks[e - n - base : e - base])
            assert head[gram] == e, "the latest position is the head of its gram"
            if before >= 0 and before - n >= base:
                head[gram] = before
            else:
                del head[gram]

    def _evict(self, new_base: int) -> None:
        """Forget positions before new_base, with the occurrences whose gram starts there."""
        base, end = self._base, len(self)
        for n, head in zip(self._sizes(), self._head):
            for e in range(base + n, min(new_base + n, end)):
                gram = tuple(self._toks[e - n - base : e - base])
                if head.get(gram) == e:
                    del head[gram]  # its only occurrence left; older links are ignored by `e - n >= base`
        drop = new_base - base
        self._matched.clear()
        del self._toks[:drop]
        for prev in self._prev:
            del prev[:drop]
        self._base = new_base

    def _reset(self, base: int) -> None:
        self._base = base
        self._matched.clear()
        self._toks.clear()
        for head, prev in zip(self._head, self._prev):
            head.clear()
            del prev[:]

    # -- proposing ---------------------------------------------------------------------------

    def propose(self, k: int) -> Proposal:
        """Up to k tokens continuing the longest n-gram suffix seen before (module docstring)."""
        end = len(self)
        if k <= 0:
            return NO_PROPOSAL
        n, e = self._match(end)
        if e >= 0:
            tokens = self._copy(e, k)
            seen, agree = self._votes(n, e, tokens[0])
            return Proposal(tokens, self._extent(n, e), e, seen, agree)
        return self._resumed(k)

    def _extent(self, n: int, e: int) -> int:
        """How far back the context before `e` agrees with the current suffix (at least the
        matched n, at most MATCH_MAX): a copy that has held for 20 tokens holds on likelier
        than one matched on its last 4, so the record is kept per length (LookupPolicy)."""
        if n < self.n_max:
            return n
        toks, base, end = self._toks, self._base, len(self)
        m, top = n, min(MATCH_MAX, e - base)
        while m < top and toks[e - 1 - m - base] == toks[end - 1 - m - base]:
            m += 1
        return m

    def _resumed(self, k: int) -> Proposal:
        """A copy resumed after an edit of it (module docstring), or NO_PROPOSAL. The edit is
        learnt as a replacement (edgespec/core/replacements.py), and one already learnt is
        known when written."""
        end, base, toks = len(self), self._base, self._toks
        if end - 1 <= base:
            return NO_PROPOSAL
        last, rules = toks[-1], self.rules if self.rules else None
        for cut in range(end - 1, max(base, end - 1 - self.resync), -1):  # the edit wrote tokens cut..end-1
            _, e = self._match(cut)  # where the copy stood before the edit
            if e < 0:
                continue
            written = tuple(toks[cut - base : end - base])
            for q in range(e, min(e + RESYNC_WINDOW, cut)):
                if toks[q - base] == last:
                    self.rules.learn(tuple(toks[e - base : q - base]), written[:-1], end)
                    return Proposal(self._copy(q + 1, k), 1, q + 1, 1, 1)
                for src, new in rules.known(toks[q - base]) if rules else ():  # the edit was a known replacement
                    if new == written and tuple(toks[q - base : q + len(src) - base]) == src:
                        return Proposal(self._copy(q + len(src), k), 1, q + len(src), 1, 1)
        return NO_PROPOSAL

    def _written(self, first: int) -> list[tuple[int, ...]]:
        """The rules whose source span occurs in the tokens from `first` on (found through the
        n-gram index where it has the span's size, so a long prompt costs no scan)."""
        toks, base, end = self._toks, self._base, len(self)
        new = set(toks[max(first, base) - base :])
        hit = []
        for src in self.rules.spans():
            n = len(src)
            if src[-1] not in new:
                continue
            if n == 1 or tuple(toks[end - n - base :]) == src:
                hit.append(src)
            elif self.n_min <= n <= self.n_max:
                e = self._head[n - self.n_min].get(src, -1)  # its latest occurrence ends before e
                if e - n >= max(first - n + 1, base):
                    hit.append(src)
            elif any(tuple(toks[j - base : j + n - base]) == src for j in range(max(first - n + 1, base), end - n + 1)):
                hit.append(src)
        return hit

    def _match(self, cut: int) -> tuple[int, int]:
        """(n, e): the longest n-gram ending at `cut` that occurred before it, and the position
        that followed its latest occurrence before `cut`; (0, -1) if none."""
        hit = self._matched.get(cut)
        if hit is not None:
            return hit
        self._matched[cut] = hit = self._find(cut)
        return hit

    def _find(self, cut: int) -> tuple[int, int]:
        base = self._base
        for n in range(self.n_max, self.n_min - 1, -1):
            if cut - n < base:
                continue
            prev = self._prev[n - self.n_min]
            e = self._head[n - self.n_min].get(tuple(self._toks[cut - n - base : cut - base]), -1)
            while e >= cut:  # occurrences at or after `cut` (only when cut < len(self))
                e = prev[e - base]
            if e >= 0 and e - n >= base:
                return n, e
        return 0, -1

    def _copy(self, source: int, k: int) -> tuple[int, ...]:
        """k tokens from `source` on, the copy continuing into its own output past the end,
        with the replacements learnt made (edgespec/core/replacements.py)."""
        i = source - self._base
        out = self.rules.apply(self._toks, i, k) if self.rules else self._toks[i : i + k]
        period = len(out)  # when short of k: the copy ran to the end
        for j in range(len(out), k):
            out.append(out[j - period])
        return tuple(out)

    def _votes(self, n: int, e: int, first: int) -> tuple[int, int]:
        # We follow the most recent occurrence, not the continuation most occurrences share:
        # where lookup pays (edits, revisions, quoting what was just said) the latest copy is
        # the one being followed, and a vote would favour older boilerplate. Disagreement is
        # reported instead, so a controller can shorten or skip a doubtful proposal.
        prev, base = self._prev[n - self.n_min], self._base
        seen = agree = 0
        while e >= 0 and e - n >= base and seen < VOTES:
            seen += 1
            agree += self._toks[e - base] == first
            e = prev[e - base]
        return seen, agree
