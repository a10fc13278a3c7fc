"""NeMo Gym's own example rows and recorded rollouts work with gym-serve unchanged.

The recordings are real model outputs that NeMo Gym's verifiers scored (NeMo Gym
0.7.0's files). Played back through our environments (tool outputs included, since
the replay key covers them), every episode must reach the end and get the reward
NeMo Gym gave, but where `OUR_REWARD_DIFFERS` says our verifier decides otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gym_serve import InputRow, ReplayModel, Response, RolloutRow, run_local
from gym_serve.environment.registry import load_environment_class
from gym_serve.rollout.replay import conversation_key
from tests.conftest import REPO

NEMO_GYM_DATA = REPO / "tests" / "data" / "nemo_gym"
"""NeMo Gym's example rows and recordings, copied into the repository (see its README)."""
OURS = {
    "example_single_tool_call": "example_single_tool_call",
    "example_multi_step": "example_multi_step",
    "example_session_state_mgmt": "example_session_state",
}
OUR_REWARD_DIFFERS = {
    ("example_single_tool_call", "how's the outside?"): 1.0,
    ("example_single_tool_call", "get the weather for 3 cities in the us"): 1.0,
}
"""Where our verifier disagrees with NeMo Gym 0.7.0's on its own recordings, on purpose: asked about the weather
with no place named, the model asks which city. NeMo Gym's `example_single_tool_call` pays only a `get_weather`
call (0.0 here); ours pays a question for the place that states no weather it never looked up (1.0)."""


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def prompt_key(row: dict[str, Any]) -> str:
    items = row["responses_create_params"]["input"]
    return conversation_key([{"role": "user", "content": items}] if isinstance(items, str) else items)


@pytest.mark.parametrize("theirs", sorted(OURS))
def test_their_rows_and_rollouts_parse_and_round_trip(theirs: str) -> None:
    for raw in read(NEMO_GYM_DATA / theirs / "example.jsonl"):
        row = InputRow.model_validate(raw)
        assert row.model_dump(by_alias=True, exclude_unset=True) == raw, "nothing added, nothing dropped"
    for raw in read(NEMO_GYM_DATA / theirs / "example_rollouts.jsonl"):
        rollout = RolloutRow.model_validate(raw)
        assert rollout.model_dump(by_alias=True, exclude_unset=True) == raw
        Response.model_validate(raw["response"]).output_text()


@pytest.mark.parametrize("theirs", sorted(OURS))
async def test_their_recordings_replay_through_our_environment_with_their_rewards(theirs: str) -> None:
    env_cls = load_environment_class(OURS[theirs])
    recordings = NEMO_GYM_DATA / theirs / "example_rollouts.jsonl"
    model = ReplayModel([recordings])
    expected = {prompt_key(r): r for r in read(recordings)}
    differs = []
    for row in read(NEMO_GYM_DATA / theirs / "example.jsonl"):
        recorded = expected[prompt_key(row)]
        rollout = await run_local(row, env_cls(), model)
        variants = [item.get("metadata", {}).get("replay_variant") for item in [rollout["response"]]]
        question = row["responses_create_params"]["input"][-1]["content"]
        reward = OUR_REWARD_DIFFERS.get((theirs, question), recorded["reward"])
        differs += [question] if reward != recorded["reward"] else []
        assert rollout["reward"] == reward, (theirs, row["responses_create_params"]["input"], variants)
        ours = [i for i in rollout["response"]["output"] if i["type"] != "reasoning"]
        theirs_items = [i for i in recorded["response"]["output"] if i["type"] != "reasoning"]
        assert [i["type"] for i in ours] == [i["type"] for i in theirs_items]
        assert (
            Response.model_validate(rollout["response"]).output_text()
            == Response.model_validate(recorded["response"]).output_text()
        )
        for field in set(recorded) - {"response", "responses_create_params", "reward"}:
            assert rollout[field] == recorded[field], f"verify field `{field}` differs"
    assert sorted(differs) == sorted(q for t, q in OUR_REWARD_DIFFERS if t == theirs)  # each still differs


def test_the_copies_are_nemo_gym_0_7_0s_own_files() -> None:
    """The README there says these are NeMo Gym 0.7.0's files: each is byte for byte the installed one."""
    from importlib import metadata

    from gym_serve.environment.nemo_gym.catalog import servers_root

    assert metadata.version("nemo-gym") == "0.7.0"
    copies = [p for p in NEMO_GYM_DATA.glob("*/*.jsonl")]
    assert len(copies) >= 16
    different = [
        str(p) for p in copies if p.read_bytes() != (servers_root() / p.parent.name / "data" / p.name).read_bytes()
    ]
    assert different == []


def test_a_judges_calls_recorded_inside_a_row_are_answered_as_recorded_and_never_varied(tmp_path: Path) -> None:
    """A row's nested `{responses_create_params, response}` pairs (a judge's) make the replay model that judge."""
    verdict = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "[[A=B]]"}]}
    judged = {"responses_create_params": {"input": "Are these equal? 1/2 and 0.5"}, "response": {"output": [verdict]}}
    answer = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "0.5"}]}
    row = {
        "responses_create_params": {"input": "What is 1/2 as a decimal?"},
        "response": {"output": [answer]},
        "reward": 1.0,
        "judge_evaluations": [judged],
    }
    path = tmp_path / "rollouts.jsonl"
    path.write_text(json.dumps(row) + "\n")
    model = ReplayModel([path], error_rate=1.0)  # every policy answer varied: the judge's never
    reply = model.respond({"input": "Are these equal? 1/2 and 0.5"}, session="s")
    assert reply["output"] == [verdict] and reply["metadata"]["replay_variant"] == "recorded"
    assert (
        model.respond({"input": "What is 1/2 as a decimal?"}, session="s")["metadata"]["replay_variant"] == "corrupted"
    )
