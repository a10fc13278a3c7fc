"""gym-serve's verl adapter on verl's real classes, in verl's own environment (`scripts/trainer_envs.py`).

verl 0.9.1 (Python 3.11, transformers<5.11) builds one `GymServeAgentLoop` per trajectory and turns each
`AgentLoopOutput` into its batch with `AgentLoopWorker`'s own post-processing: this does both, on rollouts
recorded from gym-serve's ingress, and writes what verl's batch holds as JSON for the test to check.

    PYTHONPATH=scripts/source_tree:. VENV/bin/python \
        scripts/trainer_interfaces/verl_real.py ROLLOUTS.jsonl TOKENIZER OTHER_TOKENIZER OUT
"""

import asyncio
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import recorded
from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, AgentLoopWorker

from gym_serve.trainers.source import RecordedRollouts
from gym_serve.trainers.verl import GymServeAgentLoop

PROMPT_LENGTH, RESPONSE_LENGTH = 512, 256


def agent_loop(
    rollouts: list[dict[str, Any]], tokenizer: Any, prompt_length: int = PROMPT_LENGTH
) -> GymServeAgentLoop:
    """The loop as verl's hydra builds it (its trainer config, its tokenizer), reading recorded rollouts."""
    rollout = SimpleNamespace(prompt_length=prompt_length, response_length=RESPONSE_LENGTH)
    config = SimpleNamespace(config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=rollout)))
    loop = GymServeAgentLoop(config, agent="trainers_weather", tokenizer=tokenizer, server_manager=None)
    source = RecordedRollouts(rollouts)
    loop._source = lambda: source  # type: ignore[method-assign]
    return loop


def run(loop: GymServeAgentLoop, row: dict[str, Any]) -> Any:
    """One trajectory, as verl's `AgentLoopWorker` asks for it."""
    return loop.run({"temperature": 1.0}, extra_info={"gym_serve_row": row}, raw_prompt=[])


async def main(rollouts_file: str, tokenizer_path: str, other_tokenizer_path: str, out: str) -> None:
    rollouts = recorded.load(rollouts_file)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    loop = agent_loop(rollouts, tokenizer)
    rows = [{k: v for k, v in r.items() if k in ("responses_create_params", "agent_ref")} for r in rollouts]
    outputs = [await run(loop, row) for row in rows]
    assert all(type(o) is AgentLoopOutput for o in outputs), "verl's own AgentLoopOutput"

    worker = object.__new__(AgentLoopWorker)  # only its post-processing: no Ray actor, no LLM server
    worker.rollout_config = SimpleNamespace(prompt_length=PROMPT_LENGTH, response_length=RESPONSE_LENGTH)
    worker.tokenizer = tokenizer
    worker.processor = worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    worker.mm_processor_kwargs = {}
    padded = [await worker._agent_loop_postprocess(o, validate=False, raw_prompt=[]) for o in outputs]
    batch = worker._postprocess(padded, input_non_tensor_batch=None)

    other = AutoTokenizer.from_pretrained(other_tokenizer_path)
    errors = {
        "failed": await recorded.refusal(run(agent_loop([recorded.failed(rollouts[0])], tokenizer), rows[0])),
        "no_token_ids": await recorded.refusal(run(agent_loop([recorded.text_only(rollouts[0])], tokenizer), rows[0])),
        "tokenizer": await recorded.refusal(run(agent_loop(rollouts[:1], other), rows[0])),
        "prompt_too_long": await recorded.refusal(run(agent_loop(rollouts[:1], tokenizer, prompt_length=4), rows[0])),
    }
    received = {key: value.tolist() for key, value in batch.batch.items()}
    received.update({key: value.tolist() for key, value in batch.non_tensor_batch.items() if key.endswith("steps")})
    received["num_turns"] = [o.num_turns for o in outputs]
    Path(out).write_text(json.dumps({"received": received, "errors": errors}))
    print("ok: verl took gym-serve's agent-loop outputs:", {k: tuple(v.shape) for k, v in batch.batch.items()})


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
