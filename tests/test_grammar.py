"""The grammar constraint on its own: compiling, masks, following drafts, rolling back."""

from __future__ import annotations

import json
from collections.abc import Sequence

import llguidance
import numpy as np
import pytest

from edgespec.api.engine import Engine
from edgespec.core.errors import EdgespecError
from edgespec.core.grammar import Grammar, compile_grammar
from tests.fakes import FakeModel

EOS = 256


class ByteTokenizer:
    """One token per byte, then EOS: small enough to reason about exactly."""

    eos_token_id = EOS
    bos_token_id = None
    tokens = [bytes([b]) for b in range(256)] + [b"<eos>"]
    special_token_ids = [EOS]

    def __call__(self, s: bytes) -> list[int]:
        return list(s)


def tokenizer() -> llguidance.LLTokenizer:
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(ByteTokenizer()))


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}


def ids(text: str) -> list[int]:
    return list(text.encode())


def test_a_schema_masks_every_token_but_the_allowed_ones() -> None:
    g = Grammar(tokenizer(), compile_grammar(json_schema=SCHEMA), 257)
    first = np.flatnonzero(g.allowed())
    assert set(first) <= set(ids("{ \n\t"))  # an object starts (whitespace allowed by JSON)
    row = np.zeros(257, dtype=np.float32)
    masked = g.apply(row)
    assert np.isneginf(masked).sum() == 257 - len(first) and row.max() == 0.0  # the row itself is untouched
    g.extend(ids('{"a":12}'))
    assert g.done or set(np.flatnonzero(g.allowed())) <= {EOS, *ids(" \n\t")}


def test_drafts_are_followed_and_rolled_back() -> None:
    g = Grammar(tokenizer(), compile_grammar(json_schema=SCHEMA), 257)
    g.extend(ids('{"a":'))
    before = g.allowed().copy()
    assert g.valid_prefix(ids("12x}")) == 2  # a lookup proposal is cut at its first invalid token
    g.extend(ids("12"))
    assert not np.array_equal(g.allowed(), before)
    g.truncate(g.n - 2)
    assert np.array_equal(g.allowed(), before) and g.n == len(ids('{"a":'))


def test_an_invalid_token_is_refused() -> None:
    g = Grammar(tokenizer(), compile_grammar(json_schema=SCHEMA), 257)
    with pytest.raises(EdgespecError):
        g.extend(ids("x"))


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"json_schema": {"type": "nonsense"}}, "JSON schema"),
        ({"json_schema": "{not json"}, "not valid JSON"),
        ({"lark": "start: ???"}, "grammar"),
        ({}, "exactly one"),
        ({"json_schema": SCHEMA, "regex": "a+"}, "exactly one"),
    ],
)
def test_a_bad_schema_or_grammar_is_one_line_before_generating(kw: dict, words: str) -> None:
    with pytest.raises(EdgespecError, match=words) as err:
        compile_grammar(**kw)
    assert "\n" not in str(err.value)


def test_json_mode_accepts_any_object() -> None:
    g = Grammar(tokenizer(), compile_grammar(json_schema=True), 257)
    doc = json.dumps({"x": [1, 2, {"y": None}]}, separators=(",", ":"))  # compact, as the grammar asks
    assert g.valid_prefix(ids(doc)) == len(doc)


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"json_schema": 5}, "a JSON schema is an object (a dict), not int"),
        ({"json_schema": [1, 2]}, "not list"),
        ({"json_schema": "5"}, "not int"),
        ({"json_schema": False}, "not bool"),
        ({"json_schema": object()}, "not valid JSON"),
        ({"grammar": {"a": 1}}, "grammar must be a non-empty string"),
        ({"grammar": ""}, "grammar must be a non-empty string"),
        ({"json_schema": {"type": "string", "pattern": "(?=x)"}}, "look-around, including look-ahead"),
        ({"json_schema": "[" * 5000 + "]" * 5000}, "nested too deeply"),
    ],
)
def test_schemas_and_grammars_that_cannot_be_used_are_one_line_with_the_reason(kwargs: dict, says: str) -> None:
    """ValueError and TypeError came out raw; a regex's reason was cut at "regex parse error:"."""
    options = {"lark" if k == "grammar" else k: v for k, v in kwargs.items()}
    with pytest.raises(EdgespecError) as err:
        compile_grammar(**options)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_json_schemas_true_and_a_pydantic_model_class_are_schemas() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Point(pydantic.BaseModel):
        x: int

    g = Grammar(tokenizer(), compile_grammar(json_schema=Point), 257)
    assert g.valid_prefix(ids('{"x":3}')) == 7 and g.valid_prefix(ids('{"x":"a"}')) < 6
    anything = Grammar(tokenizer(), compile_grammar(json_schema="true"), 257)  # JSON Schema's `true`
    assert anything.valid_prefix(ids("[1]")) == 3


def test_a_schema_whose_recursion_never_ends_is_an_error_not_an_empty_answer() -> None:
    """llguidance's matcher goes into an error state whose mask allows only the end: the answer
    came back as "" or '{"a":' with finish_reason "stop"."""
    with pytest.raises(EdgespecError, match="recursion never ends"):
        Grammar(tokenizer(), compile_grammar(json_schema={"$ref": "#"}), 257)
    endless = {"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}, "required": ["a"]}
    g = Grammar(tokenizer(), compile_grammar(json_schema=endless), 257)
    g.extend(ids('{"a":'))
    assert g.allowed().nonzero()[0].tolist() == [EOS]  # a draft's path: a branch the answer may not take
    g.commit()  # the answer's own
    with pytest.raises(EdgespecError, match=r"cannot go on after 5 tokens \(NoExtensionBias\)"):
        g.allowed()
    ok = {"type": "object", "properties": {"a": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}}, "required": ["a"]}
    g = Grammar(tokenizer(), compile_grammar(json_schema=ok), 257)
    g.extend(ids('{"a":{"a":null}}'))
    assert g.allowed()[EOS]


class _Bytes(FakeModel):
    """A model of byte tokens that writes `want` after the prompt, then the end (256)."""

    def __init__(self, want: str) -> None:
        super().__init__(257)
        self.want, self.eos_id = want.encode(), EOS

    def _row(self, ctx: Sequence[int]) -> np.ndarray:
        n = len(ctx) - 3  # the prompt: BOS and two tokens
        row = np.zeros(257, dtype=np.float32)
        row[self.want[n] if n < len(self.want) else EOS] = 20.0
        return row

    def is_eog(self, token: int) -> bool:
        return token == EOS

    def grammar_tokenizer(self) -> llguidance.LLTokenizer:
        return tokenizer()

    def piece(self, token: int, special: bool = False) -> bytes:
        return b"" if token == EOS else bytes([token])


def test_a_draft_that_walks_into_a_dead_end_leaves_the_answer_as_plain_decoding_s() -> None:
    """The draft writes '{"x":' where every property's schema recurses without end, the target
    '{}'. The matcher's error outlived the rollback: '{{{{{{{{{{' (before), then an error for a
    branch the target never took; the answer is plain decoding's."""
    endless = {"type": "object", "additionalProperties": {"$ref": "#/additionalProperties"}}
    out = []
    for speculative in (False, True):
        eng = Engine(_Bytes("{}"), _Bytes('{"x":1}'), name="f", default_k=6, lookup=False)
        res = eng.generate(
            "t5 t6", raw=True, temperature=0, json_schema=endless, speculative=speculative, max_tokens=10
        )
        out.append((res.text, res.finish_reason, res.stats.n_drafted > 0))
    assert out == [("{}", "stop", False), ("{}", "stop", True)]
