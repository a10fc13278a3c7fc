"""Autoscaling the batched tiers on the work they hold, not on Serve's request count.

The Agent, Environment and Model tiers take their calls in
micro-batches (`gym_serve.calls.batching`): one Serve request may carry 64 calls.
Serve's default policy scales on ongoing *requests*, so it would see one
where a replica is working on 64 and never scale. Instead each of these
replicas counts the calls it is working on (`Load`), reports the count as
the custom metric `calls_in_flight` (`record_autoscaling_stats`), and
`calls_in_flight_policy` asks for `total calls in flight /
target_ongoing_requests` replicas. `target_ongoing_requests` therefore means
*calls* per replica on these tiers. Serve still applies the config's
min/max, delays and scaling factors on top.

`gym_serve.serving.config` sets this policy on those tiers whenever they have an
`autoscaling_config` without a `policy` of their own, and a 1 s
`metrics_interval_s`: in Ray 2.60 replicas push their metrics at that
(deprecated) interval, 10 s by default, and the
`RAY_SERVE_*_AUTOSCALING_METRIC_PUSH_INTERVAL_S` variables that are to replace
it are not read yet. With the default, a tier reacted to load ~10 s late
(benchmarks/autoscaling.py); at 1 s it reacts within about a second, at a
push per replica per second to the controller.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

if TYPE_CHECKING:
    from ray.serve.config import AutoscalingContext

__all__ = [
    "BATCHED_TIER_AUTOSCALING",
    "LIVE_SANDBOXES",
    "METRIC",
    "SANDBOX_TIER_AUTOSCALING",
    "Load",
    "calls_in_flight_policy",
    "counted",
    "live_sandboxes_policy",
]

METRIC = "calls_in_flight"
BATCHED_TIER_AUTOSCALING: dict[str, Any] = {
    "policy": {"policy_function": "gym_serve.calls.autoscaling:calls_in_flight_policy"},
    "metrics_interval_s": 1.0,
}
"""The defaults merged under a batched tier's `autoscaling_config`."""

LIVE_SANDBOXES = "live_sandboxes"
SANDBOX_TIER_AUTOSCALING: dict[str, Any] = {
    "policy": {"policy_function": "gym_serve.calls.autoscaling:live_sandboxes_policy"},
    "metrics_interval_s": 1.0,
    "downscale_delay_s": 600.0,
}
"""The defaults merged under the Sandbox tier's `autoscaling_config`: `target_ongoing_requests` means live
sandboxes per replica there; a replica stopped takes its sandboxes with it, hence the long downscale delay."""

P = ParamSpec("P")
R = TypeVar("R")


class Load:
    """How many calls one replica is working on, however they arrived (alone or in a batch).

    `with load:` counts what runs inside it; `track(fn)` is `fn` counted; a deployment's methods are counted
    in its `self.load` with `@counted`.
    """

    def __init__(self) -> None:
        self.in_flight = 0

    def __enter__(self) -> None:
        self.in_flight += 1

    def __exit__(self, *exc: object) -> None:
        self.in_flight -= 1

    def track(self, fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        """`fn`, counted while it runs."""

        @wraps(fn)
        async def tracked(*args: P.args, **kwargs: P.kwargs) -> R:
            with self:
                return await fn(*args, **kwargs)

        return tracked

    def stats(self) -> dict[str, float]:
        """What a deployment's `record_autoscaling_stats` returns."""
        return {METRIC: float(self.in_flight)}


S = TypeVar("S")


def counted(method: Callable[Concatenate[S, P], Awaitable[R]]) -> Callable[Concatenate[S, P], Awaitable[R]]:
    """A deployment's method, written in its class body, counted in the replica's `self.load` while it runs."""

    @wraps(method)
    async def counting(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.load:  # type: ignore[attr-defined]
            return await method(self, *args, **kwargs)

    return counting


def calls_in_flight_policy(ctx: AutoscalingContext) -> tuple[float, dict[str, Any]]:
    """Replicas wanted = calls in flight over all replicas (+ requests still queued at handles) / target per replica.

    Before any replica has reported the metric, Serve's own request count stands in.
    """
    per_replica = (ctx.aggregated_metrics or {}).get(METRIC)
    if per_replica:
        total = sum(per_replica.values()) + (ctx.total_queued_requests or 0.0)
    else:
        total = ctx.total_num_requests
    target = ctx.config.get_target_ongoing_requests() if ctx.config is not None else 1.0
    return total / max(target, 1e-9), {}


def live_sandboxes_policy(ctx: AutoscalingContext) -> tuple[float, dict[str, Any]]:
    """The Sandbox tier: replicas wanted = live sandboxes over all replicas / target sandboxes per replica.

    A sandbox is work a replica holds between calls (a rollout's workspace), so the tier scales on what it
    holds, not on requests in flight. Before any replica has reported, Serve's request count stands in.
    """
    per_replica = (ctx.aggregated_metrics or {}).get(LIVE_SANDBOXES)
    total = sum(per_replica.values()) if per_replica else ctx.total_num_requests
    target = ctx.config.get_target_ongoing_requests() if ctx.config is not None else 1.0
    return total / max(target, 1e-9), {}
