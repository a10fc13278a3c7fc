"""The gateway and harness agents on real Serve deployments, with an instant model behind the Model tier.

The Model tier is `kind: openai` on the instant OpenAI-compatible server (`gym_serve.testing.instant_openai_server`,
its own process): every API here is the gateway's, spoken by the official `openai` and `anthropic` clients
and by raw HTTP. Token capture on a real engine is `tests/test_harness_agents.py`.

- the three APIs, each with and without `stream: true`, and `/v1/models`, through the official clients;
- the bad-input and security list: 404 (a session that ended or never was, in each API's error shape), 401
  (another session's key), 413 (over the size limit), 400 naming the field (`n > 1`, tools the tier cannot
  run, another model's name, non-text content), 429 with `Retry-After` (a session flooding its gateway), a
  confined program that reaches nothing but its own session, the session key in no rollout, log or served
  config;
- the same program in a sandbox of the Sandbox tier (`isolation: sandbox`): it acts in its overlay workspace,
  reaches only its session, and the reward is read from the file it left there; the empty base folder its
  Agent replica made goes when the application does;
- harness failures (raises, exits non-zero, never calls the model, outlives its deadline) are masked failure
  rows of their own kinds through a file collection and `POST /v1/rollouts`, and nothing a harness started
  outlives its rollout.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import ray
from ray import serve

from gym_serve.collect.driver import RolloutDriver
from gym_serve.collect.job import CollectJob, failures_path
from gym_serve.deployments.app import build_app
from gym_serve.deployments.ingress.api import build_ingress
from gym_serve.rollout.gateway_session import SessionAddress, SessionSpec
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs
from gym_serve.testing.fixtures import example_rows
from gym_serve.testing.instant_openai_server import start_instant_server
from tests.conftest import REPO

pytestmark = [pytest.mark.serve, pytest.mark.timeout(300)]

WEATHER = "example_single_tool_call"
FILE_TASK = "examples.file_task_env:FileTaskEnv"
KEY_PATTERN = re.compile(r"gs-[A-Za-z0-9_-]{43}")
PROGRAM = [sys.executable, "-I", str(REPO / "tests" / "harness_program.py")]
SMALL = {"max_body_bytes": 65536, "max_calls_per_s": 5.0, "burst": 5, "max_concurrent_calls": 4}


def harness(agent: dict[str, Any], environment: str = WEATHER) -> AppArgs:
    model = {"kind": "app", "app": "instant"}
    return AppArgs.model_validate(
        {"environment": {"name": environment}, "agent": {"kind": "harness", **agent}, "model": model}
    )


APPS = {
    "weather_chat": harness({"callable": "tests.harnesses:chat_weather", "gateway": SMALL}),
    "raises": harness({"callable": "tests.harnesses:raising"}),
    "idle": harness({"callable": "tests.harnesses:idle"}),
    "sleepy": harness({"callable": "tests.harnesses:sleepy", "timeout_s": 2}),
    "exits": harness({"command": ["sh", "-c", "echo it went wrong >&2; exit 3"]}),
    "hangs": harness({"command": ["sh", "-c", "setsid sleep 617 & sleep 60"], "timeout_s": 3}),
    "unbound": harness({"command": ["/opt/nowhere/harness"], "isolation": "sandbox"}),
    "hangs_sandboxed": harness(
        {"command": ["sh", "-c", "setsid sleep 620 & sleep 60"], "timeout_s": 3, "isolation": "sandbox"}
    ),
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base_url, instant = start_instant_server()
    os.environ.pop("GYM_SERVE_TOKEN", None)
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    model = {"kind": "openai", "base_url": base_url, "model": "instant", "api": "chat", "api_key": "sk-instant"}
    serve.run(build_app(AppArgs.model_validate({"model": model})), name="instant", route_prefix=None)
    gcs = ray.get_runtime_context().gcs_address
    probing = [*PROGRAM, "--daemon", "618", "--print-env", "--write-key", "leak.txt", "--probe"]
    sandboxed = {
        "command": ["python3", "/opt/harness/program.py", "--daemon", "619", "--print-env", "--write-key", "leak.txt",
                    "--write", "answer.txt", "42", "--probe", f"127.0.0.1:{port}", gcs],
        "task_via": "stdin",
        "isolation": "sandbox",
        "sandbox": {"binds": {"/opt/harness/program.py": str(REPO / "tests" / "harness_program.py")}},
    }  # fmt: skip
    apps = {
        **APPS,
        "program": harness({"command": [*probing, f"127.0.0.1:{port}", gcs], "task_via": "stdin"}, FILE_TASK),
        "sandboxed": harness(sandboxed, FILE_TASK),
    }
    for name, args in apps.items():
        serve.run(build_app(args), name=name, route_prefix=None)
    serve.run(build_ingress({"agents": list(apps), "default_agent": "weather_chat"}), name="ingress", route_prefix="/")
    yield {"url": f"http://127.0.0.1:{port}", "gcs": gcs}
    serve.shutdown()
    ray.shutdown()
    instant.terminate()
    instant.wait(timeout=10)


async def open_session(app: str = "weather_chat", model: str = "policy") -> tuple[Any, SessionAddress]:
    gateway = serve.get_deployment_handle("Gateway", app_name=app)
    return gateway, await gateway.open_session.remote(SessionSpec(model=model))


def weather_question() -> str:
    return "What's the weather like in Paris today?"


# ---- the APIs, through the official clients ---------------------------------------------------------------


async def test_the_official_openai_and_anthropic_clients_use_a_session_streaming_or_not(
    cluster: dict[str, Any],
) -> None:
    import anthropic
    import openai

    gateway, address = await open_session()
    chat = openai.AsyncOpenAI(base_url=f"{address.prefix()}/v1", api_key=address.key, max_retries=0)
    messages = [{"role": "user", "content": weather_question()}]
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    whole = await chat.chat.completions.create(model="policy", messages=messages, tools=[tool])
    assert whole.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert not hasattr(whole.choices[0].message, "prompt_token_ids"), "token ids stay with the gateway"
    stream = await chat.chat.completions.create(
        model="policy", messages=messages, tools=[tool], stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert calls[0].function.name == "get_weather" and chunks[-1].usage.total_tokens > 0

    flat = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    response = await chat.responses.create(model="policy", input=weather_question(), tools=[flat])
    assert response.output[0].type == "function_call" and response.output[0].name == "get_weather"
    events = [event async for event in await chat.responses.create(
        model="policy", input=weather_question(), tools=[flat], stream=True)]  # fmt: skip
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert events[-1].response.output[0].name == "get_weather"
    models = await chat.models.list()
    assert [m.id for m in models.data] == ["policy"]

    claude = anthropic.AsyncAnthropic(base_url=address.prefix(), api_key=address.key, max_retries=0)
    tools = [{"name": "get_weather", "description": "The weather.", "input_schema": {"type": "object"}}]
    asked = [{"role": "user", "content": weather_question()}]
    message = await claude.messages.create(model="policy", max_tokens=64, messages=asked, tools=tools)
    assert message.stop_reason == "tool_use" and message.content[0].input == {"city": "Paris"}
    async with claude.messages.stream(model="policy", max_tokens=64, messages=asked, tools=tools) as streamed:
        final = await streamed.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[0].name == "get_weather"
    report = '{"weather_description": "The weather in Paris is cold."}'
    result = {"type": "tool_result", "tool_use_id": final.content[0].id, "content": report}
    said = {"role": "assistant", "content": [block.model_dump() for block in final.content]}
    answered = [*asked, said, {"role": "user", "content": [result]}]
    reply = await claude.messages.create(model="policy", max_tokens=64, messages=answered, tools=tools)
    assert reply.stop_reason == "end_turn" and "cold" in reply.content[0].text
    assert [m.id for m in (await claude.models.list()).data] == ["policy"]
    await chat.close()
    await claude.close()

    record = await gateway.close_session.remote(address.session_id)
    seen = [(c["api"], c["stream"]) for c in record.summary["calls"]]
    assert seen == [("chat", False), ("chat", True), ("responses", False), ("responses", True),
                    ("anthropic", False), ("anthropic", True), ("anthropic", False)]  # fmt: skip
    assert record.summary["calls"][-1]["segment"] == record.summary["calls"][-2]["segment"], "the tool result extends"


# ---- bad input and security ---------------------------------------------------------------------------------


async def post(url: str, body: Any, *, key: str | None = None, anthropic: bool = False) -> tuple[int, Any, Any]:
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"} if anthropic else {}
    if key and not anthropic:
        headers = {"Authorization": f"Bearer {key}"}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with aiohttp.ClientSession() as session, session.post(url, data=data, headers=headers) as response:
        return response.status, await response.json(content_type=None), response.headers


async def paced(url: str, body: Any, *, key: str, anthropic: bool = False) -> tuple[int, Any, Any]:
    """`post`, a fifth of a second after the last: within the test session's 5 calls/s, so no call is throttled."""
    await asyncio.sleep(0.25)
    return await post(url, body, key=key, anthropic=anthropic)


async def test_each_bad_request_gets_its_status_in_the_apis_own_error_shape(cluster: dict[str, Any]) -> None:
    gateway, address = await open_session()
    _, other = await open_session()
    v1 = f"{address.prefix()}/v1"
    chat = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
    anthropic_body = {"model": "policy", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}

    nowhere = address.prefix().replace(address.session_id, "0" * 32)
    status, body, _ = await post(f"{nowhere}/v1/chat/completions", chat, key=address.key)
    assert status == 404 and body["error"]["type"] == "not_found_error" and "never existed" in body["error"]["message"]
    status, body, _ = await post(f"{nowhere}/v1/messages", anthropic_body, key=address.key, anthropic=True)
    assert status == 404 and body["type"] == "error" and body["error"]["type"] == "not_found_error"

    status, body, _ = await post(f"{v1}/chat/completions", chat, key=other.key)
    assert status == 401 and body["error"]["message"] == "missing or wrong key for this session"
    status, body, _ = await post(f"{v1}/messages", anthropic_body, key=other.key, anthropic=True)
    assert status == 401 and body["error"]["type"] == "authentication_error"

    status, body, _ = await paced(f"{v1}/chat/completions", b"x" * 70_000, key=address.key)
    assert status == 413 and "over this gateway's limit of 65536" in body["error"]["message"]

    refused = [
        ({**chat, "n": 2}, "n"),
        ({**chat, "tools": [{"type": "web_search"}]}, "tools.0"),
        ({**chat, "model": "gpt-4o"}, "model"),
        ({**chat, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "messages.0.content.0.type"),
        ({**chat, "response_format": {"type": "grammar"}}, "response_format.type"),
    ]  # fmt: skip
    for request, field in refused:
        status, body, _ = await paced(f"{v1}/chat/completions", request, key=address.key)
        assert status == 400 and body["error"]["param"] == field, (field, body)
    status, body, _ = await paced(
        f"{v1}/responses", {"model": "policy", "input": "hi", "tools": [{"type": "file_search"}]}, key=address.key
    )
    assert status == 400 and body["error"]["param"] == "tools.0.type"
    status, body, _ = await paced(
        f"{v1}/responses", {"model": "policy", "input": "hi", "previous_response_id": "resp_1"}, key=address.key
    )
    assert status == 400 and body["error"]["param"] == "previous_response_id"
    server_tool = {**anthropic_body, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    status, body, _ = await paced(f"{v1}/messages", server_tool, key=address.key, anthropic=True)
    assert (
        status == 400
        and body["error"]["type"] == "invalid_request_error"
        and "tools.0.type" in body["error"]["message"]
    )

    await gateway.close_session.remote(address.session_id)
    status, body, _ = await post(f"{v1}/chat/completions", chat, key=address.key)
    assert status == 404 and "ended" in body["error"]["message"], "a closed session answers no more"
    await gateway.close_session.remote(other.session_id)


async def test_a_session_that_floods_its_gateway_is_bounded_with_429_and_retry_after(cluster: dict[str, Any]) -> None:
    gateway, address = await open_session()
    chat = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
    answers = await asyncio.gather(*(post(f"{address.prefix()}/v1/chat/completions", chat, key=address.key)
                                     for _ in range(40)))  # fmt: skip
    statuses = [status for status, _, _ in answers]
    throttled = [(body, headers) for status, body, headers in answers if status == 429]
    assert statuses.count(200) <= 5 + 1 and len(throttled) >= 30, statuses
    assert all(int(headers["Retry-After"]) >= 1 and body["error"]["type"] == "rate_limit_exceeded"
               for body, headers in throttled)  # fmt: skip
    await asyncio.sleep(1.2)
    status, _, _ = await post(f"{address.prefix()}/v1/chat/completions", chat, key=address.key)
    assert status == 200, "the budget refills"
    await gateway.close_session.remote(address.session_id)


async def test_a_confined_program_reaches_only_its_session_and_its_key_is_scrubbed(cluster: dict[str, Any]) -> None:
    row = {**json.loads((REPO / "examples" / "data" / "file_task.jsonl").read_text().splitlines()[0])}
    rollout = await serve.get_app_handle("program").run.remote({**row, "_ng_task_index": 0, "_ng_rollout_index": 0})
    harness = rollout["response"]["harness"]
    assert rollout["reward"] == 0.0 and harness["info"]["isolation"] == "namespaces"
    seen = json.loads(harness["stdout"].strip().splitlines()[-1])
    assert seen["call"] == 200 and seen["no_key"] == 401
    # the Serve proxy on loopback is not this namespace's loopback; Ray's GCS on the host's address has no route
    assert set(seen["probes"].values()) <= {"ECONNREFUSED", "ENETUNREACH"}, seen["probes"]
    assert set(seen["other_routes"].values()) == {404}, seen["other_routes"]
    text = json.dumps(rollout)
    assert not KEY_PATTERN.search(text), "the session key appears nowhere in the rollout"
    assert "OPENAI_API_KEY=[gateway session key]" in harness["stdout"]
    assert harness["files"]["leak.txt"] == "the key is [gateway session key]\n"
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:41111/sessions/" in harness["stdout"], "its own loopback, relayed"
    assert not _running("sleep 618"), "the daemon it left died with its namespace"
    logs = Path(ray._private.worker._global_node.get_session_dir_path()) / "logs"
    leaked = [p.name for p in logs.rglob("*") if p.is_file() and KEY_PATTERN.search(p.read_text(errors="ignore"))]
    assert not leaked, f"a session key in Ray's logs: {leaked}"
    served = str(serve.status())
    async with aiohttp.ClientSession() as session, session.get(f"{cluster['url']}/v1/environments") as response:
        served += await response.text()
    assert not KEY_PATTERN.search(served)


async def test_a_program_in_a_sandbox_of_the_tier_acts_in_its_workspace_and_reaches_only_its_session(
    cluster: dict[str, Any],
) -> None:
    """`isolation: sandbox`: the program runs in the Sandbox tier's sandbox (system Python, its file bound in)."""
    row = {**json.loads((REPO / "examples" / "data" / "file_task.jsonl").read_text().splitlines()[0])}
    rollout = await serve.get_app_handle("sandboxed").run.remote({**row, "_ng_task_index": 0, "_ng_rollout_index": 0})
    harness = rollout["response"]["harness"]
    assert harness["info"]["isolation"] == "sandbox" and harness["workspace"] == "/workspace"
    assert rollout["reward"] == 1.0 and harness["files"]["answer.txt"] == "42", "scored from the sandbox's file"
    seen = json.loads(harness["stdout"].strip().splitlines()[-1])
    assert seen["call"] == 200 and seen["no_key"] == 401 and seen["cwd"] == "/workspace"
    assert set(seen["probes"].values()) <= {"ECONNREFUSED", "ENETUNREACH"}, seen["probes"]
    assert set(seen["other_routes"].values()) == {404}, seen["other_routes"]
    assert (
        "HOME=/workspace" in harness["stdout"]
        and "OPENAI_BASE_URL=http://127.0.0.1:41111/sessions/" in harness["stdout"]
    )
    assert "RAY_" not in harness["stdout"], "nothing of the replica's environment reaches the sandbox"
    assert (
        not KEY_PATTERN.search(json.dumps(rollout))
        and "the key is [gateway session key]" in harness["files"]["leak.txt"]
    )
    assert not _running("sleep 619"), "the daemon it left was ended with its sandbox"
    sandboxes = serve.get_deployment_handle("Sandbox", app_name="sandboxed")
    assert (await sandboxes.stats.remote())["live"] == 0, "the rollout's sandbox was destroyed"
    bases = set(Path(tempfile.gettempdir()).glob("gym-serve-empty-base-*"))
    serve.delete("sandboxed")
    gone = bases - set(Path(tempfile.gettempdir()).glob("gym-serve-empty-base-*"))
    assert len(gone) == 1, "the empty base folder its Agent replica made went with the application"


# ---- failures, through the front doors ----------------------------------------------------------------------


FAILED = {
    "raises": ("harness_error", "raised RuntimeError: the harness broke"),
    "exits": ("harness_error", "exited with status 3. The end of its stderr: it went wrong"),
    "idle": ("harness_no_model_calls", "without calling the model"),
    "sleepy": ("harness_timeout", "did not finish within 2 s"),
    "hangs": ("harness_timeout", "was still running at its deadline of 3 s; it was killed"),
    "unbound": ("harness_error", "the harness program is not in its sandbox: cannot run `/opt/nowhere/harness`"),
    "hangs_sandboxed": ("harness_timeout", "was still running at its deadline of 3 s; it was killed"),
}


def failing_rows() -> list[dict[str, Any]]:
    row = example_rows(WEATHER)[0]
    return [{**row, "agent_ref": {"name": name}} for name in ["weather_chat", *FAILED]]


def check(results: list[dict[str, Any]]) -> None:
    by_agent = {r["agent_ref"]["name"]: r for r in results}
    assert by_agent["weather_chat"]["reward"] == 1.0 and "_ng_failure_class" not in by_agent["weather_chat"]
    for name, (kind, message) in FAILED.items():
        failure = by_agent[name]
        assert failure["_ng_failure_class"] == kind and message in failure["error"], (name, failure["error"])
        assert failure["mask_sample"] is True and "reward" not in failure and failure["attempts"] == 1
    assert not _running("sleep 617"), "nothing a timed-out program started outlives its rollout"
    assert not _running("sleep 620"), "nor in a sandbox"


async def test_harness_failures_are_masked_rows_of_their_kind_through_a_file_collection(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in failing_rows()))
    job = CollectJob(input_path=str(source), output_path=str(out), agents=["weather_chat", *FAILED])
    driver: Any = RolloutDriver
    await driver.remote().collect.remote(job)
    check([json.loads(line) for path in (out, failures_path(out)) for line in path.read_text().splitlines()])


async def test_harness_failures_are_masked_rows_of_their_kind_through_v1_rollouts(cluster: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{cluster['url']}/v1/rollouts", json={"rows": failing_rows()}) as response:
            assert response.status == 200, await response.text()
            check([json.loads(line) async for line in response.content if line.strip()])


def _running(command: str) -> bool:
    return subprocess.run(["pgrep", "-f", f"^{command}$"], capture_output=True).returncode == 0
