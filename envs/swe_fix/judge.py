"""The trusted test runner `verify` starts in the sandbox, and how its verdict is read back.

`SOURCE` runs as `python -I -S -B -c SOURCE` in the repository: isolated (no `PYTHON*` variable, no
user site, no `sitecustomize`, no `.pth` file is read), pytest from `/opt/gs-judge/lib` (bound
read-only from the host: the workspace cannot change the runner), the standard library next, the
repository last (it can shadow neither). Third-party plugins are off and the cache is off. It reads
a nonce and the test ids on stdin, runs exactly those tests, and prints one line,
`@@gs-verdict <nonce> {...}`: each test's outcome (passed only when its call passed and neither its
setup nor its teardown failed). pytest's own report goes to /dev/null.

Code the agent wrote runs in this process (the tests import it), so nothing here is secret from it
by construction: `patch_check` holds that the library's changed code reaches for nothing that could
find the nonce or the runner (no introspection, no process control, no pytest), and the nonce only
proves the line came from this run.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

__all__ = ["JUDGE_LIB", "SOURCE", "Verdict", "read_verdict", "stdin_for"]

JUDGE_LIB = "/opt/gs-judge/lib"
MARK = "@@gs-verdict"
JUDGED_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")
"""What the runner needs (pytest and its dependencies), bound read-only from the host."""

SOURCE = r"""
import json, os, sys
nonce = sys.stdin.readline().strip()
ids = json.loads(sys.stdin.readline())
repo = os.getcwd()
sys.path[:0] = ["/opt/gs-judge/lib"]
sys.path.append(repo)
out = os.dup(1)
devnull = os.open(os.devnull, os.O_WRONLY)
os.dup2(devnull, 1)
os.dup2(devnull, 2)
import pytest
outcomes = {}


class Recorder:
    def pytest_runtest_logreport(self, report):
        if report.failed:
            outcomes[report.nodeid] = "failed"
        elif report.skipped and outcomes.get(report.nodeid) != "failed":
            outcomes[report.nodeid] = "skipped"
        elif report.when == "call" and report.passed and report.nodeid not in outcomes:
            outcomes[report.nodeid] = "passed"

    def pytest_collectreport(self, report):
        if report.failed:
            outcomes["<collection>"] = "failed"


config = os.path.join(repo, "pyproject.toml")
args = ["-q", "-p", "no:cacheprovider", "--rootdir", repo, "-c", config, "-o", "addopts="]
code = pytest.main(args + ids, plugins=[Recorder()])
verdict = json.dumps({"exit": int(code), "outcomes": outcomes})
os.write(out, ("\n@@gs-verdict " + nonce + " " + verdict + "\n").encode())
os._exit(0)
"""


class Verdict:
    """The runner's verdict: each asked test's outcome (a test it did not report is `missing`)."""

    def __init__(self, outcomes: dict[str, str], asked: list[str]) -> None:
        self.outcomes = {test: outcomes.get(test, "missing") for test in asked}
        self.collection_failed = outcomes.get("<collection>") == "failed"

    @property
    def failed(self) -> list[str]:
        return [test for test, outcome in self.outcomes.items() if outcome != "passed"]


def stdin_for(tests: list[str]) -> tuple[str, bytes]:
    """A fresh nonce, and the runner's stdin: the nonce, then the test ids."""
    nonce = secrets.token_hex(16)
    return nonce, f"{nonce}\n{json.dumps(tests)}\n".encode()


def read_verdict(stdout: str, nonce: str, asked: list[str]) -> Verdict | None:
    """The verdict line of this run (its nonce), or None when the runner gave none."""
    prefix = f"{MARK} {nonce} "
    for line in reversed(stdout.splitlines()):
        if line.startswith(prefix):
            try:
                body: Any = json.loads(line[len(prefix) :])
                outcomes = body["outcomes"]
            except (ValueError, KeyError, TypeError):
                return None
            if not isinstance(outcomes, dict):
                return None
            return Verdict({str(k): str(v) for k, v in outcomes.items()}, asked)
    return None
