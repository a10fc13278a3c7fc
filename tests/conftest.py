"""The repository's root folder, for tests that run its files (configs, scripts, the README)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
