"""OpenRLHF: gym-serve's episodes as an agent executor (`--train.agent_func_path`, openrlhf 0.11).

OpenRLHF loads the file named by `--train.agent_func_path` and builds its
`AgentExecutor` class with no arguments, in each of its vLLM engine actors:

    # agent.py
    from gym_serve.trainers.openrlhf import GymServeAgentExecutor

    class AgentExecutor(GymServeAgentExecutor):
        environment = "weather"        # the gym-serve application whose Environment tier runs tools and verify

The contract (openrlhf/utils/agent.py and trainer/ray/vllm_engine.py, 0.11.2):
OpenRLHF calls `await executor.execute(prompt, label, sampling_params,
max_length, hf_tokenizer, llm_engine)` once per sample, `llm_engine` being
its own engine actor (`await llm_engine.generate(token_ids, sampling_params)`
returns vLLM's `RequestOutput`), and reads from the result `observation_tokens`
(the whole episode), `action_ranges` (the `(start, end)` of every generation:
its action mask), `rollout_log_probs` (the sampler's, aligned to the episode,
0.0 elsewhere; None unless `sampling_params.logprobs` is set), `reward`,
`scores`, `truncated` (the last generation hit its length limit) and
`extra_logs`, as its own `MultiTurnAgentExecutor` returns them.

Here the episode is gym-serve's tool loop (`gym_serve.rollout.loop`) with its
model calls sent to OpenRLHF's engine, token in, token out: the first prompt
is the row rendered with `hf_tokenizer`'s chat template and the environment's
tools, each later prompt extends the previous prompt + generation with the new
turns (`gym_serve.wire.chat_template`), so no sampled text is ever
re-tokenized. Tools and `verify` go to the Environment tier of application
`environment` in the Ray cluster OpenRLHF runs in, through Serve handles.

The dataset: OpenRLHF's `label` (`--data.label_key`) is the gym-serve row, a
dict or its JSON; OpenRLHF's `prompt` is echoed back and not used (the row's
messages and the environment's tools make the prompt).

Every sampling setting is OpenRLHF's (temperature, top_p, ...); each call's
budget is `max_length` less the prompt, as OpenRLHF's own executor sets it,
capped by the row's `max_output_tokens`.

Failures: a rollout is retried inside the executor as gym-serve's driver
retries (`RetryPolicy`); one that still fails, and a `mask_sample` rollout,
come back with no action range (OpenRLHF's loss skips a fully masked
sequence) and reward 0.0, flagged `extra_logs["gym_serve_failed"] = 1.0`. A
wrong setup raises: a prompt longer than `max_length`, a `label` that is no
row, a tokenizer other than the engine's.
"""

from __future__ import annotations

import collections
import copy
import json
import random
from typing import Any, ClassVar

from openrlhf.utils.agent import AgentExecutorBase

from gym_serve.collect.attempts import RetryPolicy, run_attempts
from gym_serve.environment.runner import EnvInfo
from gym_serve.errors import InputError
from gym_serve.rollout.loop import AgentConfig, EnvClient, run_episode
from gym_serve.trainers.sequence import (
    PromptTooLong,
    TokenizerMismatch,
    TrainingSequence,
    build_sequence,
    failure_class,
)
from gym_serve.wire.chat_template import ChatTokenizer
from gym_serve.wire.hermes import forced_tool_call_regex, parse_output
from gym_serve.wire.tokens import token_calls, token_response

__all__ = ["EngineModel", "GymServeAgentExecutor", "check_engine_tokenizer", "executor_output", "gym_row"]

FAILED = "gym_serve_failed"
"""The `extra_logs` key (1.0 or 0.0) that marks a sample standing in for a failed or masked rollout."""


class EngineModel:
    """gym-serve's `ModelClient` over OpenRLHF's engine: ids in, ids and log-probs out, OpenRLHF's sampling."""

    def __init__(self, engine: Any, chat: ChatTokenizer, sampling_params: Any, max_length: int) -> None:
        self.engine = engine
        self.chat = chat
        self.sampling_params = sampling_params
        self.max_length = max_length
        self.samples: list[tuple[list[int], str]] = []
        """Each call's sampled ids and the engine's own text for them (its tokenizer's reading)."""

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        prompt_ids = self.chat.prompt_ids(request)
        room = self.max_length - len(prompt_ids)
        if room <= 0:  # the episode filled max_length: an incomplete answer, as OpenRLHF's own loop stops there
            return token_response("openrlhf", [], prompt_ids, [], [], "length")
        params = copy.deepcopy(self.sampling_params)
        params.max_tokens = min(room, int(request.get("max_output_tokens") or room))
        params.logprobs = params.logprobs if params.logprobs is not None else 0  # the sampled token's, at least
        regex = forced_tool_call_regex(request)
        if regex is not None:
            from vllm.sampling_params import StructuredOutputsParams

            params.structured_outputs = StructuredOutputsParams(regex=regex)
        output = (await self.engine.generate(prompt_ids, params)).outputs[0]
        generated = list(output.token_ids)
        logprobs = [float(step[token].logprob) for step, token in zip(output.logprobs, generated, strict=True)]
        self.samples.append((generated, output.text))
        return token_response(
            "openrlhf", parse_output(output.text), prompt_ids, generated, logprobs, output.finish_reason
        )


class GymServeAgentExecutor(AgentExecutorBase):
    """OpenRLHF's agent executor running gym-serve episodes; subclass it and set `environment`.

    `env` / `env_info` replace the in-cluster Environment tier (for a caller
    with its own `EnvClient`); OpenRLHF passes neither.
    """

    environment: ClassVar[str | None] = None
    """The gym-serve application whose Environment deployment serves the tools and `verify`."""
    agent: ClassVar[AgentConfig] = AgentConfig()
    retry: ClassVar[RetryPolicy] = RetryPolicy()

    def __init__(self, env: EnvClient | None = None, env_info: EnvInfo | None = None) -> None:
        self._env = env
        self._env_info = env_info
        self._rng = random.Random()
        self.rollouts: collections.deque[dict[str, Any]] = collections.deque(maxlen=64)
        """The latest rollout rows (and failure rows) this executor ran, for logs and checks."""

    async def execute(
        self,
        prompt: Any,
        label: Any,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        images: Any = None,
    ) -> dict[str, Any]:
        row = gym_row(label)
        env, info = await self._environment()
        chat = ChatTokenizer(hf_tokenizer)
        params = row["responses_create_params"]
        first = {**params, "input": params["input"], "tools": params.get("tools") or info.tools}
        prompt_ids = chat.prompt_ids(first)
        if len(prompt_ids) >= max_length:
            raise PromptTooLong(
                f"row (task {row.get('_ng_task_index')}): its prompt has {len(prompt_ids)} tokens, leaving no room "
                f"to generate within OpenRLHF's max_length of {max_length}; raise `--max_len` or shorten the task",
                key="max_len",
            )
        model = EngineModel(llm_engine, chat, sampling_params, max_length)
        outcome = await run_attempts(
            lambda: run_episode(row, model=model, env=env, env_info=info, config=self.agent),
            row,
            self.retry,
            self._rng,
        )
        self.rollouts.append(outcome.row)
        check_engine_tokenizer(model.samples, hf_tokenizer, skip_special_tokens=sampling_params.skip_special_tokens)
        return executor_output(
            outcome.row,
            prompt=prompt,
            label=label,
            images=images,
            prompt_ids=prompt_ids,
            logprobs=sampling_params.logprobs is not None,
        )

    async def _environment(self) -> tuple[EnvClient, EnvInfo]:
        if self._env is None or self._env_info is None:
            if self.environment is None:
                raise InputError(f"{type(self).__name__}.environment: name the gym-serve application to run")
            from ray import serve

            from gym_serve.calls.handles import EnvironmentHandle  # the Agent tier's own client of the tier

            handle = serve.get_deployment_handle("Environment", app_name=self.environment)
            self._env, self._env_info = EnvironmentHandle(handle), await handle.describe.remote()
        return self._env, self._env_info


def check_engine_tokenizer(samples: list[tuple[list[int], str]], tokenizer: Any, *, skip_special_tokens: bool) -> None:
    """Raise `TokenizerMismatch` unless `tokenizer` reads every sampled id as the engine did.

    gym-serve renders prompts with OpenRLHF's `hf_tokenizer` and the engine samples
    with the model's own: if they differ, the engine's text for its ids is not what
    `hf_tokenizer` decodes them to (the engine leaves a final stop token out of its text).
    """
    for number, (ids, text) in enumerate(samples, start=1):
        decoded = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        if not decoded.startswith(text):
            raise TokenizerMismatch(
                f"model call {number}: OpenRLHF's tokenizer decodes the engine's sampled ids to {decoded[:60]!r}, "
                f"the engine to {text[:60]!r}: `hf_tokenizer` must be the tokenizer of the model the engine serves",
                key="tokenizer",
            )


def gym_row(label: Any) -> dict[str, Any]:
    """The gym-serve row OpenRLHF's `label` carries (a dict, or its JSON)."""
    row = json.loads(label) if isinstance(label, str) and label.lstrip().startswith("{") else label
    if not isinstance(row, dict) or not isinstance(row.get("responses_create_params"), dict):
        raise InputError(
            f"OpenRLHF's label is not a gym-serve row ({str(label)[:80]!r}): point `--data.label_key` at a column "
            "holding the NeMo Gym row (`responses_create_params`, task fields), as a dict or JSON",
            field="label",
        )
    return row


def executor_output(
    rollout: dict[str, Any],
    *,
    prompt: Any,
    label: Any,
    images: Any,
    prompt_ids: list[int],
    logprobs: bool,
) -> dict[str, Any]:
    """What OpenRLHF's `MultiTurnAgentExecutor` returns, from a rollout row (or failure row) of one episode."""
    s = build_sequence(rollout) if failure_class(rollout) is None else None
    trained = s is not None and s.trainable
    episode = s.token_ids if s is not None else list(prompt_ids)
    ranges = _action_ranges(rollout) if trained else []
    reward = float(s.reward) if s is not None and s.reward is not None else 0.0
    return {
        "prompt": prompt,
        "label": label,
        "images": images,
        "mm_train_inputs": None,
        "reward": reward,
        "scores": reward,
        "observation_tokens": episode,
        "action_ranges": ranges,
        "rollout_log_probs": _aligned_logprobs(s, len(episode)) if logprobs else None,
        "truncated": (rollout.get("response") or {}).get("incomplete_details", {}).get("reason")
        == "max_output_tokens",
        "extra_logs": {FAILED: 0.0 if trained else 1.0},
    }


def _action_ranges(rollout: dict[str, Any]) -> list[tuple[int, int]]:
    """`(start, end)` of every model call's generation in the episode."""
    return [
        (len(call["prompt_token_ids"]), len(call["prompt_token_ids"]) + len(call["generation_token_ids"]))
        for call in token_calls(rollout["response"]["output"])
    ]


def _aligned_logprobs(s: TrainingSequence | None, length: int) -> list[float]:
    """The sampler's log-probs over the whole episode, 0.0 on the prompt and every token not sampled."""
    if s is None or not s.trainable:
        return [0.0] * length
    return [0.0] * len(s.prompt_ids) + s.completion_logprobs
