"""A family's `score_answer` on the model's answer, in a worker process under a deadline.

reasoning-gym's scorers run Python on the answer: `countdown` hands it to sympy's `parse_expr`, so
`<answer>9**9**9**9</answer>` computes for ever. In a thread it also holds the GIL, so the replica's event
loop (every other rollout on it, and the deadline meant to stop it) stalls with it. Here the scorer runs in
a worker process, started from a fork server (never a fork of a Serve replica, whose gRPC threads a child can
die on: `gym_serve.verifiers.worker`, as math-verify's checks), one scoring at a time, under a deadline.

A scoring that overruns its deadline is the answer's or the machine's. The worker is killed and replaced, and
the entry's own answer (pristine input, what a right answer would be) is scored within the rest of the
deadline: if that finishes, the answer is what could not be scored, and it scores 0 (`overran`), for a policy
must not buy a masked row with an answer that hangs the scorer; if it does not, the machine is too slow to
score anything, and the result is `timed_out` (the environment fails the rollout as `verifier_timeout`,
masked). Building a family's dataset in the worker (word lists, precomputation) is never part of the deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import reasoning_gym

from gym_serve.verifiers.worker import Worker

from .generation import load_dataset

__all__ = ["ANSWER_SHARE", "Scored", "score_answer"]

ANSWER_SHARE = 0.9
"""The part of the deadline the answer's scoring gets; the entry's own answer, scored only when the answer's
overran, gets the rest (scorers take milliseconds on a machine that is not stalled)."""


@dataclass(frozen=True)
class Scored:
    """`score` is meaningful only when `timed_out` is False."""

    score: float
    error: str | None = None
    """The scorer raised on the answer (which then scores 0)."""
    overran: bool = False
    """The answer's scoring overran while the entry's own answer's did not: the answer could not be scored (0)."""
    timed_out: bool = False
    """Not even the entry's own answer was scored in time: the machine, not the answer, is at fault (unscored)."""


def _scorer(name: str, config: dict[str, Any] | None) -> Any:
    if config is not None:  # the dataset that made the entry, with its config
        return load_dataset(name, config).score_answer
    return reasoning_gym.get_score_answer_fn(name)  # as NeMo Gym does: the family's scorer at its default config


def _prepare(name: str, config: dict[str, Any] | None) -> None:
    """Build (and keep) the family's dataset in the worker, before any deadline starts."""
    _scorer(name, config)


def _score(name: str, config: dict[str, Any] | None, answer: str | None, entry: dict[str, Any]) -> Scored:
    try:  # the model's answer may break a scorer's parsing: that answer scores 0, the rollout stands
        return Scored(float(_scorer(name, config)(answer=answer, entry=entry)))
    except Exception as e:
        return Scored(0.0, f"{type(e).__name__}: {e}")


_worker = Worker(["reasoning_gym"])


async def score_answer(
    name: str, config: dict[str, Any] | None, answer: str | None, entry: dict[str, Any], *, timeout_s: float
) -> Scored:
    """The family's score of `answer` on `entry`, within `timeout_s` (see the module docstring)."""
    async with _worker.turn():
        scored = await _run(name, config, answer, entry, timeout_s * ANSWER_SHARE)
        if scored is not None:
            return scored
        pristine = entry.get("answer")
        reference = None if pristine is None else str(pristine)
        control = await _run(name, config, reference, entry, timeout_s * (1 - ANSWER_SHARE))
        return Scored(0.0, overran=control is not None, timed_out=control is None)


async def _run(
    name: str, config: dict[str, Any] | None, answer: str | None, entry: dict[str, Any], timeout_s: float
) -> Scored | None:
    """`_score` in the worker within `timeout_s` (its dataset built first, off the clock), or None when it
    overran."""
    return await _worker.call(
        _score, name, config, answer, entry, timeout_s=timeout_s, before=(_prepare, name, config)
    )
