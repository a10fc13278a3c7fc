"""Red team: fork, memory and disk bombs, huge output, the network (host ports, an abstract socket, the Ray
raylet's socket, the internet), the host's environment, another sandbox's files, killing and tracing the
replica, sleeping forever and escaping through /proc, each in a sandbox of its own (`tests.sandbox.attacks`).

Each attack must be contained while the replica keeps serving (a heartbeat in another sandbox answers
throughout, the replica's pid lives): with the provider in this process (root), in a process of its own
running as `nobody` (the sandboxes share its uid: the case the kernel's uid checks do not cover), and in
a Serve replica of the Sandbox tier, through its handle.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from gym_serve.sandbox import LocalProvider
from tests.sandbox.attacks import SECRET_ENV, contained, run_attacks
from tests.sandbox.leftovers import left, mounts
from tests.verifiers.callers import NOBODY, venv_site

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_every_attack_is_contained_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sk-{uuid.uuid4().hex}"
    monkeypatch.setenv(SECRET_ENV, secret)
    before = mounts()
    async with LocalProvider(warm=1) as provider:
        results = await run_attacks(provider, os.getpid())
    assert contained(results, secret) == [], json.dumps(results, indent=1)[:6000]
    assert await asyncio.to_thread(left, (provider.tag,), before) == {}


NOBODY_RUNNER = r"""
import asyncio, json, os, sys
from gym_serve.sandbox import LocalProvider
from tests.sandbox.attacks import run_attacks

async def main():
    async with LocalProvider(warm=1) as provider:
        results = await run_attacks(provider, os.getpid())
        results["_provider"] = {"tag": provider.tag, "cgroups": provider.uses_cgroups, "uid": os.geteuid()}
    return results

print(json.dumps(asyncio.run(main())))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged uid needs root")
async def test_every_attack_is_contained_when_the_provider_runs_as_nobody(tmp: Path) -> None:
    secret = f"sk-{uuid.uuid4().hex}"
    python = shutil.which("python3", path="/usr/bin:/bin")
    assert python is not None
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "TMPDIR": str(tmp), "LANG": "C.UTF-8"}
    env |= {"PYTHONPATH": venv_site(tmp), SECRET_ENV: secret}
    command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python, "-c", NOBODY_RUNNER]
    before = mounts()
    done = await asyncio.to_thread(
        subprocess.run, command, env=env, cwd=tmp, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    provider = results.pop("_provider")
    assert provider["uid"] == NOBODY and provider["cgroups"] is False  # rlimits, not cgroups, bound it as nobody
    assert contained(results, secret) == [], json.dumps(results, indent=1)[:6000]
    assert await asyncio.to_thread(left, (provider["tag"],), before) == {}


@pytest.mark.serve
async def test_every_attack_is_contained_in_a_serve_replica(serve_instance: None) -> None:
    from ray import serve

    from gym_serve.calls.routing import session_router_config
    from gym_serve.calls.sandboxes import SandboxTierClient
    from gym_serve.deployments.sandbox import SandboxDeployment
    from gym_serve.serving.config import SandboxArgs

    secret = f"sk-{uuid.uuid4().hex}"
    options = {
        "ray_actor_options": {"num_cpus": 0, "runtime_env": {"env_vars": {SECRET_ENV: secret}}},
        "request_router_config": session_router_config(),
    }
    name = f"red-team-{uuid.uuid4().hex[:8]}"
    handle = serve.run(SandboxDeployment.options(**options).bind(SandboxArgs(warm=1)), name=name, route_prefix=None)
    stats = await handle.stats.remote()
    results = await run_attacks(SandboxTierClient(handle), stats["pid"])
    assert contained(results, secret) == [], json.dumps(results, indent=1)[:6000]
    after = await handle.stats.remote()
    assert after["pid"] == stats["pid"] and after["live"] == 0  # the same replica served it all, and holds nothing
    before = mounts()
    serve.delete(name)
    assert await asyncio.to_thread(left, (stats["tag"],), before) == {}
