"""Score model-written Python against tests, in a sandbox the solution cannot game, off the event loop.

The policy being trained writes the code, so the code is an adversary of its own reward. This
module is a client of the one way gym-serve runs tests against untrusted code
(`gym_serve.sandbox.judge`: its threat model is in `gym_serve/sandbox/README.md`); in short:

- **Two processes.** A trusted *harness* holds the tests and the expected values (sent on its
  stdin, never written to a file); the solution runs in separate, confined *runner* processes
  that inherit neither. Assert-style tests run in the harness, calling the solution through a
  pipe; values come back as plain data (exact builtin types, decoded into fresh values), so frame
  or `gc` introspection, patched builtins or `assert`, lying `__eq__` (or `in`), early exits and
  patched test modules all act on a process whose word is not taken. Expected stdout never
  enters the sandbox: this module compares.
- **The verdict has a channel of its own**: a pipe only the harness holds. Its stdout, where a
  test's `print` goes (of a value the solution returned, say), reaches nothing that is read.
- **The policy's failures are 0s.** A call past its deadline, a reply past `reply_bytes`, a
  solution that does not load or kills its runner fails its test; the harness answers within the
  run's budget whatever the solution does. Only a sandbox that gives no verdict at all
  (`SandboxError`) or none within its budget and a margin (`SandboxTimeout`) is the system's.
- **Kernel walls** on every runner and on the harness (`gym_serve.sandbox._confine`), and two
  isolation modes (`namespaces`, `fallback`: `gym_serve.sandbox.oneshot`); force the fallback
  with `GYM_SERVE_SANDBOX_ISOLATION=fallback` or `mode=`.

Scoring: `reward` is 1.0 only when every test passes; `fraction` is the share that passed.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from gym_serve.sandbox import host, judge
from gym_serve.sandbox.errors import SandboxError
from gym_serve.sandbox.judge import RunResult, SandboxLimits, SandboxTimeout
from gym_serve.sandbox.oneshot import ISOLATION_ENV, isolation

__all__ = [
    "ISOLATION_ENV",
    "CodeResult",
    "RunResult",
    "SandboxError",
    "SandboxLimits",
    "SandboxTimeout",
    "extract_code",
    "isolation",
    "run_python",
    "same_stdout",
    "sandbox_lacks",
    "verify_asserts",
    "verify_calls",
    "verify_stdio",
]


@dataclass
class CodeResult:
    """The score of a solution: `reward` 1.0 iff every test passed, plus the fraction and per-test notes."""

    passed: int
    total: int
    details: list[str] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)
    """The kernel walls the runners were under (e.g. `seccomp`, `landlock_abi7`)."""
    harness_layers: list[str] = field(default_factory=list)
    """The kernel walls the trusted harness put itself under."""
    missing_modules: list[str] = field(default_factory=list)
    """Top-level modules a failed test or run could not import ("No module named ..."): the solution's say-so,
    to be checked against the task and `sandbox_lacks` before it means anything."""

    @property
    def reward(self) -> float:
        return 1.0 if self.total > 0 and self.passed == self.total else 0.0

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def extract_code(text: str) -> str | None:
    """The code between the last two lines holding a ``` fence (LiveCodeBench's rule, NeMo Gym's `code_gen`)."""
    lines = text.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return None
    return "\n".join(lines[fences[-2] + 1 : fences[-1]])


async def run_python(
    code: str, *, stdin: str = "", limits: SandboxLimits = SandboxLimits(), mode: str | None = None
) -> RunResult:
    """Run `code` once as a program in a fresh sandbox, with `stdin`; `mode` forces an isolation mode."""
    result = await judge.run({"mode": "stdio", "solution": code, "stdin": [stdin]}, 1, limits, mode)
    return _run_result(result["runs"][0])


async def verify_stdio(
    code: str, cases: list[dict[str, str]], *, limits: SandboxLimits = SandboxLimits(), mode: str | None = None
) -> CodeResult:
    """Run `code` once per case (`{"input", "output"}`), each in a fresh process of one sandbox.

    A case passes when the program exits 0 and its stdout matches (`same_stdout`). The expected
    outputs never enter the sandbox.
    """
    spec = {"mode": "stdio", "solution": code, "stdin": [case["input"] for case in cases]}
    result = await judge.run(spec, len(cases), limits, mode)
    _covers(result, "runs", len(cases))
    scored = CodeResult(
        passed=0, total=len(cases), layers=result.get("layers", []), harness_layers=result.get("harness_layers", [])
    )
    for i, (raw, case) in enumerate(zip(result["runs"], cases, strict=True)):
        run = _run_result(raw)
        if run.ok and same_stdout(run.stdout, case["output"]):
            scored.passed += 1
            scored.details.append(f"case {i}: passed")
        else:
            scored.details.append(f"case {i}: {_why(run)}")
            scored.missing_modules += _missing(run.stderr)
    scored.missing_modules = sorted(set(scored.missing_modules))
    return scored


async def verify_asserts(
    code: str, tests: list[str], *, limits: SandboxLimits = SandboxLimits(), mode: str | None = None
) -> CodeResult:
    """Load `code`, then run each test snippet (e.g. `assert add(1, 2) == 3`) in the harness against it."""
    result = await judge.run({"mode": "asserts", "solution": code, "tests": tests}, len(tests), limits, mode)
    return _scored(result, "test", len(tests))


async def verify_calls(
    code: str,
    fn_name: str,
    cases: list[tuple[list[Any], Any]],
    *,
    limits: SandboxLimits = SandboxLimits(),
    mode: str | None = None,
) -> CodeResult:
    """LiveCodeBench's call-based tests: `fn_name(*args)` (a method of `Solution` when it defines one) must equal
    the expected value (tuples as lists; floats close), compared in the harness."""
    spec = {
        "mode": "calls",
        "solution": code,
        "fn_name": fn_name,
        "cases": [{"args": args, "expected": expected} for args, expected in cases],
    }
    return _scored(await judge.run(spec, len(cases), limits, mode), "case", len(cases))


def same_stdout(actual: str, expected: str) -> bool:
    """LiveCodeBench's stdout comparison (NeMo Gym's `code_gen`): the same number of stripped lines, each equal,
    or a case-insensitive yes/no, or the same numbers token by token (1e-6 tolerance where a token has `.`/`e`)."""
    got, want = _stripped_lines(actual), _stripped_lines(expected)
    if len(got) != len(want):
        return False
    return all(_same_line(g, w) for g, w in zip(got, want, strict=True))


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _same_line(got: str, want: str) -> bool:
    if got == want or (got.lower() in ("yes", "no") and got.lower() == want.lower()):
        return True
    got_tokens, want_tokens = got.split(), want.split()
    if len(got_tokens) != len(want_tokens):
        return False
    try:
        pairs = [(Decimal(g), Decimal(w), g, w) for g, w in zip(got_tokens, want_tokens, strict=True)]
    except InvalidOperation:
        return False
    tolerance = Decimal("1e-6")
    for g, w, g_text, w_text in pairs:
        if g == w:
            continue
        floating = any("." in t or "e" in t.lower() for t in (g_text, w_text))
        if not floating or not (g.is_finite() and w.is_finite()):
            return False
        error = abs(g - w)
        if error > tolerance and error / max(abs(w), Decimal(1)) > tolerance:
            return False
    return True


def _run_result(raw: dict[str, Any]) -> RunResult:
    return RunResult(
        exit_code=raw["exit_code"],
        stdout=raw["stdout"],
        stderr=raw["stderr"][-4000:],
        timed_out=raw["timed_out"],
        output_exceeded=raw["output_exceeded"],
        disk_exceeded=raw["disk_exceeded"],
        wall_s=raw["wall_s"],
    )


def _scored(result: dict[str, Any], noun: str, sent: int) -> CodeResult:
    _covers(result, "tests", sent)
    scored = CodeResult(
        passed=0, total=sent, layers=result.get("layers", []), harness_layers=result.get("harness_layers", [])
    )
    for i, (outcome, detail) in enumerate(result["tests"]):
        if outcome == "ok":
            scored.passed += 1
            scored.details.append(f"{noun} {i}: passed")
        else:
            scored.details.append(f"{noun} {i}: {detail or 'failed'}")
    scored.missing_modules = sorted({m for d in scored.details for m in _missing(d)})
    return scored


_NO_MODULE = re.compile(r"No module named '([A-Za-z_][\w.]*)'")


def _missing(text: str) -> list[str]:
    return [name.split(".")[0] for name in _NO_MODULE.findall(text)]


def sandbox_lacks(modules: list[str]) -> list[str]:
    """Those of these top-level modules the sandbox's interpreter cannot import (it finds no such module).

    Asked of that interpreter (`python -I`, as the sandbox runs it) without importing anything: a module
    is looked up, never run. Cached per name: what is installed does not change under a running verifier.
    """
    return [name for name in modules if name.isidentifier() and not _sandbox_has(name)]


@lru_cache(maxsize=1024)
def _sandbox_has(module: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 3)"
    done = subprocess.run(
        [host.sandbox_python(), "-I", "-c", probe], capture_output=True, env=host.minimal_env("/"), cwd="/"
    )
    return done.returncode != 3


def _covers(result: dict[str, Any], key: str, sent: int) -> None:
    """The verdict must hold one well-formed outcome per test sent, no more, no fewer; else it is no verdict."""
    outcomes = result.get(key)
    if not isinstance(outcomes, list):
        raise SandboxError(f"the sandbox's verdict holds no `{key}` for the {sent} tests sent")
    if key == "tests":
        well_formed = all(
            isinstance(o, list) and len(o) == 2 and o[0] in ("ok", "fail") and isinstance(o[1], str) for o in outcomes
        )
    else:
        well_formed = all(isinstance(o, dict) and _RUN_KEYS <= o.keys() for o in outcomes)
    if not well_formed or len(outcomes) != sent:
        raise SandboxError(f"the sandbox's verdict is not one outcome per test: {len(outcomes)} for the {sent} sent")


_RUN_KEYS = frozenset({"exit_code", "stdout", "stderr", "timed_out", "output_exceeded", "disk_exceeded", "wall_s"})


def _why(run: RunResult) -> str:
    if run.timed_out:
        return "timed out"
    if run.output_exceeded:
        return "output limit exceeded"
    if run.disk_exceeded:
        return "disk quota exceeded"
    if run.exit_code != 0:
        tail = run.stderr.strip().splitlines()[-1:] or [""]
        return f"exit code {run.exit_code} {tail[0][:200]}".strip()
    return "wrong output"
