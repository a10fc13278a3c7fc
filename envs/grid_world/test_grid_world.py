"""Grid world: Gymnasium reset/step, per-step rewards through the agent's user_turn loop."""

from __future__ import annotations

import pytest

from gym_serve import ReplayModel, run_local
from gym_serve.wire.jsonl import read_jsonl

from . import GridTask, GridWorld

ENV, CONFIG = GridWorld, None


def test_reset_and_step_follow_gymnasium() -> None:
    env, task = GridWorld(), GridTask(grid=["S#.", "..G"], max_moves=3)
    board, observation = env.start(task)
    assert observation == "A#.\n..G"
    obs, reward, terminated, truncated = env.step(task, board, "right")  # a wall
    assert (round(reward, 2), terminated, truncated) == (-0.15, False, False) and "wall" in obs
    env.step(task, board, "down")
    obs, reward, terminated, truncated = env.step(task, board, "right")
    assert (terminated, truncated) == (False, True)  # out of moves before the goal
    board, _ = env.start(task)
    for move in ("down", "right", "right"):
        obs, reward, terminated, truncated = env.step(task, board, move)
    assert terminated and not truncated and round(reward, 2) == 0.95 and board.reached_goal


async def test_step_rewards_show_up_in_the_rollout() -> None:
    row = next(row for _, row in read_jsonl(ENV.data_dir() / "example.jsonl"))
    rollout = await run_local(row, GridWorld(), ReplayModel.for_environment(ENV))
    assert rollout["reward"] == 1.0
    assert [round(r, 2) for r in rollout["step_rewards"]] == [-0.05, 0.95]
    users = [i for i in rollout["response"]["output"] if i.get("role") == "user"]
    assert users[-1]["content"].endswith("You reached the goal!")


@pytest.mark.serve
async def test_the_game_runs_through_serve_handles(serve_instance: None) -> None:
    """`user_turn` crosses the Agent → Environment handle like the other calls, with its state."""
    import uuid

    from ray import serve

    from gym_serve.deployments.app import build_app
    from gym_serve.serving.config import AppArgs

    name = f"grid-{uuid.uuid4().hex[:8]}"
    app = build_app(AppArgs.model_validate({"environment": {"name": "grid_world", "deployment": {"num_replicas": 2}}}))
    handle = serve.run(app, name=name, route_prefix=None)
    rows = [
        {**row, "_ng_task_index": i, "_ng_rollout_index": 0}
        for i, (_, row) in enumerate(read_jsonl(ENV.data_dir() / "example.jsonl"))
    ]
    rollouts = [await handle.run.remote(row) for row in rows]
    assert [r["reward"] for r in rollouts] == [1.0] * len(rows)
    assert [len(r["step_rewards"]) for r in rollouts] == [2, 3, 6, 4, 5]
    assert all(round(r["step_rewards"][-1], 2) == 0.95 for r in rollouts)
    serve.delete(name)
