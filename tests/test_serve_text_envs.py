"""Real Ray + Serve: `instruction_following` and `reasoning_gym` deployed from their YAML, rollouts through handles.

(Wrong answers replay to 0.0 in each environment's own tests, in-process.)
"""

from __future__ import annotations

import asyncio

import pytest
from ray import serve

from gym_serve.deployments.app import build_app
from gym_serve.serving.config import load_serve_config
from gym_serve.testing.fixtures import example_rows, unique
from tests.conftest import REPO

pytestmark = pytest.mark.serve


@pytest.mark.parametrize("env", ["instruction_following", "reasoning_gym"])
async def test_app_from_its_yaml_rolls_out_every_example(serve_instance: None, env: str) -> None:
    (spec,) = load_serve_config(REPO / "deployments" / f"{env}.yaml")
    args = spec.app_args()
    assert args.environment is not None and args.environment.name == env
    rows = [{**row, "_ng_task_index": i, "_ng_rollout_index": 0} for i, row in enumerate(example_rows(env))]

    name = unique(env)
    handle = serve.run(build_app(args), name=name, route_prefix=None)
    rollouts = await asyncio.gather(*(handle.run.remote(row) for row in rows))
    assert [r["reward"] for r in rollouts] == [1.0] * len(rows)
    assert [r["_ng_task_index"] for r in rollouts] == list(range(len(rows)))
    field = "follow_all_instructions" if env == "instruction_following" else "extracted_answer"
    assert all(r[field] not in (None, False) for r in rollouts)
    assert all(r["response"]["output"][-1]["role"] == "assistant" for r in rollouts)
    serve.delete(name)
