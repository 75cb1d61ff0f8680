"""OpenEnv's messages as the provider reads them: frames parsed within limits, and each message
checked against the JSON Schema generated from rollgym's one declaration (protocol/openenv.ts ->
openenv_schema.json beside this file). A refusal is written from the schema by the same rules as
rollgym serve's (_field_errors follows protocol/openenv.ts's fieldErrors), so both servers name
the field, the value and what is allowed in the same words; test/openenv/golden-transcript.json
holds them equal.
"""

import json
import math
import os
import re
from typing import Any, Dict, List, Optional, Tuple

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "openenv_schema.json"), encoding="utf-8") as _file:
    DECLARATION: Dict[str, Any] = json.load(_file)

MAX_SEED: int = DECLARATION["max_seed"]
PREVIEW_CHARS: int = DECLARATION["preview_chars"]
MAX_LISTED_ERRORS: int = DECLARATION["max_listed_errors"]
CLIENT_MESSAGES: Dict[str, Any] = DECLARATION["client_messages"]
MESSAGE_TYPES: Tuple[str, ...] = tuple(CLIENT_MESSAGES)
#: GET /schema's answer: the action, observation and state models.
MODELS: Dict[str, Any] = DECLARATION["models"]

Loc = List[Any]


def error_frame(code: str, message: str, **extra: Any) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}})


def clip(text: str, chars: int = PREVIEW_CHARS) -> str:
    """`text` cut to at most `chars` characters, "..." marking a cut."""
    return text if len(text) <= chars else text[: chars - 3] + "..."


def _json_string(text: str) -> str:
    # As JavaScript's JSON.stringify writes it: non-ASCII kept, lone surrogates escaped.
    return re.sub("[\ud800-\udfff]", lambda m: "\\u%04x" % ord(m.group()), json.dumps(text, ensure_ascii=False))


def _number(value: Any) -> str:
    """A number as JavaScript's String() writes it (for the cases JSON gives)."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", repr(value))


def preview(value: Any, chars: int = PREVIEW_CHARS) -> str:
    """A value as an error message shows it: JSON-like, at most `chars` characters, three levels
    deep and eight items wide (protocol/bounded-json.ts's preview)."""
    out: List[str] = []
    length = [0]

    def push(text: str) -> bool:
        out.append(text)
        length[0] += len(text)
        return length[0] <= chars

    def walk(item: Any, depth: int) -> bool:
        if isinstance(item, str):
            return push(_json_string(item[:chars]))
        if item is None:
            return push("null")
        if isinstance(item, bool):
            return push("true" if item else "false")
        if isinstance(item, (int, float)):
            return push(_number(item))
        if depth >= 3:
            return push("[…]" if isinstance(item, list) else "{…}")
        if isinstance(item, list):
            if not push("["):
                return False
            for i, inner in enumerate(item):
                if i > 0 and not push(","):
                    return False
                if i == 8:
                    return push("…")
                if not walk(inner, depth + 1):
                    return False
            return push("]")
        if not push("{"):
            return False
        for n, (key, inner) in enumerate(item.items()):
            if n > 0 and not push(","):
                return False
            if n == 8:
                return push("…")
            if not push(_json_string(key[:chars]) + ":"):
                return False
            if not walk(inner, depth + 1):
                return False
        return push("}")

    walk(value, 0)
    return clip("".join(out), chars)


def _echo(value: Any) -> Any:
    """`input` as an error echoes it: the value when small and shallow, else its preview."""
    if isinstance(value, str):
        return clip(value)
    if not isinstance(value, (dict, list)):
        return value
    shown = preview(value)
    return shown if shown.endswith("...") or "…" in shown else value


# --------------------------------------------------------------------------- parsing


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels (the message itself is level 1)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        nested = [c for c in children if isinstance(c, (dict, list))]
        if nested and depth == limit:
            return True
        stack.extend((c, depth + 1) for c in nested)
    return False


def _not_json(name: str) -> Any:
    # Python's json reads NaN and Infinity, which no JSON client can read back in an echo.
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"{clip(text)} is out of a double's range")
    return number


def parse_frame(frame: Any, max_depth: int) -> Tuple[Any, Optional[str]]:
    """(value, None) for a JSON text frame nested at most `max_depth` levels, (None, error frame) otherwise."""
    if isinstance(frame, bytes):
        return None, error_frame("INVALID_JSON", "Invalid JSON: binary frame; OpenEnv messages are JSON text frames")
    too_deep = error_frame("INVALID_JSON", f"Invalid JSON: nested deeper than {max_depth} levels (max_depth); OpenEnv messages nest 3")
    try:
        value = json.loads(frame, parse_constant=_not_json, parse_float=_finite)
    except RecursionError:  # deeper than the parser's own recursion limit
        return None, too_deep
    except ValueError as error:  # not JSON, or an integer of more digits than Python converts
        return None, error_frame("INVALID_JSON", f"Invalid JSON: {clip(str(error))}")
    if isinstance(value, (dict, list)) and _deeper_than(value, max_depth):
        return None, too_deep
    return value, None


# --------------------------------------------------------------------------- checking

_KINDS = {"integer": "int_type", "number": "float_type", "string": "string_type", "boolean": "bool_type", "object": "dict_type", "array": "list_type"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _branch_for(node: Dict[str, Any], value: Any) -> Optional[Dict[str, Any]]:
    """The branch of `node` (itself, or one of its anyOf) whose type `value` has, or None."""
    kind = _json_type(value)
    for branch in node.get("anyOf", [node]):
        if "const" in branch:
            if branch["const"] == value and _json_type(branch["const"]) == kind:
                return branch
        elif "type" not in branch or branch["type"] == kind or (branch["type"] == "number" and kind == "integer"):
            return branch
    return None


def _within_bounds(node: Dict[str, Any], value: Any) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in node and value < node["minimum"]:
            return False
        if "maximum" in node and value > node["maximum"]:
            return False
    if isinstance(value, str) and "maxLength" in node and len(value) > node["maxLength"]:
        return False
    return True


def _expected(node: Dict[str, Any]) -> str:
    """What a schema allows, in words: its description, else "an integer in [0, 9]", "a string or null"."""
    if "description" in node:
        return node["description"]
    if "anyOf" in node:
        return " or ".join(_expected(branch) for branch in node["anyOf"])
    if "const" in node:
        return json.dumps(node["const"])
    kind = node.get("type")
    if kind in ("integer", "number"):
        noun = "an integer" if kind == "integer" else "a number"
        low, high = node.get("minimum"), node.get("maximum")
        if low is not None and high is not None:
            return f"{noun} in [{low}, {high}]"
        if low is not None:
            return f"{noun} >= {low}"
        if high is not None:
            return f"{noun} <= {high}"
        return noun
    if kind == "string":
        return "a string" if "maxLength" not in node else f"a string of at most {node['maxLength']} characters"
    return {"boolean": "a boolean", "null": "null", "array": "an array", "object": "an object"}.get(kind, "a JSON value")


def _leaf_error(node: Dict[str, Any], value: Any, loc: Loc) -> Dict[str, Any]:
    typed = next((b for b in node.get("anyOf", [node]) if b.get("type") != "null"), {})
    kind = "literal_error" if "const" in typed else _KINDS.get(typed.get("type"), "value_error")
    return {"type": kind, "loc": loc, "msg": f"must be {_expected(node)}, not {preview(value)}", "input": _echo(value)}


def _field_errors(node: Dict[str, Any], value: Any, loc: Loc) -> List[Dict[str, Any]]:
    """Why `value` does not fit `node`, at `loc` (protocol/openenv.ts's fieldErrors): the unknown
    keys of a closed object (a few), else the first missing field or the first field that does not
    fit; [] when it fits."""
    branch = _branch_for(node, value)
    if branch is None:
        return [_leaf_error(node, value, loc)]
    if branch.get("type") == "object" and isinstance(value, dict):
        properties = branch.get("properties", {})
        allowed = ", ".join(properties)
        if branch.get("additionalProperties") is False:
            extra = [key for key in value if key not in properties]
            if extra:
                return [
                    {"type": "extra_forbidden", "loc": [*loc, clip(key)], "msg": f"is not a field here; allowed: {allowed}", "input": _echo(value[key])}
                    for key in extra[:MAX_LISTED_ERRORS]
                ]
        for key, child in properties.items():
            if key not in value:
                if key in branch.get("required", []):
                    return [{"type": "missing", "loc": [*loc, key], "msg": f"is required: {_expected(child)}", "input": _echo(value)}]
                continue
            errors = _field_errors(child, value[key], [*loc, key])
            if errors:
                return errors
        return []
    if branch.get("type") == "array" and isinstance(value, list) and "items" in branch:
        for i, item in enumerate(value):
            errors = _field_errors(branch["items"], item, [*loc, i])
            if errors:
                return errors
        return []
    return [] if _within_bounds(branch, value) else [_leaf_error(node, value, loc)]


def _describe(errors: List[Dict[str, Any]]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"] for e in errors)


def validation_frame(errors: List[Dict[str, Any]]) -> str:
    return error_frame("VALIDATION_ERROR", f"Invalid message: {_describe(errors)}", errors=errors)


def check_message(value: Any) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(message, None) for a valid message, (None, error frame) otherwise. A reset comes back as
    {type, seed, episode_id}, a step as {type, action}."""
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        message = f'a message must be a JSON object with a string "type" ({", ".join(MESSAGE_TYPES)})'
        return None, validation_frame([{"type": "model_type", "loc": [], "msg": message, "input": _echo(value)}])
    kind = value["type"]
    if kind not in CLIENT_MESSAGES:
        return None, error_frame("UNKNOWN_TYPE", f"Unknown message type: {preview(kind)}; allowed: {', '.join(MESSAGE_TYPES)}")
    errors = _field_errors(CLIENT_MESSAGES[kind], value, [])
    if errors:
        return None, validation_frame(errors)
    if kind == "reset":
        data = value.get("data") or {}
        seed = data.get("seed")
        return {"type": "reset", "seed": None if seed is None else int(seed), "episode_id": data.get("episode_id")}, None
    if kind == "step":
        return {"type": "step", "action": value["data"]["action"]}, None
    return {"type": kind}, None
