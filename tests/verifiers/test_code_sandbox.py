"""The code verifier's sandbox against hostile solutions, in both isolation modes: each is contained and scores 0.

Every hostile solution also defines a correct `add`, so a reward of 0 shows the
sandbox (not a wrong answer) stopped it. The last test runs the same attacks
through a real Serve replica of the `code_generation` environment and checks
that the replica keeps answering. Attacks on the reward itself (forged passes)
are in `test_code_red_team.py`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from gym_serve.verifiers.code import ISOLATION_ENV, SandboxLimits, isolation, run_python, verify_asserts, verify_stdio
from tests.verifiers.callers import processes_with

LIMITS = SandboxLimits(cpu_s=2, wall_s=4.0, memory_mb=256, output_bytes=64_000, max_processes=16)
ADD = "\ndef add(a, b):\n    return a + b\n"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]
MODES = ["namespaces", "fallback"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


async def score(code: str, mode: str) -> tuple[float, float]:
    result = await verify_asserts(code, TESTS, limits=LIMITS, mode=mode)
    return result.reward, time.perf_counter()


async def test_correct_solutions_pass_and_wrong_ones_fail(mode: str) -> None:
    assert (await verify_asserts(ADD, TESTS, limits=LIMITS, mode=mode)).reward == 1.0
    half = await verify_asserts("def add(a, b):\n    return 3\n", TESTS, limits=LIMITS, mode=mode)
    assert (half.reward, half.fraction) == (0.0, 0.5)
    cases = [{"input": "2 3\n", "output": "5\n"}, {"input": "4 4", "output": "8"}]
    solution = "a, b = map(int, input().split())\nprint(a + b)\n"
    assert (await verify_stdio(solution, cases, limits=LIMITS, mode=mode)).reward == 1.0
    wrong = await verify_stdio("print(5)", cases, limits=LIMITS, mode=mode)
    assert (wrong.reward, wrong.fraction) == (0.0, 0.5)


async def test_an_early_exit_passes_no_test(mode: str) -> None:
    for exit_call in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit(0)"):
        result = await verify_asserts(ADD + exit_call, TESTS, limits=LIMITS, mode=mode)
        assert (result.reward, result.passed) == (0.0, 0), exit_call


async def test_infinite_loop_is_killed_by_its_cpu_limit(mode: str) -> None:
    started = time.perf_counter()
    reward, ended = await score(ADD + "while True:\n    pass\n", mode)
    assert reward == 0.0
    assert ended - started < LIMITS.wall_s + 2


async def test_sleeping_forever_is_killed_at_the_wall_timeout(mode: str) -> None:
    run = await run_python("import time\ntime.sleep(60)", limits=LIMITS, mode=mode)
    assert run.timed_out and not run.ok
    assert run.wall_s < LIMITS.wall_s + 2


async def test_fork_bomb_hits_the_process_limit_and_leaves_nothing_behind(mode: str) -> None:
    tag = f"bomb{uuid.uuid4().hex[:8]}"
    bomb = (
        f"import os, time\n# {tag}\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
        "        time.sleep(0.01)\n"
    )
    before = len(os.listdir("/proc"))
    reward, _ = await score(ADD + bomb, mode)
    assert reward == 0.0
    await asyncio.sleep(0.2)
    assert len(os.listdir("/proc")) < before + 20  # no stray processes on the host


async def test_memory_bomb_fails_within_its_address_space(mode: str) -> None:
    run = await run_python("x = bytearray(8 * 1024**3)\nprint('allocated')", limits=LIMITS, mode=mode)
    assert "MemoryError" in run.stderr and "allocated" not in run.stdout
    assert (await score(ADD + "blocks = [bytearray(64 * 1024**2) for _ in range(100)]", mode))[0] == 0.0


async def test_huge_output_is_cut_at_the_cap(mode: str) -> None:
    run = await run_python("while True:\n    print('x' * 10000)", limits=LIMITS, mode=mode)
    assert run.output_exceeded and len(run.stdout) <= LIMITS.output_bytes
    assert (await score(ADD + "print('y' * 10**6)", mode))[0] == 0.0


async def test_writes_outside_the_work_dir_have_no_effect(tmp_path: Path, mode: str) -> None:
    target = tmp_path / f"escape-{uuid.uuid4().hex}"
    os.chmod(tmp_path, 0o777)
    attack = f"open({str(target)!r}, 'w').write('pwned')\n"
    assert (await score(ADD + attack, mode))[0] == 0.0
    assert not target.exists()
    # The work dir is writable, and it is gone afterwards (namespaces: it was a tmpfs of the sandbox's own).
    name = f"scratch-{uuid.uuid4().hex}.txt"
    run = await run_python(f"import os\nopen({name!r}, 'w').write('ok')\nprint(os.getcwd())", limits=LIMITS, mode=mode)
    assert run.ok and not (Path(run.stdout.strip()) / name).exists()


async def test_secrets_in_the_parent_environment_are_invisible(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    monkeypatch.setenv("SECRET_TOKEN", token)
    monkeypatch.setenv("OPENAI_API_KEY", token)
    run = await run_python(
        "import os\nprint(sorted(os.environ))\nprint(os.environ.get('SECRET_TOKEN'))\n"
        "print(open('/proc/1/environ', 'rb').read())\n",
        limits=LIMITS,
    )
    assert token not in run.stdout + run.stderr
    assert "SECRET_TOKEN" not in run.stdout
    needs_secret = "import os\nif 'SECRET_TOKEN' not in os.environ:\n    raise SystemExit(1)\n"
    assert (await score(needs_secret + ADD, mode))[0] == 0.0


async def test_network_sockets_reach_nothing(mode: str) -> None:
    server = socket.create_server(("127.0.0.1", 0))  # a listener on the host's loopback
    port = server.getsockname()[1]
    attack = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'hi')\n"
    assert (await score(ADD + attack, mode))[0] == 0.0
    server.setblocking(False)
    with pytest.raises(BlockingIOError):  # nothing ever connected: the backlog is empty
        server.accept()
    server.close()
    assert (await score(ADD + "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2)", mode))[
        0
    ] == 0.0


async def test_spawned_processes_die_with_the_sandbox_and_cannot_escape_it(mode: str) -> None:
    tag = f"{uuid.uuid4().int % 10**6}.{uuid.uuid4().int % 997}"
    spawn = (
        "import subprocess\n"
        f"subprocess.Popen(['sleep', '{tag}'], start_new_session=True)\n"
        "subprocess.run(['sh', '-c', 'echo pwned > /tmp/gs-sandbox-escape'], check=True)\n"
    )
    assert (await score(ADD + spawn, mode))[0] == 0.0
    await asyncio.sleep(0.3)
    assert processes_with(tag) == []
    assert not Path("/tmp/gs-sandbox-escape").exists()


async def test_verification_does_not_block_the_event_loop() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    task = asyncio.create_task(ticker())
    await verify_asserts(
        ADD + "import time\nt = time.time()\nwhile time.time() - t < 1.5:\n    pass\n", TESTS, limits=LIMITS
    )
    task.cancel()
    assert ticks >= 20  # ~30 expected in 1.5 s; a blocked loop would give 0


def test_isolation_mode_is_probed_and_can_be_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isolation() in {"namespaces", "fallback"}
    monkeypatch.setenv(ISOLATION_ENV, "fallback")
    assert isolation() == "fallback"


async def test_both_modes_raise_every_kernel_wall_this_machine_has(mode: str) -> None:
    result = await verify_asserts(ADD, TESTS, limits=LIMITS, mode=mode)
    assert {"no_new_privs", "seccomp"} <= set(result.layers)
    assert any(layer.startswith("landlock_abi") for layer in result.layers)
    listing = "import os\nprint(os.getcwd())\nprint(os.listdir('.'))\nprint(os.listdir('..'))"
    run = await run_python(listing, limits=LIMITS, mode=mode)
    # its own folder in the sandbox's work dir (a tmpfs of its own over /tmp, or a private folder), holding its
    # code, and no other place to read: not the harness's folder above it (where a pytest run's tests are)
    work = "/tmp" if mode == "namespaces" else "/tmp/gs-sandbox-"
    assert run.stdout.startswith(work) and run.stdout.splitlines()[0].endswith("/run"), run
    assert "solution.py" in run.stdout.splitlines()[1] and "PermissionError" in run.stderr, run


# ---- a real Serve replica of the code_generation environment under attack ----

HOSTILE = {
    "infinite_loop": "while True:\n    pass\n",
    "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "memory_bomb": "blocks = [bytearray(64 * 1024**2) for _ in range(100)]\n",
    "huge_output": "while True:\n    print('x' * 10000)\n",
    "write_outside": "open('/var/tmp/gs-serve-escape', 'w').write('pwned')\n",
    "read_secret": "import os\nif 'SECRET_TOKEN' not in os.environ:\n    raise SystemExit(1)\n",
    "network": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\n",
    "subprocess": "import subprocess\nsubprocess.Popen(['sleep', '4242.5'], start_new_session=True)\n"
    "subprocess.run(['sh', '-c', 'echo pwned > /var/tmp/gs-serve-escape'], check=True)\n",
}


def code_row(code: str, i: int) -> dict:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": f"```python\n{code}{ADD}```"}]},
        "tests": TESTS,
        "_ng_task_index": i,
        "_ng_rollout_index": 0,
    }


@pytest.mark.serve
async def test_a_serve_replica_contains_hostile_code_and_keeps_serving(serve_instance: None) -> None:
    from ray import serve

    from gym_serve.calls.batching import BatchedResponses
    from gym_serve.deployments.app import build_app
    from gym_serve.serving.config import AppArgs

    @serve.deployment(name="Model", ray_actor_options={"num_cpus": 0})
    class Echo(BatchedResponses):
        """A model that answers with the user's message: the rows carry the solutions."""

        async def responses(self, request: dict, session: str | None = None) -> dict:
            text = request["input"][0]["content"]
            return {
                "id": "r",
                "object": "response",
                "status": "completed",
                "output": [
                    {
                        "type": "message",
                        "role": "assistant",
                        "id": "m",
                        "content": [{"type": "output_text", "text": text, "annotations": []}],
                    }
                ],
            }

    name = f"code-{uuid.uuid4().hex[:8]}"
    token = f"tok-{uuid.uuid4().hex}"
    serve.run(Echo.bind(), name=name + "-model", route_prefix=None)
    args = AppArgs.model_validate(
        {
            "environment": {
                "name": "code_generation",
                "config": {"cpu_s": 2, "wall_s": 4, "memory_mb": 256},
                "deployment": {
                    "num_replicas": 1,
                    "ray_actor_options": {"num_cpus": 0, "runtime_env": {"env_vars": {"SECRET_TOKEN": token}}},
                },
            },
            "model": {"kind": "app", "app": name + "-model"},
        }
    )
    handle = serve.run(build_app(args), name=name, route_prefix=None)
    env = serve.get_deployment_handle("Environment", app_name=name)
    assert (await handle.run.remote(code_row("", 0)))["reward"] == 1.0

    started = time.perf_counter()
    attacks = {kind: handle.run.remote(code_row(code, i)) for i, (kind, code) in enumerate(HOSTILE.items(), start=1)}
    latencies = []
    while time.perf_counter() - started < 3:  # the attacks are running now
        t0 = time.perf_counter()
        await env.describe.remote()
        latencies.append(time.perf_counter() - t0)
        await asyncio.sleep(0.1)
    rewards = {kind: (await response)["reward"] for kind, response in attacks.items()}
    elapsed = time.perf_counter() - started

    assert rewards == dict.fromkeys(HOSTILE, 0.0)
    assert elapsed < 30  # each attack ended within its limits (2 s CPU, 4 s wall), two sandboxes at a time
    assert max(latencies) < 1.0, latencies  # the replica's event loop kept answering during the attacks
    assert not Path("/var/tmp/gs-serve-escape").exists() and processes_with("4242.5") == []
    # ...and the same replica still scores correct code right.
    after = await asyncio.gather(*(handle.run.remote(code_row("", 100 + i)) for i in range(4)))
    assert [r["reward"] for r in after] == [1.0] * 4
    serve.delete(name)
    serve.delete(name + "-model")


async def test_a_test_s_temporary_folder_is_one_the_solution_can_write(mode: str) -> None:
    """BigCodeBench's tests make a temporary folder and ask the solution to fill it: the harness's temporary files
    are in the runners' own folder, the one place a runner may write."""
    solution = "import os\ndef touch(folder):\n    open(os.path.join(folder, 'made'), 'w').close()\n    return 1\n"
    test = "import os, tempfile\nfolder = tempfile.mkdtemp()\nassert touch(folder) == 1\n"
    test += "assert os.listdir(folder) == ['made']"
    result = await verify_asserts(solution, [test], limits=LIMITS, mode=mode)
    assert result.reward == 1.0, result.details
