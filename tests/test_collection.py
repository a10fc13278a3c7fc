"""The collection's bookkeeping with a scripted call in place of Serve: retries, deadlines, back-pressure, resume.

(The same `Collection` runs inside the driver actor against real deployments in
tests/test_collection_faults.py.)
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gym_serve.collect.driver import Collection
from gym_serve.collect.job import CollectJob, failures_path, sibling_path
from gym_serve.collect.window import AdaptiveWindow
from gym_serve.errors import ModelError, VerifyError


class ActorDiedError(Exception):
    """Named like Ray's: classified as `replica_died`."""


class BackPressureError(Exception):
    """Named like Serve's: classified as `backpressure`."""


def write_input(path: Path, n: int, extra_lines: list[str] = ()) -> Path:
    rows = [json.dumps({"responses_create_params": {"input": f"task {i}"}, "answer": i}) for i in range(n)]
    path.write_text("\n".join([*rows, *extra_lines]) + "\n")
    return path


def job(tmp_path: Path, n: int = 5, **kwargs: Any) -> CollectJob:
    return CollectJob(
        input_path=str(write_input(tmp_path / "in.jsonl", n)),
        output_path=str(tmp_path / "out.jsonl"),
        agents=["a"],
        default_agent="a",
        **kwargs,
    )


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def keys(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows)


class Script:
    """A rollout call whose behaviour per (task, attempt) is scripted; counts attempts."""

    def __init__(self, plan: dict[int, list[Any]] | None = None, delay: float = 0.0) -> None:
        self.plan = plan or {}
        self.attempts: Counter[tuple[int, int]] = Counter()
        self.delay = delay
        self.in_flight = self.max_in_flight = 0

    async def __call__(self, agent: str, row: dict[str, Any], on_turn: Any = None) -> dict[str, Any]:
        row = {k: v for k, v in row.items() if k != "_gs_run"}  # the dispatcher's instructions: an Agent's to read
        key = (row["_ng_task_index"], row["_ng_rollout_index"])
        self.attempts[key] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            steps = self.plan.get(row["_ng_task_index"], [])
            outcome = steps[min(self.attempts[key], len(steps)) - 1] if steps else None
            if outcome == "hang":
                await asyncio.sleep(3600)
            if isinstance(outcome, BaseException):
                raise outcome
            return {
                **row,
                "response": {"output": []},
                "reward": 1.0,
                "_gs_timings": {"model_s": 0.01, "tool_s": 0.002, "verify_s": 0.001},
            }
        finally:
            self.in_flight -= 1


async def test_collects_every_rollout_once_and_accounts_for_all(tmp_path: Path) -> None:
    script = Script(delay=0.001)
    summary = await Collection(job(tmp_path, n=20, num_repeats=3, concurrency=4), script).run()
    rollouts = read(tmp_path / "out.jsonl")
    assert keys(rollouts) == [(t, k) for t in range(20) for k in range(3)]
    assert script.max_in_flight <= 4
    assert summary.rollouts == summary.rollouts_expected == 60 and summary.failures == 0
    assert summary.time_split_s["model_s"] == pytest.approx(0.6)
    assert summary.latency_p50_s is not None and summary.latency_p99_s >= summary.latency_p50_s


async def test_retryable_failures_are_retried_others_are_not(tmp_path: Path) -> None:
    plan = {
        1: [ActorDiedError("replica gone"), ActorDiedError("again"), "ok"],
        2: [VerifyError("verify raised")],
        3: [ModelError("model 503")] * 5,
    }
    script = Script(plan)
    summary = await Collection(job(tmp_path, max_attempts=3), script).run()
    assert keys(read(tmp_path / "out.jsonl")) == [(0, 0), (1, 0), (4, 0)]
    failures = {f["_ng_task_index"]: f for f in read(failures_path(tmp_path / "out.jsonl"))}
    assert failures[2]["_ng_failure_class"] == "verifier_error" and failures[2]["attempts"] == 1
    assert failures[3]["_ng_failure_class"] == "model_error" and failures[3]["attempts"] == 3
    assert failures[3]["error"] == "model 503" and failures[3]["answer"] == 3, "the failure row keeps the input"
    assert script.attempts[(1, 0)] == 3 and summary.retries == 2 + 2
    assert summary.failures_by_class == {"verifier_error": 1, "model_error": 1}


async def test_a_hung_rollout_times_out_without_holding_up_the_rest(tmp_path: Path) -> None:
    script = Script({2: ["hang"]})
    summary = await asyncio.wait_for(
        Collection(job(tmp_path, attempt_timeout_s=0.2, max_attempts=2), script).run(), timeout=10
    )
    failure = read(failures_path(tmp_path / "out.jsonl"))[0]
    assert failure["_ng_failure_class"] == "agent_timeout" and failure["attempts"] == 2
    assert "within 0.2 s" in failure["error"]
    assert summary.rollouts == 4


async def test_back_pressure_shrinks_the_window_and_costs_no_attempt(tmp_path: Path) -> None:
    script = Script({0: [BackPressureError("queue full")] * 4 + ["ok"]})
    collection = Collection(job(tmp_path, n=1, concurrency=8, max_attempts=1), script)
    summary = await collection.run()
    assert summary.rollouts == 1 and summary.failures == 0 and summary.backpressure_waits == 4
    assert collection.window.limit < 8


async def test_window_halves_on_back_pressure_and_grows_back() -> None:
    window = AdaptiveWindow(8)
    window.on_backpressure()
    window.on_backpressure()
    assert window.limit == 2
    for _ in range(10):
        window.on_success()
    assert 4 < window.limit <= 8
    for _ in range(1000):
        window.on_success()
    assert window.limit == 8


async def test_materialized_inputs_carry_overrides_agents_and_per_agent_repeats(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"responses_create_params": {"input": "x", "temperature": 1.0}},
                {"responses_create_params": {"input": "y"}, "agent_ref": {"name": "b"}},
            ]
        )
        + "\n"
    )
    j = CollectJob(
        input_path=str(source),
        output_path=str(tmp_path / "out.jsonl"),
        agents=["a", "b"],
        default_agent="a",
        num_repeats={"a": 2, "b": 3},
        params_overrides={"temperature": 0.5, "max_output_tokens": 64},
    )
    await Collection(j, Script()).run()
    rows = read(sibling_path(tmp_path / "out.jsonl", "materialized_inputs.jsonl"))
    assert [(r["agent_ref"]["name"], r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows] == [
        ("a", 0, 0),
        ("a", 0, 1),
        ("b", 1, 0),
        ("b", 1, 1),
        ("b", 1, 2),
    ]
    assert all(r["responses_create_params"]["temperature"] == 0.5 for r in rows)
    assert all(r["responses_create_params"]["max_output_tokens"] == 64 for r in rows)


async def test_ordered_copy_is_sorted(tmp_path: Path) -> None:
    class Reversed(Script):
        async def __call__(self, agent: str, row: dict[str, Any], on_turn: Any = None) -> dict[str, Any]:
            await asyncio.sleep(0.01 * (10 - row["_ng_task_index"]))  # later tasks finish first
            return await super().__call__(agent, row)

    summary = await Collection(job(tmp_path, n=10, num_repeats=2, concurrency=20, ordered=True), Reversed()).run()
    written = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in read(tmp_path / "out.jsonl")]
    ordered = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in read(Path(summary.ordered_path))]
    assert written != sorted(written) and ordered == sorted(written)


async def test_resume_after_a_crash_redoes_only_what_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    first = job(tmp_path, n=6, num_repeats=2, max_attempts=3)
    await Collection(first, Script({4: [ModelError("503")] * 3, 5: [VerifyError("bad")]})).run()
    assert len(read(out)) == 8
    # simulate a crash: the last rollout line was cut off mid-write, and a key appears twice
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:6]) + lines[0] + lines[7][: len(lines[7]) // 2])
    kept = {(r["_ng_task_index"], r["_ng_rollout_index"]) for r in map(json.loads, lines[:6])}
    script = Script()
    summary = await Collection(first.model_copy(update={"resume": True}), script).run()

    rollouts = read(out)
    assert len(keys(rollouts)) == len(set(keys(rollouts))), "no key twice"
    assert keys(rollouts) == [(t, k) for t in range(6) for k in range(2) if t != 4]
    everything = {(t, k) for t in range(6) for k in range(2)}
    assert set(script.attempts) == everything - kept - {(4, 0), (4, 1)}, "finished keys are never run again"
    assert script.attempts[(5, 0)] == 1, "a failure with attempts left is tried again"
    failures = read(failures_path(out))
    assert keys(failures) == [(4, 0), (4, 1)] and all(f["attempts"] == 3 for f in failures)
    assert summary.rollouts_resumed == 6 and summary.rollouts == 4 and summary.failures_kept == 2
    assert (
        summary.rollouts_expected
        == summary.rollouts + summary.rollouts_resumed + summary.failures + summary.failures_kept
    )


async def test_bad_rows_are_counted_and_written_with_their_line(tmp_path: Path) -> None:
    source = write_input(tmp_path / "in.jsonl", 2, ["{oops", json.dumps({"no": "params"})])
    j = CollectJob(input_path=str(source), output_path=str(tmp_path / "out.jsonl"), agents=["a"], default_agent="a")
    summary = await Collection(j, Script()).run()
    assert summary.rows_read == 4 and summary.rows_skipped == 2 and summary.rollouts == 2
    assert [f["line"] for f in read(failures_path(tmp_path / "out.jsonl"))] == [3, 4]


class Versioned(Script):
    """Rollouts sampled by an old policy on their first attempt, by the current one after (per task)."""

    def __init__(self, current: int, first: dict[int, int]) -> None:
        super().__init__()
        self.current, self.first = current, first

    async def __call__(self, agent: str, row: dict[str, Any], on_turn: Any = None) -> dict[str, Any]:
        rollout = await super().__call__(agent, row)
        key = (row["_ng_task_index"], row["_ng_rollout_index"])
        oldest = self.first.get(row["_ng_task_index"], self.current) if self.attempts[key] == 1 else self.current
        return {**rollout, "policy_version_min": oldest, "policy_version_max": self.current}


@pytest.mark.parametrize("flag_stale", [False, True])
async def test_rollouts_behind_max_policy_lag_are_run_again_or_flagged(tmp_path: Path, flag_stale: bool) -> None:
    from gym_serve.collect.staleness import Staleness

    script = Versioned(current=7, first={0: 4, 1: 5, 2: 6})  # lags 3, 2, 1 on the first attempt; 0 after
    staleness = Staleness(1, flag_stale=flag_stale, current=lambda agent: asyncio.sleep(0, result=script.current))
    summary = await Collection(job(tmp_path, n=4, max_attempts=2), script, staleness=staleness).run()
    rows = {r["_ng_task_index"]: r for r in read(tmp_path / "out.jsonl")}
    assert summary.rollouts == 4 and summary.failures == 0
    if flag_stale:
        assert [rows[t].get("policy_stale", False) for t in range(4)] == [True, True, False, False]
        assert [rows[t]["policy_lag"] for t in range(4)] == [3, 2, 1, 0] and summary.retries == 0
    else:  # tasks 0 and 1 were too stale: run again, on the current policy
        assert [script.attempts[(t, 0)] for t in range(4)] == [2, 2, 1, 1] and summary.retries == 2
        assert all(rows[t]["policy_lag"] == 0 for t in (0, 1)) and rows[2]["policy_lag"] == 1
        assert not any("policy_stale" in row for row in rows.values())


async def test_a_rollout_that_stays_stale_ends_as_a_stale_policy_failure(tmp_path: Path) -> None:
    from gym_serve.collect.staleness import Staleness

    class AlwaysOld(Script):
        async def __call__(self, agent: str, row: dict[str, Any], on_turn: Any = None) -> dict[str, Any]:
            return {**await super().__call__(agent, row), "policy_version_min": 0, "policy_version_max": 0}

    staleness = Staleness(2, current=lambda agent: asyncio.sleep(0, result=9))
    summary = await Collection(job(tmp_path, n=1, max_attempts=3), AlwaysOld(), staleness=staleness).run()
    (failure,) = read(failures_path(tmp_path / "out.jsonl"))
    assert summary.failures == 1 and summary.failures_by_class == {"stale_policy": 1}
    assert failure["attempts"] == 3 and failure["mask_sample"] is True
    assert "policy version 0, 9 behind the current 9 (max_policy_lag 2)" in failure["error"]


async def test_rollouts_without_policy_versions_pass_the_bound_unchecked(tmp_path: Path) -> None:
    from gym_serve.collect.staleness import Staleness

    async def never(agent: str) -> int:
        raise AssertionError("a rollout without versions needs no current version")

    summary = await Collection(job(tmp_path, n=3), Script(), staleness=Staleness(0, current=never)).run()
    assert summary.rollouts == 3 and not any("policy_lag" in r for r in read(tmp_path / "out.jsonl"))
