"""A model's chat template is untrusted code: it renders sandboxed, bounded in output and time,
and any failure is one line. The time bound also holds for a loop that writes nothing (found
hanging a load by a fuzz of a real model's metadata, stop 60)."""

from __future__ import annotations

import sys
import time

import pytest

from edgespec.core import templates
from edgespec.core.templates import TemplateRenderError, render

HI = [{"role": "user", "content": "hi"}]


def test_a_loop_that_writes_nothing_ends_at_the_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(templates, "MAX_RENDER_S", 0.2)
    t0 = time.monotonic()
    with pytest.raises(TemplateRenderError, match="took too long"):
        render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x", HI)
    assert time.monotonic() - t0 < 2.0


def test_a_tracer_set_before_is_put_back() -> None:
    def mine(frame, event, arg):  # type: ignore[no-untyped-def]
        return None

    before = sys.gettrace()
    sys.settrace(mine)
    try:
        assert render("{{ messages[0]['content'] }}", HI) == "hi"
        with pytest.raises(TemplateRenderError):
            render("{{ raise_exception('no') }}", HI)
        assert sys.gettrace() is mine
    finally:
        sys.settrace(before)


def test_what_a_template_raises_is_one_line() -> None:
    with pytest.raises(TemplateRenderError) as err:
        render('{{ raise_exception("line one\nline two") }}', HI)
    assert str(err.value) == "the model's chat template raised: line one line two"


def test_too_much_output_and_the_sandbox_are_one_line_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(templates, "MAX_OUTPUT_CHARS", 1000)
    with pytest.raises(TemplateRenderError, match="too much output"):
        render("{% for i in range(10000) %}xxxxxxxxxx{% endfor %}", HI)
    with pytest.raises(TemplateRenderError, match="failed .*SecurityError"):
        render("{{ ''.__class__.__mro__[1].__subclasses__() }}", HI)


def test_a_prompt_over_the_templates_limit_is_called_too_long_not_the_templates_fault(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a 5 MB prompt was "the model's chat template produced too much output ...; pass --raw"
    from edgespec.api.prompts import Prompts
    from edgespec.core.errors import ContextFullError
    from tests.fakes import FakeModel

    monkeypatch.setattr(templates, "MAX_OUTPUT_CHARS", 1000)
    prompts = Prompts(FakeModel(64), templates.FALLBACK_TEMPLATE)  # type: ignore[arg-type]
    with pytest.raises(ContextFullError, match="the prompt is 1200 characters.*shorten it"):
        prompts.tokenize([{"role": "user", "content": "t5 " * 200}, {"role": "user", "content": "t6 " * 200}])
    assert prompts.chat_text([{"role": "user", "content": "t5 " * 300}])  # under it: rendered


def test_a_template_the_header_holds_as_another_type_is_no_template() -> None:
    # llama.cpp hands a u32 template over as the text "5", which replaced every prompt with "5"
    from edgespec import Engine
    from edgespec.core.info import EngineInfo
    from tests.fakes import FakeModel

    class NumberTemplate(FakeModel):
        def chat_template(self) -> str | None:
            return "5"

    info = EngineInfo(target={"chat_template": False})  # the header's own reading: no text template
    engine = Engine(NumberTemplate(), FakeModel(noise=0.5), name="fake", info=info)  # type: ignore[arg-type]
    assert any("no chat template" in w for w in engine.warnings)
    assert engine.chat_text([{"role": "user", "content": "hi"}]) != "5"
    trusted = Engine(NumberTemplate(), FakeModel(noise=0.5), name="fake")  # type: ignore[arg-type]
    assert trusted.chat_text([{"role": "user", "content": "hi"}]) == "5"  # no header read: the model's word
