"""The rest of NeMo Gym's catalogue through real Serve deployments: a NeMo Gym agent hosted in the Agent tier, a
judge model that is another application's Model tier, and a server whose packages Ray installs for its replicas
alone (`runtime_env`). The same pieces in-process are in `tests/test_nemo_gym_catalogue.py`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from ray import serve

from gym_serve.analysis.check import recorded_rollouts
from gym_serve.deployments.app import build_app
from gym_serve.errors import FailureKind, failure_kind
from gym_serve.rollout.replay import recorded_judge_calls
from gym_serve.serving.config import validate_app_args
from gym_serve.testing.fixtures import unique

pytestmark = pytest.mark.serve

ZERO = {"ray_actor_options": {"num_cpus": 0}}


def deploy(name: str, args: dict[str, Any]) -> Any:
    args.setdefault("model", {"kind": "replay"})
    for tier in ("agent", "model"):
        args.setdefault(tier, {}).setdefault("deployment", ZERO)
    args["environment"].setdefault("deployment", ZERO)
    return serve.run(build_app(validate_app_args(args, source="test", app=name)), name=name, route_prefix=None)


@pytest.mark.timeout(300)
async def test_simple_agent_hosted_in_the_agent_tier_gives_what_gym_serves_loop_gives(serve_instance: None) -> None:
    server = "example_session_state_mgmt"  # its counter lives in the replica that seeded the rollout
    environment = {"kind": "nemo_gym", "server": server, "deployment": {"num_replicas": 2, **ZERO}}
    names = unique("ng-own"), unique("ng-hosted")
    ours = deploy(names[0], {"environment": dict(environment), "agent": {"max_steps": 20}})
    hosted_args = {"max_steps": 20, "nemo_gym": {"agent": "simple_agent"}}
    theirs = deploy(names[1], {"environment": dict(environment), "agent": hosted_args})
    for row, recorded in recorded_rollouts(server):
        a = await ours.run.remote(row)
        b = await theirs.run.remote(row)
        assert a["reward"] == b["reward"] == float(recorded["reward"])
        outputs = [
            [i["output"] for i in r["response"]["output"] if i["type"] == "function_call_output"] for r in (a, b)
        ]
        assert outputs[0] == outputs[1], "the same tool answers: every call of a rollout reached its session's replica"
    for name in names:
        serve.delete(name)


@pytest.mark.timeout(300)
async def test_a_judge_is_another_applications_model_tier_reached_through_its_handle(
    serve_instance: None, tmp_path: Path
) -> None:
    server = "equivalence_llm_judge"  # its judge is `policy_model` in NeMo Gym's config: mapped here to the judge
    pairs = recorded_rollouts(server)
    judged = tmp_path / "judge.jsonl"
    judged.write_text("".join(json.dumps(call) + "\n" for _, r in pairs for call in recorded_judge_calls(r)))
    judge = unique("judge")
    serve.run(
        build_app(
            validate_app_args({"model": {"kind": "replay", "recordings": [str(judged)]}}, source="t", app=judge)
        ),
        name=judge,
        route_prefix=None,
    )
    environment = {"kind": "nemo_gym", "server": server, "models": {"policy_model": judge}}
    handle = deploy(unique("ng-judged"), {"environment": environment})
    for row, recorded in pairs:
        assert (await handle.run.remote(row))["reward"] == float(recorded["reward"])

    # the judge application answers nothing it was not recorded for: the rollout fails judge_failed, never 0.0
    row, recorded = pairs[0]
    other = {**row, "expected_answer": "something no judge call was recorded for"}
    with pytest.raises(Exception) as failed:
        await handle.run.remote(other)
    assert failure_kind(failed.value) is FailureKind.JUDGE_FAILED


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_a_server_lacking_a_package_runs_in_an_environment_ray_builds_for_its_replicas(
    serve_instance: None,
) -> None:
    """structeval imports `toml`, which gym-serve's environment lacks: `dependencies: pip` makes Ray build the
    Environment replicas an environment from its requirements.txt; gym-serve's own stays without it."""
    server = "structeval"
    with pytest.raises(ModuleNotFoundError):
        __import__("toml")
    environment = {"kind": "nemo_gym", "server": server, "dependencies": "pip"}
    started = time.perf_counter()
    handle = deploy(unique("ng-pip"), {"environment": environment})
    built_s = time.perf_counter() - started
    rewards = [(await handle.run.remote(row))["reward"] for row, _ in recorded_rollouts(server)]
    assert rewards == [float(recorded["reward"]) for _, recorded in recorded_rollouts(server)]
    print(f"structeval: runtime_env built and deployed in {built_s:.0f} s")
