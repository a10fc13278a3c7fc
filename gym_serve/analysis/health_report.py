"""The health report of a rollout file: `gym-serve health`, and the health section of `gym-serve profile`.

`health` runs every check (`gym_serve.analysis.health.HealthRun`) over a rollout
file and its failures file, and writes two files beside them:
`<out>_health.json` (per check: its origin, how many rows it could look at,
how many it flagged, the rate; the bad lines) and `<out>_health_findings.jsonl`
(one row per finding: the check, the rollout — agent, task, rollout index,
file, line — where in it, the evidence). `render` is what the terminal shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gym_serve.analysis.health import CheckCount, HealthRun, nothing_readable, read_rollouts, rollout_sources
from gym_serve.analysis.health_checks import CHECKS, Finding, HealthOptions
from gym_serve.collect.job import sibling_path
from gym_serve.errors import InputError
from gym_serve.wire.jsonl import JsonlWriter, dumps

__all__ = ["HealthReport", "finding_line", "headline", "health", "render"]

SHOWN_BAD_LINES = 100


class HealthReport(BaseModel):
    """What `health` found: the counts per check, the bad lines, and where the files are."""

    sources: list[str]
    rows: int
    rollouts: int
    failures: int
    bad_lines: list[dict[str, Any]]
    checks: list[CheckCount]
    summary_path: str | None = None
    findings_path: str | None = None
    findings: list[Finding] = []

    def summary(self) -> dict[str, Any]:
        body = self.model_dump(mode="json", exclude={"findings", "checks"})
        body["bad_lines"] = body["bad_lines"][:SHOWN_BAD_LINES]
        body["checks"] = {c.id: {**c.as_dict(), "rate": c.rate} for c in self.checks}
        return body


def health(
    rollouts_path: str | Path, *, options: HealthOptions | None = None, write: bool = True, with_failures: bool = True
) -> HealthReport:
    """Run every check over a rollout file and its failures file; write the report beside it unless `write` is off."""
    sources = rollout_sources(rollouts_path, with_failures=with_failures)
    run = HealthRun(options or HealthOptions())
    findings: list[Finding] = []
    bad: list[dict[str, Any]] = []
    for line in read_rollouts(sources):
        if line.row is None:
            findings.append(run.unreadable(line.source, line.number, line.reason or ""))
            bad.append({"source": line.source, "line": line.number, "error": line.reason})
        else:
            findings += run.observe(line.row, source=line.source, line=line.number)
    if not run.seen:
        raise InputError(nothing_readable(bad), source=str(rollouts_path))
    findings += run.finish()
    report = HealthReport(
        sources=[str(s) for s in sources],
        rows=len(run.seen),
        rollouts=run.rollouts,
        failures=run.failures,
        bad_lines=bad,
        checks=list(run.counts.values()),
        findings=findings,
    )
    if write:
        _write(report, Path(rollouts_path))
    return report


def _write(report: HealthReport, rollouts_path: Path) -> None:
    summary_path = sibling_path(rollouts_path, "health.json")
    findings_path = sibling_path(rollouts_path, "health_findings.jsonl")
    report.summary_path, report.findings_path = str(summary_path), str(findings_path)
    with JsonlWriter(findings_path, append=False, flush=False) as out:
        for finding in report.findings:
            out.write(finding.model_dump(mode="json", exclude_none=True))
    summary_path.write_text(json.dumps(report.summary(), indent=2) + "\n")


def finding_line(finding: Finding) -> str:
    """One finding as a line of text: `check: agent task 3 rollout 1 (file:line) turn 2: evidence`."""
    who = " ".join(
        part
        for part in (
            finding.agent or "",
            f"task {finding.task}" if finding.task is not None else "",
            f"rollout {finding.rollout}" if finding.rollout is not None else "",
        )
        if part
    )
    where = f"{Path(finding.source).name}:{finding.line}" if finding.source and finding.line else ""
    locator = " ".join(f"{k} {v}" for k, v in (finding.locator or {}).items())
    head = " ".join(part for part in (who, f"({where})" if where else "", locator) if part)
    return f"{finding.check}: {head}: {dumps(finding.evidence).decode()[:300]}"


SHOWN_FINDINGS = 3


def headline(report: HealthReport) -> str:
    """One line: which checks found something, and how often."""
    flagged = [f"{c.id} {c.flagged}/{c.evaluated}" for c in report.checks if c.findings]
    bad = f"; {len(report.bad_lines)} bad line(s)" if report.bad_lines else ""
    return (
        f"{len(flagged)} of {len(CHECKS)} checks with findings: " + ", ".join(flagged) if flagged else "no findings"
    ) + bad


def render(report: HealthReport) -> str:
    """The report as the terminal shows it: the checks that found something, a few findings each, the bad lines."""
    flagged = [c for c in report.checks if c.findings]
    lines = [
        f"rows: {report.rows} ({report.rollouts} rollouts, {report.failures} failures) from "
        + ", ".join(Path(s).name for s in report.sources)
        + (f"; {len(report.bad_lines)} bad line(s)" if report.bad_lines else ""),
        f"{len(CHECKS)} checks, {len(flagged)} with findings" + (":" if flagged else "; nothing to report"),
    ]
    if flagged:
        lines.append(f"  {'check':<36} {'from':<9} {'looked at':>9} {'flagged':>8} {'rate':>7}")
        lines += [
            f"  {c.id:<36} {c.origin:<9} {c.evaluated:>9} {c.flagged:>8} {c.rate:>7.1%}  {c.says}" for c in flagged
        ]
    for check in flagged:
        shown = [f for f in report.findings if f.check == check.id][:SHOWN_FINDINGS]
        lines += [f"  {finding_line(f)}" for f in shown]
    for bad in report.bad_lines[:SHOWN_FINDINGS]:
        lines.append(f"  bad line: {bad['source']}, line {bad['line']}: {bad['error']}")
    if len(report.bad_lines) > SHOWN_FINDINGS:
        lines.append(f"  (and {len(report.bad_lines) - SHOWN_FINDINGS} more bad lines)")
    if report.summary_path:
        lines.append(f"wrote {report.summary_path}\n      {report.findings_path}")
    return "\n".join(lines)
