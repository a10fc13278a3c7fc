"""The ingress fuzzed against its own OpenAPI schema (schemathesis), every route, with auth on and with it off.

Schemathesis reads `/openapi.json` from the running ingress (a real Serve HTTP proxy) and sends each route
bodies that fit the schema and bodies that do not (its positive and negative modes), a bounded number each.
Every answer must be what the schema declares: no 5xx the route does not declare, the status codes, content
types and bodies the schema gives, a refusal for a body the schema rules out, and, with auth on, a 401 for a
request that leaves the token out or gets it wrong (`ignored_auth`).

The rollouts run for real: the weather environment on a model behind HTTP (the instant OpenAI-compatible
server, which answers any conversation), so a fuzzed row that the ingress accepts runs to its reward.
`GYM_SERVE_PROPERTY_EXAMPLES` raises the examples per route (CI's budget: 25).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import ray
import schemathesis
from hypothesis import HealthCheck, settings
from ray import serve
from schemathesis import checks

from gym_serve.deployments.app import build_app
from gym_serve.deployments.ingress.api import build_ingress, openapi_schema
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs
from gym_serve.testing.instant_openai_server import start_instant_server
from tests.ray_start_cluster import free_port

pytestmark = [pytest.mark.serve, pytest.mark.timeout(900)]

TOKEN = "tok-fuzz-7d1c0e5a9b"
TOKEN_ENV = "GYM_SERVE_FUZZ_TOKEN"
EXAMPLES = int(os.environ.get("GYM_SERVE_PROPERTY_EXAMPLES", "25"))
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
    checks.negative_data_rejection,
]


@pytest.fixture(scope="module")
def ingresses() -> Iterator[dict[str, str]]:
    """Two ingresses on one proxy: `/open` (no token) and `/locked` (a token); each serves the weather agent and
    its Model tier."""
    base_url, server = start_instant_server()
    port = free_port()
    os.environ[TOKEN_ENV] = TOKEN  # the builder publishes it to the replicas; it is in no config
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        model = {"kind": "openai", "base_url": base_url, "model": "instant", "api_key_env": "NO_KEY_NEEDED"}
        app = AppArgs.model_validate({"environment": {"name": "example_single_tool_call"}, "model": model})
        serve.run(build_app(app), name="weather", route_prefix=None)
        common = {"agents": ["weather"], "default_agent": "weather", "model_app": "weather", "max_in_flight": 256}
        serve.run(build_ingress({**common, "token_env": "GYM_SERVE_FUZZ_NO_TOKEN"}), name="open", route_prefix="/open")
        serve.run(build_ingress({**common, "token_env": TOKEN_ENV}), name="locked", route_prefix="/locked")
        yield {"open": f"http://127.0.0.1:{port}/open", "locked": f"http://127.0.0.1:{port}/locked"}
    finally:
        serve.shutdown()
        ray.shutdown()
        del os.environ[TOKEN_ENV]
        server.kill()
        server.wait()


BUDGET = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))

# The schemas as the app builds them, read when the tests are collected (the ingresses start later); the test
# below holds each equal to what its running ingress serves at /openapi.json.
OPEN = schemathesis.openapi.from_dict(openapi_schema(auth=False))
LOCKED = schemathesis.openapi.from_dict(openapi_schema(auth=True))


async def test_the_schemas_fuzzed_are_the_ones_the_ingresses_serve(ingresses: dict[str, str]) -> None:
    async with aiohttp.ClientSession() as session:
        for name, auth in (("open", False), ("locked", True)):
            async with session.get(f"{ingresses[name]}/openapi.json") as response:
                served = await response.json()
            assert {k: v for k, v in served.items() if k != "servers"} == openapi_schema(auth=auth)
    assert "security" in json.dumps(openapi_schema(auth=True)) and "security" not in json.dumps(
        openapi_schema(auth=False)
    )


@OPEN.parametrize()
@BUDGET
def test_every_route_with_auth_off_answers_as_its_schema_says(case: Any, ingresses: dict[str, str]) -> None:
    case.call_and_validate(base_url=ingresses["open"], checks=CHECKS)


@LOCKED.parametrize()
@BUDGET
def test_every_route_with_auth_on_answers_as_its_schema_says(case: Any, ingresses: dict[str, str]) -> None:
    case.call_and_validate(
        base_url=ingresses["locked"],
        headers={"Authorization": f"Bearer {TOKEN}"},
        checks=[*CHECKS, checks.ignored_auth],
    )


# ---- what the fuzzing found, held as regressions ----------------------------------------------------------------


async def answer(url: str, body: Any, token: str | None = None) -> tuple[int, str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with aiohttp.ClientSession() as session, session.post(url, data=data, headers=headers) as response:
        return response.status, response.content_type, await response.json(content_type=None)


async def test_found_values_pydantic_would_coerce_are_refused_naming_the_field(ingresses: dict[str, str]) -> None:
    """`parallel_tool_calls: 0` ran (coerced to false) and came back as 0, against the schema's boolean; the
    Responses and Chat bodies were checked for `input`/`messages` only (`stream: {}` ran as not streaming)."""
    url = ingresses["open"]
    row = {"responses_create_params": {"input": "what is it like in sf?", "parallel_tool_calls": 0}}
    status, _, body = await answer(f"{url}/run", row)
    assert status == 422 and body["field"] == "responses_create_params.parallel_tool_calls", body
    status, _, body = await answer(f"{url}/v1/responses", {"input": "hi", "parallel_tool_calls": {}})
    assert status == 400 and body["error"]["param"] == "parallel_tool_calls", body
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    status, _, body = await answer(f"{url}/v1/chat/completions", {**chat, "stream": {}})
    assert status == 400 and body["error"]["param"] == "stream", body


async def test_found_a_chat_tool_or_call_without_its_function_is_a_400_not_a_500(ingresses: dict[str, str]) -> None:
    url = f"{ingresses['open']}/v1/chat/completions"
    status, _, body = await answer(url, {"messages": [{"role": "user", "content": "hi"}], "tools": [{}]})
    assert status == 400 and body["error"]["param"] == "tools.0.function", body
    called = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]}
    status, _, body = await answer(url, {"messages": [{"role": "user", "content": "hi"}, called]})
    assert status == 400 and body["error"]["param"] == "messages.1.tool_calls.0.function", body


async def test_found_an_integer_beyond_64_bits_is_refused_naming_it_not_a_502(ingresses: dict[str, str]) -> None:
    """orjson (the model client's and the writers') takes no integer beyond 64 bits: the call failed as 502."""
    url = ingresses["open"]
    status, _, body = await answer(f"{url}/v1/responses", b'{"input": "hi", "metadata": {"n": 18446744073709551616}}')
    assert status == 400 and body["error"]["param"] == "metadata.n" and "beyond 64 bits" in body["error"]["message"]
    status, _, body = await answer(
        f"{url}/run", b'{"responses_create_params": {"input": "hi"}, "seed": -9223372036854775809}'
    )
    assert status == 400 and body["field"] == "seed", body


async def test_found_errors_on_the_ndjson_route_are_json_as_its_schema_says(ingresses: dict[str, str]) -> None:
    status, content_type, body = await answer(f"{ingresses['open']}/v1/rollouts", b"")
    declared = openapi_schema(auth=False)["paths"]["/v1/rollouts"]["post"]["responses"][str(status)]["content"]
    assert status == 400 and content_type == "application/json" and list(declared) == ["application/json"], body


async def test_found_weights_for_a_tier_that_takes_none_are_a_404_naming_it(ingresses: dict[str, str]) -> None:
    """The weather app's Model tier is an OpenAI-compatible endpoint: no weights to load (it answered 503)."""
    status, _, body = await answer(f"{ingresses['locked']}/v1/weights", {"version": 1, "checkpoint": "/x"}, TOKEN)
    assert status == 404 and "takes no weights" in body["error"], body


async def test_found_an_ingress_without_a_token_asks_for_none_in_its_schema(ingresses: dict[str, str]) -> None:
    """Its schema asked every route for a bearer token it never checks: a client reading the schema could not
    tell an open ingress from a locked one (schemathesis sent requests without it, expecting 401)."""
    unsigned = [await answer(f"{ingresses[name]}/v1/responses", {"input": "hi"}) for name in ("open", "locked")]
    assert [status for status, _, _ in unsigned] == [200, 401]
