"""Turn-level checkpoints in one process: the episode loop resumed from any turn, stopped at a turn boundary, a
collection's journal read back after a crash (torn and corrupt lines), and partial rows refused when altered.

The Serve-level versions (a replica killed mid-rollout, a SIGKILLed `collect`, a vLLM batch paused across a
weight update) are in tests/test_rollouts_survive.py, tests/test_collection_faults.py and
tests/test_policy_weights.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from gym_serve.collect.driver import Collection
from gym_serve.collect.job import CollectJob, journal_path
from gym_serve.collect.journal import load_journal
from gym_serve.environment.runner import OPENING_KEY, EnvInfo, EnvRunner
from gym_serve.rollout.checkpoint import RUN, Checkpoint, PartialRefused, Paused, continued, partial_row
from gym_serve.rollout.loop import AgentConfig, run_episode
from gym_serve.wire.tokens import check_contiguity
from tests.conftest import written_lines
from tests.fault_parts import Count, SlowCounter, token_bump_turn


class TokenModel:
    """The scripted counter policy with token bundles; counts its calls per session."""

    def __init__(self, fail_at: dict[tuple[str, int], BaseException] | None = None) -> None:
        self.calls: list[tuple[str | None, int]] = []
        self.fail_at = dict(fail_at or {})

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        turn = 1 + sum(1 for item in request["input"] if item.get("type") == "function_call_output")
        self.calls.append((session, turn))
        failure = self.fail_at.pop((session or "", turn), None)
        if failure is not None:
            raise failure
        return {"id": "r", "object": "response", "status": "completed", "output": token_bump_turn(request)}


def counter_row(bumps: int, task: int = 0, rollout: int = 0) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": str(bumps)}]},
        "bumps": bumps,
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        "agent_ref": {"name": "counter"},
    }


def runner() -> EnvRunner:
    return EnvRunner(SlowCounter({"delay_s": 0.0}))


async def episode(row: dict[str, Any], model: TokenModel, **options: Any) -> dict[str, Any]:
    env = runner()
    return await run_episode(row, model=model, env=env, env_info=env.describe(), config=AgentConfig(), **options)


def items_without_ids(rollout: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in rollout["response"]["output"]]


async def test_a_rollout_resumed_at_any_turn_ends_as_the_undisturbed_one() -> None:
    row = counter_row(3)
    records: list[dict[str, Any]] = []
    whole = await episode(row, TokenModel(), on_turn=records.append)
    assert [r["turn"] for r in records] == [1, 2, 3, 4] and whole["_gs_timings"]["turns"] == 4
    assert whole["reward"] == 1.0 and check_contiguity(whole).ok
    for k in range(1, 4):
        checkpoint = Checkpoint()
        for record in json.loads(json.dumps(records[:k])):  # as it crosses the wire
            checkpoint.extend(record)
        model = TokenModel()
        resumed = await episode(row, model, resume=checkpoint)
        assert model.calls == [("0:0", turn) for turn in range(k + 1, 5)], "no completed turn runs again"
        assert resumed["resumed_at_turn"] == k and resumed["_gs_timings"]["turns"] == 4
        assert resumed["reward"] == whole["reward"] and check_contiguity(resumed).ok
        assert resumed["response"]["output"] == whole["response"]["output"], "token ids and log-probs as sampled"
        assert resumed["response"]["usage"] == whole["response"]["usage"]


async def test_a_stop_lands_on_the_next_turn_boundary_and_an_unsafe_environment_starts_over() -> None:
    stop_after = 2
    records: list[dict[str, Any]] = []
    with pytest.raises(Paused) as paused:
        await episode(counter_row(3), TokenModel(), on_turn=records.append, stop=lambda: len(records) >= stop_after)
    assert paused.value.turn == 2 and len(records) == 2
    with pytest.raises(Paused) as before:
        await episode(counter_row(3), TokenModel(), stop=lambda: True)
    assert before.value.turn == 0, "a rollout stopped before it starts runs nothing, not even `reset`"

    class Unsafe(SlowCounter):
        replay_safe_tools = False

    checkpoint = Checkpoint()
    for record in records:
        checkpoint.extend(record)
    env, model = EnvRunner(Unsafe({"delay_s": 0.0})), TokenModel()
    rollout = await run_episode(
        counter_row(3), model=model, env=env, env_info=env.describe(), config=AgentConfig(), resume=checkpoint
    )
    assert "resumed_at_turn" not in rollout and [turn for _, turn in model.calls] == [1, 2, 3, 4]


class LocalAgent:
    """The Agent's side of a dispatched attempt, in this process: reads `_gs_run`, resumes, reports turns."""

    def __init__(self, model: TokenModel) -> None:
        self.model = model

    async def __call__(self, agent: str, row: dict[str, Any], on_turn: Any = None) -> dict[str, Any]:
        control = row[RUN]
        row = {k: v for k, v in row.items() if k != RUN}
        resume = Checkpoint.from_wire(control["resume"]) if control["resume"] else None
        return await episode(row, self.model, resume=resume, on_turn=on_turn if control["report"] else None)


class ActorDiedError(Exception):
    """Named like Ray's: a replica died under the call (`kill_shaped`, retried)."""


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def collect_job(tmp_path: Path, n: int, **options: Any) -> CollectJob:
    rows = [{k: v for k, v in counter_row(1 + i % 3).items() if not k.startswith("_ng")} | {"i": i} for i in range(n)]
    return CollectJob(
        input_path=str(write_rows(tmp_path / "in.jsonl", rows)),
        output_path=str(tmp_path / "out.jsonl"),
        agents=["counter"],
        default_agent="counter",
        **options,
    )


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("checkpoints", [True, False])
async def test_a_retried_attempt_goes_on_from_the_last_completed_turn(tmp_path: Path, checkpoints: bool) -> None:
    """A replica dies under the third turn of two rollouts: with checkpoints only that turn runs again."""
    died = ActorDiedError("the replica died")
    model = TokenModel(fail_at={("1:0", 3): died, ("2:0", 3): died})
    summary = await Collection(collect_job(tmp_path, 3, turn_checkpoints=checkpoints), LocalAgent(model)).run()
    rows = {r["_ng_task_index"]: r for r in read(tmp_path / "out.jsonl")}
    assert summary.rollouts == 3 and summary.retries == 2
    for task in (1, 2):
        calls = [turn for session, turn in model.calls if session == f"{task}:0"]
        if checkpoints:
            assert calls == [1, 2, 3, 3, *range(4, task + 3)] and rows[task]["resumed_at_turn"] == 2
        else:
            assert calls == [1, 2, 3, *range(1, task + 3)] and "resumed_at_turn" not in rows[task]
        assert rows[task]["attempts"] == 2 and rows[task]["reward"] == 1.0 and check_contiguity(rows[task]).ok
    assert "attempts" not in rows[0] and not journal_path(tmp_path / "out.jsonl").exists(), "nothing left to resume"


async def test_a_killed_collection_resumes_its_unfinished_rollouts_from_the_journal(tmp_path: Path) -> None:
    """Cancelled mid-run (the in-process stand-in for SIGKILL): `resume` runs no journaled turn again."""
    gate = asyncio.Event()

    class Parking(TokenModel):
        async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
            turn = 1 + sum(1 for item in request["input"] if item.get("type") == "function_call_output")
            if turn == 3:  # rollouts with 2+ bumps stop here, their first two turns journaled
                await gate.wait()
            return await super().responses(request, session)

    job = collect_job(tmp_path, 6, concurrency=6)
    first = asyncio.ensure_future(Collection(job, LocalAgent(Parking())).run())
    journal = journal_path(job.output_path)
    # 2 done, 4 parked after turn 2
    while written_lines(journal) < 2 + 2 * 4 or written_lines(Path(job.output_path)) < 2:
        await asyncio.sleep(0.01)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    model = TokenModel()
    summary = await Collection(job.model_copy(update={"resume": True}), LocalAgent(model)).run()
    assert summary.rollouts_resumed == 2 and summary.rollouts_resumed_mid_way == 4 and summary.turns_restored == 8
    assert all(turn >= 3 for _, turn in model.calls), model.calls
    rows = read(Path(job.output_path))
    assert sorted(r["_ng_task_index"] for r in rows) == list(range(6))
    assert all(r["reward"] == 1.0 and check_contiguity(r).ok for r in rows)
    assert sorted(r.get("resumed_at_turn") for r in rows if "resumed_at_turn" in r) == [2, 2, 2, 2]


async def test_a_torn_or_corrupt_journal_resumes_from_what_is_intact(tmp_path: Path) -> None:
    records: list[dict[str, Any]] = []
    await episode(counter_row(3, task=0), TokenModel(), on_turn=records.append)
    other: list[dict[str, Any]] = []
    await episode(counter_row(3, task=1), TokenModel(), on_turn=other.append)
    path = tmp_path / "out_journal.jsonl"
    from gym_serve.collect.journal import JournalWriter

    writer = JournalWriter(path)
    for record in records[:3]:
        writer(("counter", 0, 0), record)
    for record in other[:3]:
        writer(("counter", 1, 0), record)
    writer(("counter", 2, 0), records[0])
    writer.close()
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"turn":2', b'"turn":9')  # rollout 0's turn 2, changed on disk: its digest fails
    lines[4] = b'{"key": ["counter", 1, 0], "rec' + b"\n"  # rollout 1's turn 2: not JSON
    lines[6] = lines[6][:40]  # the last line, torn mid-write
    path.write_bytes(b"".join(lines))

    journal = load_journal(path, finished=set())
    assert {key: c.turn for key, c in journal.checkpoints.items()} == {("counter", 0, 0): 1, ("counter", 1, 0): 1}
    assert journal.skipped == [
        (2, "corrupt (its digest does not match its content)"),
        (3, "turn 3 of rollout 0:0 of `counter` after a missing turn"),
        (5, "corrupt (not JSON)"),
        (6, "turn 3 of rollout 1:0 of `counter` after a missing turn"),
        (7, "torn (cut off mid-write)"),
    ]
    assert len(path.read_bytes().splitlines()) == 2, "the journal now holds only what is intact"
    assert load_journal(path, finished={("counter", 0, 0)}).checkpoints.keys() == {("counter", 1, 0)}


async def test_a_partial_goes_on_only_as_it_was_paused() -> None:
    records: list[dict[str, Any]] = []
    row = counter_row(3)
    await episode(row, TokenModel(), on_turn=records.append)
    checkpoint = Checkpoint()
    for record in records[:2]:
        checkpoint.extend(record)
    partial = partial_row(row, checkpoint, agent="counter", policy="counter-model")
    assert partial["partial"] is True and partial["mask_sample"] is True and partial["turns"] == 2
    agent, policy, back, restored = continued(json.loads(json.dumps(partial)), line=1, source="partials")
    assert (agent, policy, back, restored.to_wire()) == ("counter", "counter-model", row, checkpoint.to_wire())

    def altered(change: Any) -> str:
        copy = json.loads(json.dumps(partial))
        change(copy)
        with pytest.raises(PartialRefused) as refused:
            continued(copy, line=3, source="partials")
        assert "partials, line 3" in str(refused.value)
        return str(refused.value.field)

    output = "response.output"
    assert altered(lambda p: p["response"]["output"][0]["generation_token_ids"].append(5)) == (
        f"{output}.0.generation_token_ids"
    )
    assert altered(lambda p: p["response"]["output"][2].update(generation_log_probs=[0.0] * 3)) == (
        f"{output}.2.generation_log_probs"
    )
    assert altered(lambda p: p["_gs_checkpoint"]["state"].update(count=9)) == "_gs_checkpoint.state"
    assert altered(lambda p: p["response"]["output"][1].update(output="7")) == output
    assert altered(lambda p: p["response"]["output"].pop(2)) == f"{output}.2.prompt_token_ids"
    assert altered(lambda p: p["response"]["output"].pop()) == output
    assert altered(lambda p: p.pop("_gs_checkpoint")) == "_gs_checkpoint"
    assert altered(lambda p: p.update(partial=False)) == "partial"
    assert Count.model_validate(restored.state).count == 2, "two turns, two bumps"


class SteppedEnv:
    """A Gymnasium-style environment (unit-test stand-in): every turn is a step, the reset observation opens the
    prompt, the third step terminates."""

    info = EnvInfo(
        name="stepped", tools=[], has_seed=True, has_user_turn=True, steps_every_turn=True, replay_safe_tools=True
    )

    async def seed(self, row: dict[str, Any]) -> dict[str, Any]:
        return {OPENING_KEY: "observation 0", "steps": 0}

    async def user_turn(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> tuple[Any, Any]:
        steps = state["steps"] + 1
        return {"reward": 0.5, "terminated": steps == 3, "message": f"observation {steps}"}, {"steps": steps}

    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> dict[str, Any]:
        return {"reward": float(state["steps"])}


class EchoModel:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        self.requests.append(request)
        text = {"type": "output_text", "text": f"move {len(request['input'])}"}
        return {"status": "completed", "output": [{"type": "message", "role": "assistant", "content": [text]}]}


async def test_a_gymnasium_episode_resumed_mid_way_sends_its_opening_observation_again() -> None:
    row = counter_row(0)

    async def run(model: EchoModel, **options: Any) -> dict[str, Any]:
        env: Any = SteppedEnv()
        return await run_episode(row, model=model, env=env, env_info=env.info, config=AgentConfig(), **options)

    records: list[dict[str, Any]] = []
    first = EchoModel()
    whole = await run(first, on_turn=records.append)
    assert whole["step_rewards"] == [0.5, 0.5, 0.5] and whole["reward"] == 3.0 and whole["terminated"]
    assert whole["responses_create_params"]["input"][-1]["content"] == "observation 0"
    checkpoint = Checkpoint()
    checkpoint.extend(json.loads(json.dumps(records[0])))  # as it crosses the wire
    assert checkpoint.opening == "observation 0"
    again = EchoModel()
    resumed = await run(again, resume=checkpoint)
    assert again.requests == first.requests[1:], "the same prompts, the opening observation in each"
    assert {k: v for k, v in resumed.items() if k != "_gs_timings"} == {
        **{k: v for k, v in whole.items() if k != "_gs_timings"},
        "resumed_at_turn": 1,
    }
    kept = partial_row(row, checkpoint, agent="stepped", policy="policy")
    kept["_gs_checkpoint"]["opening"] = "another observation"
    with pytest.raises(PartialRefused, match="_gs_checkpoint.opening"):
        continued(kept, line=1, source="partials")
