"""What must never become a reward: a replay miss and a verification that ran out of time are failure rows.

A reward of 0 says "the policy was wrong". A replay miss (the stand-in model had no recording)
and a verifier that did not finish (a busy machine) say nothing about the policy: they are
failure rows with their own kind and `mask_sample: true`, through the one attempts path the
driver and the ingress share.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from gym_serve import Environment, ReplayModel, Response, RolloutError, Task, run_local
from gym_serve.collect.attempts import RetryPolicy, run_attempts
from gym_serve.environment.registry import load_environment_class
from gym_serve.errors import FailureKind, ReplayMissError, failure_kind
from gym_serve.rollout.replay import MISS_PREFIX
from gym_serve.verifiers import math as math_verifier

WEATHER = load_environment_class("example_single_tool_call")
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "a question nobody recorded"}]}}


async def failure_row_of(attempt: Any) -> dict[str, Any]:
    outcome = await run_attempts(attempt, ROW, RetryPolicy(max_attempts=3, backoff_base_s=0.0), random.Random(0))
    assert not outcome.ok and outcome.attempts == 1, "neither is worth another attempt"
    return outcome.row


async def test_a_replay_miss_is_a_masked_failure_row_not_a_scored_rollout() -> None:
    model = ReplayModel.for_environment(WEATHER)
    with pytest.raises(ReplayMissError, match="No recording matches") as miss:
        model.respond(ROW["responses_create_params"])
    assert str(miss.value).startswith(MISS_PREFIX)
    row = await failure_row_of(lambda: run_local(ROW, WEATHER(), model))
    assert row["_ng_failure_class"] == "replay_miss" and row["mask_sample"] is True and "reward" not in row


class Slow(Environment):
    verify_timeout_s = 0.2

    async def verify(self, task: Task, response: Response, state: None) -> float:
        await asyncio.sleep(5)
        return 1.0


class Says:
    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        text = "\\boxed{4}"
        return {
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]
        }


async def test_a_verification_past_its_deadline_is_a_verifier_timeout_failure_never_reward_zero() -> None:
    row = await failure_row_of(lambda: run_local(ROW, Slow(), Says()))
    assert row["_ng_failure_class"] == "verifier_timeout" and row["mask_sample"] is True and "reward" not in row
    assert "within its deadline of 0.2 s" in row["error"]
    # the deadline is per environment, set where it is deployed
    assert Slow(verify_timeout_s=30.0).verify_timeout_s == 30.0 and Slow().verify_timeout_s == 0.2


async def test_a_math_answer_that_cannot_be_checked_in_time_is_not_scored() -> None:
    """On a machine too busy to finish math-verify in time, the answer is not marked wrong: it is not scored."""
    math_env = load_environment_class("math")
    assert math_env.verify_timeout_s == 10.0 == math_verifier.DEFAULT_TIMEOUT_S  # NeMo Gym's default
    row = {**ROW, "expected_answer": "4"}
    assert (await run_local(row, math_env(), Says()))["reward"] == 1.0
    with pytest.raises(RolloutError) as caught:
        await run_local(row, math_env(verify_timeout_s=1e-6), Says())
    assert failure_kind(caught.value) is FailureKind.VERIFIER_TIMEOUT
