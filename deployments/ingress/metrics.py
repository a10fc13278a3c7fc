"""The ingress's own metrics, served at `GET /metrics` in Prometheus's text format (`prometheus_client`).

Ray already exports Serve's request counts, latencies and replica states on
each node's metrics port; what it cannot know is what a *rollout* is. These
few series say it, per ingress replica (label `replica`):

- `gym_serve_ingress_in_flight` (gauge): rollouts running now.
- `gym_serve_ingress_rollouts_total{outcome}` (counter): rollouts that ended, `outcome` being `ok`, a failure
  class (`agent_timeout`, `model_error`, ...) or `cancelled` (the client went away first).
- `gym_serve_ingress_rollout_seconds` (histogram): how long the rollouts that finished took, retries included.
- `gym_serve_ingress_replayed_total` (counter): rollouts answered from the idempotency cache instead of run.
- `gym_serve_ingress_rejected_total{reason}` (counter): requests refused, `reason` being `saturated` (429).

With several ingress replicas each answers for itself (a scrape reaches one of
them); sum over the `replica` label, or use Ray's metrics for totals. Each
replica's series live in a registry of their own, so `/metrics` shows exactly these.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4 as CONTENT_TYPE  # what scrapers of any age read

__all__ = ["BUCKETS", "CONTENT_TYPE", "RolloutMetrics"]

BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, math.inf)
"""Upper bounds of the latency histogram's buckets, in seconds: rollouts take from milliseconds to minutes."""

disable_created_metrics()  # the five series above, without `*_created` timestamps beside them


class RolloutMetrics:
    """The series of one ingress replica; `render()` gives the exposition text."""

    def __init__(self, in_flight: Callable[[], int], *, replica: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._replica = replica
        Gauge(
            "gym_serve_ingress_in_flight",
            "Rollouts this ingress replica is running now.",
            ["replica"],
            registry=self.registry,
        ).labels(replica).set_function(in_flight)
        self._outcomes = Counter(
            "gym_serve_ingress_rollouts",
            "Rollouts that ended: ok, a failure class, or cancelled.",
            ["outcome", "replica"],
            registry=self.registry,
        )
        self._seconds = Histogram(
            "gym_serve_ingress_rollout_seconds",
            "Time from admission to the end of a rollout, retries included.",
            ["replica"],
            registry=self.registry,
            buckets=BUCKETS,
        ).labels(replica)
        self._replayed = Counter(
            "gym_serve_ingress_replayed",
            "Rollouts answered from the idempotency cache instead of run.",
            ["replica"],
            registry=self.registry,
        ).labels(replica)
        self._rejected = Counter(
            "gym_serve_ingress_rejected", "Requests refused, by reason.", ["reason", "replica"], registry=self.registry
        )

    def finished(self, outcome: str, seconds: float | None = None) -> None:
        """A rollout ended with `outcome` after `seconds` (None: it did not run to an end, e.g. cancelled)."""
        self._outcomes.labels(outcome, self._replica).inc()
        if seconds is not None:
            self._seconds.observe(seconds)

    def rejected(self, reason: str) -> None:
        self._rejected.labels(reason, self._replica).inc()

    def replayed(self, rollouts: int) -> None:
        self._replayed.inc(rollouts)

    def render(self) -> bytes:
        return generate_latest(self.registry)
