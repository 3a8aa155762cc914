"""Replacements a copy makes: what prompt lookup learns from an answer that renames.

Asked to rename `values` to `samples`, a model copies the code and writes `samples` at
every place the source has `values`. Each of those breaks a plain copy: the proposal
says `values`, the target rejects it, and the next step finds the copy again after the
edit (LookupIndex._resumed). The edit it finds there is a replacement: the source span
it skipped and the tokens the answer wrote instead. Seen at SEEN places, it becomes a
rule, and copies through the source span propose the replacement (LookupIndex._copy),
so the rest of the rename is copied through like the text around it. Teacher-forced over
an exact rename of the bench's code, every proposal of up to 16 tokens verified: target
passes 19 -> 18 (one name, `values`; the tokenizer splits it three ways, one rule each) and
37 -> 27 (two names); the demo model's own answers, none of them a faithful rename, are
unchanged (docs/bench-history.md, stop 37).

Still lossless: a proposal stays a function of the tokens before it (its q one-hot).
A wrong rule costs a rejected proposal, and goes once the answer writes its source span
again (LookupIndex._written). Pure Python: no model, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

SPAN_MAX = 3  # the longest span a replacement rewrites, either side: a renamed word (longer: a rewording)
SEEN = 2  # edits that must make the same replacement, at different places, before copies make it
RULES_MAX = 16  # rules kept (a rename touches a few words), and edits not yet rules; the oldest go first

Span = tuple[int, ...]


class Replacements:
    """Rules `source span -> what the answer writes instead`, learnt from edits of a copy."""

    def __init__(self, on: bool = True) -> None:
        self.on = on
        self._rules: dict[Span, tuple[Span, int]] = {}  # source span -> (replacement, position learnt at)
        self._by_first: dict[int, list[Span]] = {}  # the rules' spans by their first token
        self._edits: dict[tuple[Span, Span], list[int]] = {}  # edits not yet rules: where each was seen
        # rules dropped by tokens that may be taken back (a draft's): (span, replacement, learnt
        # at, the first position of the tokens that wrote the span)
        self._dropped: list[tuple[Span, Span, int, int]] = []

    def __bool__(self) -> bool:
        return bool(self._rules)

    def spans(self) -> list[Span]:
        return list(self._rules)

    def known(self, token: int) -> list[tuple[Span, Span]]:
        """The rules whose source span starts with `token`: (span, replacement)."""
        return [(src, self._rules[src][0]) for src in self._by_first.get(token, ())]

    def learn(self, src: Span, new: Span, at: int) -> None:
        """The answer wrote `new` where the copy's source had `src`, up to position `at`. A word
        replaced by another (at most SPAN_MAX tokens each side) at SEEN places is a rule, so
        a rename is proposed whole from its third occurrence on. One edit is not enough: a
        model that rewords what it copies makes one-off edits, and each wrong rule costs a
        rejected proposal (seen once, rules cost the demo model's revise and extract answers
        5% on virtual costs). An insertion has no source span to key it by."""
        if not (self.on and 0 < len(src) <= SPAN_MAX and 0 < len(new) <= SPAN_MAX) or src == new:
            return
        seen = self._edits.pop((src, new), [])
        if at not in seen:  # proposals asked twice at one place see one edit
            seen.append(at)
        if len(seen) < SEEN:
            self._edits[(src, new)] = seen  # the latest last: the oldest go first
            if len(self._edits) > RULES_MAX:
                del self._edits[next(iter(self._edits))]
            return
        self._rules.pop(src, None)
        self._rules[src] = (new, at)
        if len(self._rules) > RULES_MAX:
            del self._rules[next(iter(self._rules))]
        self._index()

    def forget_after(self, n: int) -> None:
        """Positions from `n` on are taken back (a draft's rejected tokens, another conversation):
        drop what was learnt from edits there, and restore the rules that tokens there dropped
        (a draft that wrote the old name does not show the answer keeps it)."""
        if not (self._rules or self._edits or self._dropped):
            return  # most steps: nothing learnt
        if self._dropped and self._dropped[-1][3] >= n:  # the latest last: none is taken back otherwise
            back = [d for d in self._dropped if d[3] >= n and d[2] <= n]
            self._dropped = [d for d in self._dropped if d[3] < n]
            for src, new, at, _ in back:
                self._rules.setdefault(src, (new, at))
            while len(self._rules) > RULES_MAX:
                del self._rules[next(iter(self._rules))]
            self._index()
        if self._edits:
            self._edits = {e: [a for a in seen if a <= n] for e, seen in self._edits.items() if min(seen) <= n}
        self.drop([src for src, (_, at) in self._rules.items() if at > n])

    def drop(self, spans: Sequence[Span], written_from: int | None = None) -> None:
        """Drop the rules of `spans`; `written_from`: the first position of the tokens that wrote
        them, kept so that taking those tokens back restores the rules (`forget_after`)."""
        if spans:
            for src in spans:
                new, at = self._rules.pop(src, ((), 0))
                if new and written_from is not None:
                    self._dropped = [*self._dropped[-RULES_MAX + 1 :], (src, new, at, written_from)]
            self._index()

    def apply(self, toks: Sequence[int], i: int, k: int) -> list[int]:
        """Up to k tokens copied from toks[i:], each rule's source span replaced."""
        out: list[int] = []
        end = len(toks)
        while len(out) < k and i < end:
            for src in self._by_first.get(toks[i], ()):
                if tuple(toks[i : i + len(src)]) == src:
                    out.extend(self._rules[src][0])
                    i += len(src)
                    break
            else:
                out.append(toks[i])
                i += 1
        return out[:k]  # a replacement longer than its span may overshoot

    def _index(self) -> None:
        self._by_first = {}
        for src in self._rules:
            self._by_first.setdefault(src[0], []).append(src)
