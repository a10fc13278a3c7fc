"""In every isolation mode, code can neither signal nor outlive its caller, nor leave files, nor fill the disk.

The caller is a real process (`tests.verifiers.callers`): `gym_serve.verifiers.code` imported in a
fresh interpreter, as root and as an unprivileged uid (`nobody`, where the code and its caller share
a uid: the case the kernel's uid checks do not cover), in the `namespaces` mode and in the forced
`fallback` mode.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from gym_serve.verifiers.code import SandboxLimits, run_python
from tests.verifiers.callers import processes_with, start_caller

CALLERS = [("root", "namespaces"), ("root", "fallback"), ("nobody", "namespaces"), ("nobody", "fallback")]


def start(who: str, mode: str, solution: str, tmp: Path, wall_s: float = 8.0) -> subprocess.Popen[str]:
    limits = {"cpu_s": 5, "wall_s": wall_s, "memory_mb": 256, "max_processes": 256}
    return start_caller(who, {"mode": mode, "solutions": {"it": solution}, "tests": None, "limits": limits}, tmp)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged uid needs root")
@pytest.mark.parametrize(("who", "mode"), CALLERS)
def test_code_cannot_signal_its_caller(who: str, mode: str, tmp: Path) -> None:
    attack = (
        "import os, signal\nresults = []\n"
        "for target, sig in ((CALLER_PID, signal.SIGKILL), (os.getppid(), signal.SIGKILL), (-1, signal.SIGKILL),\n"
        "                    (-CALLER_PID, signal.SIGTERM)):\n"
        "    try:\n        os.kill(target, sig)\n        results.append('sent')\n"
        "    except OSError as e:\n        results.append(type(e).__name__)\n"
        "print(results)\n"
    )
    with start(who, mode, attack, tmp) as caller:
        out, _ = caller.communicate(timeout=120)
    assert caller.returncode == 0, out  # the caller lived to report
    result = json.loads(out.strip().splitlines()[-1])["it"]
    assert result["stdout"].strip() == str(["PermissionError"] * 4), result


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged uid needs root")
@pytest.mark.parametrize(("who", "mode"), CALLERS)
def test_code_dies_with_its_caller_and_leaves_no_files(who: str, mode: str, tmp: Path) -> None:
    tag = f"{uuid.uuid4().int % 10**6}.{uuid.uuid4().int % 997}"
    lingerer = (
        "import os, subprocess, time\n"
        f"subprocess.Popen(['sleep', '{tag}'])\n"
        "if os.fork() == 0:\n"  # a daemon: double fork, so it is nobody's child
        "    if os.fork() == 0:\n"
        f"        os.execvp('sleep', ['sleep', '{tag}1'])\n"
        "    os._exit(0)\n"
        "open('left-behind.txt', 'w').write('x' * 1000)\n"
        "time.sleep(60)\n"
    )
    caller = start(who, mode, lingerer, tmp, wall_s=60.0)
    assert caller.stdout is not None
    json.loads(caller.stdout.readline())
    started = lambda: [pid for pid in processes_with(tag) if pid != caller.pid]  # noqa: E731
    deadline = time.monotonic() + 30
    while len(started()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(started()) == 2, "the program's child and its daemon started"
    caller.send_signal(signal.SIGKILL)  # the caller dies without any chance to clean up
    caller.wait()
    caller.stdout.close()
    leftovers = lambda: [  # noqa: E731 - the caller's own files (its script, job and site folder) are not the code's
        p for p in tmp.rglob("*") if not p.relative_to(tmp).parts[0].startswith("caller")
    ]
    deadline = time.monotonic() + 20  # the sandbox cleans up after its caller's death: give a busy machine time
    while (processes_with(tag) or leftovers()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(tag) == [], "nothing the code started outlives its caller"
    assert leftovers() == [], "nothing the code wrote outlives its caller"


@pytest.mark.parametrize("mode", ["namespaces", "fallback"])
async def test_the_disk_quota_bounds_the_total_across_many_files(mode: str) -> None:
    """One sandbox once wrote 1.4 GB in many files under a per-file limit; the quota bounds the total."""
    filler = (
        "import sys\nwritten = 0\n"
        "for i in range(1400):\n"
        "    with open(f'part{i}', 'wb') as f:\n        f.write(b'x' * (1 << 20))\n"
        "    written += 1\n    print(written, flush=True)\n"
    )
    limits = SandboxLimits(wall_s=30.0, disk_mb=16, output_bytes=1 << 20)
    run = await run_python(filler, limits=limits, mode=mode)
    assert not run.ok
    written = int(run.stdout.split()[-1]) if run.stdout.split() else 0
    if mode == "namespaces":  # the kernel's own limit: the write fails at the quota
        assert "No space left on device" in run.stderr and written <= 16
    else:  # polled every 20 ms: stopped just past the quota
        assert run.disk_exceeded and written < 16 + 64, written
    many = "for i in range(100_000):\n    open(f'f{i}', 'w').close()\n"
    run = await run_python(many, limits=SandboxLimits(wall_s=30.0, max_files=500), mode=mode)
    assert not run.ok and (run.disk_exceeded or "No space left on device" in run.stderr)
