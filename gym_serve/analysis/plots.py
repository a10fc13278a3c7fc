"""The picture next to a reward profile: reward distribution per agent, and each task's pass rate."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

__all__ = ["plot_rewards"]


def plot_rewards(by_task: dict[tuple[str, int], list[tuple[int, dict[str, float], Any]]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = sorted({agent for agent, _ in by_task})
    fig, axes = plt.subplots(len(agents), 2, figsize=(11, 2.8 * max(1, len(agents))), squeeze=False)
    for row, agent in enumerate(agents):
        tasks = sorted((task, rollouts) for (a, task), rollouts in by_task.items() if a == agent)
        rewards = [numbers.get("reward", 0.0) for _, rollouts in tasks for _, numbers, _ in rollouts]
        left, right = axes[row]
        left.hist(rewards, bins=20, color="#4c72b0")
        left.set_title(f"{agent}: reward distribution ({len(rewards)} rollouts)", fontsize=9)
        left.set_xlabel("reward")
        rates = [statistics.fmean(numbers.get("reward", 0.0) for _, numbers, _ in rollouts) for _, rollouts in tasks]
        right.bar(range(len(rates)), rates, color="#55a868")
        right.set_ylim(0, max(1.0, max(rates, default=1.0)))
        right.set_title(f"{agent}: mean reward per task", fontsize=9)
        right.set_xlabel("task (_ng_task_index order)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
