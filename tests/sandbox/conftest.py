"""What the sandbox tests share: a folder the sandbox user (`nobody`, when the tests run as root) can read."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder every user can reach (pytest's own `tmp_path` is private to root); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="gs-sandbox-test-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
