"""The engine of the health checks (`gym_serve.analysis.health_checks`): rows in, findings and counts out.

`HealthRun` is the one engine: `observe` runs the per-rollout checks on a row
and remembers the little the task and file checks need; `finish` runs those.
`gym-serve health` (`gym_serve.analysis.health_report`), the health section of
`gym-serve profile`, the viewer and `gym-serve collect`'s live warnings
(`HealthMonitor`) all use it. A collection's failures (`<out>_failures.jsonl`)
are read with its rollouts (`rollout_sources`, `read_rollouts`).

Bad lines never stop it: each is a `record_unreadable` finding with its line
number. A file in which no line is a rollout is an error that says what the
file looks like instead (`nothing_readable`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from gym_serve.analysis.health_checks import (
    CHECKS,
    ROLLOUT_CHECKS,
    Finding,
    HealthOptions,
    RowView,
    Scope,
    model_failure,
)
from gym_serve.collect.job import failures_path
from gym_serve.errors import InputError
from gym_serve.wire.jsonl import scan_jsonl_spans

__all__ = [
    "CheckCount",
    "HealthRun",
    "Line",
    "not_a_rollout",
    "nothing_readable",
    "read_rollouts",
    "rollout_sources",
]


@dataclass(slots=True)
class CheckCount:
    """One check's numbers over a file (a plain dataclass: it is counted up for every row)."""

    id: str
    origin: str
    scope: Scope
    says: str
    evaluated: int = 0
    """Rows (or tasks) where the check could look."""
    flagged: int = 0
    """Rows (or tasks) with at least one finding."""
    findings: int = 0

    @property
    def rate(self) -> float:
        return self.flagged / self.evaluated if self.evaluated else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {name: str(value) if name == "scope" else value for name, value in asdict(self).items()}


@dataclass
class _Seen:
    """What the task and file checks need of a row, once its body is gone."""

    agent: Any
    task: Any
    rollout: Any
    source: str
    line: int
    flagged: bool
    answered: bool | None
    """A model call of the rollout returned (None: the row cannot say, e.g. a failure before the model)."""
    reward: float | None
    """The reward of a scored (not masked, not failed) rollout."""
    oldest_version: int | None


@dataclass
class HealthRun:
    """The checks over a stream of rows: `observe` each row (or `unreadable` each bad line), then `finish`."""

    options: HealthOptions = field(default_factory=HealthOptions)
    counts: dict[str, CheckCount] = field(default_factory=dict)
    seen: list[_Seen] = field(default_factory=list)
    keep_rows: bool = True
    """Remember each row for `finish` (a live monitor, which never finishes, does not)."""
    rollouts: int = 0
    failures: int = 0

    def __post_init__(self) -> None:
        self.counts = {spec.id: CheckCount(spec.id, spec.origin, spec.scope, spec.says) for spec in CHECKS}

    def observe(self, row: dict[str, Any], *, source: str, line: int) -> list[Finding]:
        """The per-rollout findings of one row (a rollout or a failure row)."""
        view = RowView.of(row, self.options)
        identity = _identity(row, source, line)
        findings: list[Finding] = []
        raised = []
        for check, run in ROLLOUT_CHECKS.items():
            try:
                found = run(view)
            except Exception as e:  # noqa: BLE001 - a check's bug is a finding; the other checks go on
                evidence = {"failed_check": check, "error": repr(e)[:300]}
                raised.append(Finding(check="check_execution_error", **identity, evidence=evidence))
                continue
            if found is None:
                continue
            self._count(check, len(found))
            findings += [Finding(check=check, **identity, locator=loc, evidence=ev) for loc, ev in found]
        self._count("check_execution_error", len(raised))
        findings += raised
        if view.failure is None:
            self.rollouts += 1
        else:
            self.failures += 1
        if self.keep_rows:
            self.seen.append(_seen(row, view, identity, flagged=bool(findings)))
        return findings

    def unreadable(self, source: str, line: int, reason: str) -> Finding:
        """A line that is not a rollout: a finding with its line number."""
        self._count("record_unreadable", 1)
        return Finding(check="record_unreadable", source=source, line=line, evidence={"error": reason})

    def finish(self) -> list[Finding]:
        """The findings that need the whole file: duplicates, the tasks' checks, the policy lag bound."""
        self.counts["record_unreadable"].evaluated += len(self.seen)
        findings = self._duplicates() + self._stale_by_lag()
        tasks: dict[tuple[Any, Any], dict[Any, _Seen]] = defaultdict(dict)
        for seen in self.seen:
            if seen.task is not None:
                tasks[(seen.agent, seen.task)].setdefault(seen.rollout, seen)
        for (agent, task), repeats in tasks.items():
            findings += self._task_checks(agent, task, list(repeats.values()))
        return findings

    def _count(self, check: str, findings: int, evaluated: int = 1) -> None:
        count = self.counts[check]
        count.evaluated += evaluated
        count.findings += findings
        count.flagged += 1 if findings else 0

    def _duplicates(self) -> list[Finding]:
        copies: dict[tuple[Any, Any, Any], list[_Seen]] = defaultdict(list)
        for seen in self.seen:
            if seen.task is not None:
                copies[(seen.agent, seen.task, seen.rollout)].append(seen)
        self.counts["rollout_duplicate_identity"].evaluated = len(self.seen)
        findings = []
        for group in copies.values():
            if len(group) < 2:
                continue
            where = [f"{s.source}:{s.line}" for s in group]
            for seen in group:
                self._count("rollout_duplicate_identity", 1, evaluated=0)
                evidence = {"copies": len(group), "at": where}
                findings.append(Finding(check="rollout_duplicate_identity", **_seen_identity(seen), evidence=evidence))
        return findings

    def _stale_by_lag(self) -> list[Finding]:
        lag = self.options.max_policy_lag
        versions = [s.oldest_version for s in self.seen if s.oldest_version is not None]
        if lag is None or not versions:
            return []
        newest = max(versions)
        findings = []
        for seen in self.seen:
            if seen.oldest_version is not None and newest - seen.oldest_version > lag:
                self._count("policy_stale", 1, evaluated=0)
                evidence = {"policy_version_min": seen.oldest_version, "newest_seen": newest, "max_policy_lag": lag}
                findings.append(Finding(check="policy_stale", **_seen_identity(seen), evidence=evidence))
        return findings

    def _task_checks(self, agent: Any, task: Any, repeats: list[_Seen]) -> list[Finding]:
        identity = {"agent": agent, "task": task, "source": repeats[0].source}
        findings = []
        if len(repeats) >= 2:
            unhealthy = all(seen.flagged for seen in repeats)
            self._count("task_consistently_unhealthy", int(unhealthy))
            if unhealthy:
                evidence = {"repeats": len(repeats)}
                findings.append(Finding(check="task_consistently_unhealthy", **identity, evidence=evidence))
        if all(seen.answered is not None for seen in repeats):
            silent = not any(seen.answered for seen in repeats)
            self._count("task_no_successful_model_calls", int(silent))
            if silent:
                evidence = {"repeats": len(repeats)}
                findings.append(Finding(check="task_no_successful_model_calls", **identity, evidence=evidence))
        rewards = [seen.reward for seen in repeats if seen.reward is not None]
        if len(rewards) >= 2:
            same = len(set(rewards)) == 1
            self._count("group_identical_rewards", int(same))
            if same:
                same_reward = {"reward": rewards[0], "scored_rollouts": len(rewards)}
                findings.append(Finding(check="group_identical_rewards", **identity, evidence=same_reward))
        return findings


def _seen(row: dict[str, Any], view: RowView, identity: dict[str, Any], *, flagged: bool) -> _Seen:
    reward = row.get("reward")
    scored = view.failure is None and row.get("mask_sample") is not True and isinstance(reward, int | float)
    oldest = row.get("policy_version_min")
    return _Seen(
        agent=identity["agent"],
        task=identity["task"],
        rollout=identity["rollout"],
        source=identity["source"],
        line=identity["line"],
        flagged=flagged,
        answered=bool(view.model_turns) if view.failure is None else (False if model_failure(view) else None),
        reward=float(reward) if scored else None,  # type: ignore[arg-type]
        oldest_version=oldest if isinstance(oldest, int) else None,
    )


def _identity(row: dict[str, Any], source: str, line: int) -> dict[str, Any]:
    agent_ref = row.get("agent_ref")
    agent = agent_ref.get("name") if isinstance(agent_ref, dict) else None
    return {
        "agent": agent if isinstance(agent, str) else None,
        "task": _index(row.get("_ng_task_index")),
        "rollout": _index(row.get("_ng_rollout_index")),
        "source": source,
        "line": line,
    }


def _index(value: Any) -> int | str | None:
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


def _seen_identity(seen: _Seen) -> dict[str, Any]:
    return {"agent": seen.agent, "task": seen.task, "rollout": seen.rollout, "source": seen.source, "line": seen.line}


def not_a_rollout(row: dict[str, Any]) -> str | None:
    """Why a JSON object is not a rollout row, or None if it is one (a finished rollout or a failure row)."""
    if isinstance(row.get("response"), dict) or "_ng_failure_class" in row:
        return None
    if "responses_create_params" in row:
        return "an input row (it has `responses_create_params` but no `response`): collect it first"
    return "not a rollout: no `response` object and no `_ng_failure_class`"


def rollout_sources(path: str | Path, *, with_failures: bool = True) -> list[Path]:
    """The rollout file and, for a collection's output, its failures file beside it (if there is one)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("cannot open: no such file" if not path.exists() else "not a file", source=str(path))
    failures = failures_path(path)
    return [path, failures] if with_failures and failures.is_file() and failures != path else [path]


class Line(NamedTuple):
    """One line of a rollout file: the row, or why it is not one; where it is, to read it again."""

    source: str
    number: int
    offset: int
    length: int
    row: dict[str, Any] | None
    reason: str | None


def read_rollouts(sources: list[Path]) -> Iterator[Line]:
    """Every line of the files: a rollout row (a finished rollout or a failure row), or why the line is none."""
    for source in sources:
        for number, offset, length, row, error in scan_jsonl_spans(source, strict=False):
            reason = (error.reason if error is not None else "unreadable") if row is None else not_a_rollout(row)
            yield Line(str(source), number, offset, length, None if reason else row, reason)


def nothing_readable(bad: list[dict[str, Any]]) -> str:
    """What a file that holds no rollout is, from its bad lines (`{"line", "error"}` each)."""
    if not bad:
        return "not a rollouts file: it holds no rows (it is empty, or only blank lines)"
    first = bad[0]
    return f"not a rollouts file: none of its {len(bad)} line(s) is a rollout (line {first['line']}: {first['error']})"
