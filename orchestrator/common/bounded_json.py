"""JSON another program wrote (a trial's result, a journal line, a trial's copy of its config),
parsed so that nothing in it raises anything but one reason: no number past a float's range
(Python would convert thousands of digits, or refuse with its own error), no nesting past a
bound (json recurses, and a deep enough text exhausts the stack), nothing that is not JSON."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from orchestrator.common.errors import excerpt

_LARGEST_WHOLE_FLOAT = int(sys.float_info.max)
FLOAT_DIGITS = len(str(_LARGEST_WHOLE_FLOAT))


class UnfitJson(ValueError):
    """Text that is JSON but not one a reader may take: its message says why."""


class NotJson(ValueError):
    """Text that is not JSON at all (a line cut short, bytes that are not UTF-8): the message
    is the parser's."""


def _whole_number(text: str) -> int:
    """A JSON integer, refused before Python converts thousands of digits (or fails to)."""
    digits = len(text.lstrip("-"))
    if digits <= FLOAT_DIGITS:  # JSON has no leading zeros: a longer one cannot fit
        value = int(text)
        if abs(value) <= _LARGEST_WHOLE_FLOAT:
            return value
    raise UnfitJson(f"a number of {digits} digits, past a float's range (1.8e308)")


def _decimal_number(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise UnfitJson(f"the number {excerpt(text, 24, quote=False)}, past a float's range "
                        "(1.8e308)")
    return value


_DECODER = json.JSONDecoder(parse_int=_whole_number, parse_float=_decimal_number)


def depth_problem(value: Any, max_depth: int) -> str | None:
    """Why `value` nests lists and mappings deeper than `max_depth`, or None (walked without
    recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, (dict, list)):
            continue
        if depth > max_depth:
            return f"nested more than {max_depth} levels deep"
        stack.extend((child, depth + 1) for child in
                     (item.values() if isinstance(item, dict) else item))
    return None


def loads_bounded(data: str | bytes, max_depth: int) -> Any:
    """The JSON value in `data`; UnfitJson or NotJson, each with its one-line reason."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = _DECODER.decode(text)
    except UnicodeDecodeError:
        raise NotJson("not UTF-8 text") from None
    except RecursionError:
        raise UnfitJson(f"nested more than {max_depth} levels deep") from None
    except json.JSONDecodeError as exc:
        raise NotJson(f"not JSON ({exc})") from None
    brackets = text.count("[") + text.count("{")
    why = depth_problem(value, max_depth) if brackets > max_depth else None
    if why:
        raise UnfitJson(why)
    return value
