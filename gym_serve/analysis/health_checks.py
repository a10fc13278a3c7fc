"""The named rollout health checks: NeMo Gym 0.7's, under its ids where our rows show the same fact, and ours.

A check reads one row (`RowView`: the row, its turns and token bundles) and
returns its findings as `(locator, evidence)` pairs, or None when the row does
not show the fact it needs (a check of token bundles on a text-only row): the
row then counts as *unobserved* for that check, as NeMo Gym counts it, and a
rate is findings over the rows where the check could look.

| id | from | a finding says |
|---|---|---|
| `check_execution_error` | NeMo Gym | a check raised on this row (the others still ran) |
| `record_unreadable` | NeMo Gym | a line is not JSON, not an object, or not a rollout (its line number) |
| `rollout_duplicate_identity` | NeMo Gym | two rows claim the same (agent, task, rollout) |
| `rollout_missing_agent_turns` | NeMo Gym | the output holds nothing the model produced |
| `rollout_ended_on_failed_model_call` | NeMo Gym | a failure row whose attempt ended on the model tier failing |
| `agent_turn_hollow` | NeMo Gym | a model call produced no text, reasoning or function call |
| `model_call_zero_completion_tokens` | NeMo Gym | a token bundle with no generated token |
| `model_call_missing_token_counts` | NeMo Gym | `usage` lacks its token counts, or a bundle its token ids |
| `trajectory_capture_mismatch` | NeMo Gym | a model turn lacks the token bundle the rollout's other turns have |
| `model_call_failed` | NeMo Gym | a model call failed (ours: the one that failed the rollout's last attempt) |
| `rollout_token_count_mismatch` | NeMo Gym | `usage` disagrees with the token ids the bundles hold |
| `model_call_runaway_generation` | NeMo Gym | a call stopped by its token limit having produced nothing |
| `task_consistently_unhealthy` | NeMo Gym | every rollout (two or more) of a task has a finding |
| `task_no_successful_model_calls` | NeMo Gym | no rollout of a task got an answer from the model |
| `token_contiguity_break` | gym-serve | a call's prompt does not extend the previous prompt + generation |
| `policy_stale` | gym-serve | sampled by a policy older than the bound (marked, failed, or past `max_policy_lag`) |
| `rollout_masked` | gym-serve | the verifier said not to train on it (`mask_sample`) |
| `group_identical_rewards` | gym-serve | every scored rollout of a task has the same reward: no learning signal |
| `verify_near_deadline` | gym-serve | verify used 80% or more of its deadline, or overran it |

NeMo Gym reads model calls from its own `ng_trajectory` capture; ours are the
turns of `response.output` and the token bundles of a token-returning tier. A
model call that failed and was retried successfully leaves no trace in our
rows, so `model_call_failed` sees only the call that failed a rollout for good.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gym_serve.errors import FailureKind
from gym_serve.wire.tokens import check_contiguity, token_calls
from gym_serve.wire.turns import Turn, split_turns

__all__ = [
    "CHECKS",
    "ROLLOUT_CHECKS",
    "CheckSpec",
    "Finding",
    "HealthOptions",
    "RowView",
    "Scope",
    "model_failure",
]

NEAR_DEADLINE = 0.8
"""`verify_near_deadline`: the share of its deadline a verify may use before it is flagged."""
LENGTH_LIMIT = frozenset({"max_output_tokens", "length", "max_tokens"})
MODEL_FAILURES = frozenset(
    {
        FailureKind.MODEL_ERROR,
        FailureKind.TRANSPORT_UNREACHABLE,
        FailureKind.TRANSPORT_TIMEOUT,
        FailureKind.REPLAY_MISS,
    }
)


class Scope(StrEnum):
    ROLLOUT = "rollout"
    TASK = "task"
    FILE = "file"


class CheckSpec(BaseModel):
    """One named check: what it looks at, whose id it is, and what a finding says."""

    model_config = ConfigDict(frozen=True)

    id: str
    scope: Scope
    origin: Literal["nemo_gym", "gym_serve"]
    says: str


class Finding(BaseModel):
    """One finding: the check, the rollout (or task) it is about, where in it, and the evidence."""

    check: str
    agent: str | None = None
    task: int | str | None = Field(default=None, description="`_ng_task_index`")
    rollout: int | str | None = Field(default=None, description="`_ng_rollout_index`; None for a task's finding")
    source: str | None = Field(default=None, description="The file the row is in.")
    line: int | None = None
    locator: dict[str, Any] | None = Field(default=None, description="Where in the rollout: `turn`, `call` (from 1).")
    evidence: dict[str, Any] = Field(default_factory=dict)


class HealthOptions(BaseModel):
    """What some checks need that a row may not say."""

    verify_deadline_s: float | None = Field(
        default=None, gt=0, description="Verify's deadline for rows that do not carry `_gs_timings.verify_deadline_s`."
    )
    max_policy_lag: int | None = Field(
        default=None, ge=0, description="Flag rollouts whose oldest token is more versions behind the newest seen."
    )


@dataclass
class RowView:
    """One row as the checks read it (built once per row)."""

    row: dict[str, Any]
    options: HealthOptions = field(default_factory=HealthOptions)
    failure: str | None = None
    response: dict[str, Any] | None = None
    turns: list[Turn] = field(default_factory=list)
    bundles: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, row: dict[str, Any], options: HealthOptions | None = None) -> RowView:
        response = row.get("response") if isinstance(row.get("response"), dict) else None
        output = [item for item in (response or {}).get("output") or [] if isinstance(item, dict)]
        failure = row.get("_ng_failure_class")
        return cls(
            row=row,
            options=options or HealthOptions(),
            failure=str(failure) if failure is not None else None,
            response=response if failure is None else None,
            turns=split_turns(output),
            bundles=token_calls(output),
        )

    @property
    def model_turns(self) -> list[Turn]:
        return [turn for turn in self.turns if turn.items]


Found = list[tuple[dict[str, Any] | None, dict[str, Any]]] | None
"""A check's answer: `(locator, evidence)` per finding, or None when the row does not show the fact."""


def model_failure(view: RowView) -> bool:
    """Did the row's last attempt end on the model tier failing? (A timeout counts when the model call timed out.)"""
    if view.failure not in MODEL_FAILURES:
        return False
    return view.failure != FailureKind.TRANSPORT_TIMEOUT or "model" in str(view.row.get("error", ""))


def _failure_evidence(view: RowView) -> dict[str, Any]:
    return {"failure_kind": view.failure, "error": str(view.row.get("error", ""))[:500]}


def rollout_missing_agent_turns(view: RowView) -> Found:
    if view.response is None:
        return None
    output = view.response.get("output") or []
    return [] if view.model_turns else [(None, {"output_items": len(output)})]


def rollout_ended_on_failed_model_call(view: RowView) -> Found:
    if view.response is None and view.failure is None:
        return None
    return [(None, _failure_evidence(view))] if model_failure(view) else []


def agent_turn_hollow(view: RowView) -> Found:
    if view.response is None:
        return None
    return [
        ({"turn": turn.index + 1}, {"items": [item.get("type", "message") for item in turn.items]})
        for turn in view.model_turns
        if turn.hollow
    ]


def model_call_zero_completion_tokens(view: RowView) -> Found:
    if not view.bundles:
        return None
    return [
        ({"call": number}, {"completion_tokens": 0})
        for number, bundle in enumerate(view.bundles, start=1)
        if bundle.get("generation_token_ids") == []
    ]


def model_call_missing_token_counts(view: RowView) -> Found:
    if view.response is None:
        return None
    usage = view.response.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    found: list[tuple[dict[str, Any] | None, dict[str, Any]]] = []
    missing = [f"usage.{key}" for key in ("input_tokens", "output_tokens") if type(usage.get(key)) is not int]
    if missing:
        found.append((None, {"missing": missing}))
    for number, bundle in enumerate(view.bundles, start=1):
        missing = [
            key for key in ("prompt_token_ids", "generation_token_ids") if not isinstance(bundle.get(key), list)
        ]
        if missing:
            found.append(({"call": number}, {"missing": missing}))
    return found


def trajectory_capture_mismatch(view: RowView) -> Found:
    if not view.bundles:
        return None
    return [
        ({"turn": turn.index + 1}, {"kind": "missing_captured_call"})
        for turn in view.model_turns
        if turn.bundle is None
    ]


def model_call_failed(view: RowView) -> Found:
    if view.response is None and view.failure is None:
        return None
    if not model_failure(view):
        return []
    return [({"attempt": view.row.get("attempts")}, _failure_evidence(view))]


def rollout_token_count_mismatch(view: RowView) -> Found:
    usage = (view.response or {}).get("usage")
    if (
        not view.bundles
        or not isinstance(usage, dict)
        or any(turn.bundle is None for turn in view.model_turns)
        or any(
            not isinstance(b.get(k), list) for b in view.bundles for k in ("prompt_token_ids", "generation_token_ids")
        )
        or type(usage.get("input_tokens")) is not int
        or type(usage.get("output_tokens")) is not int
    ):
        return None
    prompt = sum(len(bundle["prompt_token_ids"]) for bundle in view.bundles)
    completion = sum(len(bundle["generation_token_ids"]) for bundle in view.bundles)
    if (usage["input_tokens"], usage["output_tokens"]) == (prompt, completion):
        return []
    evidence = {
        "usage_input_tokens": usage["input_tokens"],
        "usage_output_tokens": usage["output_tokens"],
        "bundle_prompt_tokens": prompt,
        "bundle_completion_tokens": completion,
    }
    return [(None, evidence)]


def model_call_runaway_generation(view: RowView) -> Found:
    """The agent loop stops at the first call cut by its limit, so only the last turn can be one."""
    if view.response is None:
        return None
    reason = (view.response.get("incomplete_details") or {}).get("reason")
    if view.response.get("status") != "incomplete" or reason not in LENGTH_LIMIT or not view.model_turns:
        return []
    last = view.model_turns[-1]
    return [({"turn": last.index + 1}, {"finish_reason": reason})] if last.hollow else []


def token_contiguity_break(view: RowView) -> Found:
    if not view.bundles:
        return None
    report = check_contiguity(view.row)
    return [
        ({"call": number}, {"problem": next(p for p in report.problems if p.startswith(f"call {number}: prompt"))})
        for number in report.breaks
    ]


def policy_stale(view: RowView) -> Found:
    """Marked by the collection (`--flag-stale`) or failed as `stale_policy`; the lag bound is a file check."""
    if view.failure == FailureKind.STALE_POLICY:
        return [(None, _failure_evidence(view))]
    if view.response is None or ("policy_stale" not in view.row and "policy_version_min" not in view.row):
        return None
    if view.row.get("policy_stale") is True:
        versions = {k: view.row.get(k) for k in ("policy_lag", "policy_version_min", "policy_version_max")}
        return [(None, {"marked": True, **versions})]
    return []


def rollout_masked(view: RowView) -> Found:
    if view.response is None:
        return None  # a failure row is always masked: the failure checks say why
    return [(None, {"reward": view.row.get("reward")})] if view.row.get("mask_sample") is True else []


def verify_near_deadline(view: RowView) -> Found:
    if view.failure == FailureKind.VERIFIER_TIMEOUT:
        return [(None, {"overran": True, **_failure_evidence(view)})]
    timings = view.row.get("_gs_timings")
    timings = timings if isinstance(timings, dict) else {}
    spent = timings.get("verify_s")
    deadline = timings.get("verify_deadline_s") or view.options.verify_deadline_s
    if view.response is None or not isinstance(spent, int | float) or not isinstance(deadline, int | float):
        return None
    if spent < NEAR_DEADLINE * deadline:
        return []
    return [(None, {"verify_s": round(spent, 3), "deadline_s": deadline, "share": round(spent / deadline, 3)})]


ROLLOUT_CHECKS: dict[str, Callable[[RowView], Found]] = {
    "rollout_missing_agent_turns": rollout_missing_agent_turns,
    "rollout_ended_on_failed_model_call": rollout_ended_on_failed_model_call,
    "agent_turn_hollow": agent_turn_hollow,
    "model_call_zero_completion_tokens": model_call_zero_completion_tokens,
    "model_call_missing_token_counts": model_call_missing_token_counts,
    "trajectory_capture_mismatch": trajectory_capture_mismatch,
    "model_call_failed": model_call_failed,
    "rollout_token_count_mismatch": rollout_token_count_mismatch,
    "model_call_runaway_generation": model_call_runaway_generation,
    "token_contiguity_break": token_contiguity_break,
    "policy_stale": policy_stale,
    "rollout_masked": rollout_masked,
    "verify_near_deadline": verify_near_deadline,
}
"""The checks that read one row, by id, in the order reports list them."""


def _nemo(id: str, scope: Scope, says: str) -> CheckSpec:
    return CheckSpec(id=id, scope=scope, origin="nemo_gym", says=says)


def _ours(id: str, scope: Scope, says: str) -> CheckSpec:
    return CheckSpec(id=id, scope=scope, origin="gym_serve", says=says)


CHECKS: tuple[CheckSpec, ...] = (
    _nemo("check_execution_error", Scope.FILE, "a check raised on this row (the others still ran)"),
    _nemo("record_unreadable", Scope.FILE, "a line is not JSON, not an object, or not a rollout"),
    _nemo("rollout_duplicate_identity", Scope.FILE, "two rows claim the same (agent, task, rollout)"),
    _nemo("rollout_missing_agent_turns", Scope.ROLLOUT, "the output holds nothing the model produced"),
    _nemo(
        "rollout_ended_on_failed_model_call", Scope.ROLLOUT, "the rollout's last attempt ended on a failed model call"
    ),
    _nemo("agent_turn_hollow", Scope.ROLLOUT, "a model call produced no text, reasoning or function call"),
    _nemo("model_call_zero_completion_tokens", Scope.ROLLOUT, "a model call generated no token"),
    _nemo("model_call_missing_token_counts", Scope.ROLLOUT, "token counts or token ids are missing"),
    _nemo("trajectory_capture_mismatch", Scope.ROLLOUT, "a model turn lacks the token bundle its siblings have"),
    _nemo("model_call_failed", Scope.ROLLOUT, "a model call failed"),
    _nemo("rollout_token_count_mismatch", Scope.ROLLOUT, "`usage` disagrees with the bundles' token ids"),
    _nemo("model_call_runaway_generation", Scope.ROLLOUT, "a call hit its token limit having produced nothing"),
    _nemo("task_consistently_unhealthy", Scope.TASK, "every rollout (two or more) of the task has a finding"),
    _nemo("task_no_successful_model_calls", Scope.TASK, "no rollout of the task got an answer from the model"),
    _ours("token_contiguity_break", Scope.ROLLOUT, "a prompt does not extend the previous prompt + generation"),
    _ours("policy_stale", Scope.ROLLOUT, "sampled by a policy older than the staleness bound"),
    _ours("rollout_masked", Scope.ROLLOUT, "the verifier said not to train on it (`mask_sample`)"),
    _ours("group_identical_rewards", Scope.TASK, "all scored rollouts of the task have one reward: no signal"),
    _ours("verify_near_deadline", Scope.ROLLOUT, "verify used 80% or more of its deadline, or overran it"),
)
"""Every check, NeMo Gym's 14 then gym-serve's 5, with what a finding of it says (the table above, shorter)."""
