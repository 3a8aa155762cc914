"""Tool calls (OpenAI's `tools` / `tool_choice`): the prompt, the constraint and the parse.

A model calls a function by writing text in the layout its chat template taught it:
- "hermes" (Hermes, Qwen 2.5/3 and others whose template holds `<tool_call>`):
  `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, tools listed by
  the template itself;
- "llama3" (Llama 3.x, whose template knows the `ipython` role): a bare JSON
  object `{"name": ..., "parameters": {...}}`, tools listed by the template;
- "generic" (any other template, the demo pair's included): the tools and the
  `<tool_call>` layout are described in the system message, and past calls and
  results are written into the history as text.

The calls are constrained with a grammar, so their arguments are valid JSON for
the function's schema: `required` and a named function force a call; `auto`
leaves the text free and constrains a call once the model starts one (a lazy
trigger on `<tool_call>`). The grammar is applied to the target's and the
draft's rows alike, so speculation stays lossless under it. `CallParser` turns
the streamed text back into content and `ToolCall`s (where calls are bare JSON, also
llama.cpp's generic format: `{"tool_call": ...}`, `{"tool_calls": [...]}`).
Pure Python: the grammar is Lark text that `grammar.compile_grammar` compiles.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import EdgespecError
from .grammar import compile_grammar
from .tool_schemas import hoist, object_schema

OPEN, CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MAX_TOOLS = 128
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_NO_SPACES = {"whitespace_flexible": False}  # as structured output: no runs of blank lines

GENERIC_PROMPT = (
    "You can call functions. To call one, answer with only this, one block per call:\n"
    f'{OPEN}\n{{"name": <function name>, "arguments": <the arguments as a JSON object>}}\n{CLOSE}\n'
    "Results come back as <tool_response> blocks. Answer normally when no call is needed.\n"
    "The functions:"
)


@dataclass(frozen=True)
class Function:
    name: str
    description: str
    parameters: Mapping[str, Any]

    def openai(self) -> dict[str, Any]:
        spec = {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}
        return {"type": "function", "function": spec}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text of an object, as OpenAI sends it
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def layout_for(template: str) -> str:
    """Which way of writing calls the chat template (jinja2 source) teaches its model."""
    if OPEN in template and "tools" in template:
        return "hermes"
    if "ipython" in template and "tools" in template:
        return "llama3"
    return "generic"


@dataclass(frozen=True)
class ToolSet:
    """A request's functions and choice, for a model whose template has `layout`."""

    functions: tuple[Function, ...]
    choice: str  # "auto", "required" or the name of the one function to call
    layout: str
    parallel: bool = False

    @property
    def names(self) -> frozenset[str]:
        return frozenset(f.name for f in self.functions)

    def template_tools(self) -> list[dict[str, Any]] | None:
        """The `tools` the chat template lists itself (None: the generic layout lists them)."""
        return [f.openai() for f in self.functions] if self.layout != "generic" else None

    def messages(self, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The conversation as the template should see it."""
        out = render_history(messages, self.layout)
        if self.layout != "generic":
            return out
        listing = "\n".join(json.dumps(f.openai()["function"]) for f in self.functions)
        text = f"{GENERIC_PROMPT}\n{listing}"
        if out and out[0]["role"] == "system":
            return [{**out[0], "content": f"{out[0]['content']}\n\n{text}"}, *out[1:]]
        return [{"role": "system", "content": text}, *out]

    def grammar(self) -> str | None:
        """Lark for llguidance: calls forced (`required`, a name) or constrained once begun
        (`auto`); None for Llama 3.x's `auto`, whose bare JSON calls have no trigger to wait for."""
        chosen = [f for f in self.functions if self.choice in ("auto", "required", f.name)]
        key = "parameters" if self.layout == "llama3" else "arguments"
        defs: dict[str, Any] = {}
        options = [
            {
                "type": "object",
                "properties": {"name": {"const": f.name}, key: hoist(object_schema(f.parameters), i, defs)},
                "required": ["name", key],
                "additionalProperties": False,
            }
            for i, f in enumerate(chosen)
        ]
        schema: dict[str, Any] = {"anyOf": options, "x-guidance": _NO_SPACES}
        if defs:
            schema["$defs"] = defs
        call = "%json " + json.dumps(schema)
        if self.layout == "llama3":
            return None if self.choice == "auto" else f"start: {call}\n"
        block = f'"{_lark(OPEN)}\\n" {call} "\\n{_lark(CLOSE)}"'
        if self.choice != "auto":
            more = ' ("\\n" block)*' if self.parallel else ""
            return f"start: block{more}\nblock: {block}\n"
        return (
            "%llguidance {}\n"
            f"start: {'(block)* text' if self.parallel else 'block | text'}\n"
            "text: TEXT\n"
            "TEXT: /(.|\\n)*/\n"
            f'block_trigger[lazy]: TEXT "{_lark(OPEN)}"\n'
            f'block: block_trigger "\\n" {call} "\\n{_lark(CLOSE)}"\n'
        )

    def parser(self) -> CallParser:
        """The answer's parser: bare JSON calls only where the template teaches them (Llama 3.x); in a
        `<tool_call>` layout a JSON answer is content (streamed as it comes, never an unchecked call)."""
        return CallParser(self.names, json_calls=self.layout == "llama3")

    def answer(self, text: str, finish_reason: str) -> tuple[str | None, str, list[ToolCall]]:
        """A whole answer's (content, finish_reason, calls) as OpenAI reports them: content None
        when there are calls and no other text."""
        parser = self.parser()
        pieces = [*parser.feed(text), *parser.finish()]
        calls = [p for p in pieces if isinstance(p, ToolCall)]
        content = "".join(p for p in pieces if isinstance(p, str))  # what a stream sends, in one piece
        if calls:
            return (content or None), called_finish(finish_reason, True), calls
        return content, finish_reason, []


def called_finish(finish_reason: str, called: bool) -> str:
    """OpenAI's finish_reason for an answer that called tools: "tool_calls" where it stopped."""
    return "tool_calls" if called and finish_reason == "stop" else finish_reason


def _lark(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def make_toolset(tools: Any, tool_choice: Any, template: str, *, parallel: bool = False) -> ToolSet | None:
    """A checked `ToolSet` from OpenAI's `tools` and `tool_choice` (None: no tools offered,
    or `none`). Any mistake is an EdgespecError that names it."""
    choice = _choice(tool_choice)
    if not tools:
        if choice not in ("auto", "none"):
            raise EdgespecError(f"tool_choice {choice!r} needs tools")
        return None
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise EdgespecError(f"tools must be a list of at most {MAX_TOOLS} functions")
    functions = tuple(_function(i, t) for i, t in enumerate(tools))
    layout = layout_for(template)
    for i, f in enumerate(functions):  # each within the calls' grammar too (a schema that moves badly)
        try:
            compile_grammar(lark=ToolSet((f,), "required", layout).grammar())
        except EdgespecError as err:
            raise EdgespecError(f"tools[{i}] ({f.name}): parameters cannot be used in a call: {err}") from None
    names = [f.name for f in functions]
    if len(set(names)) != len(names):
        raise EdgespecError("tools: two functions have the same name")
    if choice not in ("auto", "none", "required") and choice not in names:
        raise EdgespecError(f"tool_choice names the function {choice!r}, which is not among the tools")
    if choice == "none":
        return None
    return ToolSet(functions, choice, layout, parallel)


def _choice(choice: Any) -> str:
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise EdgespecError(f'tool_choice must be "auto", "none", "required" or a function (got {choice!r})')
        return choice
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or not isinstance(choice, dict) or choice.get("type", "function") != "function":
        raise EdgespecError('tool_choice as an object must be {"type": "function", "function": {"name": ...}}')
    return name


def _function(i: int, tool: Any) -> Function:
    spec = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
    if not isinstance(spec, dict):
        raise EdgespecError(f'tools[{i}] must be {{"type": "function", "function": {{"name": ..., ...}}}}')
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise EdgespecError(f"tools[{i}]: the name must be 1 to 64 letters, digits, '_', '.' or '-' (got {name!r})")
    params = spec.get("parameters") or {}
    if not isinstance(params, dict) or params.get("type", "object") != "object":
        raise EdgespecError(f"tools[{i}] ({name}): parameters must be a JSON schema of an object")
    try:  # alone, so that a reason names the user's schema, not the calls' grammar around it
        compile_grammar(json_schema=params or True)
    except EdgespecError as err:
        raise EdgespecError(f"tools[{i}] ({name}): parameters {str(err).removeprefix('the ')}") from None
    description = spec.get("description") or ""
    if not isinstance(description, str):
        raise EdgespecError(f"tools[{i}] ({name}): the description must be a string")
    return Function(name, description, params)


# -- the history ------------------------------------------------------------------
def render_history(messages: Sequence[Mapping[str, Any]], layout: str) -> list[dict[str, Any]]:
    """Messages for the template: calls and results kept as data for a template that knows
    tools (arguments as objects, as those templates expect), written out as text otherwise."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role, content = m.get("role"), m.get("content") or ""
        calls = m.get("tool_calls") or []
        if layout != "generic":
            item = {"role": role, "content": content}
            if calls:
                item["tool_calls"] = [_call_for_template(c) for c in calls]
            for key in ("tool_call_id", "name"):
                if m.get(key):
                    item[key] = m[key]
            out.append(item)
        elif role == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1].get("_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_results": True})
        elif calls:
            blocks = [f"{OPEN}\n{json.dumps(_call_for_template(c)['function'])}\n{CLOSE}" for c in calls]
            out.append({"role": role, "content": "\n".join([content, *blocks] if content else blocks)})
        else:
            out.append({"role": role, "content": content})
    return [{k: v for k, v in m.items() if k != "_results"} for m in out]


def _call_for_template(call: Any) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping):
        raise EdgespecError(
            'a message\'s tool_calls must be {"id": ..., "type": "function", "function": {"name": ...}}'
        )
    args: Any = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass  # a template gets what the client sent
    item = {"type": "function", "function": {"name": fn.get("name", ""), "arguments": args}}
    return {**item, "id": call["id"]} if call.get("id") else item


# -- the answer -------------------------------------------------------------------
class CallParser:
    """Streamed text in, content and calls out: `feed` returns what is certain so far
    (text that cannot be the start of a call goes out at once), `finish` the rest.
    A block or JSON answer that does not parse as a call of a known function stays
    content: nothing is lost but whitespace that starts the answer or follows a call (`_tidy`)."""

    def __init__(self, names: Iterable[str], *, json_calls: bool = True) -> None:
        self.names = frozenset(names)
        self._buf = ""
        self._in_call = False
        # None: not known yet; True: the answer is one JSON text (buffered); False: text and blocks
        self._whole: bool | None = None if json_calls else False
        self.calls = 0
        self._trim = True  # at the start and after a call, blank text is dropped (the line between calls)

    def feed(self, text: str) -> list[str | ToolCall]:
        self._buf += text
        if self._whole is None:
            head = self._buf.lstrip()
            if not head or PYTHON_TAG.startswith(head):
                return []  # not known yet
            self._whole = head.startswith("{") or head.startswith("[") or head.startswith(PYTHON_TAG)
        if self._whole:
            return []
        return self._tidy(self._scan(final=False))

    def finish(self) -> list[str | ToolCall]:
        if self._whole:
            text, self._buf = self._buf, ""
            calls = self._json_calls(text.strip().removeprefix(PYTHON_TAG))
            if calls:
                return self._tidy(list(calls))
            self._whole, self._buf = False, text  # JSON that is not a call: text, maybe blocks later
        return self._tidy(self._scan(final=True))

    def _tidy(self, pieces: list[str | ToolCall]) -> list[str | ToolCall]:
        """`pieces` without the whitespace that starts the answer or follows a call, however the
        text came in (streamed a few characters at a time or whole, the content is the same)."""
        out: list[str | ToolCall] = []
        for p in pieces:
            p = p.lstrip() if isinstance(p, str) and self._trim else p
            if p:  # (a call is never empty)
                self._trim = isinstance(p, ToolCall)
                out.append(p)
        return out

    def _scan(self, final: bool) -> list[str | ToolCall]:
        out: list[str | ToolCall] = []
        while True:
            if self._in_call:
                end = self._buf.find(CLOSE)
                if end < 0 and not final:
                    return out
                body = self._buf if end < 0 else self._buf[:end]
                self._buf = "" if end < 0 else self._buf[end + len(CLOSE) :]
                self._in_call = False
                calls = self._json_calls(body.strip())
                out += calls or [OPEN + body + ("" if end < 0 else CLOSE)]
                continue
            start = self._buf.find(OPEN)
            if start >= 0:
                if start:
                    out.append(self._buf[:start])
                self._buf = self._buf[start + len(OPEN) :]
                self._in_call = True
                continue
            keep = 0 if final else _partial_suffix(self._buf, OPEN)
            if len(self._buf) > keep:
                out.append(self._buf[: len(self._buf) - keep])
                self._buf = self._buf[len(self._buf) - keep :]
            return out

    def _json_calls(self, text: str) -> list[ToolCall]:
        """The calls in a JSON text (one call, a list, llama.cpp's generic wrappers, or several
        objects separated by ';' or new lines); [] when it is anything else."""
        values: list[Any] = []
        decoder, i = json.JSONDecoder(), 0
        while True:
            while i < len(text) and (text[i].isspace() or text[i] == ";"):
                i += 1
            if i == len(text):
                break
            try:
                value, i = decoder.raw_decode(text, i)
            except ValueError:
                return []
            values.append(value)
        calls: list[ToolCall] = []
        for value in values:
            if isinstance(value, dict) and "tool_calls" in value:
                value = value["tool_calls"]
            elif isinstance(value, dict) and "tool_call" in value:
                value = value["tool_call"]
            for item in value if isinstance(value, list) else [value]:
                call = self._call(item)
                if call is None:
                    return []
                calls.append(call)
        self.calls += len(calls)
        return calls

    def _call(self, item: Any) -> ToolCall | None:
        if not isinstance(item, dict):
            return None
        if isinstance(item.get("function"), dict):  # OpenAI's own shape
            item = item["function"]
        args = item.get("arguments", item.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None
        name = item.get("name")
        if name not in self.names or not isinstance(args, dict):
            return None
        return ToolCall(name, json.dumps(args, ensure_ascii=False))


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag` (held back: the tag may follow)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
