"""Hypothesis strategies the property tests share: JSON values, and rows that are almost right.

Arbitrary JSON alone rarely gets past a row's first check, so most generated rows start from a real example
row and change one thing in it (a value anywhere replaced by arbitrary JSON, or a key removed): that is where
the validators deep inside a row are reached.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = ["BOUNDED", "EXAMPLES", "json_values", "mutated", "paths"]

EXAMPLES = int(os.environ.get("GYM_SERVE_PROPERTY_EXAMPLES", "150"))
"""Examples per property: CI's budget (a second or two each); raise it to search harder by hand."""
BOUNDED = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
"""Any JSON value (what `json.loads` can give: no NaN, no infinities)."""


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value: keys of objects, indices of lists (the value itself is `()`)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += paths(inner, (*prefix, index))
    return found


def _replaced(value: Any, path: tuple[Any, ...], new: Any, *, delete: bool) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if delete and not rest:
            del copy[head]
        else:
            copy[head] = _replaced(value[head], rest, new, delete=delete)
        return copy
    copy_list = list(value)
    if delete and not rest:
        del copy_list[head]
    else:
        copy_list[head] = _replaced(value[head], rest, new, delete=delete)
    return copy_list


@st.composite
def mutated(draw: st.DrawFn, rows: list[dict[str, Any]]) -> Any:
    """One of `rows` with one value anywhere in it replaced by arbitrary JSON, or one key or item removed."""
    row = draw(st.sampled_from(rows))
    path = draw(st.sampled_from(paths(row)))
    if path and draw(st.booleans()):
        return _replaced(row, path, None, delete=True)
    return _replaced(row, path, draw(json_values), delete=False)
