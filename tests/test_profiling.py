"""`gym-serve profile`: NeMo Gym's profile and aggregate files, strict about missing and duplicate rollouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gym_serve.analysis.profiling import profile
from gym_serve.errors import InputError


def row(task: int, rollout: int, agent: str = "a", **extra: Any) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": f"q{task}"},
        "agent_ref": {"name": agent},
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        **extra,
    }


def write(path: Path, rows: list[dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return path


def collection(tmp_path: Path, rewards: dict[tuple[int, int], float]) -> Path:
    inputs = [row(t, r) for t in range(2) for r in range(3)]
    write(tmp_path / "out_materialized_inputs.jsonl", inputs)
    rollouts = [
        {
            **row(t, r),
            "reward": reward,
            "accuracy": reward == 1.0,
            "extracted_answer": str(reward),
            "response": {
                "output": [],
                "usage": {"input_tokens": 10 * (t + 1), "output_tokens": 4, "total_tokens": 10 * (t + 1) + 4},
            },
        }
        for (t, r), reward in rewards.items()
    ]
    return write(tmp_path / "out.jsonl", rollouts)


ALL = {(0, 0): 1.0, (0, 1): 0.0, (0, 2): 1.0, (1, 0): 0.0, (1, 1): 0.0, (1, 2): 0.0}


def test_profile_files_follow_nemo_gym(tmp_path: Path) -> None:
    result = profile(collection(tmp_path, ALL))
    tasks = [json.loads(line) for line in Path(result["reward_profiling"]).read_text().splitlines()]
    assert [t["_ng_task_index"] for t in tasks] == [0, 1]
    first = tasks[0]
    assert first["mean/reward"] == pytest.approx(2 / 3) and first["max/reward"] == 1.0 and first["min/reward"] == 0.0
    assert first["mean/input_tokens"] == 10 and first["mean/accuracy"] == pytest.approx(2 / 3)
    assert first["num_rollouts"] == 3 and first["missing_num_rollouts"] == 0
    assert first["reward_profile_completion_pct"] == 100.0
    assert first["rollout_infos"][1] == {
        "rollout_id": "0:1",
        "_ng_task_index": 0,
        "_ng_rollout_index": 1,
        "reward": 0.0,
        "accuracy": 0.0,
        "input_tokens": 10.0,
        "output_tokens": 4.0,
        "total_tokens": 14.0,
    }
    assert first["sample"]["responses_create_params"] == {"input": "q0"}
    (agent,) = json.loads(Path(result["aggregate_metrics"]).read_text())
    assert agent["agent_ref"] == {"name": "a"}
    metrics = agent["agent_metrics"]
    assert metrics["mean/reward"] == pytest.approx(1 / 3)
    assert metrics["pass@1/accuracy"] == pytest.approx(100 / 3)
    assert metrics["pass@2/accuracy"] == pytest.approx(50.0)  # task 0: 1 - C(1,2)/C(3,2) = 1; task 1: 0
    assert "majority@2/accuracy" in metrics
    assert agent["group_level_metrics"] == {"num_tasks": 2, "tasks_all_correct": 0, "tasks_none_correct": 1}
    assert Path(result["plot"]).stat().st_size > 1000


def test_missing_rollouts_are_an_error_unless_partial(tmp_path: Path) -> None:
    partial = {k: v for k, v in ALL.items() if k != (1, 2)}
    path = collection(tmp_path, partial)
    with pytest.raises(InputError, match="1 rollouts missing .*a:1:2"):
        profile(path)
    result = profile(path, allow_partial=True)
    tasks = [json.loads(line) for line in Path(result["reward_profiling"]).read_text().splitlines()]
    assert tasks[1]["num_rollouts"] == 2 and tasks[1]["missing_num_rollouts"] == 1
    assert tasks[1]["reward_profile_completion_pct"] == pytest.approx(200 / 3)


def test_duplicates_strangers_and_bad_lines_name_the_line(tmp_path: Path) -> None:
    path = collection(tmp_path, ALL)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines + [lines[0]]) + "\n")
    with pytest.raises(InputError, match=r"line 7: rollout a:0:0 written twice"):
        profile(path)
    path.write_text("\n".join(lines + [json.dumps({**json.loads(lines[0]), "_ng_task_index": 9})]) + "\n")
    with pytest.raises(InputError, match=r"line 7: rollout a:9:0 has no materialized input row"):
        profile(path)
    path.write_text("\n".join(lines + ["{cut off"]) + "\n")
    with pytest.raises(InputError, match=r"line 7: not valid JSON"):
        profile(path)


def test_environments_add_their_answer_key_and_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gym_serve import Environment

    class Graded(Environment):
        answer_key = "extracted_answer"

        @classmethod
        def compute_metrics(cls, tasks: list[list[dict[str, float]]]) -> dict[str, float]:
            return {"tasks_seen": float(len(tasks))}

        async def verify(self, task, response, state) -> float:
            return 0.0

    monkeypatch.setattr("gym_serve.analysis.profiling.load_environment_class", lambda name: Graded)
    result = profile(collection(tmp_path, ALL), environments={"a": "graded"})
    (agent,) = json.loads(Path(result["aggregate_metrics"]).read_text())
    assert agent["agent_metrics"]["tasks_seen"] == 2.0
    assert agent["agent_metrics"]["majority@2/accuracy"] == pytest.approx(50.0)


def test_the_plot_aggregates_so_10000_tasks_read_like_10(tmp_path: Path) -> None:
    """No bar or tick per task: the figure holds the same number of marks at 10 tasks and at 10,000."""
    import random

    from matplotlib.patches import Rectangle

    from gym_serve.analysis.plots import BINS, CURVE_POINTS, plot_rewards, reward_figure

    def by_task(tasks: int) -> dict[tuple[str, int], list[tuple[int, dict[str, float], Any]]]:
        rng = random.Random(tasks)
        rates = {t: rng.random() for t in range(tasks)}
        return {("math", t): [(k, {"reward": float(rng.random() < rates[t])}, None) for k in range(4)] for t in rates}

    def marks(figure: Any) -> list[tuple[int, int, int]]:
        """Per panel: bars, plotted vertices, tick labels."""
        return [
            (
                sum(isinstance(p, Rectangle) for p in axes.patches),
                sum(len(line.get_xdata()) for line in axes.lines),
                len(axes.get_xticklabels()),
            )
            for axes in figure.axes
        ]

    small, large = marks(reward_figure(by_task(10))), marks(reward_figure(by_task(10_000)))
    assert [bars for bars, _, _ in large] == [BINS, BINS, 0], "two 20-bin histograms and a curve"
    assert [ticks for _, _, ticks in large] == [ticks for _, _, ticks in small] and all(t <= 12 for _, _, t in large)
    assert large[2][1] <= CURVE_POINTS, "the sorted-tasks curve is drawn from quantiles, not from every task"
    path = plot_rewards(by_task(10_000), tmp_path / "rewards.png")
    assert path.stat().st_size < 200_000
