"""`gym-serve env test`: what it reports on broken data, and a full pass through real Serve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_serve import Environment, Response, Task
from gym_serve.analysis.check import EnvReport, _check_rows, _recorded_rewards, check_environment
from gym_serve.serving.cluster import start_local
from gym_serve.verifiers.non_answer import non_answers


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
    assert "line 2" in text and "line 3, field `responses_create_params`: Field required" in text
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

    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        report = check_environment("example_session_state")
    finally:
        ray.shutdown()
    assert report.ok, report.render()
    assert len(report.rows) >= 5
    assert all(r.right == 1.0 and r.wrong == 0.0 and 0 < r.verify_s < 2.0 for r in report.rows)


def test_a_verifier_that_pays_for_non_answers_is_caught(tmp_path: Path) -> None:
    """Empty text, "I don't know", the question echoed, empty JSON and the replay miss text must each score 0."""

    class Generous(Environment):
        Task = Needs

        @classmethod
        def data_dir(cls) -> Path:
            return tmp_path

        async def verify(self, task: Task, response: Response, state: None) -> float:
            return 0.0 if response.output_text() == "" else 1.0  # it only refuses an empty reply

    lines = [json.dumps(row(f"question {i}?", expected="1")) for i in range(5)]
    (tmp_path / "example.jsonl").write_text("\n".join(lines) + "\n")
    report = check_environment_rows(Generous)
    found = {p.split("`")[1] for r in report.rows for p in r.problems if p.startswith("non-answer")}
    assert found == set(non_answers("q")) - {"empty"}
    assert {"json_all_null", "json_all_empty", "json_empty_object", "json_empty_array", "echo_padded"} <= found
    assert all("non-answer `echo` scored 1" in r.problems for r in report.rows)


def check_environment_rows(cls: type[Environment]) -> EnvReport:
    import asyncio

    from gym_serve.analysis.check import RowResult, _check_non_answers

    report = EnvReport(cls.__name__)
    rows = _check_rows(cls.data_dir() / "example.jsonl", cls.Task, report)
    report.rows = [RowResult(line, None, None) for line, _ in rows]
    asyncio.run(_check_non_answers(cls, rows, report))
    return report


def test_every_bundled_environment_scores_every_non_answer_zero() -> None:
    from gym_serve.environment.registry import available_environments, load_environment_class

    for name in available_environments():
        report = check_environment_rows(load_environment_class(name))
        assert report.rows and [p for r in report.rows for p in r.problems] == [], name
