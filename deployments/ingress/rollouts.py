"""The rollout routes: `POST /run` (one row, NeMo Gym's agent `/run`) and `POST /v1/rollouts` (a batch, streamed).

Both go through the replica's dispatcher (`gym_serve.collect.dispatch`), as a file collection and the
in-cluster stream do: the same row checks, task numbering, overrides, per-agent repeats, retries within
`rollout_deadline_s`, failure rows and staleness bound.

`/v1/rollouts` streams NDJSON lines as rollouts finish, or whole groups with `group_size` (finished early by a
`group_policy`). A batch with a bad row is refused (422, 404 for an unknown agent) unless it asks
`on_bad_row: fail`, which answers such a row with a `bad_input` failure line, as a collection writes one. When
the client goes away, the batch's unfinished rollouts are cancelled down the handle calls and their slots come
back at once. A batch with an `idempotency_key` that repeats an earlier one's replays the rollouts that
finished then (header `Idempotency-Replayed: N`) and runs only the others (`.idempotency`).

`POST /v1/rollouts/{batch_id}/pause` stops a running batch at its rollouts' next turn boundaries: its stream
sends each unfinished rollout as a partial and ends (404 for a batch this replica does not run). A batch's
`partials` are such rows sent back to be continued under the policy serving now; one altered since it was
paused, or sent to another application or policy, is refused (422, naming the field).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, RootModel, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from gym_serve.collect.dispatch import Rollout, RowProblems, UnknownAgent
from gym_serve.collect.groups import GroupPolicy
from gym_serve.collect.staleness import Staleness
from gym_serve.collect.stream import group_size_of, plan
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


HEADER_SAFE = r"^[!-~]+$"
"""Visible ASCII: a batch's id goes back in its `Batch-Id` header, which cannot carry anything else."""


class RolloutsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # `temperature: true`: a 400, as the schema says

    rows: list[dict[str, Any]] = Field(
        default_factory=list, description="NeMo Gym rows (`responses_create_params` + fields)."
    )
    partials: list[dict[str, Any]] = Field(
        default_factory=list, description="Partial rollouts of a paused batch, to continue under the current policy."
    )
    num_repeats: int | dict[str, int] = Field(default=1, description="Rollouts per task, or per agent name.")
    group_size: int | None = Field(default=None, ge=1, description="Send each task's rollouts together, in groups.")
    group_policy: GroupPolicy | None = Field(
        default=None, description="Finish a group before all its rollouts have (long-tail control)."
    )
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
        pattern=HEADER_SAFE,
        description="Re-sending a batch with its key replays what finished.",
    )
    batch_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=HEADER_SAFE,
        description="The batch's id for `/v1/rollouts/{batch_id}/pause` (default: the idempotency key, else new).",
    )

    @model_validator(mode="after")
    def _something_to_run(self) -> RolloutsRequest:
        if not self.rows and not self.partials:
            raise ValueError("give `rows` to run, `partials` to continue, or both")
        return self

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
    batch_id = request.batch_id or request.idempotency_key or uuid.uuid4().hex
    if batch_id in replica.batches:
        raise IngressError(409, f"batch `{batch_id}` is still running", field="batch_id")
    try:
        work, rejected = await plan(
            replica.dispatcher,
            request.rows,
            request.partials,
            num_repeats=request.num_repeats,
            group_size=request.group_size,
            group_policy=request.group_policy,
            overrides=request.overrides(),
        )
    except ValueError as e:
        field = "group_policy" if str(e).startswith("group_policy") else "num_repeats"
        raise IngressError(400, str(e), field=field) from None
    if rejected and request.on_bad_row == "refuse":
        first = rejected[0]
        raise _refusal(first.error, prefix=f"{first.error.source or SOURCE}.{first.line - 1}.")
    key = request.idempotency_key
    replayed = _replayed(replica, request) if key is not None else {}
    pending = {i: rollout for i, rollout in enumerate(work) if i not in replayed}
    try:
        lease = _admit(replica, len(pending))
    except IngressError:
        if key is not None:
            replica.idempotency.end(key)
        raise
    staleness = None
    if request.max_policy_lag is not None:
        staleness = Staleness(request.max_policy_lag, flag_stale=request.flag_stale)
    batch = Batch(
        replica,
        lease,
        batch_id,
        pending,
        replayed={i: (work[i], row) for i, row in replayed.items()},
        failed=[r.failure_row(r.error.source or SOURCE) for r in rejected],
        group_size=group_size_of(request.group_size, request.num_repeats, request.group_policy),
        group_policy=request.group_policy,
        key=key,
        staleness=staleness,
    )
    replica.metrics.replayed(len(replayed))
    return BatchResponse(batch, headers={"Idempotency-Replayed": str(len(replayed))} if key else None)


class Paused(BaseModel):
    batch_id: str
    running: int = Field(description="Rollouts that were running: each comes back finished, or as a partial.")


@router.post(
    "/v1/rollouts/{batch_id}/pause",
    summary="Stop a running batch at its rollouts' next turn boundaries; its stream sends the rest as partials",
    response_model=Paused,
    responses=responses(401, 404),
)
async def pause(replica: CurrentReplica, batch_id: str) -> Paused:
    batch = replica.batches.get(batch_id)
    if batch is None:
        raise IngressError(
            404,
            f"no running batch `{batch_id}` on this ingress replica (it finished, or never started here)",
            field="batch_id",
        )
    return Paused(batch_id=batch_id, running=await batch.pause())


def _resolved(replica: Replica, row: Any) -> str:
    try:
        return replica.dispatcher.resolve(row, line=1)
    except InputError as e:
        raise _refusal(e, prefix="") from None


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
