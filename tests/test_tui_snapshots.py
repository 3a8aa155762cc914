"""SVG snapshots of the chat's layout (pytest-textual-snapshot).

Deterministic by construction: fixed terminal size, seed and K, a fixed
memory/CPU reader, no wall-clock numbers (`timings=False`) and no cursor blink.
Regenerate after an intended layout change:
    pytest tests/test_tui_snapshots.py --snapshot-update
"""

from __future__ import annotations

from edgespec import EngineInfo, GpuOffload, PairVerdict
from edgespec_tui.app import ChatOptions, create_app
from tests.fakes import make_engine

SIZE = (100, 30)
INFO = EngineInfo(
    target={
        "architecture": "llama",
        "name": "SmolLM2 135M Instruct",
        "quantization": "F32",
        "bits_per_weight": 32.0,
        "vocab_size": 49152,
        "file_size": 540_000_000,
    },
    draft={
        "architecture": "llama",
        "name": "SmolLM2 135M Instruct",
        "quantization": "Q4_1",
        "bits_per_weight": 5.0,
        "vocab_size": 49152,
        "file_size": 90_000_000,
    },
    pair=PairVerdict(True),
    gpu=GpuOffload(supported=False),
    n_ctx=512,
    threads=2,
)


def app(**engine_kw: object):
    options = ChatOptions(seed=0, k=4, max_tokens=40, timings=False, sys_reader=lambda: (187e6, 42.0))
    return create_app(make_engine(info=INFO, **engine_kw), options=options)  # type: ignore[arg-type]


async def still(pilot) -> None:
    # the prompt's cursor blinks every 0.5 s: under load a snapshot caught it hidden once
    pilot.app.query_one("#prompt").cursor_blink = False


async def ask(pilot, text: str) -> None:
    await still(pilot)
    pilot.app.query_one("#prompt").value = text
    await pilot.press("enter")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()


def test_start_screen_with_a_warning(snap_compare) -> None:
    a = app(
        warnings=[
            "the draft (Q2_K, 2.6 bits/weight) is much lower-bit than the target (F16); expect low "
            "acceptance, prefer a Q4_K_M or Q8_0 draft"
        ]
    )
    assert snap_compare(a, terminal_size=SIZE, run_before=still)


def test_reply_with_draft_and_target_highlighting(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await ask(pilot, "t5 t6 [bold]not markup[/bold]")

    assert snap_compare(app(), terminal_size=SIZE, run_before=run_before)


def test_context_full_error(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await ask(pilot, "t5 t6")
        await ask(pilot, "t7 t8 t9")

    assert snap_compare(app(n_ctx=40), terminal_size=SIZE, run_before=run_before)


def test_model_info_screen(snap_compare) -> None:
    assert snap_compare(app(), terminal_size=SIZE, press=["ctrl+o"], run_before=still)
