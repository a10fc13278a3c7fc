"""What a collection runs (`CollectJob`), the identity of a rollout, and the files a collection writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from gym_serve.calls import tracing
from gym_serve.collect.attempts import RetryPolicy
from gym_serve.collect.dispatch import Repeats, check_repeats

__all__ = ["CollectJob", "CollectSummary", "Key", "failures_path", "journal_path", "rollout_key", "sibling_path"]

Key = tuple[str, int, int]
"""A rollout's identity: (agent, `_ng_task_index`, `_ng_rollout_index`)."""


class CollectJob(BaseModel):
    """What to collect, and how hard to push."""

    input_path: str
    output_path: str
    agents: list[str] = Field(description="Names of the deployed agent applications rows may route to.")
    default_agent: str | None = Field(default=None, description="For rows without `agent_ref`.")
    num_repeats: Repeats = Field(default=1, description="Rollouts per task, or per agent name.")
    limit: int | None = Field(default=None, ge=1, description="Read at most this many input lines.")
    params_overrides: dict[str, Any] = Field(
        default_factory=dict, description="Merged into every row's `responses_create_params` (e.g. temperature)."
    )
    concurrency: int = Field(default=64, ge=1, description="Most rollouts in flight at once.")
    max_attempts: int = Field(default=3, ge=1, description="Tries per rollout for retryable failures.")
    attempt_timeout_s: float | None = Field(default=600.0, gt=0, description="Deadline of one rollout attempt.")
    resume: bool = Field(default=False, description="Continue from the files on disk instead of starting over.")
    ordered: bool = Field(default=False, description="Also write `<out>_ordered.jsonl` in (task, rollout) order.")
    shard_index: int = Field(default=0, ge=0, description="Run only tasks with index % shard_count == shard_index.")
    shard_count: int = Field(default=1, ge=1, description="Split the input's tasks among this many collections.")
    max_policy_lag: int | None = Field(
        default=None,
        ge=0,
        description="Run again a rollout whose oldest token is more than this many policy versions behind the "
        "current one (gym_serve.collect.staleness).",
    )
    flag_stale: bool = Field(default=False, description="Keep such rollouts, marked `policy_stale`, instead.")
    turn_checkpoints: bool = Field(
        default=True,
        description="Journal every completed turn (`<out>_journal.jsonl`): a retried attempt and a resumed "
        "collection go on from a rollout's last completed turn (gym_serve.collect.journal).",
    )
    trace: str | None = Field(
        default=None,
        description="One OpenTelemetry trace per rollout, to this JSON-lines file or http(s):// OTLP endpoint "
        "(gym_serve.calls.tracing); None: no tracing.",
    )
    trace_sample: float = Field(
        default=1.0, gt=0.0, le=1.0, description="The share of rollouts traced (drawn at random), with `trace`."
    )

    @field_validator("trace")
    @classmethod
    def _trace_destination(cls, value: str | None) -> str | None:
        return None if value is None else tracing.destination(value)

    @model_validator(mode="after")
    def _shard_in_range(self) -> CollectJob:
        if self.shard_index >= self.shard_count:
            raise ValueError(f"shard_index {self.shard_index} is not below shard_count {self.shard_count}")
        return self

    @model_validator(mode="after")
    def _repeats_name_agents(self) -> CollectJob:
        check_repeats(self.num_repeats, self.agents)
        return self

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(max_attempts=self.max_attempts, attempt_timeout_s=self.attempt_timeout_s)


class CollectSummary(BaseModel):
    """The outcome of a collection, and its progress while it runs.

    Accounting: `rows_read = rows_ran + rows_skipped`, and every expected rollout
    ends up exactly once in the output or the failures file:
    `rollouts_expected = rollouts + rollouts_resumed + failures + failures_kept`.
    """

    rows_read: int = 0
    rows_skipped: int = 0
    rollouts_expected: int = 0
    rollouts: int = 0
    rollouts_resumed: int = 0
    failures: int = 0
    failures_kept: int = 0
    rollouts_resumed_mid_way: int = Field(default=0, description="Unfinished rollouts resumed at their last turn.")
    turns_restored: int = Field(default=0, description="Completed turns those rollouts did not run again.")
    journal_skipped: list[str] = Field(
        default_factory=list, description="Journal lines a resume could not use (torn, corrupt), and why."
    )
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    retries: int = 0
    backpressure_waits: int = 0
    in_flight: int = 0
    window: int = 0
    elapsed_s: float = 0.0
    rollouts_per_s: float = 0.0
    mean_reward: float | None = None
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    latency_p99_s: float | None = None
    time_split_s: dict[str, float] = Field(default_factory=dict, description="Summed model/tool/verify seconds.")
    driver_rss_mb: float | None = Field(default=None, description="The driver process's resident memory now.")
    finished: bool = False
    output_path: str = ""
    failures_path: str = ""
    materialized_path: str = ""
    ordered_path: str | None = None


def sibling_path(output_path: str | Path, suffix: str) -> Path:
    """`<out>_<suffix>.jsonl` next to the output, as NeMo Gym names its side files."""
    path = Path(output_path)
    return path.with_name(f"{path.stem}_{suffix}")


def rollout_key(row: dict[str, Any]) -> Key:
    return (row["agent_ref"]["name"], int(row["_ng_task_index"]), int(row["_ng_rollout_index"]))


def failures_path(output_path: str | Path) -> Path:
    return sibling_path(output_path, "failures.jsonl")


def journal_path(output_path: str | Path) -> Path:
    """Where a collection journals its rollouts' completed turns (`gym_serve.collect.journal`)."""
    return sibling_path(output_path, "journal.jsonl")
