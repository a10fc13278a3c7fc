"""gym-serve's verl adapter against verl's real classes and post-processing, in verl's own environment (not CI).

verl 0.9 pins transformers<5.11, so it does not install beside gym-serve; CI checks the adapter against the
contract copied into tests/trainer_contracts.py. This runs it against verl itself (CPU, no Ray actor, no LLM
server): `GymServeAgentLoop.run` on canned rollouts, then `AgentLoopWorker`'s own padding and batching.

    python -m venv /tmp/verl-env && /tmp/verl-env/bin/pip install torch==2.13.0 verl==0.9.1 cachetools fastapi \
        uvicorn pytest pytest-asyncio pyyaml orjson jsonschema
    python -m gym_serve.models.tiny_model /tmp/tiny-model
    PYTHONPATH=. /tmp/verl-env/bin/python scripts/trainer_interfaces/verl_real.py /tmp/tiny-model
"""

import asyncio
import sys
from types import SimpleNamespace

from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, AgentLoopWorker

from gym_serve.trainers.verl import GymServeAgentLoop
from tests.test_trainers import CannedSource


async def main(tokenizer_path: str) -> None:
    rollout = SimpleNamespace(prompt_length=16, response_length=32)
    config = SimpleNamespace(config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=rollout)))
    loop = GymServeAgentLoop(config, agent="weather")
    loop._source = lambda: CannedSource()  # type: ignore[method-assign]
    outputs = [await loop.run({"temperature": 1.0}, raw_prompt=[{"role": "user", "content": "q"}]) for _ in range(4)]
    assert all(type(o) is AgentLoopOutput for o in outputs)
    worker = object.__new__(AgentLoopWorker)  # only its post-processing
    worker.rollout_config = rollout
    worker.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    worker.processor = worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    worker.mm_processor_kwargs = {}
    padded = [await worker._agent_loop_postprocess(o, validate=False, raw_prompt=[]) for o in outputs]
    batch = worker._postprocess(padded, input_non_tensor_batch=None)
    assert batch.batch["response_mask"][0].tolist()[:7] == [1, 1, 0, 0, 0, 1, 1]
    assert batch.non_tensor_batch["min_global_steps"].tolist() == [0, 0, 0, 0]
    print({k: tuple(v.shape) for k, v in batch.batch.items()})
    print("ok: verl took gym-serve's agent-loop outputs")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
