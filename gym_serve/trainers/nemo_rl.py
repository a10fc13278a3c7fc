"""NeMo RL: gym-serve in place of NeMo Gym's rollout collection, so NeMo RL's `NemoGym` environment runs unchanged.

NeMo RL (v0.7 and main) collects rollouts inside its `NemoGym` Ray actor with
NeMo Gym's `RolloutCollectionHelper`:

    it = self.rch.run_examples(examples=nemo_gym_examples, head_server_config=self.head_server_config)
    for task in it:                    # a plain iterator of awaitables, in completion order
        row, result = await task       # row: the example (NeMo RL set `_rowidx`); result: the agent's /run JSON

and reads from each `result` the token bundles on `response.output` items
(asserting contiguity), `reward`, and `responses_create_params`. It groups
rollouts by identical first-prompt tokens and computes advantages itself.
`GymServeRolloutCollection` answers the same call from gym-serve: each example
is one rollout (NeMo RL has already repeated every prompt
`num_generations_per_prompt` times), and each result is gym-serve's rollout
row, which is NeMo Gym's `/run` shape. Rows go to the gym-serve agent
application named by their `agent_ref.name` (name it as in NeMo Gym's config).

Install it in the actor's process before `_spinup` (which imports the class
from `nemo_gym.rollout_collection`), e.g. as a Ray worker setup hook:

    ray.init(runtime_env={"worker_process_setup_hook": "gym_serve.trainers.nemo_rl.install",
                          "env_vars": {"GYM_SERVE_URL": url, "GYM_SERVE_TOKEN": token}})

A failed rollout raises `RolloutFailed` (NeMo RL accepts no failure row: on
v0.7 the step fails; on main the rollout manager re-requests the prompt group).
gym-serve has already retried what was worth retrying.

For NeMo RL, the trainer owns and refits the policy's vLLM servers: point
gym-serve's model tier at them (`model: {kind: vllm_http, ...}` with NeMo RL's
`base_urls`). NeMo RL needs Python 3.13 and is not on the registries; this is
tested in NeMo Gym 0.7.0's own environment (`scripts/trainer_envs.py`), with
the real `nemo_gym.rollout_collection` module replaced as above and each
result read back through NeMo Gym's own training types.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Awaitable, Iterator
from typing import Any

from gym_serve.trainers.sequence import (
    RolloutFailed,
    build_sequence,
    check_prompt_length,
    check_tokenizer,
    failure_class,
    final_segment,
)
from gym_serve.trainers.source import SourceFactory

__all__ = ["GymServeRolloutCollection", "install"]


class GymServeRolloutCollection:
    """Stands in for `nemo_gym.rollout_collection.RolloutCollectionHelper` (its `run_examples` call)."""

    def __init__(
        self, source: SourceFactory | None = None, *, tokenizer: Any = None, max_prompt_length: int | None = None
    ) -> None:
        """NeMo RL builds it with no arguments: the source, tokenizer and limit then come from the environment
        (`GYM_SERVE_URL` / `GYM_SERVE_TOKEN`, `GYM_SERVE_TOKENIZER`: a path or name for `AutoTokenizer`,
        `GYM_SERVE_MAX_PROMPT_LENGTH`)."""
        self.source = source or _client_from_environment
        if tokenizer is None and os.environ.get("GYM_SERVE_TOKENIZER"):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(os.environ["GYM_SERVE_TOKENIZER"])
        self.tokenizer = tokenizer
        limit = os.environ.get("GYM_SERVE_MAX_PROMPT_LENGTH")
        self.max_prompt_length = max_prompt_length if max_prompt_length is not None else int(limit) if limit else None

    def run_examples(
        self, examples: list[dict[str, Any]], head_server_config: Any = None, **_: Any
    ) -> Iterator[Awaitable[tuple[dict[str, Any], dict[str, Any]]]]:
        """One rollout per example, started now; awaitables of `(example, result)` in completion order.

        Called from inside NeMo RL's running event loop (as NeMo Gym's is).
        `head_server_config` and NeMo Gym's other options are accepted and unused.
        """
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[tuple[dict[str, Any], dict[str, Any]]]] = [loop.create_future() for _ in examples]
        runner = loop.create_task(self._run(examples, futures))

        def settle(_: asyncio.Task[None]) -> None:  # the source broke: fail every example still waiting
            error = None if runner.cancelled() else runner.exception()
            for future in futures:
                if not future.done():
                    future.set_exception(error or RuntimeError("gym-serve rollout collection stopped"))

        runner.add_done_callback(settle)
        return iter(asyncio.as_completed(futures))

    async def _run(
        self, examples: list[dict[str, Any]], futures: list[asyncio.Future[tuple[dict[str, Any], dict[str, Any]]]]
    ) -> None:
        rows = [{**example, "_ng_task_index": i} for i, example in enumerate(examples)]
        async with self.source() as source:
            async for result in source.rollouts(rows, num_repeats=1):
                index = int(result["_ng_task_index"])
                try:
                    futures[index].set_result((examples[index], self._checked(result)))
                except Exception as e:  # raised where NeMo RL awaits this example
                    futures[index].set_exception(e)

    def _checked(self, result: dict[str, Any]) -> dict[str, Any]:
        """The result NeMo RL reads, or the error it would hit later (or never: a wrong tokenizer), raised now
        with the rollout named."""
        if failure_class(result) is not None:
            raise RolloutFailed(result)
        result = final_segment(result)  # NeMo RL checks one contiguous output: a rewritten history's last segment
        s = build_sequence(result)  # token ids present and contiguous, as NeMo RL asserts
        if self.tokenizer is not None:
            check_tokenizer(result, self.tokenizer, trainer="NeMo RL")
        if self.max_prompt_length is not None:
            check_prompt_length(s, self.max_prompt_length, setting="GYM_SERVE_MAX_PROMPT_LENGTH")
        return result


def _client_from_environment() -> Any:
    """A `GymClient` on `$GYM_SERVE_URL` with `$GYM_SERVE_TOKEN`: NeMo RL builds the helper with no arguments."""
    from gym_serve.client import GymClient

    url = os.environ.get("GYM_SERVE_URL")
    if not url:
        raise RuntimeError("set GYM_SERVE_URL (the gym-serve ingress) for NeMo RL's rollout collection")
    return GymClient(url, token=os.environ.get("GYM_SERVE_TOKEN"))


def install() -> None:
    """Make `nemo_gym.rollout_collection.RolloutCollectionHelper` this stand-in (a Ray worker setup hook)."""
    module = importlib.import_module("nemo_gym.rollout_collection")
    module.RolloutCollectionHelper = GymServeRolloutCollection  # type: ignore[attr-defined]
