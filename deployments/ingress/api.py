"""The HTTP ingress for external trainers: a FastAPI app served by Ray Serve.

- `POST /run`, `POST /v1/rollouts`: rollouts, one or a streamed batch (`.rollouts`).
- `POST /v1/responses`, `POST /v1/chat/completions`: the Model tier, OpenAI-compatible (`.model`).
- `POST /v1/weights`, `GET /v1/weights`: policy weights and versions (`.weights`).
- `GET /healthz`, `GET /v1/environments`, `GET /metrics` (Prometheus text, `.metrics`): below.
- `GET /openapi.json`: the schema of every route's body and answers (`openapi_schema`: the bearer token where
  this ingress has one).

Every route but `/healthz` and the schema needs the bearer token when the ingress has one (`.replica`);
errors are exceptions, answered in the shape of the route's API (`.errors`); what one replica holds (its
in-flight slots, its dispatcher, its idempotency cache, its metrics) is its `Replica`.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI, Response
from pydantic import BaseModel
from ray import serve

from gym_serve.deployments.ingress import model, rollouts, weights
from gym_serve.deployments.ingress.errors import install_handlers, responses
from gym_serve.deployments.ingress.metrics import CONTENT_TYPE
from gym_serve.deployments.ingress.replica import Authorized, CurrentReplica, IngressArgs, JSONBodies, Replica
from gym_serve.serving import secrets

__all__ = ["IngressArgs", "app", "build_ingress", "openapi_schema"]

app = FastAPI(
    title="gym-serve",
    summary="Verified rollouts over HTTP, the Model tier OpenAI-compatible, and policy weights.",
    docs_url=None,
    redoc_url=None,
)
install_handlers(app)
app.add_middleware(JSONBodies)
app.include_router(rollouts.router)
app.include_router(model.router)
app.include_router(weights.router)


class Health(BaseModel):
    status: str


class Deployment(BaseModel):
    status: str
    replicas: dict[str, int]


class Application(BaseModel):
    status: str
    deployments: dict[str, Deployment]


class Environments(BaseModel):
    """What the ingress routes to, and every application on the cluster with its replicas."""

    agents: list[str]
    default_agent: str | None
    model_app: str | None
    in_flight: int
    applications: dict[str, Application]


@app.get("/healthz", tags=["status"], response_model=Health)
async def healthz() -> Health:
    return Health(status="ok")


@app.get(
    "/metrics",
    tags=["status"],
    dependencies=[Authorized],
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}}, **responses(401)},
)
async def prometheus_metrics(replica: CurrentReplica) -> Response:
    return Response(replica.metrics.render(), media_type=CONTENT_TYPE)


@app.get(
    "/v1/environments",
    tags=["status"],
    dependencies=[Authorized],
    response_model=Environments,
    responses=responses(401),
)
async def environments(replica: CurrentReplica) -> Environments:
    applications = {
        name: Application(
            status=application.status.value,
            deployments={
                d: Deployment(status=dep.status.value, replicas=dict(dep.replica_states))
                for d, dep in application.deployments.items()
            },
        )
        for name, application in serve.status().applications.items()
    }
    return Environments(
        agents=replica.args.agents,
        default_agent=replica.args.default_agent,
        model_app=replica.args.model_app,
        in_flight=replica.slots.in_flight,
        applications=applications,
    )


def _errors_as_json(document: dict[str, Any]) -> dict[str, Any]:
    """Error answers are JSON on every route (`.errors`); FastAPI files a declared error body under the route's own
    media type, which on the NDJSON route (`/v1/rollouts`) would promise errors as `application/x-ndjson`."""
    for operations in document["paths"].values():
        for operation in operations.values():
            for status, answer in operation["responses"].items():
                content = answer.get("content") or {}
                if int(status) >= 400 and content and "application/json" not in content:
                    answer["content"] = {"application/json": content.popitem()[1]}
    return document


_DOCUMENT = _errors_as_json(app.openapi())
"""Every route's schema, as FastAPI builds it (with the bearer token on every route that checks it)."""


def openapi_schema(*, auth: bool) -> dict[str, Any]:
    """The OpenAPI document an ingress serves: with a token (`auth`) every route but `/healthz` asks for it;
    without one, none does, and none declares the 401 it cannot answer (a client or a fuzzer reading the
    schema then sends what this ingress takes)."""
    document = copy.deepcopy(_DOCUMENT)
    if not auth:
        for operations in document["paths"].values():
            for operation in operations.values():
                operation.pop("security", None)
                operation["responses"].pop("401", None)
        document.get("components", {}).pop("securitySchemes", None)
    return document


@serve.deployment(name="Ingress", max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0})
@serve.ingress()
class Ingress:
    """The app's replica: its state is a `Replica`, which the routes take as a dependency."""

    def __init__(self, args: IngressArgs | dict[str, Any]) -> None:
        self.replica = Replica(args if isinstance(args, IngressArgs) else IngressArgs.model_validate(args))

    def __serve_build_asgi_app__(self) -> FastAPI:
        """The app this replica serves: this module's, holding this replica's state (Serve calls it after
        `__init__`; given the app up front, Serve would serve a copy of it that the state never reaches)."""
        app.state.replica = self.replica
        app.openapi_schema = openapi_schema(auth=self.replica.token is not None)
        return app


def build_ingress(args: dict[str, Any]) -> Any:
    """The application builder `serve run` imports (`gym_serve.deployments.ingress:build_ingress`).

    It runs where the deployment is built: in `gym-serve up`'s process, or in a
    Serve task on the cluster for `serve run`/`serve deploy`. A token in that
    process's environment is published to the cluster for the replicas, and
    the ingress is then told to require it, so auth cannot silently be off.
    """
    parsed = IngressArgs.model_validate(args)
    if secrets.share(parsed.token_env):
        parsed = parsed.model_copy(update={"require_token": True})
    else:
        secrets.withdraw(parsed.token_env)  # a token published by an earlier deployment is not this one's
    deployment: Any = Ingress  # `@serve.deployment` made the class a `Deployment`, which type checkers do not see
    return deployment.bind(parsed)
