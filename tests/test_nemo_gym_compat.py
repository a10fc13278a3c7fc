"""NeMo Gym's own example rows and recorded rollouts work with gym-serve unchanged.

The recordings are real model outputs that NeMo Gym's verifiers scored. Played
back through our environments (tool outputs included, since the replay key
covers them), every episode must reach the end and get the reward NeMo Gym gave.
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
    for row in read(NEMO_GYM_DATA / theirs / "example.jsonl"):
        recorded = expected[prompt_key(row)]
        rollout = await run_local(row, env_cls(), model)
        variants = [item.get("metadata", {}).get("replay_variant") for item in [rollout["response"]]]
        assert rollout["reward"] == recorded["reward"], (theirs, row["responses_create_params"]["input"], variants)
        ours = [i for i in rollout["response"]["output"] if i["type"] != "reasoning"]
        theirs_items = [i for i in recorded["response"]["output"] if i["type"] != "reasoning"]
        assert [i["type"] for i in ours] == [i["type"] for i in theirs_items]
        assert (
            Response.model_validate(rollout["response"]).output_text()
            == Response.model_validate(recorded["response"]).output_text()
        )
        for field in set(recorded) - {"response", "responses_create_params", "reward"}:
            assert rollout[field] == recorded[field], f"verify field `{field}` differs"
