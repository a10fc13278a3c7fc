"""gym-serve in place of NeMo Gym's rollout collection, in NeMo Gym 0.7.0's own environment (scripts/trainer_envs.py).

NeMo RL is not on the registries (PyPI's `nemo-rl` is a placeholder), so this drives what NeMo RL calls instead:
NeMo Gym's `nemo_gym.rollout_collection.RolloutCollectionHelper`, replaced by `gym_serve.trainers.nemo_rl.install()`
as NeMo RL's Ray worker setup hook would, built with no arguments as NeMo RL's `NemoGym` actor builds it (its
source, tokenizer and prompt limit from GYM_SERVE_URL, GYM_SERVE_TOKEN, GYM_SERVE_TOKENIZER and
GYM_SERVE_MAX_PROMPT_LENGTH), and iterated as NeMo RL iterates `run_examples`. The rollouts come live from
gym-serve's ingress; every model call's item is read back through NeMo Gym's own training types (the
`...ForTraining` items that carry token ids), and what NeMo RL would receive is written as JSON, with what NeMo
Gym's `BaseVerifyResponse` finds missing from the row (NeMo RL reads the dict; it does not validate it).

    PYTHONPATH=scripts/source_tree:. VENV/bin/python \
        scripts/trainer_interfaces/nemo_rl_real.py ROWS.jsonl OTHER_TOKENIZER OUT
"""

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import recorded
from pydantic import ValidationError

from gym_serve.trainers import nemo_rl

nemo_rl.install()
from nemo_gym.base_resources_server import BaseVerifyResponse  # noqa: E402
from nemo_gym.openai_utils import (  # noqa: E402
    NeMoGymResponseFunctionToolCallForTraining,
    NeMoGymResponseOutputMessageForTraining,
)
from nemo_gym.rollout_collection import RolloutCollectionHelper  # noqa: E402  (what NemoGym._spinup imports)
from nemo_gym.server_utils import BaseServerConfig  # noqa: E402

TRAINING_ITEM = {
    "function_call": NeMoGymResponseFunctionToolCallForTraining,
    "message": NeMoGymResponseOutputMessageForTraining,
}


async def collect(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NeMo RL's loop (nemo_rl/environments/nemo_gym.py): awaitables as they complete, put in order by `_rowidx`."""
    rch = RolloutCollectionHelper()
    head = BaseServerConfig(host="127.0.0.1", port=1)  # NeMo RL passes its head server's; gym-serve needs none
    examples = [{**row, "_rowidx": i} for i, row in enumerate(rows)]
    results: list[Any] = [None] * len(rows)
    for task in rch.run_examples(examples=examples, head_server_config=head):
        row, result = await task
        results[row["_rowidx"]] = result
    return results


async def refused_with(rows: list[dict[str, Any]], **environment: str) -> str:
    """The refusal of a collection whose helper NeMo RL builds under `environment`."""
    saved = {k: os.environ.get(k) for k in environment}
    os.environ.update(environment)
    try:
        return await recorded.refusal(collect(rows))
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def _verify_problems(result: dict[str, Any]) -> list[str]:
    """What NeMo Gym's `BaseVerifyResponse` finds wrong with the row as it stands (NeMo RL itself reads the dict)."""
    try:
        BaseVerifyResponse.model_validate(result)
    except ValidationError as e:
        return [".".join(str(part) for part in error["loc"]) for error in e.errors()]
    return []


async def main(rows_file: str, other_tokenizer: str, out: str) -> None:
    assert RolloutCollectionHelper is nemo_rl.GymServeRolloutCollection, "install() replaced NeMo Gym's class"
    rows = recorded.load(rows_file)
    results = await collect(rows)
    received = []
    for result in results:
        items = [item for item in result["response"]["output"] if "generation_token_ids" in item]
        typed = [TRAINING_ITEM[item["type"]].model_validate(item) for item in items]
        calls = [{"prompt": t.prompt_token_ids, "generation": t.generation_token_ids} for t in typed]
        for call, t in zip(calls, typed, strict=True):
            call["logprobs"] = t.generation_log_probs
        received.append(
            {"reward": float(result["reward"]), "calls": calls, "as_verify_response": _verify_problems(result)}
        )
    errors = {
        "tokenizer": await refused_with(rows[:1], GYM_SERVE_TOKENIZER=other_tokenizer),
        "prompt_too_long": await refused_with(rows[:1], GYM_SERVE_MAX_PROMPT_LENGTH="4"),
    }
    Path(out).write_text(json.dumps({"received": received, "errors": errors}))
    print(f"ok: NeMo Gym's RolloutCollectionHelper is gym-serve's; {len(received)} results in NeMo Gym's types")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
