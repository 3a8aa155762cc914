"""Chat templates from GGUF metadata, rendered as untrusted code.

A template is jinja2 source that came with a downloaded file, so it renders
only in jinja2's ImmutableSandboxedEnvironment, with its output size and
rendering time bounded. A model without a template gets a plain ChatML-style
layout (and the engine says so in its warnings).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import EdgespecError

MAX_OUTPUT_CHARS = 4 * 1024 * 1024
MAX_RENDER_S = 2.0

FALLBACK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

Message = dict[str, str]


class TemplateRenderError(EdgespecError):
    pass


def _raise(msg: str) -> None:
    raise TemplateRenderError(f"the model's chat template raised: {msg}")


def check_messages(messages: Sequence[Any]) -> list[Message]:
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise EdgespecError(f"message {i} must be a dict with string 'role' and 'content'")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def render(template: str, messages: Sequence[Message], *, bos_token: str = "", eos_token: str = "") -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: time.strftime(str(fmt))
    try:
        tmpl = env.from_string(template)
        parts: list[str] = []
        size = 0
        t0 = time.monotonic()
        for chunk in tmpl.generate(
            messages=list(messages), add_generation_prompt=True, bos_token=bos_token, eos_token=eos_token
        ):
            parts.append(chunk)
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS or time.monotonic() - t0 > MAX_RENDER_S:
                raise TemplateRenderError(
                    "the model's chat template produced too much output or took too long; "
                    "pass a raw prompt (--raw) instead"
                )
    except TemplateRenderError:
        raise
    except Exception as err:  # the template is foreign code; any failure is the file's
        raise TemplateRenderError(
            f"the model's chat template failed ({type(err).__name__}: {err}); pass a raw prompt (--raw) instead"
        ) from err
    return "".join(parts)
