"""The quantization-asymmetry warning, confirmed or retracted by measured acceptance."""

from __future__ import annotations

import pytest

from edgespec.llama.pair import QuantReport, live_quantization_verdict
from tests.conftest import demo_paths

ASYM = QuantReport("F32", "Q2_K", 32.0, 5.1, "f16", ("the draft is much lower-bit ...",))
SYM = QuantReport("F32", "Q8_0", 32.0, 8.5, "f16", ())


def test_no_verdict_before_enough_draft_tokens() -> None:
    assert live_quantization_verdict(ASYM, 10, 2) is None


def test_low_acceptance_confirms_the_warning_with_numbers() -> None:
    v = live_quantization_verdict(ASYM, 200, 80)
    assert v is not None and v.confirmed and "40%" in v.message and "Q8_0" in v.message


def test_good_acceptance_retracts_the_warning() -> None:
    v = live_quantization_verdict(ASYM, 200, 190)
    assert v is not None and not v.confirmed and "not hurting" in v.message


def test_symmetric_pair_gets_no_live_warning() -> None:
    assert live_quantization_verdict(SYM, 500, 100) is None


@pytest.mark.real
@pytest.mark.parametrize("draft, expect", [("smollm2-135m-q2_k", "confirmed"), ("smollm2-135m-q8_0", None)])
def test_live_warning_on_real_drafts(draft: str, expect: str | None) -> None:
    if demo_paths() is None:
        pytest.skip("demo pair not prepared")
    from edgespec import Engine
    from edgespec.llama.config import load_config
    from edgespec.llama.models import prepare

    cfg = load_config()
    with Engine.load(demo_paths()[0], prepare(cfg, draft), n_ctx=1024) as eng:
        eng.generate("Explain how a refrigerator works.", temperature=0.8, max_tokens=96, k=4, seed=3)
        live = [w for w in eng.warnings if "accepts" in w]
        if expect is None:
            assert live == [] and not any("lower-bit" in w for w in eng.warnings)
        else:
            assert len(live) == 1 and expect in live[0], eng.warnings
            assert not any("lower-bit" in w for w in eng.warnings)  # the measured verdict replaced the guess


def test_the_log_hears_a_verdict_once_not_at_every_request(caplog: pytest.LogCaptureFixture) -> None:
    from tests.fakes import make_engine

    eng = make_engine(noise=4.0)  # a poor draft: low acceptance
    eng._live.report = ASYM
    texts = []
    with caplog.at_level("WARNING", logger="edgespec"):
        for seed in range(4):
            eng.generate("t5 t9", max_tokens=40, k=4, temperature=0.8, seed=seed)
            texts += [w for w in eng.warnings if "accepts" in w]
    assert len(set(texts)) > 1  # the figures in the verdict moved from request to request
    logged = [r.getMessage() for r in caplog.records if "accepts" in r.getMessage()]
    assert len(logged) == 1 and logged[0].startswith("confirmed")


LOW_UNWARNED = QuantReport("Q4_1", "Q2_K", 5.7, 5.1, "f16", (), low_bit=True)  # no bits-per-weight gap to see


def test_a_low_bit_draft_the_headers_did_not_warn_of_is_reported_when_it_is_seldom_accepted() -> None:
    # a Q2_K draft under a Q4_1 target accepted 36% and nothing said so
    v = live_quantization_verdict(LOW_UNWARNED, 196, 70)
    assert v is not None and v.confirmed and v.message.startswith("the Q2_K draft accepts only 36%")
    assert live_quantization_verdict(LOW_UNWARNED, 196, 180) is None  # nothing was said: nothing to retract


def test_the_report_of_a_low_bit_draft_goes_when_its_acceptance_recovers() -> None:
    from types import SimpleNamespace

    from edgespec.api.live import LiveWarning

    live = LiveWarning(LOW_UNWARNED)
    warnings = live.update(SimpleNamespace(n_drafted=100, n_accepted=30), ["other"])
    assert warnings[0] == "other" and "accepts only 30%" in warnings[1]
    assert live.update(SimpleNamespace(n_drafted=900, n_accepted=880), warnings) == ["other"]


def test_the_static_report_marks_low_bit_drafts(tmp_path) -> None:
    from gguf_corpus import Q2_K, Q4_1, small_model

    from edgespec.llama.gguf_file import read_gguf
    from edgespec.llama.pair import quantization_report

    infos = []
    for name, ttype, ftype in (("t", Q4_1, 3), ("d", Q2_K, 10)):
        path = tmp_path / f"{name}.gguf"
        path.write_bytes(small_model(ttype=ttype, file_type=ftype))
        infos.append(read_gguf(path))
    assert quantization_report(infos[1], infos[0]).low_bit is False
    assert quantization_report(infos[0], infos[1]).low_bit is True
