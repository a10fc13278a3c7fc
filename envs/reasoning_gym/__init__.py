"""reasoning-gym's procedural tasks, single turn: reward = the dataset's own `score_answer` on the model's answer.

A row names a reasoning-gym dataset (`dataset`, a task family such as `chain_sum`),
its full config (`dataset_config`, seed included) and an `index`, and carries the
generated entry as NeMo Gym's rows do (`question`, `answer`, `metadata`). `verify`
regenerates the entry from the first three and scores against *that*, so editing
`answer` or `metadata` cannot change what a reward means; a carried entry that
differs from the regenerated one (another reasoning-gym version, or an edit) fails
the rollout by name. NeMo Gym's own rows (entry only, no config) are scored by
their carried entry only when the environment is configured `trust_row_entry: true`.

The answer is the last `<answer>...</answer>` in the final message (reasoning-gym's
prompts ask for it), else the last `\\boxed{}`; see `generation.extract_answer`.

Scorers run Python on the answer (`countdown`'s calls sympy's `parse_expr`), so an answer
can keep one busy for ever: scoring runs in a worker process under `SCORE_TIMEOUT_S`, and
an answer whose scoring overruns it scores 0 (`rejected` says so) when the entry's own
answer is scored in time; when that overruns too, the machine is at fault and the rollout
fails as `verifier_timeout` (masked). See `scoring`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.errors import VerifierTimeoutError

from .generation import RG_VERSION, extract_answer, generate_entry, to_json
from .scoring import score_answer

SCORE_TIMEOUT_S = 10.0
"""The deadline of scoring one answer (at most half of `verify_timeout_s`); scorers take milliseconds."""


class ReasoningGymTask(Task):
    dataset: str | None = None
    dataset_config: dict[str, Any] | None = None
    index: int | None = None
    question: str | None = None
    answer: Any = None
    metadata: dict[str, Any] | None = None


class ReasoningGymConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    datasets: list[str] | None = None
    """Only these task families are scored (None: any reasoning-gym dataset)."""
    trust_row_entry: bool = False
    """Score rows without `dataset`/`dataset_config`/`index` by their carried `answer`/`metadata` (NeMo Gym rows)."""


class ReasoningGym(Environment[ReasoningGymTask, None]):
    """Single turn; the answer is scored against the regenerated task (see the module docstring)."""

    Config = ReasoningGymConfig
    answer_key = "extracted_answer"

    async def verify(self, task: ReasoningGymTask, response: Response) -> Verdict:
        answer = extract_answer(response.output_text())
        name, entry = await asyncio.to_thread(self._entry, task)  # generation can be CPU work
        config = (task.dataset_config or {}) if task.dataset is not None else None
        deadline = min(SCORE_TIMEOUT_S, self.verify_timeout_s / 2)  # the rest: generation, a worker's restart
        scored = await score_answer(name, config, answer, entry, timeout_s=deadline)
        if scored.timed_out:
            raise VerifierTimeoutError(
                f"reasoning-gym's `{name}` scorer did not score the answer within {deadline:g} s, "
                "nor the entry's own answer after it"
            )
        fields: dict[str, Any] = {"extracted_answer": answer, "task_name": name}
        if scored.error:
            fields["score_error"] = scored.error
        if scored.overran:
            fields["rejected"] = (
                f"reasoning-gym's `{name}` scorer could not score the answer within its share of {deadline:g} s; "
                "the entry's own answer took less"
            )
        return Verdict(reward=scored.score, fields=fields)

    def _entry(self, task: ReasoningGymTask) -> tuple[str, dict[str, Any]]:
        if task.dataset is None:
            if not self.config.trust_row_entry:
                raise ValueError(
                    "the row has no `dataset`, `dataset_config` and `index` to regenerate its task from; "
                    "make rows with `python -m gym_serve.envs.reasoning_gym.make_rows`, or set `trust_row_entry: "
                    "true` in the environment's config to score by the row's own `answer`"
                )
            name = (task.metadata or {}).get("source_dataset")
            self._check_allowed(name)
            return name, {"question": task.question, "answer": task.answer, "metadata": task.metadata}
        self._check_allowed(task.dataset)
        if task.dataset_config is None or task.index is None:
            raise ValueError(f"the row names dataset `{task.dataset}` but lacks `dataset_config` or `index`")
        entry = generate_entry(task.dataset, task.dataset_config, task.index)
        for key in ("question", "answer", "metadata"):
            carried = getattr(task, key)
            if carried is not None and to_json(carried) != to_json(entry.get(key)):
                raise ValueError(
                    f"the row's `{key}` differs from what reasoning-gym {RG_VERSION} generates for "
                    f"`{task.dataset}` index {task.index} with this config: the row was made by another "
                    "reasoning-gym version or edited; regenerate it with `gym_serve.envs.reasoning_gym.make_rows`"
                )
        return task.dataset, entry

    def _check_allowed(self, name: Any) -> None:
        if not isinstance(name, str):
            raise ValueError("the row's `metadata.source_dataset` must name its reasoning-gym dataset")
        if self.config.datasets is not None and name not in self.config.datasets:
            raise ValueError(
                f"dataset `{name}` is not among this environment's `datasets`: {', '.join(self.config.datasets)}"
            )
