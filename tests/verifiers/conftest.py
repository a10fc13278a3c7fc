"""What the code verifier's tests share: a directory an unprivileged caller can use."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def tmp() -> Iterator[Path]:
    """A directory the unprivileged caller can use (pytest's own `tmp_path` is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="gs-isolation-"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)
