"""`gym-serve profile --trace FILE`: where a collection's time went, per tier, from its trace file.

The file is what `gym-serve collect --trace FILE` writes (`gym_serve.calls.tracing`: one span per line). Each
span counts for the tier of the process that ended it (`gym_serve.tier`: driver, agent, model, environment) under
its name: the driver's `rollout`, `queued` and `attempt`; the Agent's `agent.run` and its calls `model_call`,
`tool_call`, `verify`; the Model's and Environment's own `model.responses`, `environment.verify`, ...; and, per
tier, `queued`: the driver's wait for a slot, a replica's `gym_serve.queued_s` (from the caller's call to the
replica starting it). Bad lines are counted and named by line number,
never fatal.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from gym_serve.collect.job import sibling_path
from gym_serve.errors import InputError
from gym_serve.wire.jsonl import scan_jsonl

__all__ = ["trace_profile"]


def trace_profile(path: str | Path) -> dict[str, Any]:
    """Per tier and span name: count, p50 and p99 seconds; written to `<trace>_tier_times.json` beside the file."""
    path = Path(path)
    if not path.is_file():
        raise InputError("cannot open: no such file", source=str(path))
    durations: defaultdict[tuple[str, str], list[float]] = defaultdict(list)
    traces: set[str] = set()
    spans = 0
    bad: list[int] = []
    for line, row, error in scan_jsonl(path, strict=False):
        if row is None or error is not None:
            bad.append(line)
            continue
        try:
            tier = str(row["resource"]["gym_serve.tier"])
            durations[(tier, str(row["name"]))].append(float(row["duration_s"]))
            if "gym_serve.queued_s" in row["attributes"]:
                durations[(tier, "queued")].append(float(row["attributes"]["gym_serve.queued_s"]))
            traces.add(str(row["trace_id"]))
            spans += 1
        except (KeyError, TypeError, ValueError, AttributeError):
            bad.append(line)
    if not durations:
        raise InputError("holds no spans: is it a trace file `gym-serve collect --trace` wrote?", source=str(path))
    tiers: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for (tier, name), values in sorted(durations.items()):
        values.sort()
        tiers[tier][name] = {
            "count": len(values),
            "p50_s": _percentile(values, 0.50),
            "p99_s": _percentile(values, 0.99),
        }
    report = {
        "trace": str(path),
        "traces": len(traces),
        "spans": spans,
        "bad_lines": bad,
        "tiers": dict(tiers),
    }
    out = sibling_path(path, "tier_times.json")
    out.write_text(json.dumps(report, indent=2))
    return {**report, "written": str(out)}


def _percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile of sorted values (p99 of few spans is their largest)."""
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]
