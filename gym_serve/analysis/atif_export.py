"""`gym-serve export --format atif`: a rollout file as ATIF v1.7 trajectories, laid out as NeMo Gym 0.7 lays them.

The output folder holds one `<task>-<rollout>.json` per finished rollout and a
`manifest.jsonl` (`trajectory_path`, `_ng_task_index`, `_ng_rollout_index`,
`expected_sha256`): what NeMo Gym's exporter writes and its reverify reads. A
file of several agents gets one such folder per agent (NeMo Gym's manifest
keys a trajectory by task and rollout only). The folder appears whole or not
at all: it is written beside its name and moved into place at the end.

Failure rows have no trajectory and are counted, not written; a line that is
not a rollout, or a rollout ATIF cannot hold, is listed with its line number
and the others are written. `read_atif` reads such a folder (or one
trajectory file) back into rollout rows, for `gym-serve reverify`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gym_serve.analysis.health import not_a_rollout
from gym_serve.errors import InputError
from gym_serve.wire.atif import AtifTrajectory
from gym_serve.wire.atif_rows import to_row, to_trajectory
from gym_serve.wire.jsonl import scan_jsonl

__all__ = ["AtifExport", "export_atif", "is_atif", "read_atif"]

MANIFEST = "manifest.jsonl"


@dataclass
class AtifExport:
    """What an export wrote, and what it could not."""

    out_dir: Path
    trajectories: int = 0
    failure_rows: int = 0
    manifests: list[Path] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)


def export_atif(
    rollouts_path: str | Path,
    out_dir: str | Path | None = None,
    *,
    session_id: str | None = None,
    agent_version: str | None = None,
    token_ids: bool = True,
) -> AtifExport:
    """Write every finished rollout of `rollouts_path` as an ATIF trajectory; see the module docstring."""
    source = Path(rollouts_path)
    out = Path(out_dir) if out_dir else source.with_name(f"{source.stem}_atif")
    if out.exists():
        raise InputError("already exists: remove it or name another folder with --out", source=str(out))
    session = session_id or source.stem
    version = agent_version or f"gym-serve {metadata.version('gym-serve')}"
    result = AtifExport(out_dir=out)
    by_agent: dict[str, dict[tuple[Any, Any], tuple[int, bytes]]] = defaultdict(dict)
    for line, row, error in scan_jsonl(source, strict=False):
        if error is not None or row is None:
            result.errors.append(error or InputError("unreadable", source=str(source), line=line))
            continue
        if "_ng_failure_class" in row:
            result.failure_rows += 1
            continue
        reason = not_a_rollout(row)
        try:
            if reason:
                raise InputError(reason)
            trajectory = to_trajectory(row, session_id=session, agent_version=version, token_ids=token_ids)
        except (InputError, ValidationError) as e:
            result.errors.append(_at(e, source, line))
            continue
        key = (row.get("_ng_task_index"), row.get("_ng_rollout_index"))
        written = by_agent[trajectory.agent.name]
        if key in written:
            result.errors.append(InputError(f"task {key[0]} rollout {key[1]} again (first on line {written[key][0]})",
                                            source=str(source), line=line))  # fmt: skip
            continue
        written[key] = (line, (trajectory.model_dump_json(exclude_none=True, indent=2) + "\n").encode())
    if not by_agent:
        raise InputError(_nothing_to_export(result), source=str(source))
    _publish(out, by_agent, result)
    return result


def _at(error: InputError | ValidationError, source: Path, line: int) -> InputError:
    if isinstance(error, ValidationError):
        return InputError(f"not valid ATIF: {error.errors()[0]['msg']}", source=str(source), line=line)
    return InputError(error.reason, source=str(source), line=line, field=error.field)


def _nothing_to_export(result: AtifExport) -> str:
    if result.failure_rows:
        return f"no finished rollout to export (its {result.failure_rows} rows are all failure rows)"
    first = f" (line {result.errors[0].line}: {result.errors[0].reason})" if result.errors else ""
    return f"not a rollouts file: none of its lines is a finished rollout{first}"


def _publish(out: Path, by_agent: dict[str, dict[tuple[Any, Any], tuple[int, bytes]]], result: AtifExport) -> None:
    staging = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for agent, written in by_agent.items():
            folder = staging / agent if len(by_agent) > 1 else staging
            folder.mkdir(parents=True, exist_ok=True)
            entries = []
            for (task, rollout), (_, body) in sorted(written.items(), key=lambda kv: kv[1][0]):
                name = f"{task}-{rollout}.json"
                (folder / name).write_bytes(body)
                entries.append(
                    {
                        "trajectory_path": name,
                        "_ng_task_index": task,
                        "_ng_rollout_index": rollout,
                        "expected_sha256": hashlib.sha256(body).hexdigest(),
                    }
                )
            (folder / MANIFEST).write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in entries))
            result.trajectories += len(entries)
            result.manifests.append(out / folder.relative_to(staging) / MANIFEST)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def is_atif(path: str | Path) -> bool:
    """Is `path` an ATIF export (a folder with a manifest, a manifest, or one `.json` trajectory)?"""
    path = Path(path)
    return path.is_dir() or path.name == MANIFEST or path.suffix == ".json"


def read_atif(
    path: str | Path, *, inputs: dict[tuple[Any, Any], dict[str, Any]] | None = None
) -> Iterator[tuple[int, dict[str, Any] | None, InputError | None]]:
    """`(number, row, None)` per trajectory of an export, or `(number, None, error)`; numbered as the manifest lines.

    `inputs` (materialized input rows by task and rollout) are the task rows of
    trajectories another exporter wrote; gym-serve's carry their own.
    """
    path = Path(path)
    if path.suffix == ".json":
        yield 1, *_read_one(path, None, inputs or {})
        return
    manifests = [path] if path.name == MANIFEST else sorted(path.glob(MANIFEST)) or sorted(path.glob(f"*/{MANIFEST}"))
    if not manifests:
        raise InputError(f"not an ATIF export: no {MANIFEST} in it or in its folders", source=str(path))
    number = 0
    for manifest in manifests:
        for line, entry, error in scan_jsonl(manifest):
            number += 1
            if error is not None or entry is None:
                yield number, None, error
                continue
            trajectory = manifest.parent / str(entry.get("trajectory_path"))
            yield number, *_read_one(trajectory, entry, inputs or {}, manifest=manifest, line=line)


def _read_one(
    path: Path,
    entry: dict[str, Any] | None,
    inputs: dict[tuple[Any, Any], dict[str, Any]],
    *,
    manifest: Path | None = None,
    line: int | None = None,
) -> tuple[dict[str, Any] | None, InputError | None]:
    try:
        body = path.read_bytes()
    except OSError as e:
        return None, InputError(f"cannot read {path}: {e.strerror}", source=str(manifest or path), line=line)
    expected = (entry or {}).get("expected_sha256")
    if expected and hashlib.sha256(body).hexdigest() != expected:
        return None, InputError(f"{path.name} changed since the export (sha256)", source=str(manifest), line=line)
    try:
        trajectory = AtifTrajectory.model_validate_json(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return None, InputError(f"not ATIF v1.7: {first['msg']}", source=str(path), field=where or None)
    key = ((entry or {}).get("_ng_task_index"), (entry or {}).get("_ng_rollout_index"))
    try:
        return to_row(trajectory, task_row=inputs.get(key)), None
    except InputError as e:
        return None, InputError(e.reason, source=str(path), field=e.field)
