"""A harness agent's episode: open a gateway session, run the harness under its deadline, close, verify.

    seed → open session → harness(task, endpoint, workspace) → close session → verify(row, response, state)

The harness is an async Python callable run here (`callable:`), or a program run in the rollout's
workspace (`command:`; a confined subprocess, `gym_serve.rollout.confined`, or a sandbox of the Sandbox
tier, `isolation: sandbox`; both `gym_serve.rollout.workspace`) with the session's endpoint, key and
model name in `OPENAI_BASE_URL` / `OPENAI_API_KEY`, `ANTHROPIC_BASE_URL` / `ANTHROPIC_API_KEY` and
`GYM_SERVE_MODEL`, and its task as an argument, on stdin or in a file.

The rollout's `response.output` is what the gateway recorded (`gym_serve.rollout.capture`: every call, its
segments, token bundles where the tier gives them); `response.harness` is the `HarnessResult` (its reply,
exit status, output, workspace files) the environment's `verify` reads. The row also carries `segments`
(each segment's training sequence) and `gateway` (every call: its API, whether it streamed, its segment).

A harness that raises or exits non-zero, ends without calling the model, or outlives its deadline is a
failure (`harness_error`, `harness_no_model_calls`, `harness_timeout`: masked, never a reward); when the
Model tier failed the harness first, the tier's failure is the rollout's. The session's key appears
nowhere in the row: the harness's output and files are scrubbed of it.
"""

from __future__ import annotations

import asyncio
import importlib
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field

from gym_serve.environment.runner import EnvInfo
from gym_serve.errors import (
    EnvError,
    FailureKind,
    HarnessError,
    HarnessIdle,
    HarnessTimeout,
    ModelError,
    RolloutError,
    VerifyError,
)
from gym_serve.rollout.gateway_session import GatewayClient, SessionAddress, SessionRecord, SessionSpec
from gym_serve.rollout.harness_config import HarnessConfig
from gym_serve.rollout.loop import AgentConfig, EnvClient, call_tier, session_id
from gym_serve.rollout.workspace import Workspace, Workspaces
from gym_serve.wire.harness import HarnessResult
from gym_serve.wire.pieces import input_items, usage
from gym_serve.wire.tokens import policy_version_range
from gym_serve.wire.turns import content_text

__all__ = ["Endpoint", "HarnessFunction", "HarnessTask", "harness_task", "run_harness_episode"]

SCRUBBED = "[gateway session key]"


class HarnessTask(BaseModel):
    """A rollout's task as a harness gets it: the prompt to act on, and the whole row for anything else."""

    prompt: str = Field(description="The row's user text (its `input`'s user messages, joined).")
    instructions: str | None = Field(default=None, description="Its `instructions` and system messages, if any.")
    row: dict[str, Any] = Field(description="The input row as it runs (task fields, `_ng_task_index`, ...).")


class Endpoint(BaseModel):
    """A gateway session as a harness uses it: the base URLs of each API, the key, the model name."""

    openai_base_url: str
    """`.../sessions/<id>/v1`: the OpenAI clients' `base_url` (Chat Completions and Responses)."""
    anthropic_base_url: str
    """`.../sessions/<id>`: the Anthropic client's `base_url` (it adds `/v1/messages`)."""
    api_key: str = Field(repr=False)
    model: str

    def environment(self) -> dict[str, str]:
        """The variables a program gets, which the official clients read."""
        return {
            "OPENAI_BASE_URL": self.openai_base_url,
            "OPENAI_API_KEY": self.api_key,
            "ANTHROPIC_BASE_URL": self.anthropic_base_url,
            "ANTHROPIC_API_KEY": self.api_key,
            "GYM_SERVE_MODEL": self.model,
        }


HarnessFunction = Callable[[HarnessTask, Endpoint, Path], Awaitable[HarnessResult | str | None]]
"""`async def run(task, endpoint, workspace) -> HarnessResult` (a reply string, or None, is taken too)."""


def harness_task(row: dict[str, Any]) -> HarnessTask:
    """The task of a row: its user messages' text as the prompt, its instructions and system text apart.

    >>> harness_task({"responses_create_params": {"input": "Write 42 to answer.txt"}}).prompt
    'Write 42 to answer.txt'
    """
    params = row.get("responses_create_params") or {}
    items = input_items(params.get("input") or [])
    texts = {role: [content_text(i.get("content")) for i in items if i.get("role") == role] for role in ("user",)}
    system = [content_text(i.get("content")) for i in items if i.get("role") in ("system", "developer")]
    instructions = "\n\n".join([params["instructions"], *system] if params.get("instructions") else system)
    return HarnessTask(prompt="\n\n".join(texts["user"]), instructions=instructions or None, row=row)


async def run_harness_episode(
    row: dict[str, Any],
    *,
    gateway: GatewayClient,
    env: EnvClient,
    env_info: EnvInfo,
    config: HarnessConfig,
    workspaces: Workspaces,
    tiers: AgentConfig,
) -> dict[str, Any]:
    """Run one rollout of `row` with the harness and return the rollout row (see the module docstring)."""
    started = time.perf_counter()
    state = await call_tier("environment `seed`", env.seed(row), EnvError, tiers) if env_info.has_seed else None
    params = row["responses_create_params"]
    spec = SessionSpec(
        model=config.model_name,
        sampling=config.sampling,
        rollout_sampling={k: params[k] for k in ("temperature", "top_p") if params.get(k) is not None},
        affinity=session_id(row),
    )
    address = await call_tier("gateway `open`", gateway.open(spec), ModelError, tiers)
    try:
        workspace = await workspaces.open(address)
    except BaseException:
        await _close(gateway, address, tiers)
        raise
    try:
        ran = time.perf_counter()
        result, failure = None, None
        try:
            result = await _run(config, harness_task(row), address, workspace)
        except HarnessError as e:
            failure = e
        finally:
            record = await _close(gateway, address, tiers)
        harness_s = time.perf_counter() - ran
        _raise_failure(failure, record)
        assert result is not None
        result = result.model_copy(
            update={
                "reply": result.reply or record.reply,
                "workspace": str(workspace.path),
                "files": result.files
                or await workspace.snapshot(config.snapshot_max_files, config.snapshot_max_bytes),
                "info": {**result.info, "isolation": "in_process" if config.callable else workspace.isolation},
            }
        )
        response = _response(config, record, result)
        t0 = time.perf_counter()
        verdict = await call_tier("environment `verify`", env.verify(row, response, state), VerifyError, tiers)
        verify_s = time.perf_counter() - t0
    finally:
        await workspace.close()
    output = record.output
    versions = policy_version_range(output)
    truncated = response["status"] == "incomplete"
    latencies = [call.get("latency_s", 0.0) for call in record.summary.get("calls", [])]
    rollout = {
        **row,
        "response": response,
        "mask_sample": False,
        **verdict,
        "segments": record.sequences,
        "gateway": record.summary,
        **({"policy_version_min": versions[0], "policy_version_max": versions[1]} if versions else {}),
        "terminated": not truncated,
        "truncated": truncated,
        "_gs_timings": {
            "model_calls": record.calls,
            "model_s": round(sum(latencies), 4),
            "harness_s": round(harness_s, 4),
            "verify_s": round(verify_s, 4),
            "total_s": round(time.perf_counter() - started, 4),
            **({"verify_deadline_s": env_info.verify_timeout_s} if env_info.verify_timeout_s is not None else {}),
        },
    }
    return scrub(rollout, address.key)


async def _close(gateway: GatewayClient, address: SessionAddress, tiers: AgentConfig) -> SessionRecord:
    """Close the session, even when the rollout is being cancelled (else it waits out the gateway's idle timer)."""
    closing = asyncio.ensure_future(call_tier("gateway `close`", gateway.close(address), ModelError, tiers))
    try:
        return await asyncio.shield(closing)
    except asyncio.CancelledError:
        closing.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise


def _raise_failure(failure: HarnessError | None, record: SessionRecord) -> None:
    """The rollout's failure: the Model tier's, if it failed the harness first; else the harness's own."""
    if record.errors and (failure is not None or record.calls == 0):
        first = record.errors[0]
        raise RolloutError(
            f"the model tier failed call {first['call']} of the harness ({first['kind']}: {first['message']})"
            + (f"; then {failure}" if failure is not None else ""),
            kind=FailureKind(first["kind"]),
        )
    if failure is not None:
        raise failure
    if record.calls == 0:
        raise HarnessIdle("the harness ended without calling the model: there is nothing of the policy to score")


async def _run(
    config: HarnessConfig, task: HarnessTask, address: SessionAddress, workspace: Workspace
) -> HarnessResult:
    if config.callable is not None:
        return await _run_callable(config, task, address, workspace)
    return await _run_program(config, task, address, workspace)


async def _run_callable(
    config: HarnessConfig, task: HarnessTask, address: SessionAddress, workspace: Workspace
) -> HarnessResult:
    assert config.callable is not None
    function = load_callable(config.callable)
    prefix = address.prefix()
    endpoint = Endpoint(
        openai_base_url=f"{prefix}/v1", anthropic_base_url=prefix, api_key=address.key, model=config.model_name
    )
    try:
        returned = await asyncio.wait_for(function(task, endpoint, workspace.path), config.timeout_s)
    except TimeoutError:
        raise HarnessTimeout(f"the harness `{config.callable}` did not finish within {config.timeout_s:g} s") from None
    except Exception as e:
        raise HarnessError(f"the harness `{config.callable}` raised {type(e).__name__}: {e}") from e
    if isinstance(returned, HarnessResult):
        return returned
    return HarnessResult(reply=returned or "")


def load_callable(path: str) -> HarnessFunction:
    """`module:function`, imported (a missing one is named)."""
    module, _, name = path.partition(":")
    try:
        function: HarnessFunction = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise HarnessError(f"cannot load the harness `{path}`: {type(e).__name__}: {e}") from e
    return function


async def _run_program(
    config: HarnessConfig, task: HarnessTask, address: SessionAddress, workspace: Workspace
) -> HarnessResult:
    assert config.command is not None
    prefix = address.prefix(workspace.gateway_url)
    endpoint = Endpoint(
        openai_base_url=f"{prefix}/v1", anthropic_base_url=prefix, api_key=address.key, model=config.model_name
    )
    task_file = workspace.path / config.task_file
    places = {
        "{task}": task.prompt,
        "{task_file}": str(task_file),
        "{workspace}": str(workspace.path),
        "{model}": config.model_name,
        "{openai_base_url}": endpoint.openai_base_url,
        "{anthropic_base_url}": endpoint.anthropic_base_url,
    }
    delivery = config.delivery
    if delivery == "file":
        await workspace.write_text(config.task_file, task.prompt)
    argv = [_filled(arg, places) for arg in config.command]
    env = {
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        **endpoint.environment(),
        **{name: _filled(value, places) for name, value in config.env.items()},
    }
    stdin = task.prompt.encode() if delivery == "stdin" else None
    ended = await workspace.exec(
        argv, env, stdin=stdin, timeout_s=config.timeout_s, max_output_bytes=config.max_output_bytes
    )
    if ended.timed_out:
        raise HarnessTimeout(
            f"`{config.command[0]}` was still running at its deadline of {config.timeout_s:g} s; it was killed "
            f"with everything it started. The end of its stderr: {_tail(ended.stderr)}"
        )
    result = HarnessResult(
        exit_status=ended.exit_status,
        stdout=ended.stdout,
        stderr=ended.stderr,
        output_truncated=ended.truncated,
    )
    if result.failed:
        raise HarnessError(
            f"`{config.command[0]}` exited with status {ended.exit_status}. The end of its stderr: "
            f"{_tail(ended.stderr) or '(none)'}; of its stdout: {_tail(ended.stdout) or '(none)'}"
        )
    return result


def _filled(text: str, places: dict[str, str]) -> str:
    for placeholder, value in places.items():
        text = text.replace(placeholder, value)
    return text


def _tail(text: str, limit: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def _response(config: HarnessConfig, record: SessionRecord, result: HarnessResult) -> dict[str, Any]:
    """The rollout's Responses object: the recorded output, the calls' usage summed, the harness's result."""
    calls = record.summary.get("calls", [])
    prompt = sum(int(c.get("prompt_tokens", 0)) for c in calls)
    generated = sum(int(c.get("generated_tokens", 0)) for c in calls)
    cached = sum(int(c.get("cached_tokens", 0)) for c in calls)
    last = calls[-1] if calls else {}
    status = "incomplete" if last.get("status") == "incomplete" else "completed"
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": time.time(),
        "model": config.model_name,
        "status": status,
        "output": record.output,
        "usage": usage(prompt, generated, cached_tokens=cached),
        "harness": result.model_dump(),
    }


def scrub(value: Any, secret: str) -> Any:
    """`value` with every occurrence of `secret` replaced (a harness may have printed its environment)."""
    if secret not in orjson.dumps(value).decode():
        return value
    if isinstance(value, str):
        return value.replace(secret, SCRUBBED)
    if isinstance(value, dict):
        return {k: scrub(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, secret) for v in value]
    return value
