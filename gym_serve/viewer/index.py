"""The viewer's index of a rollout file: a few numbers per rollout, the tasks, the findings; rows read on demand.

Building it reads every line once, runs the health checks on it
(`gym_serve.analysis.health.HealthRun`) and keeps, per rollout, where its line
is (file, byte offset, length), who it is (agent, task, rollout index) and what
the tables show (reward, failure kind, turns, tokens, the checks that flagged
it); the row itself is dropped. A page reads the few rows it shows with a seek,
so 100,000 rollouts cost a few megabytes, not the file.

The index is kept beside the rollouts (`<rollouts>_viewer_index.json`) and
used again while the files it was built from keep their size and modification
time, so the next `gym-serve view` of the same file starts at once.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gym_serve.analysis.health import HealthRun, nothing_readable, read_rollouts, rollout_sources
from gym_serve.analysis.metrics import pass_at_k
from gym_serve.collect.job import sibling_path
from gym_serve.errors import InputError
from gym_serve.wire.turns import split_turns

__all__ = ["RolloutIndex", "Task", "unreadable"]

VERSION = 1
PASS = 1.0
"""A rollout passes when its reward reaches this (NeMo Gym's correctness for binary rewards)."""
_COLUMNS = (
    "source", "offset", "length", "line", "agent", "task", "rollout",
    "reward", "failure", "masked", "turns", "tokens_in", "tokens_out", "checks",
)  # fmt: skip


@dataclass
class Task:
    """One task of one agent, as the task table shows it."""

    agent: str
    task: int | str
    rids: list[int]
    passed: int = 0
    failures: int = 0
    mean_reward: float | None = None
    pass_at_k: float | None = None
    checks: Counter[str] = field(default_factory=Counter)

    @property
    def rollouts(self) -> int:
        return len(self.rids)

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.rids) if self.rids else 0.0

    @property
    def findings(self) -> int:
        return sum(self.checks.values())


class RolloutIndex:
    """One record per rollout, in columns (`rid` is the position); see the module docstring."""

    def __init__(self, sources: list[str]) -> None:
        self.sources = sources
        self.columns: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
        self.task_checks: dict[tuple[str, int | str], list[str]] = defaultdict(list)
        self.bad_lines: list[dict[str, Any]] = []
        self.check_counts: dict[str, dict[str, Any]] = {}
        self._tasks: list[Task] | None = None

    def __len__(self) -> int:
        return len(self.columns["line"])

    def __getitem__(self, name: str) -> list[Any]:
        return self.columns[name]

    # ---- building, keeping, loading ------------------------------------------------------------------------

    @classmethod
    def kept(cls, rollouts_path: str | Path) -> RolloutIndex | None:
        """The index kept beside the file, if it was built from the files as they are now."""
        path = sibling_path(rollouts_path, "viewer_index.json")
        return cls._load(path, rollout_sources(rollouts_path)) if path.is_file() else None

    @classmethod
    def open(cls, rollouts_path: str | Path, *, progress: Callable[[int], None] | None = None) -> RolloutIndex:
        """The index of a rollout file (and its failures file): the kept one if still valid, else built and kept.

        `progress` hears the bytes read so far while it builds.
        """
        index = cls.kept(rollouts_path)
        if index is not None:
            return index
        sources = rollout_sources(rollouts_path)
        index = cls.build(sources, progress=progress)
        if not len(index):
            raise InputError(nothing_readable(index.bad_lines), source=str(rollouts_path))
        try:
            sibling_path(rollouts_path, "viewer_index.json").write_bytes(orjson.dumps(index._state(sources)))
        except OSError:
            pass  # a read-only folder: the next start builds it again
        return index

    @classmethod
    def build(cls, sources: list[Path], *, progress: Callable[[int], None] | None = None) -> RolloutIndex:
        index = cls([str(s) for s in sources])
        run = HealthRun()
        where: dict[tuple[str | None, int | None], int] = {}
        before = {str(s): sum(p.stat().st_size for p in sources[:n]) for n, s in enumerate(sources)}
        for line in read_rollouts(sources):
            if progress is not None and line.number % 2000 == 0:
                progress(before[line.source] + line.offset)
            if line.row is None:
                run.unreadable(line.source, line.number, line.reason or "")
                index.bad_lines.append({"source": line.source, "line": line.number, "error": line.reason})
                continue
            where[(line.source, line.number)] = len(index)
            checks = sorted({f.check for f in run.observe(line.row, source=line.source, line=line.number)})
            index._add(index.sources.index(line.source), line.offset, line.length, line.number, line.row, checks)
        for finding in run.finish():
            if finding.rollout is not None and (finding.source, finding.line) in where:
                index.columns["checks"][where[(finding.source, finding.line)]].append(finding.check)
            else:
                index.task_checks[(finding.agent or "", _task_key(finding.task))].append(finding.check)
        index.check_counts = {c.id: c.as_dict() for c in run.counts.values()}
        return index

    def _add(self, source: int, offset: int, length: int, line: int, row: dict[str, Any], checks: list[str]) -> None:
        response: dict[str, Any] = row["response"] if isinstance(row.get("response"), dict) else {}
        usage: dict[str, Any] = response["usage"] if isinstance(response.get("usage"), dict) else {}
        agent_ref: dict[str, Any] = row["agent_ref"] if isinstance(row.get("agent_ref"), dict) else {}
        reward = row.get("reward")
        failure = row.get("_ng_failure_class")
        values: dict[str, Any] = {
            "source": source,
            "offset": offset,
            "length": length,
            "line": line,
            "agent": str(agent_ref.get("name") or ""),
            "task": _task_key(row.get("_ng_task_index")),
            "rollout": _task_key(row.get("_ng_rollout_index")),
            "reward": float(reward) if isinstance(reward, int | float) and failure is None else None,
            "failure": str(failure) if failure is not None else None,
            "masked": row.get("mask_sample") is True,
            "turns": sum(1 for t in split_turns(list(response.get("output") or [])) if t.items),
            "tokens_in": usage.get("input_tokens") if isinstance(usage.get("input_tokens"), int) else None,
            "tokens_out": usage.get("output_tokens") if isinstance(usage.get("output_tokens"), int) else None,
            "checks": checks,
        }
        for name, value in values.items():
            self.columns[name].append(value)

    def _state(self, sources: list[Path]) -> dict[str, Any]:
        return {
            "version": VERSION,
            "stamps": [_stamp(s) for s in sources],
            "sources": self.sources,
            "columns": self.columns,
            "task_checks": [[agent, task, checks] for (agent, task), checks in self.task_checks.items()],
            "bad_lines": self.bad_lines,
            "check_counts": self.check_counts,
        }

    @classmethod
    def _load(cls, path: Path, sources: list[Path]) -> RolloutIndex | None:
        try:
            state = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        if state.get("version") != VERSION or state.get("stamps") != [_stamp(s) for s in sources]:
            return None
        index = cls(state["sources"])
        index.columns = state["columns"]
        for agent, task, checks in state["task_checks"]:
            index.task_checks[(agent, task)] = checks
        index.bad_lines, index.check_counts = state["bad_lines"], state["check_counts"]
        return index

    # ---- reading -------------------------------------------------------------------------------------------

    def row(self, rid: int) -> dict[str, Any]:
        """The rollout row `rid`, read from its file."""
        with open(self.sources[self.columns["source"][rid]], "rb") as handle:
            handle.seek(self.columns["offset"][rid])
            raw = handle.read(self.columns["length"][rid])
        if raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        row: dict[str, Any] = orjson.loads(raw)
        return row

    def tasks(self) -> list[Task]:
        """Every (agent, task), in file order, with its numbers (computed once)."""
        if self._tasks is None:
            by_key: dict[tuple[str, int | str], Task] = {}
            agent, task = self.columns["agent"], self.columns["task"]
            for rid in range(len(self)):
                key = (agent[rid], task[rid])
                if key not in by_key:
                    by_key[key] = Task(agent=key[0], task=key[1], rids=[])
                by_key[key].rids.append(rid)
            for key, found in by_key.items():
                self._score(found, self.task_checks.get(key, []))
            self._tasks = list(by_key.values())
        return self._tasks

    def _score(self, task: Task, task_checks: list[str]) -> None:
        rewards = [self.columns["reward"][rid] for rid in task.rids]
        scored = [r for r in rewards if r is not None]
        task.failures = sum(1 for rid in task.rids if self.columns["failure"][rid] is not None)
        task.passed = sum(1 for r in scored if r >= PASS)
        task.mean_reward = statistics.fmean(scored) if scored else None
        if scored:  # a failed rollout does not pass
            task.pass_at_k = pass_at_k([min(r or 0.0, PASS) for r in rewards], len(rewards))
        for rid in task.rids:
            task.checks.update(self.columns["checks"][rid])
        task.checks.update(task_checks)


def unreadable(rollouts_path: str | Path) -> str | None:
    """Why the file holds no rollout, or None as soon as a line is one (a rollout file is not read to its end)."""
    bad: list[dict[str, Any]] = []
    for line in read_rollouts(rollout_sources(rollouts_path)):
        if line.row is not None:
            return None
        bad.append({"line": line.number, "error": line.reason})
    return nothing_readable(bad)


def _task_key(value: Any) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return "" if value is None else str(value)


def _stamp(path: Path) -> list[Any]:
    stat = path.stat()
    return [str(path), stat.st_size, stat.st_mtime_ns]
