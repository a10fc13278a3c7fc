"""The ingress's own metrics, in Prometheus's text format (`GET /metrics`).

Ray already exports Serve's request counts, latencies and replica states on
each node's metrics port; what it cannot know is what a *rollout* is. These
few series say it, per ingress replica:

- `gym_serve_ingress_in_flight` (gauge): rollouts running now.
- `gym_serve_ingress_rollouts_total{outcome}` (counter): rollouts that ended, `outcome` being `ok`, a failure
  class (`timeout`, `model_error`, ...) or `cancelled` (the client went away first).
- `gym_serve_ingress_rollout_seconds` (histogram): how long the rollouts that finished took, retries included.
- `gym_serve_ingress_replayed_total` (counter): rollouts answered from the idempotency cache instead of run.
- `gym_serve_ingress_rejected_total{reason}` (counter): requests refused, `reason` being `saturated` (429).

With several ingress replicas each answers for itself (a scrape reaches one of
them); sum over the `replica` label, or use Ray's metrics for totals.

Example:
    >>> metrics = RolloutMetrics(lambda: 0, replica="r1")
    >>> metrics.finished("ok", 0.3)
    >>> 'gym_serve_ingress_rollouts_total{outcome="ok",replica="r1"} 1' in metrics.render()
    True
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

__all__ = ["BUCKETS", "RolloutMetrics"]

BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, math.inf)
"""Upper bounds of the latency histogram's buckets, in seconds: rollouts take from milliseconds to minutes."""


class RolloutMetrics:
    """Counters of one ingress replica; `render()` gives the exposition text."""

    def __init__(self, in_flight: Callable[[], int], *, replica: str) -> None:
        self._in_flight = in_flight
        self._replica = replica
        self._outcomes: Counter[str] = Counter()
        self._rejected: Counter[str] = Counter()
        self._buckets = [0] * len(BUCKETS)
        self._seconds_sum = 0.0
        self._seconds_count = 0
        self.replayed = 0

    def finished(self, outcome: str, seconds: float | None = None) -> None:
        """A rollout ended with `outcome` after `seconds` (None: it did not run to an end, e.g. cancelled)."""
        self._outcomes[outcome] += 1
        if seconds is None:
            return
        self._seconds_sum += seconds
        self._seconds_count += 1
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self._buckets[i] += 1

    def rejected(self, reason: str) -> None:
        self._rejected[reason] += 1

    def render(self) -> str:
        replica = _label("replica", self._replica)
        lines = [
            "# HELP gym_serve_ingress_in_flight Rollouts this ingress replica is running now.",
            "# TYPE gym_serve_ingress_in_flight gauge",
            f"gym_serve_ingress_in_flight{{{replica}}} {self._in_flight()}",
            "# HELP gym_serve_ingress_rollouts_total Rollouts that ended: ok, a failure class, or cancelled.",
            "# TYPE gym_serve_ingress_rollouts_total counter",
            *(
                f"gym_serve_ingress_rollouts_total{{{_label('outcome', k)},{replica}}} {v}"
                for k, v in sorted(self._outcomes.items())
            ),
            "# HELP gym_serve_ingress_rollout_seconds Time from admission to the end of a rollout, retries included.",
            "# TYPE gym_serve_ingress_rollout_seconds histogram",
            *(
                f"gym_serve_ingress_rollout_seconds_bucket{{{_label('le', _bound(b))},{replica}}} {n}"
                for b, n in zip(BUCKETS, self._buckets, strict=True)
            ),
            f"gym_serve_ingress_rollout_seconds_sum{{{replica}}} {self._seconds_sum!r}",
            f"gym_serve_ingress_rollout_seconds_count{{{replica}}} {self._seconds_count}",
            "# HELP gym_serve_ingress_replayed_total Rollouts answered from the idempotency cache instead of run.",
            "# TYPE gym_serve_ingress_replayed_total counter",
            f"gym_serve_ingress_replayed_total{{{replica}}} {self.replayed}",
            "# HELP gym_serve_ingress_rejected_total Requests refused, by reason.",
            "# TYPE gym_serve_ingress_rejected_total counter",
            *(
                f"gym_serve_ingress_rejected_total{{{_label('reason', k)},{replica}}} {v}"
                for k, v in sorted(self._rejected.items())
            ),
        ]
        return "\n".join(lines) + "\n"


def _bound(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


def _label(name: str, value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{name}="{escaped}"'
