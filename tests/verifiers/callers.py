"""A caller of the code verifier in a process of its own, as root or as an unprivileged uid.

The caller imports `gym_serve.verifiers.code` (it imports only the standard library and the sandbox
package, `gym_serve.sandbox`) in a fresh interpreter: as root this venv's, as `nobody` the system's
Python reading this venv's packages (`venv_site`). As `nobody` the caller shares its uid with the
sandbox in the `fallback` mode: the case the kernel's uid checks do not cover. It runs a job (a
JSON file): each of `solutions` through `verify_asserts` against `tests` (or through `run_python`
when `tests` is null), in `mode`, with `limits`; `CALLER_PID` anywhere in the job reads as the
caller's pid, and a `harness` source, when given, stands in for `_judge_harness.py` (a hostile
harness). It prints its pid, then one JSON line: each solution's result (`reward`, `passed`,
`details`, `harness_layers`; `exit_code`, `stdout`, `stderr` for a run; `error` when the verifier
raised).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
WHO = ["root", "nobody"]

CALLER = r"""
import asyncio, json, os, sys
from gym_serve.sandbox import judge
from gym_serve.verifiers import code
with open(sys.argv[1]) as f:
    job = json.loads(f.read().replace("CALLER_PID", str(os.getpid())))
if job.get("harness"):
    real = judge._source
    judge._source = lambda name: job["harness"] if name == "_judge_harness.py" else real(name)
print(json.dumps({"caller": os.getpid()}), flush=True)
limits = code.SandboxLimits(**job["limits"])


async def one(solution):
    try:
        if job["tests"] is None:
            run = await code.run_python(solution, limits=limits, mode=job["mode"])
            return {"exit_code": run.exit_code, "stdout": run.stdout, "stderr": run.stderr[-300:]}
        result = await code.verify_asserts(solution, job["tests"], limits=limits, mode=job["mode"])
        return {"reward": result.reward, "passed": result.passed, "details": result.details,
                "harness_layers": getattr(result, "harness_layers", None)}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


async def main():
    return {name: await one(solution) for name, solution in job["solutions"].items()}


print(json.dumps(asyncio.run(main())), flush=True)
"""


def venv_site(tmp: Path) -> str:
    """A `PYTHONPATH` under `tmp` through which another interpreter (the system's, run by `nobody`) reads this venv's
    packages, `.pth` files (the editable install's finder) included, and the repository (`tests`)."""
    site = tmp / "caller-site"  # the caller's own, like its script and job
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return f"{site}:{REPO}"


def start_caller(who: str, job: dict[str, Any], tmp: Path) -> subprocess.Popen[str]:
    """Start a caller (`root` or `nobody`) on `job`, in a session of its own; `tmp` must be open to `nobody`."""
    script, job_file = tmp / "caller.py", tmp / "caller-job.json"
    script.write_text(CALLER)
    job_file.write_text(json.dumps(job))
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp), "LANG": "C.UTF-8", **job.get("env", {})}
    if who == "root":
        command = [sys.executable, str(script)]
    else:
        python = shutil.which("python3", path="/usr/bin:/bin")
        assert python is not None
        command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python, str(script)]
        env["PYTHONPATH"] = venv_site(tmp)
    command.append(str(job_file))
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)


def call(who: str, job: dict[str, Any], tmp: Path, timeout: float = 300) -> dict[str, Any]:
    """Run a caller on `job` to its end; its results by solution name (it must live to report them)."""
    with start_caller(who, job, tmp) as caller:
        out, _ = caller.communicate(timeout=timeout)
    assert caller.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


def processes_with(tag: str) -> list[int]:
    """The processes whose command line holds `tag`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found
