"""Run model-written Python against tests, in a sandbox, without blocking the event loop.

Every run is a fresh child process (`python -I -B`, started with asyncio's
subprocess API, so the caller's event loop keeps serving) with these walls:

- **limits** (`SandboxLimits`): CPU seconds, address space, file size and
  process count as rlimits, set by the trusted harness (`_sandbox_harness.py`)
  before the untrusted code starts; a wall-clock timeout after which the whole
  process group (and, with namespaces, the whole PID namespace) is SIGKILLed;
  an output cap that kills the run once stdout or stderr passes it.
- **a throwaway work dir**, the only writable place, removed afterwards.
- **a minimal environment**: `PATH`, `HOME`, `LANG` and nothing inherited, so
  secrets in the caller's environment never reach the code.
- **isolation** (`isolation()` says which is in use), probed once per process:
  `namespaces`: `unshare` (util-linux) puts the code in new user, network, mount and PID
  namespaces: no network interface but a downed loopback, every mount
  read-only except the work dir, its own `/proc`, and killing the sandbox
  kills every process in it. When running as root, the code also runs as
  `nobody` (via `setpriv`), because the kernel does not enforce `RLIMIT_NPROC`
  for root.
  `audit_hook` (fallback where `unshare` is not permitted): a Python audit hook
  refuses sockets and writes outside the work dir. Audit hooks are not a
  security boundary against native code; use `namespaces` for hostile workloads.

Scoring: `reward` is 1.0 only when every test passes; `fraction` is the share
that passed. A known limit of the asserts mode: the harness and the solution
share one interpreter, so a solution that introspects the harness's frames
could forge pass markers; early exits and exceptions cannot.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = [
    "CodeResult",
    "RunResult",
    "SandboxLimits",
    "extract_code",
    "isolation",
    "run_python",
    "verify_asserts",
    "verify_stdio",
]

_HARNESS = Path(__file__).with_name("_sandbox_harness.py")
_NOBODY = 65534
# Make the work dir the only writable mount, then run the harness (sh stays PID 1 of the
# namespace, so the harness is an ordinary process that rlimit signals can kill).
_MOUNT_SCRIPT = r"""
W=$1; shift
mount --bind "$W" "$W" && cd "$W" || exit 97
for m in $(awk '{print $2}' /proc/self/mounts | sort -u); do
  [ "$m" = "$W" ] || mount -o remount,bind,ro "$m" 2>/dev/null
done
"$@"
"""


@dataclass(frozen=True)
class SandboxLimits:
    """The walls of one run. Defaults suit competitive-programming-sized programs."""

    cpu_s: int = 5
    wall_s: float = 10.0
    memory_mb: int = 512
    file_size_mb: int = 8
    max_processes: int = 32
    output_bytes: int = 1 << 20


@dataclass
class RunResult:
    """What happened to one sandboxed run."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    output_exceeded: bool = False
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_exceeded


@dataclass
class CodeResult:
    """The score of a solution: `reward` 1.0 iff every test passed, plus the fraction and per-test notes."""

    passed: int
    total: int
    details: list[str] = field(default_factory=list)
    clean: bool = True
    """False when a run hit a limit or crashed after its tests: such a solution never earns the reward."""

    @property
    def reward(self) -> float:
        return 1.0 if self.clean and self.total > 0 and self.passed == self.total else 0.0

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def extract_code(text: str) -> str | None:
    """The last fenced code block (```python, ```py or bare ```) of a model answer, else None."""
    blocks = re.findall(r"```(?:python3?|py)?[ \t]*\n(.*?)```", text, re.S)
    return blocks[-1] if blocks else None


@lru_cache(maxsize=1)
def isolation() -> str:
    """`namespaces` if `unshare` works here (user/net/mount/pid), else `audit_hook`."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "audit_hook"
    work = _make_work_dir()
    try:
        probe = subprocess.run(
            [*_identity(), *_namespace_prefix(unshare), work, "true"],
            env=_minimal_env(work),
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "audit_hook"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return "namespaces" if probe.returncode == 0 else "audit_hook"


def _make_work_dir() -> str:
    """A fresh private directory the sandbox user owns."""
    work = tempfile.mkdtemp(prefix="gs-sandbox-")
    if os.geteuid() == 0:
        os.chown(work, _NOBODY, _NOBODY)
    os.chmod(work, 0o700)
    return work


_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _semaphore() -> asyncio.Semaphore:
    """At most one sandbox per CPU at a time per event loop; the rest wait their turn.

    One semaphore per loop: an asyncio primitive is bound to the loop that first waits on it.
    """
    loop = asyncio.get_running_loop()
    if loop not in _slots:
        _slots[loop] = asyncio.Semaphore(max(1, os.cpu_count() or 1))
    return _slots[loop]


async def run_python(
    code: str,
    *,
    stdin: str = "",
    tests: list[str] | None = None,
    limits: SandboxLimits = SandboxLimits(),
    mode: str | None = None,
) -> tuple[RunResult, str | None]:
    """Run `code` in a fresh sandbox. With `tests`, runs them after it (asserts mode).

    Returns the run and, in asserts mode, the marker the harness prefixed its results with.
    `mode` forces an isolation mode (tests of the fallback); default: `isolation()`.
    """
    async with _semaphore():
        return await _run(code, stdin=stdin, tests=tests, limits=limits, mode=mode)


async def verify_stdio(
    code: str, cases: list[dict[str, str]], *, limits: SandboxLimits = SandboxLimits()
) -> CodeResult:
    """Run `code` once per case (`{"input": ..., "output": ...}`); a case passes when stdout matches."""
    runs = await asyncio.gather(*(run_python(code, stdin=case["input"], limits=limits) for case in cases))
    result = CodeResult(passed=0, total=len(cases))
    for i, ((run, _), case) in enumerate(zip(runs, cases, strict=True)):
        if run.ok and _same_output(run.stdout, case["output"]):
            result.passed += 1
            result.details.append(f"case {i}: passed")
        else:
            result.details.append(f"case {i}: {_why(run)}")
    return result


async def verify_asserts(code: str, tests: list[str], *, limits: SandboxLimits = SandboxLimits()) -> CodeResult:
    """Run `code`, then each test snippet (e.g. `assert add(1, 2) == 3`) in its namespace."""
    run, marker = await run_python(code, tests=tests, limits=limits)
    outcomes = dict(re.findall(rf"{marker} (\d+) (ok|fail)", run.stdout)) if marker else {}
    result = CodeResult(passed=0, total=len(tests), clean=run.ok)
    for i in range(len(tests)):
        outcome = outcomes.get(str(i))
        if outcome == "ok":
            result.passed += 1
            result.details.append(f"test {i}: passed")
        else:
            result.details.append(f"test {i}: {'failed' if outcome else _why(run)}")
    return result


def _same_output(actual: str, expected: str) -> bool:
    """Equal up to trailing whitespace on each line and trailing blank lines."""

    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in text.strip("\n").splitlines()]

    return lines(actual.rstrip()) == lines(expected.rstrip())


def _why(run: RunResult) -> str:
    if run.timed_out:
        return "timed out"
    if run.output_exceeded:
        return "output limit exceeded"
    if run.exit_code != 0:
        tail = run.stderr.strip().splitlines()[-1:] or [""]
        return f"exit code {run.exit_code} {tail[0][:200]}".strip()
    return "wrong output"


async def _run(
    code: str, *, stdin: str, tests: list[str] | None, limits: SandboxLimits, mode: str | None
) -> tuple[RunResult, str | None]:
    mode = mode or await asyncio.to_thread(isolation)  # probed once; off the loop
    marker = f"@@{secrets.token_hex(16)}@@" if tests is not None else None
    work = _make_work_dir()
    try:
        work_path = Path(work)
        (work_path / "solution.py").write_text(code)
        shutil.copy(_HARNESS, work_path / "_harness.py")
        spec = {
            "mode": "asserts" if tests is not None else "stdio",
            "tests": tests or [],
            "solution": str(work_path / "solution.py"),
            "work_dir": work,
            "cpu_s": limits.cpu_s,
            "memory_bytes": limits.memory_mb << 20,
            "file_size_bytes": limits.file_size_mb << 20,
            "max_processes": limits.max_processes,
            "block_network": mode != "namespaces",
        }
        (work_path / "spec.json").write_text(json.dumps(spec))
        command = [_python(), "-I", "-B", str(work_path / "_harness.py"), str(work_path / "spec.json")]
        if mode == "namespaces":
            command = [*_namespace_prefix(shutil.which("unshare") or "unshare"), work, *command]
        command = [*_identity(), *command]
        payload = (f"{marker}\n" if marker else stdin).encode()
        return await _execute(command, work, payload, limits), marker
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _execute(command: list[str], work: str, payload: bytes, limits: SandboxLimits) -> RunResult:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=work,
        env=_minimal_env(work),
        start_new_session=True,  # its own process group, killed as a whole
    )
    exceeded = asyncio.Event()
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # all three are PIPEs
    stdin = proc.stdin

    async def feed() -> None:
        try:
            stdin.write(payload)
            await stdin.drain()
            stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass

    async def capped(stream: asyncio.StreamReader) -> bytes:
        chunks, size = [], 0
        while chunk := await stream.read(65536):
            size += len(chunk)
            if size > limits.output_bytes:
                exceeded.set()
                _kill(proc)
                break
            chunks.append(chunk)
        return b"".join(chunks)

    readers = asyncio.gather(feed(), capped(proc.stdout), capped(proc.stderr), proc.wait())
    timed_out = False
    try:
        _, out, err, _ = await asyncio.wait_for(asyncio.shield(readers), timeout=limits.wall_s)
    except TimeoutError:
        timed_out = True
        _kill(proc)
        try:  # the pipes close once every process holding them is dead
            _, out, err, _ = await asyncio.wait_for(readers, timeout=5)
        except TimeoutError:
            out, err = b"", b"(output lost: a process outside the sandbox's group kept the pipes open)"
    finally:
        if proc.returncode is None:
            _kill(proc)
            await proc.wait()
    _kill(proc)  # anything the code left behind in its group
    return RunResult(
        exit_code=proc.returncode,
        stdout=out.decode(errors="replace"),
        stderr=err.decode(errors="replace")[-4000:],
        timed_out=timed_out,
        output_exceeded=exceeded.is_set(),
        wall_s=time.perf_counter() - started,
    )


def _kill(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _namespace_prefix(unshare: str) -> list[str]:
    return [
        unshare, "--user", "--map-root-user", "--net", "--mount", "--propagation", "private",
        "--pid", "--fork", "--kill-child", "--mount-proc",
        "sh", "-c", _MOUNT_SCRIPT, "sandbox",
    ]  # fmt: skip


def _identity() -> list[str]:
    """Run as `nobody` when we are root: the kernel exempts root from `RLIMIT_NPROC`.

    A `setpriv` prefix rather than Popen's `user=`: uvloop (Serve's event loop) does not take `user=`.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError("running as root needs `setpriv` (util-linux) to drop to `nobody` in the sandbox")
    return [setpriv, f"--reuid={_NOBODY}", f"--regid={_NOBODY}", "--clear-groups"]


def _minimal_env(work: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8"}


@lru_cache(maxsize=1)
def _python() -> str:
    """This interpreter, unless the sandbox user cannot reach it (e.g. a venv under `/root`)."""
    if os.geteuid() != 0:
        return sys.executable
    for candidate in (sys.executable, shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")):
        if candidate and _world_executable(Path(candidate).resolve()):
            return candidate
    raise RuntimeError("no Python interpreter the sandbox user `nobody` can run; install python3 under /usr/bin")


def _world_executable(path: Path) -> bool:
    if not path.exists() or not path.stat().st_mode & stat.S_IXOTH:
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)
