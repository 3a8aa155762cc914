"""A function's parameters schema, moved whole into the schema of the calls' grammar.

The calls' grammar is one JSON schema: `anyOf` one object per function, each holding the
function's name and its arguments. The arguments' schema is the user's, written for its own
root: "#/$defs/X" (Pydantic's schemas use them routinely) or "#" (a recursive tree) would
resolve against the calls' schema around it. So each function's schema moves whole into the
calls' `$defs` as f{i}, and its local references are rewritten to point into it. Left as
they are: references below a nested `$id` (that subschema is its own root) and anything
inside data keywords (`const`, `enum`, `default`, `examples`: values, not schemas; a property
of one of those names is a schema like any other). The root's
own `$id` is dropped: moved, it would make the rewritten pointers resolve against itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DATA = frozenset({"const", "enum", "default", "examples"})  # keywords whose values are JSON data
# keywords whose values map names to schemas: a property may be called "examples" or "$ref"
NAMES = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"})


def object_schema(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A function's parameters (no parameters: an empty object)."""
    return dict(parameters) if parameters else {"type": "object", "properties": {}}


def hoist(schema: Mapping[str, Any], i: int, defs: dict[str, Any]) -> dict[str, Any]:
    """A reference to `schema`, which goes into `defs` as f{i} with its local `$ref`s rewritten."""
    root = f"#/$defs/f{i}"

    def fix(node: Any, names: bool = False) -> Any:
        if isinstance(node, list):
            return [fix(x) for x in node]
        if names and isinstance(node, dict):
            return {name: fix(v) for name, v in node.items()}  # names, each with its schema
        if not isinstance(node, dict) or isinstance(node.get("$id"), str) or isinstance(node.get("id"), str):
            return node  # a value, or a subschema that is its own root
        out = {k: v if k in DATA else fix(v, k in NAMES) for k, v in node.items()}
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            out["$ref"] = root + ref[1:]
        return out

    top = {k: v for k, v in schema.items() if k not in ("$id", "id")}
    defs[f"f{i}"] = fix(top)
    return {"$ref": root}
