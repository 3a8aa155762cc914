"""Chat templates from GGUF metadata, rendered as untrusted code.

A template is jinja2 source that came with a downloaded file, so it renders
only in jinja2's ImmutableSandboxedEnvironment, with its output size and
rendering time bounded: the time by a trace of the template's own lines too, so a
loop that writes nothing (`range(100000)` inside another) ends at the limit instead
of hanging the load. A model without a template gets a plain ChatML-style
layout (and the engine says so in its warnings).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import EdgespecError

MAX_OUTPUT_CHARS = 4 * 1024 * 1024
MAX_RENDER_S = 2.0

FALLBACK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

Message = dict[str, Any]  # role and content (strings), and tool calls and results' keys
_TOOL_KEYS = ("tool_calls", "tool_call_id", "name")


class TemplateRenderError(EdgespecError):
    pass


TOO_MUCH = "the model's chat template produced too much output or took too long; pass a raw prompt (--raw) instead"


@contextlib.contextmanager
def _time_limit(deadline: float) -> Iterator[None]:
    """Raise TemplateRenderError in the template's own code once `deadline` passes: a trace
    of its lines (jinja2 compiles it to Python in files named <template>), the others'
    calls not traced. Whatever tracer was set before (a debugger, coverage) is put back."""

    def lines(frame: FrameType, event: str, arg: object) -> Any:
        if event == "line" and time.monotonic() > deadline:
            raise TemplateRenderError(TOO_MUCH)
        return lines

    def calls(frame: FrameType, event: str, arg: object) -> Any:
        return lines if frame.f_code.co_filename == "<template>" else None

    before = sys.gettrace()
    sys.settrace(calls)
    try:
        yield
    finally:
        sys.settrace(before)


def _raise(msg: str) -> None:
    one_line = " ".join(str(msg).split())  # an error is one line
    raise TemplateRenderError(f"the model's chat template raised: {one_line[:300]}")


def _tojson(value: Any, indent: int | None = None, separators: Any = None, sort_keys: bool = False, **_: Any) -> str:
    """JSON as Hugging Face's templates expect it (jinja2's own escapes <, > and & for HTML,
    which would put \\u003c into a tool's description)."""
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


def check_messages(messages: Sequence[Any]) -> list[Message]:
    """Each message as a dict of a string role and content (None content: "", as in an
    assistant message that only calls tools), plus any tool calls and results' keys."""
    out = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if m.get("tool_calls") if isinstance(m, dict) else False:
            content = content or ""
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(content, str):
            raise EdgespecError(f"message {i} must be a dict with string 'role' and 'content'")
        calls = m.get("tool_calls")
        if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
            raise EdgespecError(f"message {i}: tool_calls must be a list of objects")
        out.append({"role": m["role"], "content": content, **{k: m[k] for k in _TOOL_KEYS if m.get(k)}})
    return out


def render(
    template: str,
    messages: Sequence[Message],
    *,
    bos_token: str = "",
    eos_token: str = "",
    tools: Sequence[dict[str, Any]] | None = None,
) -> str:
    """The prompt text; `tools` (OpenAI's function list) for a template that lists them itself."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise
    env.filters["tojson"] = _tojson
    env.globals["strftime_now"] = lambda fmt: time.strftime(str(fmt))
    try:
        tmpl = env.from_string(template)
        parts: list[str] = []
        size = 0
        t0 = time.monotonic()
        chunks = tmpl.generate(
            messages=list(messages),
            add_generation_prompt=True,
            bos_token=bos_token,
            eos_token=eos_token,
            **({"tools": list(tools)} if tools else {}),
        )
        with _time_limit(t0 + MAX_RENDER_S):
            for chunk in chunks:
                parts.append(chunk)
                size += len(chunk)
                if size > MAX_OUTPUT_CHARS or time.monotonic() - t0 > MAX_RENDER_S:
                    raise TemplateRenderError(TOO_MUCH)
    except TemplateRenderError:
        raise
    except Exception as err:  # the template is foreign code; any failure is the file's
        raise TemplateRenderError(
            f"the model's chat template failed ({type(err).__name__}: {err}); pass a raw prompt (--raw) instead"
        ) from err
    return "".join(parts)
