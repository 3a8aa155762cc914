"""The target's p rows of one verify batch, transformed only when verify looks at them."""

from __future__ import annotations

from collections.abc import Sequence

from .constraints import Constraints
from .sampling import Dist, Row, Rows, SamplingParams, to_dist, whole


def dist(row: Row, params: SamplingParams, hist: Constraints | None) -> Dist:
    """The sampling transform of one row, penalties (with `hist` as it stands) included."""
    return to_dist(row if hist is None else hist.apply(whole(row)), params)


class TargetRows:
    """p rows computed only when verify looks at them (it stops at the first rejection).

    With penalties, row i is penalised with the history committed + drafts[:i], the one
    q_i was made with: `hist` starts at the committed tokens and follows the drafts."""

    def __init__(
        self, rows: Rows, params: SamplingParams, hist: Constraints | None = None, drafts: Sequence[int] = ()
    ) -> None:
        self._rows, self._params = rows, params
        self._hist, self._drafts = hist, drafts
        self._base = hist.n if hist is not None else 0
        self._done: dict[int, Dist] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> Dist:
        if i not in self._done:
            hist = self._hist
            if hist is not None:
                hist.truncate(min(hist.n, self._base + i))
                hist.extend(self._drafts[hist.n - self._base : i])
            self._done[i] = dist(self._rows[i], self._params, hist)
        return self._done[i]
