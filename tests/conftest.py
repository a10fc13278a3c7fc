"""What tests that run the repository's files share: its root folder, Ctrl-C for the processes they start, a
folder every user can reach, and how far a file being written has got."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def tmp() -> Iterator[Path]:
    """A folder every user can reach and write (pytest's own `tmp_path` is private to root): for callers and
    sandboxes running as `nobody`; removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="gs-isolation-"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def interruptible() -> None:
    """Ctrl-C's default in a child process (`Popen(preexec_fn=interruptible)`), as a terminal gives it.

    A suite started in the background by a non-interactive shell (`cmd &`, as a CI runner starts it) ignores
    SIGINT, and children inherit that: a server stopped with Ctrl-C would then never see it, and its stop
    would wait out its timeout (90 s) and kill it, leaving its Ray processes behind.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def written_lines(path: Path) -> int:
    """Complete lines so far of a file a collection is writing: its last line may be half written, so a test
    that waits for N rows counts newlines instead of parsing."""
    return path.read_bytes().count(b"\n") if path.exists() else 0
