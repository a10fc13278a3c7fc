"""Policy weights through the ingress: `POST /v1/weights` pushes new weights into every replica of the Model
tier (`gym_serve.models.weights`), `GET /v1/weights` says the policy's version and each replica's.

Weights decide what every rollout samples: a push always needs the bearer token, and an ingress without one
refuses it (403) whatever else it leaves open.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from gym_serve.deployments.ingress.errors import IngressError, responses
from gym_serve.deployments.ingress.replica import Authorized, CurrentReplica, StrictJSON
from gym_serve.errors import InvalidWeights, NoWeights, VersionNotNewer, WeightsError
from gym_serve.models.weights import PolicyVersions, UpdateReport

__all__ = ["WeightsRequest", "router"]


async def _a_token_is_configured(replica: CurrentReplica) -> None:
    if replica.token is None:
        raise IngressError(403, f"weight updates need a bearer token: set {replica.args.token_env} for the ingress")


router = APIRouter(prefix="/v1/weights", tags=["weights"], dependencies=[Authorized, StrictJSON])


class WeightsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # `version: true` is no version 1

    version: int = Field(ge=1, description="The new policy version: above the current one.")
    checkpoint: str = Field(min_length=1, description="A folder of *.safetensors that every replica's node reads.")


@router.post(
    "",
    summary="New weights into every replica of the Model tier; answers once every replica serves them",
    dependencies=[Depends(_a_token_is_configured)],
    responses={200: {"model": UpdateReport}, **responses(400, 401, 403, 404, 409, 422, 503)},
)
async def push_weights(replica: CurrentReplica, update: WeightsRequest) -> JSONResponse:
    try:
        report = await replica.weights().push(update.version, checkpoint=update.checkpoint)
    except WeightsError as e:
        status = {InvalidWeights: 422, VersionNotNewer: 409, NoWeights: 404}.get(type(e), 503)
        raise IngressError(status, str(e)) from None
    return JSONResponse(report.model_dump())


@router.get(
    "",
    summary="The policy's version and each replica's",
    responses={200: {"model": PolicyVersions}, **responses(401, 404)},
)
async def weight_versions(replica: CurrentReplica) -> JSONResponse:
    return JSONResponse((await replica.weights().versions()).model_dump())
