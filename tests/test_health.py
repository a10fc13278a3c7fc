"""The health checks: each one found where a file trips it and nowhere else, a clean file yields none, bad input.

NeMo Gym 0.7's check ids are ours wherever our rows show the same fact: the
test reads its registry (`nemo_gym.health.checks.CHECK_REGISTRY`) to hold that.
`gym-serve collect` warns while it runs when a check's rate passes its
threshold: a real collection whose model answers every prompt with nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gym_serve.analysis import health_checks
from gym_serve.analysis.health_checks import CHECKS, HealthOptions
from gym_serve.analysis.health_monitor import HealthMonitor
from gym_serve.analysis.health_report import health
from gym_serve.errors import InputError
from gym_serve.testing.fixtures import example_rows
from tests.conftest import REPO
from tests.health_rows import clean_rows, episode, message, row, tripping_rows, write_collection

GYM_SERVE = [sys.executable, "-m", "gym_serve.cli"]


def test_a_file_that_trips_each_check_shows_each_finding_where_it_was_tripped(tmp_path: Path) -> None:
    rows, failures, expected = tripping_rows()
    path = write_collection(tmp_path, rows, failures, bad="{not json")
    report = health(path)
    found: dict[str, set[int | None]] = {}
    for finding in report.findings:
        found.setdefault(finding.check, set()).add(finding.task)
    assert found == expected
    assert set(found) == {spec.id for spec in CHECKS}, "every check is tripped"
    by_check = {f.check: f for f in report.findings}
    assert (
        by_check["record_unreadable"].line == 3 and "not valid JSON" in by_check["record_unreadable"].evidence["error"]
    )
    assert by_check["check_execution_error"].evidence["failed_check"] == "model_call_runaway_generation"
    assert by_check["token_contiguity_break"].locator == {"call": 2}
    assert "first difference at token 1" in by_check["token_contiguity_break"].evidence["problem"]
    assert by_check["agent_turn_hollow"].locator == {"turn": 2}
    assert by_check["model_call_failed"].source == str(tmp_path / "rollouts_failures.jsonl"), "failures are read"
    assert by_check["verify_near_deadline"].evidence == {"verify_s": 55.0, "deadline_s": 60.0, "share": 0.917}
    assert by_check["rollout_token_count_mismatch"].evidence["usage_input_tokens"] == 11
    assert by_check["rollout_token_count_mismatch"].evidence["bundle_prompt_tokens"] == 10
    duplicates = [f for f in report.findings if f.check == "rollout_duplicate_identity"]
    assert [f.line for f in duplicates] == [11, 12] and duplicates[0].evidence["copies"] == 2

    summary = json.loads((tmp_path / "rollouts_health.json").read_text())
    assert summary["bad_lines"] == [
        {"source": str(path), "line": 3, "error": by_check["record_unreadable"].evidence["error"]}
    ]
    assert summary["checks"]["agent_turn_hollow"]["flagged"] == 2 and summary["checks"]["agent_turn_hollow"]["origin"]
    written = [json.loads(line) for line in (tmp_path / "rollouts_health_findings.jsonl").read_text().splitlines()]
    assert len(written) == len(report.findings) and written[0]["check"] and "evidence" in written[0]


def test_a_clean_file_yields_no_finding(tmp_path: Path) -> None:
    report = health(write_collection(tmp_path, clean_rows(), []), options=HealthOptions(max_policy_lag=0))
    assert report.findings == [] and not report.bad_lines
    assert report.rollouts == 6 and report.failures == 1
    looked = {c.id: c.evaluated for c in report.checks}
    assert looked["token_contiguity_break"] == 6 and looked["verify_near_deadline"] == 6, "the checks did look"


def test_nemo_gyms_ids_are_its_own_and_the_table_lists_every_check() -> None:
    from nemo_gym.health.checks import CHECK_REGISTRY

    ours = {spec.id for spec in CHECKS if spec.origin == "nemo_gym"}
    assert ours == {spec.id for spec in CHECK_REGISTRY} and len(ours) == 14
    assert {spec.id for spec in CHECKS if spec.origin == "gym_serve"} == {
        "token_contiguity_break",
        "policy_stale",
        "rollout_masked",
        "group_identical_rewards",
        "verify_near_deadline",
    }
    table = health_checks.__doc__ or ""
    assert all(f"| `{spec.id}` |" in table for spec in CHECKS)


def test_the_lag_bound_and_a_deadline_from_the_command_line_flag_what_rows_do_not_mark(tmp_path: Path) -> None:
    old, new = episode(0, 0, 1.0), episode(0, 1, 0.0, policy_version_min=7, policy_version_max=7)
    old["_gs_timings"] = {"verify_s": 9.0}  # a row from before rows recorded their deadline
    path = write_collection(tmp_path, [old, new], [])
    assert health(path).findings == []
    report = health(path, options=HealthOptions(max_policy_lag=2, verify_deadline_s=10.0))
    assert {(f.check, f.rollout) for f in report.findings} == {("policy_stale", 0), ("verify_near_deadline", 0)}
    stale = next(f for f in report.findings if f.check == "policy_stale")
    assert stale.evidence == {"policy_version_min": 3, "newest_seen": 7, "max_policy_lag": 2}


def test_the_command_prints_the_findings_and_the_bad_lines_by_line_number(tmp_path: Path) -> None:
    rows, failures, _ = tripping_rows()
    path = write_collection(tmp_path, rows, failures, bad="[1, 2]")
    result = subprocess.run([*GYM_SERVE, "health", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "19 checks, 19 with findings:" in result.stdout
    assert f"bad line: {path}, line 3: expected a JSON object, got list" in result.stdout
    assert "agent_turn_hollow: health_env task 15 rollout 0 (rollouts.jsonl:" in result.stdout
    assert f"wrote {tmp_path / 'rollouts_health.json'}" in result.stdout


def test_a_file_that_is_not_rollouts_is_a_clear_error(tmp_path: Path) -> None:
    tasks = REPO / "envs" / "example_single_tool_call" / "data" / "example.jsonl"
    with pytest.raises(
        InputError, match=r"not a rollouts file: none of its 6 line\(s\) is a rollout \(line 1: an input"
    ):
        health(tasks, write=False)
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    result = subprocess.run([*GYM_SERVE, "health", str(binary)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert f"gym-serve: error: {binary}: not a rollouts file: none of its" in result.stderr
    assert "not valid JSON" in result.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match="it holds no rows"):
        health(empty, write=False)
    with pytest.raises(InputError, match="no such file"):
        health(tmp_path / "missing.jsonl")


def test_profile_has_a_health_section(tmp_path: Path) -> None:
    rows = clean_rows()[:6]
    path = write_collection(tmp_path, rows, [])
    inputs = tmp_path / "rollouts_materialized_inputs.jsonl"
    inputs.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "response"}) + "\n" for r in rows))
    result = subprocess.run(
        [*GYM_SERVE, "profile", "--rollouts", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "health: no findings" in result.stdout and (tmp_path / "rollouts_health.json").is_file()


def test_the_monitor_warns_once_when_a_rate_passes_its_threshold(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    monitor = HealthMonitor(out, rate=0.04, min_rows=20)
    assert monitor.poll() == [], "no file yet"
    healthy = [episode(t, 0, float(t % 2)) for t in range(19)]
    hollow = row(19, 0, 0.0, [message("")], usage={"input_tokens": 3, "output_tokens": 1})
    out.write_text("".join(json.dumps(r) + "\n" for r in healthy))
    assert monitor.poll() == [], "under 20 rows: too early to say"
    with out.open("a") as handle:
        text = json.dumps(hollow) + "\n"
        handle.write(text[:50])  # the driver is mid-write
        handle.flush()
        assert monitor.poll() == [], "a partial line is not read"
        handle.write(text[50:])
    (warning,) = monitor.poll()
    assert warning.startswith("gym-serve: warning: `agent_turn_hollow` in 1 of 20 rollouts so far (5.0%, over 4%)")
    assert f"`gym-serve health {out}` lists them" in warning
    with out.open("a") as handle:
        handle.write(json.dumps(hollow) + "\n")
    assert monitor.poll() == [], "said once"
    huge = row(20, 0, 1.0, [message("x" * (9 << 20))], usage={"input_tokens": 3, "output_tokens": 1})
    with out.open("a") as handle:  # a row longer than what one poll reads at a time
        handle.write(json.dumps(huge) + "\n" + json.dumps(episode(21, 0, 1.0)) + "\n")
    monitor.poll()
    assert monitor._run.counts["agent_turn_hollow"].evaluated == 23, "read through the long row and the next"


@pytest.mark.serve
@pytest.mark.timeout(240)
def test_collect_warns_live_when_the_model_answers_with_nothing(tmp_path: Path) -> None:
    """A replay model recorded to answer every prompt with an empty message: every turn is hollow."""
    rows = example_rows("example_single_tool_call")
    recordings = tmp_path / "silent.jsonl"
    silent = [{**r, "response": {"output": [message("")]}, "reward": 0.0} for r in rows]
    recordings.write_text("".join(json.dumps(r) + "\n" for r in silent))
    model = {"kind": "replay", "recordings": [str(recordings)]}
    app = {"environment": {"name": "example_single_tool_call"}, "model": model}
    entry = {"name": "silent", "route_prefix": None, "import_path": "gym_serve.deployments.app:build_app", "args": app}
    config = tmp_path / "silent.yaml"
    config.write_text(yaml.safe_dump({"applications": [entry]}))
    out = tmp_path / "out.jsonl"
    command = ["collect", "--config", str(config), "--input", "envs/example_single_tool_call/data/example.jsonl",
               "--output", str(out), "--num-repeats", "5", "--address", "local"]  # fmt: skip
    result = subprocess.run([*GYM_SERVE, *command], cwd=REPO, capture_output=True, text=True, timeout=220)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "gym-serve: warning: `agent_turn_hollow` in " in result.stderr, result.stderr[-4000:]
    assert (
        f"(100.0%, over 5%): a model call produced no text, reasoning or function call. `gym-serve health {out}`"
        in (result.stderr)
    )
    assert result.stderr.count("`agent_turn_hollow` in") == 1
