"""JSONL in and out: lazy reading with line numbers, appending with a flush per row.

Reading never loads a whole file: rows are parsed one line at a time, so a
collection over a million rows holds one row in memory, not a million. A bad
line is reported with its file and line number.

Writing appends one line and flushes it at once, so a crash (even SIGKILL)
loses nothing that finished; at worst the last line is cut short, and readers
of our own outputs treat a cut-short last line as not written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import orjson

from gym_serve.errors import InputError

__all__ = ["JsonlWriter", "dumps", "loads", "read_jsonl", "replacing_jsonl", "scan_jsonl"]

loads = orjson.loads


def dumps(row: Any) -> bytes:
    """One JSON line (without the newline)."""
    return orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY)


def scan_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | None, InputError | None]]:
    """Yield `(line_number, row, None)` for good lines and `(line_number, None, error)` for bad ones.

    Blank lines are skipped. A line that is not a JSON object is an error.
    """
    path = Path(path)
    try:
        handle = path.open("rb")
    except OSError as e:
        raise InputError(f"cannot open: {e.strerror}", source=str(path)) from e
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                row = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                yield number, None, InputError(f"not valid JSON: {e}", source=str(path), line=number)
                continue
            if not isinstance(row, dict):
                error = InputError(f"expected a JSON object, got {type(row).__name__}", source=str(path), line=number)
                yield number, None, error
                continue
            yield number, row, None


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line_number, row)`; raise `InputError` at the first bad line."""
    for number, row, error in scan_jsonl(path):
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


@contextmanager
def replacing_jsonl(path: str | Path) -> Iterator[JsonlWriter]:
    """A writer for a file that is rebuilt whole: `path` is replaced only if the block finishes.

    Rows go to `<path>.tmp`, which takes the place of `path` at the end; if
    the block raises, the temporary file is removed and `path` is untouched, so
    a failed run never empties an earlier output nor leaves an empty one.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with JsonlWriter(tmp, append=False, flush=False) as writer:
            yield writer
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
