"""`gym-serve profile`: per-task reward profiles and per-agent aggregate metrics, in NeMo Gym's files.

Inputs: the materialized inputs (`<out>_materialized_inputs.jsonl`) and the
rollouts (`<out>.jsonl`), aligned on (agent, task, rollout). Outputs next to
the rollouts:

- `<out>_reward_profiling.jsonl`: one row per task with mean/max/min/median/std
  of the reward, token usage and every numeric field, `sample`, `num_rollouts`,
  `expected_num_rollouts`, `missing_num_rollouts`,
  `reward_profile_completion_pct` and `rollout_infos` (by rollout index).
- `<out>_aggregate_metrics.json`: per agent, `{agent_ref, agent_metrics,
  key_metrics, group_level_metrics}` with pass@k, pass@1[avg-of-k] and, when
  the environment names an answer field, majority@k.
- `<out>_rewards.png`: the reward distribution per agent and each task's pass rate.
- `<out>_health.json` and `<out>_health_findings.jsonl`: the health checks' report (`gym_serve.analysis.health`).

Strict by default: a missing rollout, a key written twice, or a rollout with
no input row is an error naming the file and line. `allow_partial` profiles
what completed. Rollout bodies are dropped as they are read (only numbers are
kept), so memory follows the number of rollouts, not their size.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from gym_serve.analysis.health_report import headline, health
from gym_serve.analysis.metrics import numeric_fields, pass_metrics, summary_stats
from gym_serve.collect.job import Key, sibling_path
from gym_serve.environment.core import Environment
from gym_serve.environment.registry import load_environment_class
from gym_serve.errors import InputError
from gym_serve.wire.jsonl import read_jsonl

__all__ = ["profile"]

_ANSWER_KEYS = ("extracted_answer", "parsed_answer", "predicted_answer")


def profile(
    rollouts_path: str | Path,
    inputs_path: str | Path | None = None,
    *,
    allow_partial: bool = False,
    environments: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Write the profile files for a collection; returns a summary (paths, completion, per-agent key metrics).

    `environments` maps agent names to environment names, so that each environment's
    `answer_key` (majority@k) and `compute_metrics` take part.
    """
    env_classes = {agent: load_environment_class(env) for agent, env in (environments or {}).items()}
    rollouts_path = Path(rollouts_path)
    inputs_path = Path(inputs_path) if inputs_path else sibling_path(rollouts_path, "materialized_inputs.jsonl")
    expected, samples = _expected(inputs_path)
    answer_keys = {agent: cls.answer_key for agent, cls in env_classes.items() if cls.answer_key}
    done = _results(rollouts_path, expected, answer_keys)
    missing = sorted(set(expected) - set(done))
    if missing and not allow_partial:
        shown = ", ".join(f"{a}:{t}:{r}" for a, t, r in missing[:5])
        raise InputError(
            f"{len(missing)} rollouts missing (e.g. {shown}); pass --allow-partial to profile what completed",
            source=str(rollouts_path),
        )

    by_task: dict[tuple[str, int], list[tuple[int, dict[str, float], Any]]] = defaultdict(list)
    for (agent, task, rollout), (numbers, answer) in done.items():
        by_task[(agent, task)].append((rollout, numbers, answer))
    expected_per_task: dict[tuple[str, int], int] = defaultdict(int)
    for agent, task, _ in expected:
        expected_per_task[(agent, task)] += 1

    profile_path = sibling_path(rollouts_path, "reward_profiling.jsonl")
    with profile_path.open("w") as out:
        for agent_task in sorted(expected_per_task):
            out.write(
                json.dumps(
                    _task_row(
                        agent_task, by_task.get(agent_task, []), expected_per_task[agent_task], samples[agent_task]
                    )
                )
                + "\n"
            )

    aggregates = [
        _agent_metrics(
            agent, [sorted(by_task[key]) for key in sorted(by_task) if key[0] == agent], env_classes.get(agent)
        )
        for agent in sorted({agent for agent, _ in expected_per_task})
    ]
    metrics_path = sibling_path(rollouts_path, "aggregate_metrics.json")
    metrics_path.write_text(json.dumps(aggregates, indent=2))
    from gym_serve.analysis.plots import plot_rewards

    plot_path = plot_rewards(by_task, sibling_path(rollouts_path, "rewards.png"))
    report = health(rollouts_path)
    return {
        "reward_profiling": str(profile_path),
        "aggregate_metrics": str(metrics_path),
        "plot": str(plot_path),
        "expected": len(expected),
        "completed": len(done),
        "missing": len(missing),
        "key_metrics": {a["agent_ref"]["name"]: a["key_metrics"] for a in aggregates},
        "health": {
            "summary": report.summary_path,
            "findings": report.findings_path,
            "headline": headline(report),
        },
    }


def _expected(path: Path) -> tuple[set[Key], dict[tuple[str, int], dict[str, Any]]]:
    expected: set[Key] = set()
    samples: dict[tuple[str, int], dict[str, Any]] = {}
    for line, row in read_jsonl(path):
        key = _key(row, path, line)
        if key in expected:
            raise InputError(f"rollout {key[0]}:{key[1]}:{key[2]} appears twice", source=str(path), line=line)
        expected.add(key)
        if (key[0], key[1]) not in samples:
            samples[(key[0], key[1])] = {
                k: v for k, v in row.items() if k not in ("_ng_task_index", "_ng_rollout_index")
            }
    return expected, samples


def _results(path: Path, expected: set[Key], answer_keys: dict[str, str]) -> dict[Key, tuple[dict[str, float], Any]]:
    done: dict[Key, tuple[dict[str, float], Any]] = {}
    for line, row in read_jsonl(path):
        key = _key(row, path, line)
        if key in done:
            raise InputError(f"rollout {key[0]}:{key[1]}:{key[2]} written twice", source=str(path), line=line)
        if key not in expected:
            raise InputError(
                f"rollout {key[0]}:{key[1]}:{key[2]} has no materialized input row", source=str(path), line=line
            )
        if not isinstance(row.get("reward"), int | float):
            raise InputError("missing a numeric `reward`", source=str(path), line=line, field="reward")
        keys = [answer_keys[key[0]]] if key[0] in answer_keys else _ANSWER_KEYS
        answer = next((row[k] for k in keys if k in row), None)
        done[key] = (numeric_fields(row), json.dumps(answer) if answer is not None else None)
    return done


def _key(row: dict[str, Any], path: Path, line: int) -> Key:
    try:
        return (row["agent_ref"]["name"], int(row["_ng_task_index"]), int(row["_ng_rollout_index"]))
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(
            "needs `agent_ref.name`, `_ng_task_index` and `_ng_rollout_index`",
            source=str(path),
            line=line,
            field=str(e).strip("'"),
        ) from None


def _task_row(
    agent_task: tuple[str, int],
    rollouts: list[tuple[int, dict[str, float], Any]],
    expected: int,
    sample: dict[str, Any],
) -> dict[str, Any]:
    rollouts = sorted(rollouts, key=lambda r: r[0])
    row: dict[str, Any] = {"_ng_task_index": agent_task[1], "agent_ref": {"name": agent_task[0]}}
    for name in sorted({name for _, numbers, _ in rollouts for name in numbers}):
        row.update(summary_stats(name, [numbers[name] for _, numbers, _ in rollouts if name in numbers]))
    row.update(
        {
            "sample": sample,
            "num_rollouts": len(rollouts),
            "expected_num_rollouts": expected,
            "missing_num_rollouts": expected - len(rollouts),
            "reward_profile_completion_pct": 100.0 * len(rollouts) / expected if expected else 0.0,
            "rollout_infos": [
                {
                    "rollout_id": f"{agent_task[1]}:{index}",
                    "_ng_task_index": agent_task[1],
                    "_ng_rollout_index": index,
                    **numbers,
                }
                for index, numbers, _ in rollouts
            ],
        }
    )
    return row


def _agent_metrics(
    agent: str, tasks: list[list[tuple[int, dict[str, float], Any]]], env_cls: type[Environment] | None
) -> dict[str, Any]:
    flat = [numbers for rollouts in tasks for _, numbers, _ in rollouts]
    agent_metrics: dict[str, float] = {}
    for name in sorted({name for numbers in flat for name in numbers}):
        agent_metrics.update(summary_stats(name, [numbers[name] for numbers in flat if name in numbers]))
    has_answers = any(answer is not None for rollouts in tasks for _, _, answer in rollouts)
    rows = [
        [{"reward": numbers.get("reward", 0.0), "answer": answer} for _, numbers, answer in rollouts]
        for rollouts in tasks
        if rollouts
    ]
    agent_metrics.update(pass_metrics(rows, answer_key="answer" if has_answers else None))
    if env_cls is not None:
        agent_metrics.update(env_cls.compute_metrics([[numbers for _, numbers, _ in rollouts] for rollouts in tasks]))
    key_metrics = {k: v for k, v in agent_metrics.items() if k.startswith("mean/") or k.startswith("pass@1")}
    per_task = [
        statistics.fmean(numbers.get("reward", 0.0) for _, numbers, _ in rollouts) for rollouts in tasks if rollouts
    ]
    group = {
        "num_tasks": len(per_task),
        "tasks_all_correct": sum(1 for p in per_task if p == 1.0),
        "tasks_none_correct": sum(1 for p in per_task if p == 0.0),
    }
    return {
        "agent_ref": {"name": agent},
        "agent_metrics": agent_metrics,
        "key_metrics": key_metrics,
        "group_level_metrics": group,
    }
