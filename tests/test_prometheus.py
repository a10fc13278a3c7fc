"""The ingress's Prometheus text (prometheus_client): well-formed samples, the series names it always had,
cumulative histogram buckets, escaped labels."""

from __future__ import annotations

import re

from gym_serve.deployments.ingress.metrics import BUCKETS, RolloutMetrics

SAMPLE = re.compile(r'[a-z_]+(\{[a-z_]+="(?:[^"\\]|\\.)*"(,[a-z_]+="(?:[^"\\]|\\.)*")*\})? \S+')


def test_samples_are_well_formed_and_the_histogram_is_cumulative() -> None:
    in_flight = [3]
    metrics = RolloutMetrics(lambda: in_flight[0], replica='r"1')
    for seconds in (0.05, 0.3, 7.0, 2000.0):
        metrics.finished("ok", seconds)
    metrics.finished("timeout", 900.0)
    metrics.finished("cancelled")
    metrics.rejected("saturated")
    metrics.replayed(2)
    text = metrics.render().decode()
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert all(SAMPLE.fullmatch(line) for line in samples), [s for s in samples if not SAMPLE.fullmatch(s)]
    value = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in samples}
    assert value['gym_serve_ingress_in_flight{replica="r\\"1"}'] == 3
    assert value['gym_serve_ingress_rollouts_total{outcome="ok",replica="r\\"1"}'] == 4
    assert value['gym_serve_ingress_rollouts_total{outcome="cancelled",replica="r\\"1"}'] == 1
    buckets = [float(line.rsplit(" ", 1)[1]) for line in samples if "_bucket" in line]
    assert len(buckets) == len(BUCKETS) and buckets == sorted(buckets), "cumulative"
    assert buckets[0] == 1 and buckets[-1] == 5, "the cancelled rollout has no duration"
    assert value['gym_serve_ingress_rollout_seconds_count{replica="r\\"1"}'] == 5
    assert value['gym_serve_ingress_replayed_total{replica="r\\"1"}'] == 2
    assert text.count("# TYPE") == 5
