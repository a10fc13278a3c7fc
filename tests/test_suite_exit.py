"""The suite's process ends itself (root `conftest.py`'s `pytest_unconfigure`): with pytest's own status, its
reports written, and without hanging on a live process pool, as the math verifier's is at the end of a run."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import REPO

A_SESSION_WITH_A_LIVE_POOL = """
import concurrent.futures
import multiprocessing
import sys

POOL = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver"))


def test_the_pool_answers():
    assert POOL.submit(abs, -1).result() == 1


def test_the_suites_end_is_the_one_loaded():
    assert hasattr(sys.modules["conftest"], "pytest_unconfigure")


def test_the_outcome():
    assert {outcome}
"""


@pytest.mark.parametrize(("outcome", "status"), [(True, 0), (False, 1)])
def test_the_process_ends_with_pytests_status_and_its_report(tmp_path: Path, outcome: bool, status: int) -> None:
    session = tmp_path / "test_a_session.py"
    session.write_text(A_SESSION_WITH_A_LIVE_POOL.format(outcome=outcome))
    report = tmp_path / "report.xml"
    pytest_args = ["-q", "-p", "conftest", "-p", "no:cacheprovider", f"--junitxml={report}", f"--rootdir={tmp_path}"]
    command = [sys.executable, "-m", "pytest", *pytest_args, str(session)]
    ended = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ended.returncode == status, ended.stdout + ended.stderr
    cases = list(ET.parse(report).iter("testcase"))
    assert len(cases) == 3
    assert sum(case.find("failure") is not None for case in cases) == (0 if outcome else 1)
