"""The task table's questions, from the page's query string: which tasks, in what order, which page of them.

The table is sorted, filtered and cut into pages on the server, so a page
holds 50 rows whatever the file holds; every state of the table is a URL.

>>> q = TaskQuery.from_params({"sort": "pass_rate", "show": "never", "page": "2"})
>>> q.sort, q.show, q.page, q.descending
('pass_rate', 'never', 2, False)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlencode

from pydantic import BaseModel, Field, ValidationError

from gym_serve.viewer.index import Task

__all__ = ["SORTS", "Page", "TaskQuery", "page_of"]

PER_PAGE = 50
SORTS: dict[str, Any] = {
    "agent": lambda t: (t.agent, _order(t.task)),
    "task": lambda t: (_order(t.task), t.agent),
    "rollouts": lambda t: t.rollouts,
    "pass_rate": lambda t: t.pass_rate,
    "mean_reward": lambda t: -math.inf if t.mean_reward is None else t.mean_reward,
    "pass_at_k": lambda t: -math.inf if t.pass_at_k is None else t.pass_at_k,
    "failures": lambda t: t.failures,
    "findings": lambda t: t.findings,
}
SHOWS = {
    "all": lambda t: True,
    "never": lambda t: t.passed == 0,
    "always": lambda t: t.passed == t.rollouts,
    "failures": lambda t: t.failures > 0,
    "findings": lambda t: t.findings > 0,
}


def _order(task: int | str) -> tuple[int, int | str]:
    return (0, task) if isinstance(task, int) else (1, task)


class TaskQuery(BaseModel):
    """What the task table shows: `q` (agent or task contains), `show`, `check`, `sort`, `dir`, `page`."""

    q: str = ""
    show: Literal["all", "never", "always", "failures", "findings"] = "all"
    check: str = ""
    sort: Literal["agent", "task", "rollouts", "pass_rate", "mean_reward", "pass_at_k", "failures", "findings"] = (
        "agent"
    )
    dir: Literal["asc", "desc"] = "asc"
    page: int = Field(default=1, ge=1)

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> TaskQuery:
        """The query a URL asks; a value it cannot take falls back to its default rather than failing the page."""
        known = {k: v for k, v in params.items() if k in cls.model_fields}
        try:
            return cls.model_validate(known)
        except ValidationError as e:
            bad = {str(err["loc"][0]) for err in e.errors()}
            return cls.model_validate({k: v for k, v in known.items() if k not in bad})

    @property
    def descending(self) -> bool:
        return self.dir == "desc"

    def url(self, **changes: Any) -> str:
        """The address of this table with `changes` (a new sort starts at page 1)."""
        state = {**self.model_dump(), "page": 1, **changes}
        return "/?" + urlencode({k: v for k, v in state.items() if v not in ("", None)})

    def sort_url(self, column: str) -> str:
        flip = "asc" if self.sort == column and self.descending else "desc" if self.sort == column else "asc"
        return self.url(sort=column, dir=flip)


class Page(BaseModel):
    """One page of a list: its items, where it starts, how many pages there are."""

    items: list[Any]
    number: int
    pages: int
    total: int
    start: int


def page_of(items: list[Any], number: int, per_page: int = PER_PAGE) -> Page:
    pages = max(1, math.ceil(len(items) / per_page))
    number = min(number, pages)
    start = (number - 1) * per_page
    return Page(items=items[start : start + per_page], number=number, pages=pages, total=len(items), start=start)


def select(tasks: list[Task], query: TaskQuery) -> Page:
    """The page of tasks the query asks for."""
    needle = query.q.strip().lower()
    chosen = [
        t
        for t in tasks
        if SHOWS[query.show](t)
        and (not needle or needle in t.agent.lower() or needle in str(t.task).lower())
        and (not query.check or query.check in t.checks)
    ]
    chosen.sort(key=SORTS[query.sort], reverse=query.descending)
    return page_of(chosen, query.page)
