"""A reward the tiny test model learns on a CPU in minutes: 1.0 when the reply starts with the row's `prefix`.

The environment of the GRPO example (`examples/grpo_trainer.py`), built to show
that the loop learns, not to teach a skill. The tiny model
(`gym_serve.models.tiny_model`) has random weights, so no task reward is ever
earned; but over these prompts it starts its reply with "Yo" about one time in
six (a transformers forward pass of its weights gives 0.155 on average over
the rows of `examples/data/starts_with.jsonl`), so a group of 8 rollouts
usually holds both rewards and GRPO's advantages point somewhere. The reward
depends on the first token alone: a policy-gradient step on it raises that
token's probability after every prompt, which the tiny model can do in a few
steps, but only if the next rollouts are sampled from the updated weights.

The reply must start with the prefix exactly: a leading space, another case,
the prefix later in the reply, or an empty reply earn 0.
"""

from __future__ import annotations

from gym_serve import Environment, Response, Task, Verdict


class StartsWithTask(Task):
    prefix: str


class StartsWith(Environment[StartsWithTask, None]):
    async def verify(self, task: StartsWithTask, response: Response) -> Verdict:
        text = response.output_text()
        return Verdict(reward=1.0 if text.startswith(task.prefix) else 0.0, fields={"reply_start": text[:12]})
