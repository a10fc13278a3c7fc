"""`gym-serve reverify`: score stored rollouts again with the current verifiers, without calling a model.

For each rollout the environment is rebuilt in this process: a fresh `seed`,
then every recorded function call replayed through the tools in order (so a
stateful environment ends in the state the episode ended in), then `verify`.
Rows whose reward changed are reported; all are written to `<out>_reverified.jsonl`
with `reward` updated and the old one kept as `previous_reward`. That file is
replaced only when every row was re-scored: a run that fails (a bad line, a
missing input) leaves an earlier output as it was and creates none.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any

from gym_serve.collect.job import sibling_path
from gym_serve.environment.registry import load_environment_class
from gym_serve.environment.runner import EnvRunner
from gym_serve.errors import InputError
from gym_serve.wire.jsonl import read_jsonl, replacing_jsonl

__all__ = ["reverify"]


async def reverify(rollouts_path: str | Path, environments: dict[str, str]) -> dict[str, Any]:
    """Re-score every row; `environments` maps agent names (or "*" for any) to environment names."""
    rollouts_path = Path(rollouts_path)
    runners: dict[str, EnvRunner] = {}
    totals: dict[str, dict[str, float]] = defaultdict(lambda: {"rows": 0, "changed": 0, "before": 0.0, "after": 0.0})
    changed: list[dict[str, Any]] = []
    out_path = sibling_path(rollouts_path, "reverified.jsonl")
    if not rollouts_path.is_file():
        raise InputError("cannot open: no such file", source=str(rollouts_path))
    with replacing_jsonl(out_path) as out:
        for line, row in read_jsonl(rollouts_path):
            agent = (row.get("agent_ref") or {}).get("name", "")
            env_name = environments.get(agent) or environments.get("*")
            if env_name is None:
                known = ", ".join(sorted(environments)) or "none"
                raise InputError(
                    f"no environment for agent `{agent}` (the config's agents: {known})",
                    source=str(rollouts_path),
                    line=line,
                    field="agent_ref.name",
                )
            if env_name not in runners:
                runners[env_name] = EnvRunner(load_environment_class(env_name)())
            verdict = await _rescore(runners[env_name], row)
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
    return {
        "output": str(out_path),
        "changed": changed,
        "agents": {
            a: {**s, "before": s["before"] / s["rows"], "after": s["after"] / s["rows"]} for a, s in totals.items()
        },
    }


async def _rescore(runner: EnvRunner, row: dict[str, Any]) -> dict[str, Any]:
    state = await runner.seed(row) if runner.info.has_seed else None
    executes = runner.info.execute_tool_calls  # else the calls are the answer, never run
    for item in row["response"]["output"]:
        if executes and item.get("type") == "function_call":
            _, state = await runner.call_tools([item], state)
    return await runner.verify(row, row["response"], state)


def run(rollouts_path: str, environments: dict[str, str]) -> dict[str, Any]:
    return asyncio.run(reverify(rollouts_path, environments))
