"""The rollout routes: `POST /run` (one row, NeMo Gym's agent `/run`) and `POST /v1/rollouts` (a batch, streamed).

Both go through the replica's dispatcher (`gym_serve.collect.dispatch`), as a file collection and the
in-cluster stream do: the same row checks, task numbering, overrides, per-agent repeats, retries within
`rollout_deadline_s`, failure rows and staleness bound.

`/v1/rollouts` streams NDJSON lines as rollouts finish, or whole groups with `group_size`. A batch with a bad
row is refused (422, 404 for an unknown agent) unless it asks `on_bad_row: fail`, which answers such a row with
a `bad_input` failure line, as a collection writes one. When the client goes away, the batch's unfinished
rollouts are cancelled down the handle calls and their slots come back at once. A batch with an
`idempotency_key` that repeats an earlier one's replays the rollouts that finished then (header
`Idempotency-Replayed: N`) and runs only the others (`.idempotency`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, RootModel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from gym_serve.collect.dispatch import (
    Rejected,
    Repeats,
    Rollout,
    RowProblems,
    UnknownAgent,
    check_repeats,
)
from gym_serve.collect.staleness import Staleness
from gym_serve.deployments.ingress.batches import Batch, BatchResponse, NDJSONResponse
from gym_serve.deployments.ingress.errors import IngressError, responses
from gym_serve.deployments.ingress.idempotency import IdempotencyConflict, IdempotencyMismatch
from gym_serve.deployments.ingress.replica import Authorized, CurrentReplica, Replica, StrictJSON
from gym_serve.deployments.ingress.slots import Lease, Saturated
from gym_serve.errors import InputError
from gym_serve.wire.responses import InputRow, RolloutRow

__all__ = ["RolloutsRequest", "router"]

router = APIRouter(tags=["rollouts"], dependencies=[Authorized, StrictJSON])

SOURCE = "rows"
"""How a request's rows are named in the messages about them (`rows, line 2, field ...`)."""


class RolloutsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rows: list[dict[str, Any]] = Field(min_length=1, description="NeMo Gym rows (`responses_create_params` + fields).")
    num_repeats: int | dict[str, int] = Field(default=1, description="Rollouts per task, or per agent name.")
    group_size: int | None = Field(default=None, ge=1, description="Send each task's rollouts together, in groups.")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_policy_lag: int | None = Field(
        default=None, ge=0, description="Run again a rollout whose oldest token is more policy versions old."
    )
    flag_stale: bool = Field(default=False, description="Return such rollouts marked `policy_stale` instead.")
    on_bad_row: Literal["refuse", "fail"] = Field(
        default="refuse", description="`fail`: a row that cannot run is a `bad_input` failure line; `refuse`: 422."
    )
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Re-sending a batch with its key replays what finished.",
    )

    def overrides(self) -> dict[str, Any]:
        chosen = self.model_dump(include={"temperature", "top_p", "max_output_tokens"})
        return {k: v for k, v in chosen.items() if v is not None}


class RowBody(RootModel[dict[str, Any]]):
    """A NeMo Gym row. Any object is taken in; the dispatcher checks it, so a refusal names every field."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(InputRow.__pydantic_core_schema__)


@router.post(
    "/run",
    summary="One rollout of one row (NeMo Gym's agent `/run`)",
    responses={
        200: {"model": RolloutRow, "description": "The rollout row."},
        500: {
            "model": RolloutRow,
            "description": "The rollout could not finish: its failure row (`_ng_failure_class`).",
        },
        **responses(400, 401, 404, 413, 422, 429),
    },
)
async def run(replica: CurrentReplica, body: RowBody) -> JSONResponse:
    row = body.root
    agent = _resolved(replica, row)
    lease = _admit(replica, 1)
    started = time.perf_counter()
    try:
        outcome = await replica.dispatcher.run(Rollout(agent, row, 1))
    except asyncio.CancelledError:  # the client went away
        replica.metrics.finished("cancelled")
        raise
    finally:
        lease.close()
    replica.metrics.finished(outcome.kind or "ok", time.perf_counter() - started)
    return JSONResponse(outcome.row, status_code=200 if outcome.ok else 500)


@router.post(
    "/v1/rollouts",
    summary="Rollouts of rows × repeats, streamed as NDJSON as they finish",
    response_class=NDJSONResponse,
    responses={
        200: {"model": RolloutRow, "description": "One rollout row (or failure row) per line."},
        **responses(400, 401, 404, 409, 413, 422, 429),
    },
)
async def rollouts(replica: CurrentReplica, request: RolloutsRequest) -> NDJSONResponse:
    try:
        check_repeats(request.num_repeats, replica.args.agents)
    except ValueError as e:
        raise IngressError(400, str(e), field="num_repeats") from None
    work, rejected = _planned(replica, request.rows, request.num_repeats, request.overrides())
    if rejected and request.on_bad_row == "refuse":
        raise _refusal(rejected[0].error, prefix=f"rows.{rejected[0].line - 1}.")
    key = request.idempotency_key
    replayed = _replayed(replica, request) if key is not None else {}
    pending = [i for i in range(len(work)) if i not in replayed]
    try:
        lease = _admit(replica, len(pending))
    except IngressError:
        if key is not None:
            replica.idempotency.end(key)
        raise
    staleness = None
    if request.max_policy_lag is not None:
        staleness = Staleness(request.max_policy_lag, flag_stale=request.flag_stale)
    failed = [r.failure_row(SOURCE) for r in rejected]
    batch = Batch(replica, lease, {i: work[i] for i in pending}, replayed, failed, request.group_size, key, staleness)
    replica.metrics.replayed(len(replayed))
    return BatchResponse(batch, headers={"Idempotency-Replayed": str(len(replayed))} if key else None)


def _resolved(replica: Replica, row: Any) -> str:
    try:
        return replica.dispatcher.resolve(row, line=1)
    except InputError as e:
        raise _refusal(e, prefix="") from None


def _planned(
    replica: Replica, rows: list[dict[str, Any]], num_repeats: Repeats, overrides: dict[str, Any]
) -> tuple[list[Rollout], list[Rejected]]:
    work: list[Rollout] = []
    rejected: list[Rejected] = []
    expanded = replica.dispatcher.expand(
        enumerate(rows, 1), num_repeats=num_repeats, overrides=overrides, source=SOURCE
    )
    for item in expanded:
        if isinstance(item, Rejected):
            rejected.append(item)
        else:
            work.append(item)
    return work, rejected


def _refusal(error: InputError, *, prefix: str) -> IngressError:
    """A row that cannot run, as the request's answer: 404 for an unknown agent, else 422 naming every problem."""
    if isinstance(error, UnknownAgent):
        return IngressError(404, error.reason)
    problems = error.problems if isinstance(error, RowProblems) else [(error.field or "(row)", error.reason)]
    fields = [f"{prefix}{field}" for field, _ in problems]
    message = "; ".join(f"`{f}`: {m}" for f, (_, m) in zip(fields, problems, strict=True))
    details = [{"field": f, "error": m} for f, (_, m) in zip(fields, problems, strict=True)]
    return IngressError(422, f"invalid row: {message}", field=fields[0], problems=details)


def _admit(replica: Replica, rollouts: int) -> Lease:
    try:
        return replica.slots.admit(rollouts)
    except Saturated as e:
        replica.metrics.rejected("saturated")
        raise IngressError(429, str(e)) from None


def _replayed(replica: Replica, request: RolloutsRequest) -> dict[int, dict[str, Any]]:
    assert request.idempotency_key is not None
    body = json.dumps(request.model_dump(exclude={"idempotency_key"}), sort_keys=True, default=str)
    try:
        return replica.idempotency.begin(request.idempotency_key, hashlib.sha256(body.encode()).hexdigest())
    except IdempotencyConflict as e:
        raise IngressError(409, str(e)) from None
    except IdempotencyMismatch as e:
        raise IngressError(422, str(e)) from None
