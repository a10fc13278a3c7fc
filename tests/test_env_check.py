"""`gym-serve env test`: what it reports on broken data, and a full pass through real Serve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_serve import Environment, Task
from gym_serve.analysis.check import EnvReport, _check_rows, _recorded_rewards, check_environment


class Needs(Task):
    expected: str


def broken_env(tmp_path: Path) -> type[Environment]:
    class Broken(Environment):
        Task = Needs

        @classmethod
        def data_dir(cls) -> Path:
            return tmp_path

    return Broken


def row(prompt: str, **fields: object) -> dict:
    return {"responses_create_params": {"input": prompt}, **fields}


def test_bad_rows_are_named_by_file_line_and_field(tmp_path: Path) -> None:
    lines = [json.dumps(row("ok", expected="1")), "{oops", json.dumps({"input": "x"}), json.dumps(row("no field"))]
    (tmp_path / "example.jsonl").write_text("\n".join(lines) + "\n")
    report = EnvReport("broken")
    rows = _check_rows(broken_env(tmp_path).data_dir() / "example.jsonl", Needs, report)
    assert [line for line, _ in rows] == [1]
    text = "\n".join(report.problems)
    assert "line 2" in text and "line 3" in text and "responses_create_params.input" in text
    assert "line 4, field `expected`" in text
    assert "1 valid rows; an environment ships at least 5" in text


def test_rows_need_a_right_and_a_wrong_recording(tmp_path: Path) -> None:
    recorded = [
        {**row("a"), "response": {"output": []}, "reward": 1.0},
        {**row("a"), "response": {"output": []}, "reward": 0.0},
        {**row("b"), "response": {"output": []}, "reward": 1.0},
    ]
    (tmp_path / "example_rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recorded))
    report = EnvReport("broken")
    rewards = _recorded_rewards(broken_env(tmp_path).data_dir() / "example_rollouts.jsonl", report)
    assert not report.problems
    assert sorted(rewards.values(), key=str) == sorted([(1.0, 0.0), (1.0, None)], key=str)


@pytest.mark.serve
@pytest.mark.timeout(300)
def test_an_environment_passes_through_real_serve() -> None:
    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        report = check_environment("example_session_state")
    finally:
        ray.shutdown()
    assert report.ok, report.render()
    assert len(report.rows) >= 5
    assert all(r.right == 1.0 and r.wrong == 0.0 and 0 < r.verify_s < 2.0 for r in report.rows)
