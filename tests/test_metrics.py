"""pass@k, majority@k and summary statistics against values worked out by hand."""

from __future__ import annotations

import pytest

from gym_serve.analysis.metrics import majority_at_k, numeric_fields, pass_at_k, pass_metrics, summary_stats


@pytest.mark.parametrize(
    ("rewards", "k", "expected"),
    [
        ([1, 0, 0, 0], 1, 0.25),  # c/n
        ([1, 0, 0, 0], 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        ([1, 1, 0, 0, 0], 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        ([0, 0, 0], 3, 0.0),  # none correct
        ([1, 1, 1], 3, 1.0),  # all correct, k = n
        ([1, 0, 0], 3, 1.0),  # n - c < k
        ([0.2, 0.5, 0.9], 2, (0.5 + 0.9 + 0.9) / 3),  # continuous: mean max over the 3 pairs
        ([0.2, 0.5, 0.9], 1, (0.2 + 0.5 + 0.9) / 3),
    ],
)
def test_pass_at_k(rewards: list[float], k: int, expected: float) -> None:
    assert pass_at_k([float(r) for r in rewards], k) == pytest.approx(expected)


def test_pass_at_k_needs_enough_samples() -> None:
    with pytest.raises(ValueError, match="pass@4 needs at least 4 samples"):
        pass_at_k([1.0, 0.0], 4)


def test_majority_at_k_takes_the_most_common_answer_and_ignores_abstentions() -> None:
    assert majority_at_k(["7", "8", "7", None], [1.0, 0.0, 1.0, 0.0], 4) == 1.0
    assert majority_at_k(["8", "7", "8"], [0.0, 1.0, 0.0], 3) == 0.0
    assert majority_at_k(["8", "7"], [0.0, 1.0], 2) == 0.0, "a tie goes to the answer seen first"
    assert majority_at_k([None, None], [1.0, 1.0], 2) == 0.0


def test_pass_metrics_over_tasks_in_percent() -> None:
    tasks = [
        [{"reward": 1.0, "a": "x"}, {"reward": 0.0, "a": "y"}],
        [{"reward": 0.0, "a": "z"}, {"reward": 0.0, "a": "z"}],
    ]
    metrics = pass_metrics(tasks, answer_key="a")
    assert metrics["pass@1/accuracy"] == pytest.approx(25.0)
    assert metrics["pass@2/accuracy"] == pytest.approx(50.0)
    assert metrics["pass@1[avg-of-2]/accuracy"] == pytest.approx(25.0)
    assert metrics["majority@2/accuracy"] == pytest.approx(50.0)  # task 1: tie x/y -> x (1.0); task 2: z (0.0)
    assert metrics["pass@1[avg-of-2]/accuracy/std_dev_across_runs"] == pytest.approx(35.355, abs=1e-3)


def test_summary_stats_and_numeric_fields() -> None:
    stats = summary_stats("reward", [1.0, 0.0, 0.5, 0.5])
    assert stats == {
        "mean/reward": 0.5,
        "max/reward": 1.0,
        "min/reward": 0.0,
        "median/reward": 0.5,
        "std/reward": pytest.approx(0.353553, abs=1e-6),
    }
    row = {
        "reward": 1,
        "accuracy": True,
        "name": "x",
        "_ng_task_index": 3,
        "response": {"usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}},
    }
    assert numeric_fields(row) == {
        "reward": 1.0,
        "accuracy": 1.0,
        "input_tokens": 10.0,
        "output_tokens": 2.0,
        "total_tokens": 12.0,
    }
