"""The quantization-asymmetry warning, confirmed or retracted by the acceptance drafting measures.

Before any weights load, a draft much lower-bit than its target draws a warning from the two
GGUF headers alone (edgespec.llama.pair). Once drafts have been verified, the measured verdict
replaces that guess: the engine's warnings carry it, and the log hears of it when it first
appears or turns (confirmed to retracted or back), not each time its figures move.
"""

from __future__ import annotations

import logging
from typing import Any

from ..core.info import LiveVerdict
from ..llama.pair import QuantReport, live_quantization_verdict

log = logging.getLogger("edgespec")


class LiveWarning:
    def __init__(self, report: QuantReport | None) -> None:
        self.report = report
        self.verdict: LiveVerdict | None = None
        self.drafted = self.accepted = 0

    def update(self, stats: Any, warnings: list[str]) -> list[str]:
        """`warnings` after a generation's `stats`: the verdict in place of the static guess (and
        of any earlier verdict), where drafting has measured enough to give one."""
        if self.report is None or stats is None:
            return warnings
        self.drafted += stats.n_drafted
        self.accepted += stats.n_accepted
        verdict = live_quantization_verdict(self.report, self.drafted, self.accepted)
        if verdict is None and self.verdict is not None:  # a low-bit draft's that the headers never warned of
            gone, self.verdict = self.verdict.message, None
            log.info("withdrawn: %s (acceptance has recovered)", gone)
            return [w for w in warnings if w != gone]
        if verdict is None or verdict == self.verdict:
            return warnings
        turned = self.verdict is None or verdict.confirmed != self.verdict.confirmed
        old = self.verdict.message if self.verdict is not None else None
        self.verdict = verdict
        if turned:
            log.warning("%s", verdict.message)
        return [*(w for w in warnings if w not in self.report.warnings and w != old), verdict.message]
