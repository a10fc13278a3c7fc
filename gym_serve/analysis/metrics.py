"""Reward statistics as NeMo Gym names them: mean/max/min/median/std, pass@k, pass@1[avg-of-k], majority@k.

pass@k uses the unbiased combinatorial estimator 1 - C(n-c, k) / C(n, k) for
binary rewards (n samples, c correct) and the expected max of k samples for
continuous ones; accuracies are percentages (0-100), as in NeMo Gym.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["is_binary", "majority_at_k", "numeric_fields", "pass_at_k", "pass_metrics", "summary_stats"]

USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")


def summary_stats(name: str, values: Sequence[float]) -> dict[str, float]:
    """`mean/<name>`, `max/…`, `min/…`, `median/…`, `std/…` (population std, 0 for one value)."""
    if not values:
        return {}
    return {
        f"mean/{name}": statistics.fmean(values),
        f"max/{name}": max(values),
        f"min/{name}": min(values),
        f"median/{name}": statistics.median(values),
        f"std/{name}": statistics.pstdev(values) if len(values) > 1 else 0.0,
    }


def numeric_fields(row: dict[str, Any]) -> dict[str, float]:
    """The row's numeric and boolean top-level fields, and its token usage, as floats."""
    fields = {
        key: float(value) for key, value in row.items() if isinstance(value, int | float) and not key.startswith("_")
    }
    usage = (row.get("response") or {}).get("usage") or {}
    fields.update({key: float(usage[key]) for key in USAGE_KEYS if isinstance(usage.get(key), int | float)})
    return fields


def is_binary(values: Iterable[float]) -> bool:
    return all(v in (0.0, 1.0) for v in values)


def pass_at_k(rewards: Sequence[float], k: int) -> float:
    """pass@k of one task from its n >= k samples (a probability, 0-1)."""
    n = len(rewards)
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if is_binary(rewards):
        c = sum(1 for r in rewards if r == 1.0)
        if n - c < k:
            return 1.0
        return 1.0 - math.comb(n - c, k) / math.comb(n, k)
    # continuous: expected max over a random k-subset = Σ_i x_(i) · C(i-1, k-1) / C(n, k), ascending order
    ordered = sorted(rewards)
    return sum(x * math.comb(i, k - 1) for i, x in enumerate(ordered)) / math.comb(n, k)


def majority_at_k(answers: Sequence[Any], rewards: Sequence[float], k: int) -> float:
    """The reward of the most common answer among the first k samples (ties: the first seen); None answers abstain."""
    votes = Counter(a for a in answers[:k] if a is not None)
    if not votes:
        return 0.0
    winner = max(votes, key=lambda a: (votes[a], -list(answers).index(a)))
    return float(rewards[list(answers).index(winner)])


def pass_metrics(tasks: list[list[dict[str, Any]]], answer_key: str | None = None) -> dict[str, float]:
    """pass@k for k = 1, 2, 4, … up to the smallest task's sample count, pass@1[avg-of-k], majority@k."""
    if not tasks:
        return {}
    n = min(len(rollouts) for rollouts in tasks)
    metrics: dict[str, float] = {}
    k = 1
    while k <= n:
        metrics[f"pass@{k}/accuracy"] = 100 * statistics.fmean(
            pass_at_k([float(r.get("reward", 0.0)) for r in rollouts[:n]], k) for rollouts in tasks
        )
        if answer_key is not None:
            metrics[f"majority@{k}/accuracy"] = 100 * statistics.fmean(
                majority_at_k(
                    [r.get(answer_key) for r in rollouts], [float(r.get("reward", 0.0)) for r in rollouts], k
                )
                for rollouts in tasks
            )
        k *= 2
    per_run = [statistics.fmean(float(rollouts[i].get("reward", 0.0)) for rollouts in tasks) for i in range(n)]
    metrics[f"pass@1[avg-of-{n}]/accuracy"] = 100 * statistics.fmean(per_run)
    if n > 1:
        metrics[f"pass@1[avg-of-{n}]/accuracy/std_dev_across_runs"] = 100 * statistics.stdev(per_run)
        metrics[f"pass@1[avg-of-{n}]/accuracy/std_err_across_runs"] = 100 * statistics.stdev(per_run) / math.sqrt(n)
    return metrics
