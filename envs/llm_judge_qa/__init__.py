"""Open-ended QA scored by an LLM judge: is the answer equivalent to the reference?

Rows carry `question` and `expected_answer` (NeMo Gym's equivalence-judge
format). The judge is a model deployment: the `Model` deployment of the Serve
application named by `judge_app` (see `deployments/llm_judge_qa.yaml`, where
the judge is the replay model playing `data/judge_recordings.jsonl`; point it
at a vLLM or OpenAI-backed application for real judging). Without
`judge_app`, an in-process replay judge plays `judge_recordings` (offline use).

Reward: 1.0 when the judge says EQUIVALENT, 0.0 when it says NOT_EQUIVALENT.
A judge that fails or gives no verdict fails the rollout with failure class
`judge_failed`: an outage of the judge must not read as a wrong answer.

Except where the answer is why: an answer too long for the judge's context
(a vLLM judge answers such a prompt `incomplete`, an OpenAI-compatible one with
a 400) would buy the policy a masked row for any answer it pads. So an answer
longer than `max_answer_bytes` is never sent: it scores 0, `rejected` says why.
Set the bound so that it, the question, the reference and the judge's reply fit
the judge's context (a token of a byte-level tokenizer is at least one byte);
a judge that fails on an answer within it is the deployment's failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from gym_serve import Environment, Response, Task, Verdict, errors
from gym_serve.verifiers.llm_judge import Judge, JudgeError, judge_equivalence
from gym_serve.verifiers.non_answer import is_non_answer


class QaTask(Task):
    question: str
    expected_answer: str


class JudgeConfig(BaseModel):
    judge_app: str | None = None
    """The Serve application whose `Model` deployment judges."""
    judge_recordings: list[str] = ["judge_recordings.jsonl"]
    """Without `judge_app`: recorded verdicts for an in-process replay judge (offline); paths under `data/`.

    The default plays this env's own recordings, so the examples run offline; an answer they do not
    cover gets no verdict and fails as `judge_failed`, never a silent score."""
    judge_model: str | None = None
    """The `model` field sent to the judge, if its deployment serves several."""
    max_answer_bytes: int = Field(default=16_000, ge=1)
    """The longest answer (UTF-8 bytes) sent to the judge; a longer one scores 0 unjudged (see the module doc)."""


class _HandleJudge:
    def __init__(self, app: str) -> None:
        from gym_serve.calls.handles import model_handle

        self._handle = model_handle(app)

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        try:
            return await self._handle.responses.remote(request, session)
        except Exception as e:  # Ray's wrapper carries the replica's traceback: name the judge's own error only
            cause = getattr(e, "cause", None) or e
            raise RuntimeError(f"{type(cause).__name__}: {str(cause).strip()[:300]}") from None


class LlmJudgeQa(Environment[QaTask, None]):
    Config = JudgeConfig

    _judge_client: Judge | None = None

    def judge(self) -> Judge:
        if self._judge_client is None:
            if self.config.judge_app:
                self._judge_client = _HandleJudge(self.config.judge_app)
            else:
                from gym_serve.rollout.replay import ReplayModel

                paths = [self.data_dir() / Path(p) for p in self.config.judge_recordings]
                self._judge_client = ReplayModel(paths, name="replay-judge")
        return self._judge_client

    async def verify(self, task: QaTask, response: Response) -> Verdict:
        answer = response.output_text()
        if is_non_answer(answer, task.question):  # nothing for a judge to weigh
            return Verdict(reward=0.0, fields={"judge_text": None, "non_answer": True})
        size = len(answer.encode(errors="replace"))
        if size > self.config.max_answer_bytes:  # the judge's context would not hold it: the answer's fault
            rejected = f"the answer is {size} bytes; the judge is sent at most {self.config.max_answer_bytes}"
            return Verdict(reward=0.0, fields={"judge_text": None, "rejected": f"{rejected} (`max_answer_bytes`)"})
        try:
            verdict = await judge_equivalence(
                self.judge(),
                question=task.question,
                reference=task.expected_answer,
                answer=answer,
                model=self.config.judge_model,
            )
        except JudgeError as e:
            raise errors.JudgeError(f"llm_judge_qa: {e}") from e
        return Verdict(reward=verdict.reward, fields={"judge_text": verdict.judge_text})
