"""A format reward that an untrained model earns some of the time: how much of its reply is plain text.

The environment of the GRPO example (`examples/grpo_trainer.py`). The tiny test
model (`gym_serve.testing.tiny_model`) has random weights: it never answers a question
right, so with a correctness reward every rollout would score 0, every group's
advantages would be 0 and a policy-gradient step would do nothing. This reward
is a property of the reply's *form* that varies from sample to sample: the
share of its characters that are ASCII letters or spaces (0.0 for a reply of
digits and symbols, 1.0 for plain words). It is continuous, so the rollouts of
a group almost never tie; training on it pushes probability toward letter
tokens. It teaches no task, and is not meant to.

Rows are plain prompts (`examples/data/plain_text.jsonl`); there are no tools,
so an episode is one model call (the tiny model rarely stops by itself, and the
agent ends an episode at a reply cut by the token limit).
"""

from __future__ import annotations

from gym_serve import Environment, Response, Task, Verdict


class PlainText(Environment):
    async def verify(self, task: Task, response: Response, state: None) -> Verdict:
        text = response.output_text()
        plain = sum(1 for c in text if c == " " or (c.isascii() and c.isalpha()))
        return Verdict(reward=plain / len(text) if text else 0.0, fields={"reply_chars": len(text)})
