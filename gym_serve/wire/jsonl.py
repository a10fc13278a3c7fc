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

__all__ = ["JsonlWriter", "NotJSON", "dumps", "loads", "read_jsonl", "scan_jsonl", "scan_jsonl_spans", "strict_loads"]

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
    """JSON as the standard has it, for what enters from outside: a key given twice in one object and `NaN`,
    `Infinity` or `-Infinity` are `NotJSON` naming the field (a lenient parser keeps the last value, or a
    number no other reader takes); so is text nested too deeply for the parser. Other errors are `ValueError`s
    (`json.JSONDecodeError`, `UnicodeDecodeError`), as `json.loads` raises them.

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
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:  # iterative: the value may be as deep as the parser went
        node, path = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise NotJSON(f"`{_CONSTANTS[repr(node)]}` is not JSON", _dotted(path))
        if isinstance(node, _Twice):
            raise NotJSON(f"the key `{node.key}` is given twice in one object", _dotted((*path, node.key)))
        if isinstance(node, dict):
            stack.extend((child, (*path, key)) for key, child in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((child, (*path, index)) for index, child in reversed(list(enumerate(node))))
    return value


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
