"""gym-serve's verl adapter on verl's real classes, in verl's own environment (`scripts/trainer_envs.py`).

verl 0.9.1 (Python 3.11, transformers<5.11) builds one `GymServeAgentLoop` per trajectory and turns each
`AgentLoopOutput` into its batch with `AgentLoopWorker`'s own post-processing: this does both, on rollouts
recorded from gym-serve's ingress, and writes what verl's batch holds as JSON for the test to check.

    PYTHONPATH=. VENV/bin/python scripts/trainer_interfaces/verl_real.py ROLLOUTS.jsonl TOKENIZER OTHER_TOKENIZER OUT
"""

import asyncio
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, AgentLoopWorker

from gym_serve.errors import GymServeError
from gym_serve.trainers.source import RecordedRollouts
from gym_serve.trainers.verl import GymServeAgentLoop
from gym_serve.wire.tokens import TOKEN_FIELDS

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


async def error_of(loop: GymServeAgentLoop, row: dict[str, Any]) -> str:
    try:
        await loop.run({"temperature": 1.0}, extra_info={"gym_serve_row": row}, raw_prompt=[])
    except GymServeError as e:
        return f"{type(e).__name__}: {e}"
    raise AssertionError("the agent loop took a rollout it must refuse")


async def main(rollouts_file: str, tokenizer_path: str, other_tokenizer_path: str, out: str) -> None:
    lines = Path(rollouts_file).read_text().splitlines()
    rollouts = [json.loads(line) for line in lines if line.strip()]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    loop = agent_loop(rollouts, tokenizer)
    rows = [{k: v for k, v in r.items() if k in ("responses_create_params", "agent_ref")} for r in rollouts]
    outputs = [await loop.run({"temperature": 1.0}, extra_info={"gym_serve_row": row}, raw_prompt=[]) for row in rows]
    assert all(type(o) is AgentLoopOutput for o in outputs), "verl's own AgentLoopOutput"

    worker = object.__new__(AgentLoopWorker)  # only its post-processing: no Ray actor, no LLM server
    worker.rollout_config = SimpleNamespace(prompt_length=PROMPT_LENGTH, response_length=RESPONSE_LENGTH)
    worker.tokenizer = tokenizer
    worker.processor = worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    worker.mm_processor_kwargs = {}
    padded = [await worker._agent_loop_postprocess(o, validate=False, raw_prompt=[]) for o in outputs]
    batch = worker._postprocess(padded, input_non_tensor_batch=None)

    failed = {**rollouts[0], "_ng_failure_class": "model_error", "error": "503", "attempts": 3}
    text_only = {**rollouts[0], "response": {**rollouts[0]["response"], "output": [
        {k: v for k, v in item.items() if k not in TOKEN_FIELDS} for item in rollouts[0]["response"]["output"]
    ]}}  # fmt: skip
    other = AutoTokenizer.from_pretrained(other_tokenizer_path)
    errors = {
        "failed": await error_of(agent_loop([failed], tokenizer), rows[0]),
        "no_token_ids": await error_of(agent_loop([text_only], tokenizer), rows[0]),
        "tokenizer": await error_of(agent_loop(rollouts[:1], other), rows[0]),
        "prompt_too_long": await error_of(agent_loop(rollouts[:1], tokenizer, prompt_length=4), rows[0]),
    }
    received = {key: value.tolist() for key, value in batch.batch.items()}
    received.update({key: value.tolist() for key, value in batch.non_tensor_batch.items() if key.endswith("steps")})
    received["num_turns"] = [o.num_turns for o in outputs]
    Path(out).write_text(json.dumps({"received": received, "errors": errors}))
    print("ok: verl took gym-serve's agent-loop outputs:", {k: tuple(v.shape) for k, v in batch.batch.items()})


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
