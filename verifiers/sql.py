"""Score a model's SQL query by its result set against a reference query's, on a read-only SQLite DB.

Both queries run on a connection opened with `mode=ro` (URI), with an
authorizer that also refuses `ATTACH`/`DETACH` (which could create files) and
a progress handler that aborts a query after `timeout_s`. The work runs in a
worker thread (`asyncio.to_thread`), so the event loop keeps serving;
`sqlite3` releases the GIL while a query runs.

The model's query is the model's: whatever it does is a 0 with `error` saying why, never
a verifier that failed. So besides time, its memory is bounded: no string or blob it makes or
reads may pass `MAX_VALUE_BYTES` (SQLite's length limit: `zeroblob(1e9)` is an error, not a
gigabyte), and its result set may hold at most `MAX_ROWS` rows and `MAX_RESULT_BYTES` of text
and blobs, counted as the rows are fetched (a thousand rows of `randomblob` no longer fill the
replica's memory before the deadline is looked at).

Result sets are compared as multisets of rows (order-insensitive) unless the
task says `ordered`; floats are rounded so `0.1 + 0.2` equals `0.3`. Column
names are ignored: `SELECT name AS n` and `SELECT name` return the same data.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SqlResult", "compare_queries", "run_query"]

MAX_ROWS = 100_000
MAX_VALUE_BYTES = 1_000_000
"""The longest string or blob a query may make or read (`SQLITE_LIMIT_LENGTH`); a row holds at most one per column."""
MAX_RESULT_BYTES = 64_000_000
"""The most text and blob bytes a result set may hold."""
_FETCH = 64


class _Timeout(Exception):
    pass


@dataclass
class SqlResult:
    """`reward` 1.0 when the predicted query returns the reference's rows; `error` says why not."""

    reward: float
    error: str | None = None
    predicted_rows: int | None = None
    reference_rows: int | None = None


def run_query(
    db_path: str | Path,
    query: str,
    *,
    timeout_s: float = 5.0,
    max_rows: int = MAX_ROWS,
    max_bytes: int = MAX_RESULT_BYTES,
) -> list[tuple]:
    """Run one read-only query; raises `sqlite3.Error` (or `TimeoutError`) on failure."""
    uri = f"{Path(db_path).resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    deadline = time.monotonic() + timeout_s
    try:
        conn.set_authorizer(_authorize)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        # every 1,000 steps: one step may make a value of up to MAX_VALUE_BYTES, so 10,000 could take seconds
        conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1_000)
        rows: list[tuple] = []
        size = 0
        try:
            cursor = conn.execute(query)
            while batch := cursor.fetchmany(_FETCH):
                rows += batch
                size += sum(len(v) for row in batch for v in row if isinstance(v, str | bytes))
                if len(rows) > max_rows:
                    raise sqlite3.DataError(f"query returned more than {max_rows} rows")
                if size > max_bytes:
                    raise sqlite3.DataError(f"query returned more than {max_bytes} bytes of text and blobs")
        except sqlite3.OperationalError as e:
            if "interrupted" in str(e):
                raise TimeoutError(f"query ran longer than {timeout_s}s") from e
            raise
        return rows
    finally:
        conn.close()


async def compare_queries(
    db_path: str | Path, predicted: str, reference: str, *, ordered: bool = False, timeout_s: float = 5.0
) -> SqlResult:
    """Run both queries off the event loop and compare their result sets."""
    return await asyncio.to_thread(_compare, Path(db_path), predicted, reference, ordered, timeout_s)


def _compare(db_path: Path, predicted: str, reference: str, ordered: bool, timeout_s: float) -> SqlResult:
    expected = run_query(db_path, reference, timeout_s=timeout_s)  # a broken reference is the task's bug: raise
    try:
        actual = run_query(db_path, predicted, timeout_s=timeout_s)
    except (sqlite3.Error, TimeoutError, ValueError) as e:
        return SqlResult(0.0, error=f"{type(e).__name__}: {e}", reference_rows=len(expected))
    a, b = [_normalize(r) for r in actual], [_normalize(r) for r in expected]
    same = a == b if ordered else Counter(a) == Counter(b)
    return SqlResult(1.0 if same else 0.0, None if same else "result sets differ", len(actual), len(expected))


def _normalize(row: tuple) -> tuple:
    return tuple(round(v, 6) if isinstance(v, float) else v for v in row)


def _authorize(action: int, *args: Any) -> int:
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK
