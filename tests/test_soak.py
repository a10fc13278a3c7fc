"""The chaos soak, short: `benchmarks/soak.py`'s run (`gym_serve.testing.soak`) at CI's size, every invariant held.

A few hundred rollouts of three environments (single-turn, multi-turn with a tool, multi-turn with a simulated
user) on a model behind HTTP, an undisturbed run first, then the same rows while: a replica of each tier
(Agent, Environment, Model, ingress) is killed every few seconds, the collector is SIGKILLed twice and
resumed, the model server injects every kind of fault at rates high enough for each to happen, and a client
streams part of the rows through the ingress. Required: nothing lost, nothing twice, every failure typed,
every finished rollout's reward the undisturbed run's, the output valid JSONL at each kill.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from ray import serve

from gym_serve.serving.cluster import start_local
from gym_serve.testing.faults import KINDS, FaultRates
from gym_serve.testing.soak import SoakConfig, SoakReport, run_soak
from tests.ray_start_cluster import free_port

pytestmark = [pytest.mark.serve, pytest.mark.slow, pytest.mark.timeout(600)]

CONFIG = SoakConfig(
    rollouts=180,
    ingress_rollouts=48,
    concurrency=32,
    kill_every_s=4.0,
    faults=FaultRates(http_5xx=0.04, http_429=0.02, timeout=0.01, drop=0.03, malformed=0.01, slow=0.04, hang_s=10),
    model_timeout_s=1.5,
)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SoakReport]:
    port = free_port()
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    work: Path = tmp_path_factory.mktemp("soak")
    try:
        yield asyncio.run(run_soak(CONFIG, work, address=ray.get_runtime_context().gcs_address, http_port=port))
    finally:
        serve.shutdown()
        ray.shutdown()


def test_no_rollout_is_lost_or_written_twice_and_every_reward_is_the_undisturbed_runs(report: SoakReport) -> None:
    print(report.model_dump_json(indent=1, exclude={"config", "kill_log"}))
    assert report.problems == []
    assert report.lost == report.duplicated == report.untyped_failures == report.reward_mismatches == 0
    assert report.quiet.rollouts == CONFIG.rollouts and report.quiet.failures == 0
    assert report.chaos.rollouts + report.chaos.failures == CONFIG.rollouts
    assert report.ingress.rollouts + report.ingress.failures == CONFIG.ingress_rollouts


def test_the_chaos_happened(report: SoakReport) -> None:
    """Each fault kind injected, each tier lost replicas, the collector was killed twice mid-run: the run above
    proves something only if all of it happened."""
    assert all(report.faults[kind] > 0 for kind in KINDS), report.faults
    assert all(report.kills.get(tier, 0) > 0 for tier in ("Agent", "Environment", "Model", "Ingress")), report.kills
    assert report.collector_kills == 2
    kills = [
        check for check in report.jsonl_checks if check.startswith(("kill 1: chaos.jsonl", "kill 2: chaos.jsonl"))
    ]
    assert len(kills) == 2 and all("all valid JSON" in check for check in kills), report.jsonl_checks
