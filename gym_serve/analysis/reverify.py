"""`gym-serve reverify`: score stored rollouts again with the current verifiers, without calling a model.

For each rollout the environment is rebuilt in this process: a fresh `seed`,
then every recorded function call replayed through the tools in order (so a
stateful environment ends in the state the episode ended in), then `verify`.
An ATIF export (`gym-serve export --format atif`) is read back into rows first.
Rows whose reward changed are reported; all are written to `<out>_reverified.jsonl`
with `reward` updated and the old one kept as `previous_reward`.

A row that cannot be scored (a line that is not JSON, a row its environment
refuses, a verifier that raises or overruns its deadline) is a failure: it goes to
`<out>_reverified_failures.jsonl` as a failure row with its kind, line and error,
and the rest go on. The output is written beside its final name and moved into
place only when complete, so an existing `_reverified.jsonl` is never emptied or
cut short by a run that fails, nor replaced by a run that scored nothing (which
`gym-serve reverify` reports as an error: exit code 1).
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gym_serve.analysis.atif_export import is_atif, read_atif
from gym_serve.collect.attempts import failure_row
from gym_serve.collect.job import sibling_path
from gym_serve.environment.registry import load_environment_class
from gym_serve.environment.runner import EnvRunner
from gym_serve.errors import InputError, failure_kind
from gym_serve.wire.jsonl import JsonlWriter, read_jsonl, scan_jsonl

__all__ = ["reverify"]


async def reverify(
    rollouts_path: str | Path, environments: dict[str, str], *, inputs_path: str | Path | None = None
) -> dict[str, Any]:
    """Re-score every row; `environments` maps agent names (or "*" for any) to environment names.

    `rollouts_path` may be an ATIF export (`gym-serve export --format atif`); `inputs_path` (materialized
    inputs) gives the task rows of trajectories another exporter wrote.
    """
    rollouts_path = Path(rollouts_path)
    if not rollouts_path.exists():
        raise InputError("cannot open: no such file", source=str(rollouts_path))
    runners: dict[str, EnvRunner] = {}
    totals: dict[str, dict[str, float]] = defaultdict(lambda: {"rows": 0, "changed": 0, "before": 0.0, "after": 0.0})
    changed: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    out_path = sibling_path(rollouts_path, "reverified.jsonl")
    failures_path = sibling_path(rollouts_path, "reverified_failures.jsonl")
    partial = out_path.with_name(out_path.name + ".partial")
    with JsonlWriter(partial, append=False, flush=False) as out:
        for line, row, error in _rows(rollouts_path, inputs_path):
            if error is not None or row is None:
                failures.append(_failed({"line": line}, error or InputError("unreadable", line=line)))
                continue
            agent = (row.get("agent_ref") or {}).get("name", "")
            try:
                verdict = await _rescore(_runner(runners, environments, agent, rollouts_path, line), row)
            except Exception as e:  # noqa: BLE001 - a row that cannot be scored is a failure; the rest go on
                failures.append(_failed({**row, "line": line}, e))
                continue
            before, after = float(row.get("reward", 0.0)), float(verdict["reward"])
            stats = totals[agent]
            stats["rows"] += 1
            stats["before"] += before
            stats["after"] += after
            if after != before:
                stats["changed"] += 1
                changed.append(
                    {
                        "line": line,
                        "agent": agent,
                        "_ng_task_index": row.get("_ng_task_index"),
                        "_ng_rollout_index": row.get("_ng_rollout_index"),
                        "before": before,
                        "after": after,
                    }
                )
            out.write({**row, **verdict, "previous_reward": before})
    if any(s["rows"] for s in totals.values()) or not out_path.exists():
        os.replace(partial, out_path)
    else:  # nothing scored: an earlier run's output stays as it was
        partial.unlink()
    with JsonlWriter(failures_path, append=False, flush=False) as failed:
        for failure in failures:
            failed.write(failure)
    return {
        "output": str(out_path),
        "failures_path": str(failures_path),
        "failures": [{"line": f["line"], "kind": f["_ng_failure_class"], "error": f["error"]} for f in failures],
        "changed": changed,
        "agents": {
            a: {**s, "before": s["before"] / s["rows"], "after": s["after"] / s["rows"]} for a, s in totals.items()
        },
    }


def _rows(path: Path, inputs_path: str | Path | None) -> Iterator[tuple[int, dict[str, Any] | None, Any]]:
    """The rows of a rollouts JSONL, or of an ATIF export (numbered by its manifest's lines)."""
    if not is_atif(path):
        yield from scan_jsonl(path, strict=False)
        return
    inputs = {}
    for _, row in read_jsonl(inputs_path) if inputs_path else []:
        inputs[(row.get("_ng_task_index"), row.get("_ng_rollout_index"))] = row
    yield from read_atif(path, inputs=inputs)


def _runner(
    runners: dict[str, EnvRunner], environments: dict[str, str], agent: str, path: Path, line: int
) -> EnvRunner:
    env_name = environments.get(agent) or environments.get("*")
    if env_name is None:
        known = ", ".join(sorted(environments)) or "none"
        raise InputError(
            f"no environment for agent `{agent}` (the config's agents: {known})",
            source=str(path),
            line=line,
            field="agent_ref.name",
        )
    if env_name not in runners:
        runners[env_name] = EnvRunner(load_environment_class(env_name)())
    return runners[env_name]


def _failed(row: dict[str, Any], error: BaseException) -> dict[str, Any]:
    return failure_row(row, failure_kind(error), str(error) or type(error).__name__, 0)


async def _rescore(runner: EnvRunner, row: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(row.get("response"), dict):
        raise InputError("not a rollout: it has no `response` object", field="response")
    state = await runner.seed(row) if runner.info.has_seed else None
    executes = runner.info.execute_tool_calls  # else the calls are the answer, never run
    for item in row["response"].get("output") or []:
        if executes and item.get("type") == "function_call":
            _, state = await runner.call_tools([item], state)
    return await runner.verify(row, row["response"], state)


def run(rollouts_path: str, environments: dict[str, str], inputs_path: str | None = None) -> dict[str, Any]:
    return asyncio.run(reverify(rollouts_path, environments, inputs_path=inputs_path))
