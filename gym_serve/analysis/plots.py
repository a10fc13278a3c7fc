"""The picture next to a reward profile: one row per agent, three aggregate views.

1. the reward of every rollout (a histogram);
2. how many tasks are solved how often: a histogram of each task's mean reward
   (tasks always at 0 or always at 1 give a group-relative trainer no signal);
3. the tasks sorted by mean reward, as a curve over the share of tasks.

Every view aggregates, so the figure reads the same at 10 tasks and at 10,000
(a bar per task, as before, turned into a grey smear past ~100 tasks).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_rewards", "reward_figure"]

BINS = 20
CURVE_POINTS = 2000


def plot_rewards(by_task: dict[tuple[str, int], list[tuple[int, dict[str, float], Any]]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = reward_figure(by_task)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def reward_figure(by_task: dict[tuple[str, int], list[tuple[int, dict[str, float], Any]]]) -> Figure:
    """The figure `plot_rewards` saves: rows of (rollout rewards, task mean rewards, tasks sorted by mean reward)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = sorted({agent for agent, _ in by_task})
    fig, axes = plt.subplots(len(agents), 3, figsize=(15, 3.0 * max(1, len(agents))), squeeze=False)
    for row, agent in enumerate(agents):
        tasks = [rollouts for (a, _), rollouts in by_task.items() if a == agent]
        rewards = [numbers.get("reward", 0.0) for rollouts in tasks for _, numbers, _ in rollouts]
        means = sorted(statistics.fmean(numbers.get("reward", 0.0) for _, numbers, _ in r) for r in tasks)
        low, high = min(0.0, *means), max(1.0, *means)
        spread, by_rate, ranked = axes[row]

        spread.hist(rewards, bins=BINS, range=(low, high), color="#4c72b0")
        spread.set_title(f"{agent}: reward of each rollout ({len(rewards):,})", fontsize=9)
        spread.set_xlabel("reward")
        spread.set_ylabel("rollouts")

        by_rate.hist(means, bins=BINS, range=(low, high), color="#55a868")
        never = sum(m <= low for m in means) / len(means)
        always = sum(m >= high for m in means) / len(means)
        by_rate.set_title(
            f"{agent}: mean reward per task ({len(means):,} tasks; {100 * never:.0f}% at min, "
            f"{100 * always:.0f}% at max)",
            fontsize=9,
        )
        by_rate.set_xlabel("task's mean reward")
        by_rate.set_ylabel("tasks")

        points = min(len(means), CURVE_POINTS)  # quantiles beyond that: the same curve, fewer vertices
        shares = [(i + 0.5) / points for i in range(points)]
        curve = [means[int(share * len(means))] for share in shares]
        ranked.plot(shares, curve, color="#c44e52", drawstyle="steps-mid", linewidth=1.2)
        ranked.fill_between(shares, curve, low, step="mid", color="#c44e52", alpha=0.2)
        ranked.set_xlim(0, 1)
        ranked.set_ylim(low, high * 1.02)
        ranked.set_title(f"{agent}: tasks sorted by mean reward", fontsize=9)
        ranked.set_xlabel("share of tasks")
        ranked.set_ylabel("mean reward")
    fig.tight_layout()
    return fig
