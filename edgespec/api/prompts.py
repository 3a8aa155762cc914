"""Prompts to tokens: a string, chat messages (through the model's chat template, with any
tools offered) or token ids. The engine's front half, apart so the engine stays about decoding."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..core import templates
from ..core.errors import ContextFullError, EdgespecError
from ..core.model import TextModel
from ..core.tools import ToolSet, layout_for, make_toolset, render_history
from .checks import check_token

Prompt = str | Sequence[dict] | Sequence[int]


class Prompts:
    def __init__(self, target: TextModel, template: str) -> None:
        self.target = target
        self.template = template
        self.layout = layout_for(template)  # how its model writes tool calls

    def tools(self, tools: Any, tool_choice: Any = "auto", *, parallel: bool = False) -> ToolSet | None:
        return make_toolset(tools, tool_choice, self.template, parallel=parallel)

    def tokenize(self, prompt: Prompt, *, raw: bool = False, tools: ToolSet | None = None) -> list[int]:
        check_prompt(prompt)
        if isinstance(prompt, str):
            if raw:
                return self.target.tokenize(utf8_text(prompt), add_special=True, parse_special=True)
            prompt = [{"role": "user", "content": prompt}]
        items: list[Any] = list(prompt)  # check_prompt: it iterates
        if not items:
            raise EdgespecError("the prompt is empty; give it text, messages or token ids")
        if all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in items):
            ids = [int(t) for t in items]
            bad = [t for t in ids if not 0 <= t < self.target.n_vocab]
            if bad:
                raise EdgespecError(f"token id {bad[0]} is outside the vocabulary (0..{self.target.n_vocab - 1})")
            return ids
        text = self.chat_text(items, tools=tools)
        bos = self._text(self.target.bos_id)
        add_bos = self.target.add_bos and not (bos and text.startswith(bos))
        return self.target.tokenize(utf8_text(text), add_special=add_bos, parse_special=True)

    def piece(self, token: int) -> bytes:
        check_token(token, self.target.n_vocab)  # llama.cpp's own lookup throws past the vocabulary (an abort)
        return self.target.piece(token)

    def chat_text(self, messages: Sequence[dict], *, tools: ToolSet | None = None) -> str:
        """The prompt text the chat template makes of `messages` (what gets tokenized)."""
        checked = templates.check_messages(messages)
        size = sum(len(m["content"]) for m in checked)
        if size > templates.MAX_OUTPUT_CHARS:  # the template's limit would trip and be blamed
            raise ContextFullError(
                f"the prompt is {size} characters, more than a chat prompt may hold "
                f"({templates.MAX_OUTPUT_CHARS}) and far more than a context's tokens; shorten it"
            )
        if tools is not None:
            checked, listed = tools.messages(checked), tools.template_tools()
        else:  # calls and results of earlier turns are rendered even when no tools are offered now
            checked, listed = render_history(checked, self.layout), None
        bos, eos = self._text(self.target.bos_id), self._text(self.target.eos_id)
        return templates.render(self.template, checked, bos_token=bos, eos_token=eos, tools=listed)

    def _text(self, token: int) -> str:
        return self.target.token_text(token) if token >= 0 else ""


def check_prompt(prompt: Any) -> None:
    """A string, or messages or token ids (any iterable of them); not None, a number, or bytes
    (whose items are numbers: b"Hi" would be read as token ids)."""
    if isinstance(prompt, (bytes, bytearray, memoryview)) or not isinstance(prompt, Iterable):
        hint = "; decode it to str first" if isinstance(prompt, (bytes, bytearray, memoryview)) else ""
        raise EdgespecError(
            "the prompt must be a string, a list of messages or a list of token ids "
            f"(got {type(prompt).__name__}){hint}"
        )


def utf8_text(text: str) -> str:
    """Text llama.cpp can tokenize: bytes that were not UTF-8 (a shell's argument, a pipe) reach
    Python as lone surrogates, which UTF-8 cannot encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise EdgespecError("the prompt is not valid UTF-8: send it as UTF-8 text") from None
    return text
