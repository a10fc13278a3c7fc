"""NeMo Gym's recordings read back as task rows and judge verdicts (`gym_serve.analysis.check`): which example row a
recorded rollout ran (`join_recordings`), and the judge calls a recording kept in either API's form
(`gym_serve.rollout.replay.recorded_judge_calls`). Pure logic over rows, plus the replay model: no server, no Ray."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gym_serve.analysis.check import join_recordings, recorded_rollouts
from gym_serve.rollout.replay import ReplayModel, recorded_judge_calls
from gym_serve.wire.chat import chat_request_to_responses, responses_response_to_chat


def task(prompt: list[dict[str, Any]] | str, **fields: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": prompt}, **fields}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def recorded(row: dict[str, Any], **kept: Any) -> dict[str, Any]:
    return {**row, **kept, "response": {"output": []}, "reward": 1.0}


def test_rows_that_share_a_prompt_are_told_apart_by_the_task_index() -> None:
    rows = [task("Route the traffic.", seed=seed) for seed in (7001, 7002, 7003)]
    recordings = [recorded(rows[i], _ng_task_index=i) for i in (2, 0, 1)]
    assert [row["seed"] for row, _ in join_recordings(rows, recordings)] == [7003, 7001, 7002]


def test_a_gymnasium_recording_whose_prompt_goes_on_with_the_first_observation_finds_its_row() -> None:
    rows = [task([user("Solve the Sokoban puzzle.")], seed=seed) for seed in (84810, 98293)]
    opened = [user("Solve the Sokoban puzzle."), user("Sokoban board:\n#P_X#")]
    row, _ = join_recordings(rows, [recorded(task(opened), _ng_task_index=1)])[0]
    assert row["seed"] == 98293
    assert row["responses_create_params"]["input"] == [user("Solve the Sokoban puzzle.")]  # the row's own prompt


def test_a_task_index_that_points_at_another_prompt_loses_to_the_prompt() -> None:
    """Recordings made from another file than example.jsonl: their index numbers that file's rows."""
    rows = [task("First task.", answer="a"), task("Second task.", answer="b")]
    row, _ = join_recordings(rows, [recorded(rows[1], _ng_task_index=0)])[0]
    assert row["answer"] == "b"


def test_an_index_out_of_range_or_a_row_of_another_prompt_is_no_join() -> None:
    rows = [task([user("Play.")], seed=1)]
    unrelated = recorded(task([user("Something else.")], seed=None), _ng_task_index=0)
    beyond = recorded(task([user("Play.")], seed=None), _ng_task_index=5)
    (first, _), (second, _) = join_recordings(rows, [unrelated, beyond])
    assert "response" not in first and "reward" not in first  # the recording is its own task row
    assert first["responses_create_params"]["input"] == [user("Something else.")]
    assert second["seed"] is None  # the prompt's row, its seed replaced by the one the recording kept


def test_the_task_fields_a_recording_kept_are_the_ones_it_ran_with() -> None:
    rows = [task("Route the traffic.", seed=7001, max_steps=16, tier="replay")]
    row, _ = join_recordings(rows, [recorded(rows[0], _ng_task_index=0, max_steps=2)])[0]
    assert (row["seed"], row["max_steps"], row["tier"]) == (7001, 2, "replay")
    assert "_ng_task_index" not in row  # only the example row's own fields are replaced


def test_the_openair_and_grl_recordings_get_their_own_seeds() -> None:
    """NeMo Gym's own recordings of three seeded servers (their prompts do not tell their rows apart)."""
    for server in ("openair_congestion", "grl_sokoban", "grl_tetris"):
        pairs = recorded_rollouts(server)
        examples = [json.loads(line) for line in _example_lines(server)]
        for row, recording in pairs:
            assert row["seed"] == examples[recording["_ng_task_index"]]["seed"], server


def _example_lines(server: str) -> list[str]:
    from gym_serve.environment.nemo_gym import catalog

    text = (catalog.data_dir(server) / "example.jsonl").read_text()
    return [line for line in text.splitlines() if line.strip()]


CHAT_REQUEST = {
    "messages": [{"role": "user", "content": "Score the response against the criterion."}],
    "max_tokens": 1024,
    "response_format": {"type": "json_schema", "json_schema": {"name": "score", "schema": {"type": "object"}}},
    "temperature": None,
    "tools": None,
}
CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "judge",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": '{"score":"1"}'}}],
}


@pytest.mark.asyncio
async def test_a_judge_called_over_chat_completions_is_replayed_with_its_recorded_verdict(tmp_path: Path) -> None:
    """gdp_pdf keeps `{chat_create_params, response}` per criterion: the host asks a Model tier the same call in
    Responses form (`routes`), and the replay model must answer it with the recorded verdict."""
    row = {"reward": 1.0, "criterion_evaluations": [{"chat_create_params": CHAT_REQUEST, "response": CHAT_ANSWER}]}
    calls = recorded_judge_calls(row)
    assert len(calls) == 1
    path = tmp_path / "judge.jsonl"
    path.write_text(json.dumps(calls[0]) + "\n")
    sent = {k: v for k, v in CHAT_REQUEST.items() if v is not None}  # as NeMo Gym's client sends it (set fields)
    answer = await ReplayModel([path]).responses(chat_request_to_responses(sent))
    assert responses_response_to_chat(answer)["choices"][0]["message"]["content"] == '{"score":"1"}'


def test_a_chat_pair_without_choices_and_the_rollouts_own_request_are_no_judge_calls() -> None:
    row = {
        "responses_create_params": {"input": "the task"},
        "response": {"output": []},
        "evaluations": [{"chat_create_params": CHAT_REQUEST, "response": {"error": "rate limited"}}],
    }
    assert recorded_judge_calls(row) == []


def test_nemo_gyms_gdp_pdf_recordings_keep_a_judge_call_per_criterion() -> None:
    for _, recording in recorded_rollouts("gdp_pdf"):
        assert len(recorded_judge_calls(recording)) == len(recording["criterion_evaluations"]) > 0
