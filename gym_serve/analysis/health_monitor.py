"""Health warnings while a collection runs: the per-rollout checks over the rows written so far.

`gym-serve collect` polls a `HealthMonitor` with its progress bar. The monitor
reads the lines the driver appended since the last poll (to the last complete
line: the driver flushes each row whole), runs the per-rollout checks of
`HealthRun` on them, and says once per check when its rate — rollouts flagged
over rollouts it could look at — passes `rate` after at least `min_rows` rows:
more than 5% hollow turns is worth knowing before the other 95,000 rollouts run.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from gym_serve.analysis.health import HealthRun, not_a_rollout
from gym_serve.analysis.health_checks import CHECKS, HealthOptions, Scope
from gym_serve.collect.job import failures_path

__all__ = ["MIN_ROWS", "WARN_RATE", "HealthMonitor"]

WARN_RATE = 0.05
MIN_ROWS = 20
CHUNK = 4 << 20
"""Bytes read per file per poll: a resumed collection's earlier rows are caught up with a piece at a time."""


class HealthMonitor:
    """Tails a collection's output and failures files; `poll()` returns the warnings that became due."""

    def __init__(
        self,
        output_path: str | Path,
        *,
        rate: float = WARN_RATE,
        min_rows: int = MIN_ROWS,
        options: HealthOptions | None = None,
    ) -> None:
        self.output_path = Path(output_path)
        self.rate = rate
        self.min_rows = min_rows
        self._offsets = {self.output_path: 0, failures_path(self.output_path): 0}
        self._run = HealthRun(options or HealthOptions(), keep_rows=False)
        self._warned: set[str] = set()

    def poll(self) -> list[str]:
        for path in self._offsets:
            for line in self._new_lines(path):
                try:
                    row = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(row, dict) and not_a_rollout(row) is None:
                    self._run.observe(row, source=str(path), line=0)
        return [self._warning(check) for check in self._due()]

    def _new_lines(self, path: Path) -> list[bytes]:
        try:
            with path.open("rb") as handle:
                handle.seek(self._offsets[path])
                chunk = handle.read(CHUNK)
                while b"\n" not in chunk and (more := handle.read(CHUNK)):  # one row longer than a chunk
                    chunk += more
        except FileNotFoundError:
            return []
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offsets[path] += len(complete)
        return [line for line in complete.splitlines() if line.strip()]

    def _due(self) -> list[str]:
        due = []
        for spec in CHECKS:
            count = self._run.counts[spec.id]
            if spec.scope != Scope.ROLLOUT or spec.id in self._warned or count.evaluated < self.min_rows:
                continue
            if count.rate > self.rate:
                self._warned.add(spec.id)
                due.append(spec.id)
        return due

    def _warning(self, check: str) -> str:
        count = self._run.counts[check]
        return (
            f"gym-serve: warning: `{check}` in {count.flagged} of {count.evaluated} rollouts so far "
            f"({count.rate:.1%}, over {self.rate:.0%}): {count.says}. "
            f"`gym-serve health {self.output_path}` lists them."
        )
