"""Policy weights: new weights into every replica of a vLLM Model tier, each version numbered.

A trainer in the same Ray cluster pushes weights with `PolicyWeights`; the
HTTP ingress's `POST /v1/weights` does the same for a trainer elsewhere:

    weights = PolicyWeights("my_policy")                     # the Model tier of application `my_policy`
    await weights.push(3, checkpoint="/ckpt/step-3")         # a folder of *.safetensors, seen by every node
    await weights.push(4, tensors=model.state_dict())        # CPU tensors through Ray's object store, no disk
    (await weights.versions()).replicas                      # {replica id: version it serves}

An update goes in two phases, so that the tier is never half-updated:

1. *prepare*, on every running replica: the new weights are checked against the
   served model's checkpoint (every tensor present, no unknown one, shapes
   equal, values finite) before anything is touched. One replica's refusal
   refuses the update everywhere (`InvalidWeights`, naming the tensors), and
   every replica keeps serving what it served.
2. *commit*: the version and its source are written to the policy's store (a
   named Ray actor, one per application), then every replica loads them
   between a pause and a resume of its engine (`deployments/vllm_weights.py`).

The store is where a replica that starts later (autoscaling, or a replacement
for one that died mid-update) reads the current version, so it comes up on it;
replicas also compare themselves with the store every few seconds, so a replica
that missed a commit catches up. Versions only increase: a push whose version
is not above the current one is refused (`VersionNotNewer`). The store lives as
long as the Ray cluster: an application deployed again under the same name
starts on the last version pushed to it (a changed base model starts over at
0). The checkpoint folder of the current version must stay readable until the
next push; tensors stay in the object store while the pusher's process lives
(it owns them) and the store refers to them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ray
from pydantic import BaseModel, ConfigDict, Field, model_validator
from ray.serve.exceptions import RayServeException

from gym_serve.errors import FailureKind, InvalidWeights, NoWeights, VersionNotNewer, WeightsError, failure_kind

__all__ = [
    "PolicyState",
    "PolicyStore",
    "PolicyVersions",
    "PolicyWeights",
    "UpdateReport",
    "WeightSource",
    "current_version",
    "policy_store",
]

NAMESPACE = "gym_serve"


class WeightSource(BaseModel):
    """Where an update's weights are: a checkpoint folder, or a dict of tensors in Ray's object store."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    checkpoint: str | None = Field(default=None, description="A folder of *.safetensors in the model's format.")
    tensors: Any = Field(default=None, description="An ObjectRef to a dict of tensor name → CPU tensor.")

    @model_validator(mode="after")
    def _one_source(self) -> WeightSource:
        if (self.checkpoint is None) == (self.tensors is None):
            raise ValueError("give exactly one of `checkpoint` and `tensors`")
        return self

    def describe(self) -> str:
        return f"checkpoint {self.checkpoint}" if self.checkpoint is not None else "tensors from the object store"


class PolicyState(BaseModel):
    """What the store holds: the current version, where its weights are, and the checkpoint replicas start from."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    version: int = 0
    source: WeightSource | None = None
    base: str | None = None


@ray.remote(num_cpus=0)
class PolicyStore:
    """The current version of one application's policy and its source: every replica reads it when it starts."""

    def __init__(self) -> None:
        self._state = PolicyState()

    def attach(self, base: str) -> PolicyState:
        """A replica starting from the checkpoint `base`: the state to come up on (reset if the base changed)."""
        if self._state.base != base:
            self._state = PolicyState(base=base)
        return self._state

    def state(self) -> PolicyState:
        return self._state

    def commit(self, version: int, source: WeightSource) -> int | None:
        """Make `version` current; returns None, or the current version that is not below it (nothing changed)."""
        if version <= self._state.version:
            return self._state.version
        self._state = PolicyState(version=version, source=source, base=self._state.base)
        return None


def policy_store(app: str) -> Any:
    """The store of application `app`'s policy (created on first use; it outlives the callers)."""
    return PolicyStore.options(  # type: ignore[attr-defined]
        name=f"policy:{app}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True
    ).remote()


async def current_version(app: str) -> int:
    """The current version of application `app`'s policy (0: the weights its replicas started from)."""
    state: PolicyState = await policy_store(app).state.remote()
    return state.version


class UpdateReport(BaseModel):
    """How an update went."""

    version: int
    replicas: dict[str, int] = Field(description="Replica id → the version it serves now.")
    lost: int = Field(
        default=0,
        description="Replicas that died during the update; Serve replaces them and the replacements start on "
        "the current version.",
    )
    seconds: float


class PolicyVersions(BaseModel):
    """The policy's current version (what a new replica loads) and the version each running replica serves."""

    version: int
    replicas: dict[str, int]


class PolicyWeights:
    """Weight updates and versions of one application's vLLM Model tier, for code in the same Ray cluster."""

    def __init__(self, app: str, *, timeout_s: float = 600.0) -> None:
        from gym_serve.calls.handles import model_handle

        self.app = app
        self.timeout_s = timeout_s
        self._handle = model_handle(app)
        self._store = policy_store(app)

    async def current(self) -> int:
        """The policy's current version (0: the weights the replicas started from)."""
        return await current_version(self.app)

    async def versions(self) -> PolicyVersions:
        served = await self._broadcast("weights_version")
        return PolicyVersions(version=await self.current(), replicas=_by_replica(served))

    async def push(
        self,
        version: int,
        *,
        checkpoint: str | Path | None = None,
        tensors: Mapping[str, Any] | ray.ObjectRef | None = None,
    ) -> UpdateReport:
        """Make `version` the policy every replica serves, from a checkpoint folder or from tensors.

        Raises `InvalidWeights` (nothing changed anywhere), `VersionNotNewer`, or
        `WeightsError` when no replica is running to take the update.
        """
        started = time.perf_counter()
        if tensors is not None and not isinstance(tensors, ray.ObjectRef):
            tensors = ray.put(dict(tensors))
        source = WeightSource(
            checkpoint=None if checkpoint is None else str(Path(checkpoint).resolve()), tensors=tensors
        )
        current = await self.current()
        if version <= current:
            raise VersionNotNewer(f"policy `{self.app}`: version {version} is not above the current {current}")
        prepared = await self._broadcast("weights_prepare", version, source)
        refusals = [_cause(r) for r in _errors(prepared)]
        if refusals or not any(isinstance(r, dict) for r in prepared):
            await self._broadcast("weights_discard", version)
            if not refusals:
                raise WeightsError(f"policy `{self.app}`: no running replica took version {version}")
            if all(_takes_no_weights(r) for r in refusals):
                raise NoWeights(f"policy `{self.app}`: its Model tier takes no weights (only `kind: vllm` tiers do)")
            cls = InvalidWeights if all(isinstance(r, InvalidWeights) for r in refusals) else WeightsError
            why = " | ".join(sorted({str(r) for r in refusals}))
            raise cls(f"policy `{self.app}`: version {version} refused, no replica changed: {why}")
        blocker = await self._store.commit.remote(version, source)
        if blocker is not None:  # another push got there first
            await self._broadcast("weights_discard", version)
            raise VersionNotNewer(f"policy `{self.app}`: version {version} is not above the current {blocker}")
        applied = await self._broadcast("weights_apply", version, source)
        return UpdateReport(
            version=version,
            replicas=_by_replica(applied),
            lost=sum(isinstance(r, BaseException) for r in applied),
            seconds=time.perf_counter() - started,
        )

    async def _broadcast(self, method: str, *args: Any) -> list[Any]:
        """Call `method` on every running replica; a replica's exception (a refusal, a death) comes back as a value."""
        try:
            response = self._handle.broadcast(method, *args)
            results = await response.results_async(timeout_s=self.timeout_s, return_exceptions=True)
        except Exception as e:
            if failure_kind(e) is FailureKind.KILL_SHAPED:  # no replica is running
                return []
            raise
        return list(results)


def _errors(results: list[Any]) -> list[BaseException]:
    """The refusals among broadcast results (a replica that died refused nothing)."""
    return [r for r in results if isinstance(r, BaseException) and failure_kind(r) is not FailureKind.KILL_SHAPED]


def _takes_no_weights(error: BaseException) -> bool:
    """A replica whose deployment has no weight methods: Serve's own refusal of a method the class lacks."""
    return isinstance(error, RayServeException) and "that does not exist" in str(error)


def _cause(error: BaseException) -> BaseException:
    """The replica's own exception inside Ray's wrapper."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


def _by_replica(results: list[Any]) -> dict[str, int]:
    return {r["replica"]: r["version"] for r in results if isinstance(r, dict)}
