"""JSONL in and out: lazy reading with line numbers, appending with a flush per row.

Reading never loads a whole file: rows are parsed one line at a time, so a
collection over a million rows holds one row in memory, not a million. A bad
line is reported with its file and line number. A UTF-8 byte-order mark at the
start of a file is skipped (editors on Windows write one). Rows that enter from
outside (`scan_jsonl`'s default) are read strictly (`strict_loads`, which the HTTP
ingress uses too): a key given twice in one object is an error naming it (a JSON
parser would silently keep the last), and `NaN`/`Infinity` are not JSON; our own
files are read with the fast parser.

Writing appends one line and flushes it at once, so a crash (even SIGKILL)
loses nothing that finished; at worst the last line is cut short, and readers
of our own outputs treat a cut-short last line as not written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from gym_serve.errors import InputError

__all__ = [
    "INTEGERS",
    "JsonlWriter",
    "NotJSON",
    "dumps",
    "loads",
    "read_jsonl",
    "scan_jsonl",
    "scan_jsonl_spans",
    "strict_loads",
    "unwritable",
]

loads = orjson.loads


def dumps(row: Any) -> bytes:
    """One JSON line (without the newline)."""
    return orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY)


class NotJSON(ValueError):
    """Raised by `strict_loads` when text parses only as lenient JSON, or not at all; `field` is the dotted path of
    the offending value where there is one."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(f"`{field}`: {reason}" if field else reason)
        self.reason, self.field = reason, field


class _Twice(dict[str, Any]):
    """An object in which `key` was given twice (the last value kept, as a JSON parser keeps it)."""

    key: str


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    row = dict(pairs)
    if len(row) == len(pairs):
        return row
    seen: set[str] = set()
    twice = _Twice(row)
    twice.key = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
    return twice


def strict_loads(raw: bytes | str) -> Any:
    """JSON as the standard has it, for what enters from outside: a key given twice in one object, `NaN`,
    `Infinity` or `-Infinity`, and an integer beyond 64 bits (which no writer here takes) are `NotJSON` naming
    the field (a lenient parser keeps the last value, or a number other readers refuse); so is text nested too
    deeply for the parser. Other errors are `ValueError`s (`json.JSONDecodeError`, `UnicodeDecodeError`), as
    `json.loads` raises them.

    >>> strict_loads('{"a": [1, {"b": 2, "b": 3}]}')
    Traceback (most recent call last):
    gym_serve.wire.jsonl.NotJSON: `a.1.b`: the key `b` is given twice in one object
    >>> strict_loads(b'{"rows": [{"temperature": NaN}]}')
    Traceback (most recent call last):
    gym_serve.wire.jsonl.NotJSON: `rows.0.temperature`: `NaN` is not JSON
    """
    try:
        value = json.loads(raw, object_pairs_hook=_pairs)
    except RecursionError:
        raise NotJSON("nested too deeply to read") from None
    problem = unwritable(value)
    if problem is not None:
        raise NotJSON(problem[1], problem[0])
    return value


INTEGERS = (-(2**63), 2**64 - 1)
"""The integers the JSON writer (orjson) writes; a value beyond them would stop a row from being written."""


def unwritable(value: Any, *, max_depth: int | None = None) -> tuple[str | None, str] | None:
    """The first thing in a parsed JSON value that is not JSON or that the writers here cannot write, as
    `(dotted field path, what is wrong)`, or None: `NaN` and the infinities, an integer outside `INTEGERS`, a key
    given twice (`strict_loads`'s parse marks them), objects and arrays nested more than `max_depth` levels
    (`value` itself is level 1). Iterative: a value too deep for recursion is one it looks for.

    >>> unwritable({"a": [{"b": []}]}, max_depth=3)
    ('a.0.b', 'nested more than 3 levels deep (objects and arrays)')
    >>> unwritable({"n": 2**64}), unwritable({"a": [{"b": 1}]}, max_depth=3)
    (('n', 'the integer 18446744073709551616 is beyond 64 bits'), None)
    """
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return _dotted(path), f"`{_CONSTANTS[repr(node)]}` is not JSON"
        if isinstance(node, int) and not isinstance(node, bool) and not INTEGERS[0] <= node <= INTEGERS[1]:
            return _dotted(path), f"the integer {node} is beyond 64 bits"
        if isinstance(node, _Twice):
            return _dotted((*path, node.key)), f"the key `{node.key}` is given twice in one object"
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in reversed(list(children)):
            if max_depth is not None and isinstance(child, dict | list) and len(path) + 2 > max_depth:
                return _dotted((*path, key)), f"nested more than {max_depth} levels deep (objects and arrays)"
            stack.append((child, (*path, key)))
    return None


_CONSTANTS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
"""What the non-finite floats were called in the text."""


def _dotted(path: tuple[Any, ...]) -> str | None:
    return ".".join(str(part) for part in path) or None


def scan_jsonl(
    path: str | Path, *, strict: bool = True
) -> Iterator[tuple[int, dict[str, Any] | None, InputError | None]]:
    """Yield `(line_number, row, None)` for good lines and `(line_number, None, error)` for bad ones.

    Blank lines are skipped. A line that is not a JSON object is an error; so is, with
    `strict`, an object with a key given twice.
    """
    for number, _, _, row, error in scan_jsonl_spans(path, strict=strict):
        yield number, row, error


def scan_jsonl_spans(
    path: str | Path, *, strict: bool = True
) -> Iterator[tuple[int, int, int, dict[str, Any] | None, InputError | None]]:
    """`scan_jsonl`, with each line's byte offset and length: `(line_number, offset, length, row, error)`.

    An index of a large file keeps the spans, and reads one row back with a seek.
    """
    path = Path(path)
    try:
        handle = path.open("rb")
    except OSError as e:
        raise InputError(f"cannot open: {e.strerror}", source=str(path)) from e
    parse = strict_loads if strict else orjson.loads
    offset = 0
    with handle:
        for number, raw in enumerate(handle, start=1):
            start, length = offset, len(raw)
            offset += length
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a UTF-8 byte-order mark
            if not raw.strip():
                continue
            try:
                row = parse(raw)
            except NotJSON as e:
                yield number, start, length, None, InputError(e.reason, source=str(path), line=number, field=e.field)
                continue
            except (ValueError, RecursionError) as e:  # orjson's and json's decode errors are ValueErrors
                yield number, start, length, None, InputError(f"not valid JSON: {e}", source=str(path), line=number)
                continue
            if not isinstance(row, dict):
                error = InputError(f"expected a JSON object, got {type(row).__name__}", source=str(path), line=number)
                yield number, start, length, None, error
                continue
            yield number, start, length, row, None


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line_number, row)` (fast parser: our own files); raise `InputError` at the first bad line."""
    for number, row, error in scan_jsonl(path, strict=False):
        if error is not None:
            raise error
        yield number, row  # type: ignore[misc]


class JsonlWriter:
    """Writes rows to a JSONL file, one line per row.

    By default it appends and flushes every line, so a crash loses at most the
    line being written; `append=False, flush=False` suits files that are
    rebuilt from scratch anyway.
    """

    def __init__(self, path: str | Path, *, append: bool = True, flush: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] = self.path.open("ab" if append else "wb")
        self._flush = flush

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(dumps(row) + b"\n")
        if self._flush:
            self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
