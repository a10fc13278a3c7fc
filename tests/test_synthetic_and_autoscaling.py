"""Synthetic load parts, and autoscaling the batched tiers on calls in flight (policy logic, then real Serve)."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from types import SimpleNamespace
from typing import Any

import pytest

from gym_serve.calls.autoscaling import METRIC, Load, calls_in_flight_policy
from gym_serve.models.synthetic import Capacity, Latency, burn_cpu
from gym_serve.serving.config import DeploymentOptions
from gym_serve.testing.fixtures import example_rows, unique


def test_lognormal_latency_keeps_its_mean_and_has_a_long_tail() -> None:
    latency = Latency(mean_s=0.1, distribution="lognormal", sigma=1.0)
    rng = random.Random(7)
    samples = sorted(latency.sample(rng) for _ in range(40_000))
    assert statistics.fmean(samples) == pytest.approx(0.1, rel=0.05)
    assert samples[int(0.99 * len(samples))] > 5 * samples[len(samples) // 2]
    assert Latency(mean_s=0.1).sample(rng) == 0.1


async def test_capacity_lets_only_n_calls_in_at_once() -> None:
    capacity, inside, most = Capacity(3), 0, 0

    async def call() -> None:
        nonlocal inside, most
        async with capacity:
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.01)
            inside -= 1

    await asyncio.gather(*(call() for _ in range(12)))
    assert most == 3


async def test_burn_cpu_spends_cpu_off_the_event_loop() -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticker = asyncio.ensure_future(tick())
    cpu = time.process_time()
    await burn_cpu(200)
    ticker.cancel()
    assert time.process_time() - cpu >= 0.19
    assert ticks >= 10, "the event loop kept running while the CPU work ran"


async def test_load_counts_calls_while_they_run() -> None:
    load, seen = Load(), []

    async def work() -> None:
        seen.append(load.in_flight)
        await asyncio.sleep(0.01)

    tracked = load.track(work)
    await asyncio.gather(*(tracked() for _ in range(5)))
    assert max(seen) == 5 and load.in_flight == 0 and load.stats() == {METRIC: 0.0}
    with pytest.raises(ZeroDivisionError):
        await load.track(_fails)()
    assert load.in_flight == 0, "a failed call is not counted forever"


async def _fails() -> None:
    raise ZeroDivisionError


def _ctx(metric: dict[str, float] | None, *, requests: float = 0.0, queued: float = 0.0, target: float = 4.0):
    return SimpleNamespace(
        aggregated_metrics={METRIC: metric} if metric is not None else {},
        total_num_requests=requests,
        total_queued_requests=queued,
        config=SimpleNamespace(get_target_ongoing_requests=lambda: target),
    )


def test_policy_scales_on_calls_not_on_requests() -> None:
    # Two replicas each holding one batched request of 16 calls: Serve sees 2 requests, we see 32 calls.
    desired, _ = calls_in_flight_policy(_ctx({"r1": 16.0, "r2": 16.0}, requests=2.0, target=4.0))
    assert desired == 8.0
    assert calls_in_flight_policy(_ctx({"r1": 0.0}, requests=1.0))[0] == 0.0
    assert calls_in_flight_policy(_ctx({"r1": 4.0}, queued=4.0, target=4.0))[0] == 2.0, "queued requests count"
    assert calls_in_flight_policy(_ctx(None, requests=12.0, target=4.0))[0] == 3.0, "before any report"


def test_batched_tiers_get_the_policy_unless_they_name_one() -> None:
    from gym_serve.calls.autoscaling import BATCHED_TIER_AUTOSCALING

    mine = DeploymentOptions(autoscaling_config={"max_replicas": 4}, num_replicas=2)
    options = mine.serve_options({"max_ongoing_requests": 256}, BATCHED_TIER_AUTOSCALING)
    assert options["autoscaling_config"]["policy"] == BATCHED_TIER_AUTOSCALING["policy"]
    assert options["autoscaling_config"]["metrics_interval_s"] == 1.0
    assert "num_replicas" not in options and options["autoscaling_config"]["max_replicas"] == 4
    own = {"policy_function": "my.module:policy"}
    theirs = DeploymentOptions(autoscaling_config={"policy": own, "metrics_interval_s": 5.0}).serve_options(
        {}, BATCHED_TIER_AUTOSCALING
    )
    assert theirs["autoscaling_config"]["policy"] == own and theirs["autoscaling_config"]["metrics_interval_s"] == 5.0
    assert "autoscaling_config" not in DeploymentOptions().serve_options({}, BATCHED_TIER_AUTOSCALING)


# ---- real Serve -------------------------------------------------------------------------------------------

FAST_AUTOSCALING = {
    "min_replicas": 1,
    "max_replicas": 3,
    "target_ongoing_requests": 2,
    "upscale_delay_s": 0,
    "downscale_delay_s": 2,
    "look_back_period_s": 1,
    "metrics_interval_s": 0.5,
}


def _deploy(env_config: dict[str, Any], model: dict[str, Any]) -> tuple[Any, str]:
    from ray import serve

    from gym_serve.deployments.app import build_app
    from gym_serve.serving.config import AppArgs

    zero = {"ray_actor_options": {"num_cpus": 0}}
    args = AppArgs.model_validate(
        {
            "environment": {
                "name": "synthetic_load",
                "config": env_config,
                "deployment": {**zero, "autoscaling_config": FAST_AUTOSCALING},
            },
            "model": {
                "recordings": ["example_single_tool_call"],
                **model,
                "deployment": {**zero, "autoscaling_config": FAST_AUTOSCALING},
            },
            "agent": {"deployment": zero},
        }
    )
    name = unique("synthetic")
    return serve.run(build_app(args), name=name, route_prefix=None), name


def _replicas(app: str) -> dict[str, int]:
    from ray import serve

    deployments = serve.status().applications[app].deployments
    return {name: d.replica_states.get("RUNNING", 0) for name, d in deployments.items()}


@pytest.mark.serve
@pytest.mark.timeout(240)
async def test_synthetic_model_adds_its_latency_and_payload(serve_instance: None) -> None:
    from ray import serve

    handle, app = _deploy(
        {}, {"kind": "synthetic", "latency": {"mean_s": 0.25}, "output_tokens": 50, "prompt_tokens": 20}
    )
    started = time.perf_counter()
    rollout = await handle.run.remote({**example_rows("example_single_tool_call")[0]})
    elapsed = time.perf_counter() - started
    assert rollout["reward"] == 1.0
    assert elapsed >= 0.5, "two model turns of 0.25 s each"
    last = rollout["response"]["output"][-1]
    assert len(last["generation_token_ids"]) == len(last["generation_log_probs"]) == 50
    assert len(last["prompt_token_ids"]) == 20
    serve.delete(app)


@pytest.mark.serve
@pytest.mark.timeout(240)
async def test_a_slow_verifier_tier_scales_up_alone_and_back_down(serve_instance: None) -> None:
    """Verification is slow and each replica verifies 2 at once: the Environment tier grows, the Model does not."""
    from ray import serve

    handle, app = _deploy({"verify_latency": {"mean_s": 0.3}, "max_concurrent_verifications": 2}, {"kind": "replay"})
    rows = example_rows("example_single_tool_call")
    most = {"Environment": 1, "Model": 1}
    loaded = True

    async def client(i: int) -> None:
        while loaded:
            rollout = await handle.run.remote(rows[i % len(rows)])
            assert rollout["reward"] == 1.0

    clients = [asyncio.ensure_future(client(i)) for i in range(24)]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and most["Environment"] < 3:
        await asyncio.sleep(0.5)
        for tier, n in _replicas(app).items():
            most[tier] = max(most.get(tier, 0), n)
    loaded = False
    await asyncio.gather(*clients)
    assert most["Environment"] == 3, most
    assert most["Model"] == 1, f"the instant model tier must stay put: {most}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and _replicas(app)["Environment"] > 1:
        await asyncio.sleep(0.5)
    assert _replicas(app)["Environment"] == 1, "replicas return to the minimum after the load"
    serve.delete(app)
