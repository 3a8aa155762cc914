"""Tool calls without a model: checking tools, the three layouts, the history, the grammar, the parser."""

from __future__ import annotations

import json

import pytest
from test_grammar import EOS, ids, tokenizer

from edgespec.core import templates
from edgespec.core.errors import EdgespecError
from edgespec.core.events import Stats, StreamEvent
from edgespec.core.grammar import Grammar, compile_grammar
from edgespec.core.tools import CallParser, ToolCall, layout_for, make_toolset, render_history
from edgespec.frontends.server.schema import ChatFormat

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city <now>",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}

# Qwen 2.5's chat template (the Hermes layout), as its GGUF files carry it
QWEN = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen.' }}{%- endif %}"
    '{{- "\\n\\n# Tools\\n\\n<tools>" }}{%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}'
    '{{- "\\n</tools>\\n\\nFor each function call, return a json object within <tool_call></tool_call> '
    'XML tags<|im_end|>\\n" }}'
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    '{%- if (message.role == "user") or (message.role == "system" and not loop.first) or '
    '(message.role == "assistant" and not message.tool_calls) %}'
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == \"assistant\" %}{{- '<|im_start|>' + message.role }}"
    "{%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}"
    "{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    '{%- elif message.role == "tool" %}'
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}{{- '<|im_start|>user' }}"
    "{%- endif %}{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
LLAMA3 = "{%- if tools %}Environment: ipython{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
CHATML = templates.FALLBACK_TEMPLATE

HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": "no rain"},
]


def test_the_layout_comes_from_the_template() -> None:
    assert layout_for(QWEN) == "hermes" and layout_for(LLAMA3) == "llama3" and layout_for(CHATML) == "generic"


@pytest.mark.parametrize(
    ("tools", "choice", "says"),
    [
        ([{"type": "function", "function": {"name": "bad name"}}], "auto", "the name must be"),
        ([{"type": "retrieval"}], "auto", r"tools\[0\] must be"),
        ([WEATHER, WEATHER], "auto", "same name"),
        ([WEATHER], "maybe", "tool_choice must be"),
        ([WEATHER], {"type": "function", "function": {"name": "nope"}}, "'nope', which is not among"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}], "auto", "an object"),
        (None, "required", "needs tools"),
    ],
)
def test_bad_tools_and_choices_are_refused_with_the_reason(tools: object, choice: object, says: str) -> None:
    with pytest.raises(EdgespecError, match=says):
        make_toolset(tools, choice, CHATML)


def test_none_and_no_tools_offer_nothing() -> None:
    assert make_toolset([WEATHER], "none", CHATML) is None
    assert make_toolset(None, "auto", CHATML) is None and make_toolset([], None, CHATML) is None
    named = make_toolset([WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}}, CHATML)
    assert named is not None and named.choice == "get_time"


def test_a_template_that_knows_tools_lists_them_and_renders_calls_and_results() -> None:
    tools = make_toolset([WEATHER], "auto", QWEN)
    assert tools is not None
    text = templates.render(QWEN, tools.messages(HISTORY), tools=tools.template_tools())
    assert '"description": "The weather in a city <now>"' in text  # tojson as HF's: no HTML escapes
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n18 C, sunny\n</tool_response>\n<tool_response>\nno rain" in text


def test_the_generic_layout_describes_tools_in_the_system_message_and_writes_the_history_as_text() -> None:
    tools = make_toolset([WEATHER], "auto", CHATML)
    assert tools is not None and tools.template_tools() is None
    messages = tools.messages([{"role": "system", "content": "Be brief."}, *HISTORY])
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("Be brief.\n\nYou can call")
    assert '"name": "get_weather"' in messages[0]["content"]
    assert messages[2] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    }
    results = messages[3]
    assert results["role"] == "user" and results["content"].count("<tool_response>") == 2 and len(messages) == 4
    # without tools offered now, an earlier turn's calls and results are still written out
    assert render_history(HISTORY, "generic")[1:] == messages[2:]


def grammar(tools: object, choice: object, template: str = CHATML, parallel: bool = False) -> Grammar:
    toolset = make_toolset(tools, choice, template, parallel=parallel)
    assert toolset is not None and toolset.grammar() is not None
    return Grammar(tokenizer(), compile_grammar(lark=toolset.grammar()), 257)


CALL = '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}}\n</tool_call>'


def test_required_forces_a_call_whose_arguments_follow_the_schema() -> None:
    g = grammar([WEATHER, TIME], "required")
    assert g.valid_prefix(ids("Sure")) == 0  # no text before the call
    assert g.valid_prefix(ids(CALL)) == len(CALL)
    bad = CALL.replace('"c"', '"kelvin"')
    assert g.valid_prefix(ids(bad)) < bad.index("kelvin") + 1  # an enum the schema does not allow
    assert g.valid_prefix(ids(CALL.replace("get_weather", "get_wether"))) < len(CALL) // 2
    g.extend(ids(CALL))
    assert list(g.allowed().nonzero()[0]) == [EOS]  # one call (parallel_tool_calls is off by default)
    g = grammar([WEATHER, TIME], "required", parallel=True)
    g.extend(ids(CALL))
    assert g.allowed()[EOS] and g.valid_prefix(ids("\n" + CALL)) == len(CALL) + 1


def test_auto_without_parallel_calls_ends_after_a_call() -> None:
    g = grammar([WEATHER], "auto")
    g.extend(ids("Checking. " + CALL))
    assert list(g.allowed().nonzero()[0]) == [EOS]


def test_a_named_choice_allows_only_that_function() -> None:
    g = grammar([WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}})
    assert g.valid_prefix(ids(CALL)) < len(CALL)
    call = '<tool_call>\n{"name":"get_time","arguments":{}}\n</tool_call>'
    assert g.valid_prefix(ids(call)) == len(call)


def test_auto_leaves_text_free_and_constrains_a_call_once_begun() -> None:
    g = grammar([WEATHER], "auto")
    text = "It is probably sunny. "
    assert g.valid_prefix(ids(text)) == len(text)
    g.extend(ids(text))
    assert g.allowed()[EOS]  # plain text may end the answer
    assert g.valid_prefix(ids(CALL)) == len(CALL)
    bad = '<tool_call>\n{"name":"get_weather","arguments":{"town":"Paris"}}'
    assert g.valid_prefix(ids(bad)) < bad.index("town") + 1


def test_llama3_calls_are_bare_json_with_parameters() -> None:
    g = grammar([WEATHER], "required", LLAMA3)
    call = '{"name":"get_weather","parameters":{"city":"Oslo","unit":"f"}}'
    assert g.valid_prefix(ids(call)) == len(call)
    auto = make_toolset([WEATHER], "auto", LLAMA3)
    assert auto is not None and auto.grammar() is None  # parsed only: no trigger to constrain on


def feed_by_char(parser: CallParser, text: str) -> list[str | ToolCall]:
    out = [piece for ch in text for piece in parser.feed(ch)]
    return out + parser.finish()


def test_the_parser_streams_text_and_holds_back_only_what_may_start_a_call() -> None:
    parser = CallParser({"get_weather"})
    assert parser.feed("Let me check <to") == ["Let me check "]  # '<to' may begin <tool_call>
    assert parser.feed("y> ok") == ["<toy> ok"]
    out = feed_by_char(parser, f" then\n{CALL}\ndone")
    text = "".join(p for p in out if isinstance(p, str))
    calls = [p for p in out if isinstance(p, ToolCall)]
    assert text == " then\ndone" and len(calls) == 1  # the whitespace right after a call is dropped
    assert calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris", "unit": "c"}
    assert calls[0].id.startswith("call_") and calls[0].openai()["type"] == "function"


@pytest.mark.parametrize(
    "answer",
    [
        '{"name": "get_weather", "parameters": {"city": "Oslo"}}',  # Llama 3.x
        '<|python_tag|>{"name": "get_weather", "arguments": {"city": "Oslo"}}',
        '{"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}}}',  # llama.cpp's generic
        '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}',
        '{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}',  # arguments as JSON text
    ],
)
def test_json_answers_in_the_known_layouts_are_calls(answer: str) -> None:
    out = feed_by_char(CallParser({"get_weather"}), answer)
    assert len(out) == 1 and isinstance(out[0], ToolCall) and json.loads(out[0].arguments) == {"city": "Oslo"}


def test_two_calls_separated_by_semicolons_are_both_read() -> None:
    out = feed_by_char(CallParser({"a", "b"}), '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {}}')
    assert [c.name for c in out if isinstance(c, ToolCall)] == ["a", "b"]


@pytest.mark.parametrize(
    "answer",
    [
        "<tool_call>\nnot json\n</tool_call>",
        '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>',  # not an offered function
        '{"answer": 42}',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city"',  # cut off by max_tokens
    ],
)
def test_what_is_not_a_call_of_an_offered_function_stays_content(answer: str) -> None:
    out = feed_by_char(CallParser({"get_weather"}), answer)
    assert all(isinstance(p, str) for p in out) and "".join(out) == answer  # nothing the model wrote is lost


def test_answer_gives_content_none_and_tool_calls_when_only_calls() -> None:
    tools = make_toolset([WEATHER], "auto", CHATML)
    assert tools is not None
    content, finish, calls = tools.answer(f"\n{CALL}\n", "stop")
    assert content is None and [c.name for c in calls] == ["get_weather"] and finish == "tool_calls"
    assert tools.answer("just text", "stop") == ("just text", "stop", [])


def test_a_whole_answer_s_content_is_what_its_stream_sends() -> None:
    """The whole answer stripped its content ("...per call:"), the stream sent it as written
    ("...per call:\n"), so a client's text depended on whether it streamed."""
    tools = make_toolset([WEATHER], "auto", CHATML)
    assert tools is not None
    answer = f"One block per call:\n{CALL}\n{CALL}\n"
    content, _, calls = tools.answer(answer, "stop")
    fmt = ChatFormat("m", tools=tools)
    streamed = []
    for i in range(0, len(answer), 5):  # the stream's events, a few characters each
        last = i + 5 >= len(answer)
        event = StreamEvent(answer[i : i + 5], (), (), Stats(), "stop" if last else None)
        for chunk in fmt.chunks(event):
            delta = chunk["choices"][0]["delta"]
            streamed.append(delta.get("content") or "")
    assert len(calls) == 2 and content == "".join(streamed) == "One block per call:\n"
    for events in ([CALL, "\n\n", "Done."], [CALL, "\n", "\nDone."], ["\n", CALL]):  # cut anywhere: the same
        fmt, streamed = ChatFormat("m", tools=tools), []
        for i, text in enumerate(events):
            event = StreamEvent(text, (), (), Stats(), "stop" if i == len(events) - 1 else None)
            streamed += [c["choices"][0]["delta"].get("content") or "" for c in fmt.chunks(event)]
        whole = tools.answer("".join(events), "stop")[0]
        assert (whole or "") == "".join(streamed) and whole in ("Done.", None)


@pytest.mark.parametrize("choice", [{"type": "function", "function": "f"}, {"function": None}, ["get_weather"]])
def test_malformed_tool_choice_objects_are_refused_not_crashed(choice: object) -> None:
    with pytest.raises(EdgespecError, match="tool_choice"):
        make_toolset([WEATHER], choice, CHATML)


def test_json_text_that_is_not_a_call_keeps_a_later_block() -> None:
    out = feed_by_char(CallParser({"get_weather"}), '{"note": 1}\n' + CALL)
    assert [p.name for p in out if isinstance(p, ToolCall)] == ["get_weather"]
    assert "".join(p for p in out if isinstance(p, str)) == '{"note": 1}\n'


def test_calls_on_separate_lines_are_read_even_with_separators_inside_strings() -> None:
    text = '{"name": "a", "parameters": {"q": "x;y\\nz"}}\n{"name": "b", "parameters": {}}'
    out = feed_by_char(CallParser({"a", "b"}), text)
    assert [c.name for c in out if isinstance(c, ToolCall)] == ["a", "b"]
    assert json.loads(out[0].arguments) == {"q": "x;y\nz"}  # type: ignore[union-attr]


def test_a_functions_own_defs_still_resolve_inside_the_call_schema() -> None:
    pydantic_like = {
        "type": "function",
        "function": {
            "name": "move",
            "parameters": {
                "type": "object",
                "properties": {"to": {"$ref": "#/$defs/Point"}},
                "required": ["to"],
                "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
            },
        },
    }
    g = grammar([pydantic_like, WEATHER], "required")
    call = '<tool_call>\n{"name":"move","arguments":{"to":{"x":3}}}\n</tool_call>'
    assert g.valid_prefix(ids(call)) == len(call)
    bad = '<tool_call>\n{"name":"move","arguments":{"to":{"x":"three"}}}'
    assert g.valid_prefix(ids(bad)) < bad.index("three")


def test_a_property_named_definitions_and_a_recursive_root_ref_keep_their_meaning() -> None:
    """Hoisting a function's `$defs` dropped every key named `definitions` or `$defs` (a property
    too), and "#" pointed at the calls' schema around it (the model was made to nest calls)."""
    tree = {
        "type": "function",
        "function": {
            "name": "tree",
            "parameters": {
                "$defs": {"Lang": {"enum": ["en", "fr"]}},
                "type": "object",
                "properties": {
                    "lang": {"$ref": "#/$defs/Lang"},
                    "definitions": {"type": "string"},
                    "child": {"anyOf": [{"type": "null"}, {"$ref": "#"}]},
                },
                "required": ["lang", "definitions", "child"],
                "additionalProperties": False,
            },
        },
    }
    g = grammar([tree, WEATHER], "required")
    args = '{"lang":"en","definitions":"a","child":{"lang":"fr","definitions":"b","child":null}}'
    call = f'<tool_call>\n{{"name":"tree","arguments":{args}}}\n</tool_call>'
    assert g.valid_prefix(ids(call)) == len(call)
    nested_call = '<tool_call>\n{"name":"tree","arguments":{"lang":"en","definitions":"a","child":{"name"'
    assert g.valid_prefix(ids(nested_call)) < len(nested_call)
    bad = '<tool_call>\n{"name":"tree","arguments":{"lang":"de"'
    assert g.valid_prefix(ids(bad)) == bad.index("de")  # "en" or "fr" only


def test_a_property_named_like_a_data_keyword_keeps_its_refs() -> None:
    """A property called `examples` (or `default`, `enum`, `const`) was taken for the keyword: the
    `$ref` inside it was left pointing at the function's own root, and the tool was refused."""
    item = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    examples = {"type": "array", "items": {"$ref": "#/$defs/Item"}, "maxItems": 2}
    properties = {"examples": examples, "default": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}}
    parameters = {"$defs": {"Item": item}, "type": "object", "properties": properties}
    parameters |= {"required": ["examples", "default"], "additionalProperties": False}
    g = grammar([{"type": "function", "function": {"name": "add", "parameters": parameters}}, WEATHER], "required")
    args = '{"examples":[{"text":"a"}],"default":{"examples":[],"default":null}}'
    call = f'<tool_call>\n{{"name":"add","arguments":{args}}}\n</tool_call>'
    assert g.valid_prefix(ids(call)) == len(call)
    bad = '<tool_call>\n{"name":"add","arguments":{"examples":[{"txt"'
    assert g.valid_prefix(ids(bad)) < len(bad)


def test_parameters_llguidance_cannot_use_are_refused_by_tools_naming_the_function() -> None:
    bad = {"type": "function", "function": {"name": "g", "parameters": {"properties": {"a": {"type": "foo"}}}}}
    with pytest.raises(EdgespecError, match=r"tools\[1\] \(g\): parameters JSON schema cannot be used: .*foo"):
        make_toolset([WEATHER, bad], "auto", CHATML)


@pytest.mark.parametrize("call", ["f", {"function": "f"}, None])
def test_a_history_call_of_the_wrong_shape_is_one_error(call: object) -> None:
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]}]
    with pytest.raises(EdgespecError, match="tool_calls must be"):
        render_history(history, "hermes")


def test_a_schema_with_its_own_id_works_in_the_call_and_data_is_not_rewritten() -> None:
    """A root or nested `$id` made the rewritten pointers unresolvable in the calls' grammar: the
    function passed `tools()` and every generation failed; `const` data that looked like a ref
    was rewritten."""
    fn = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {
                "$id": "https://example.com/f",
                "$defs": {"A": {"enum": ["a", "b"]}},
                "type": "object",
                "properties": {
                    "a": {"$ref": "#/$defs/A"},
                    "q": {"$id": "https://example.com/q", "$defs": {"Q": {"type": "integer"}}, "$ref": "#/$defs/Q"},
                    "tag": {"const": {"$ref": "#"}},
                },
                "required": ["a", "q", "tag"],
                "additionalProperties": False,
            },
        },
    }
    g = grammar([fn], "required")
    call = '<tool_call>\n{"name":"f","arguments":{"a":"b","q":3,"tag":{"$ref":"#"}}}\n</tool_call>'
    assert g.valid_prefix(ids(call)) == len(call)


def test_a_schema_that_only_fails_inside_the_calls_grammar_is_named_by_tools() -> None:
    bad = {"type": "function", "function": {"name": "g", "parameters": {"$defs": {"A": {}}, "properties": {
        "a": {"$ref": "#/definitions/A"}}}}}  # fmt: skip
    with pytest.raises(EdgespecError, match=r"tools\[0\] \(g\): parameters"):
        make_toolset([bad], "auto", CHATML)


@pytest.mark.parametrize("template", [CHATML, QWEN])
def test_a_bare_json_answer_is_content_where_calls_are_blocks(template: str) -> None:
    """In a `<tool_call>` layout only a block is a call (the grammar constrains those): a JSON answer
    naming a function was taken as its call unchecked ('{"town": ...}' for a function that takes a
    city), and it was held back to its end before it streamed."""
    tools = make_toolset([WEATHER], "auto", template)
    assert tools is not None
    answer = '{"name": "get_weather", "arguments": {"town": "Paris"}}'
    assert tools.answer(answer, "stop") == (answer, "stop", [])
    fmt = ChatFormat("m", tools=tools)
    first = fmt.chunks(StreamEvent(answer[:12], (), (), Stats()))
    assert [c["choices"][0]["delta"].get("content") for c in first] == [answer[:12]]  # streamed as it comes
    llama = make_toolset([WEATHER], "auto", LLAMA3)  # where bare JSON is how calls are written
    assert llama is not None
    content, finish, calls = llama.answer('{"name": "get_weather", "parameters": {"city": "Paris"}}', "stop")
    assert content is None and finish == "tool_calls" and [c.name for c in calls] == ["get_weather"]
