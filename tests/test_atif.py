"""ATIF v1.7 export: rows exported and read back are the same rows; NeMo Gym's own ATIF reader loads the files.

NeMo Gym 0.7.0 (installed by the README's test command) provides the reader:
`nemo_gym.atif_v1_7.AtifTrajectoryV1_7` is its strict schema, and
`nemo_gym.atif_reverification` its reverify path (manifest, materialized
inputs, the Responses payload its verifiers score). That path refuses token
ids by design ("outside the initial profile"), so a token-carrying export is
checked against the schema, and `--without-token-ids` against the whole path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gym_serve.analysis.atif_export import export_atif, read_atif
from gym_serve.analysis.reverify import run as reverify
from gym_serve.errors import InputError
from tests.conftest import REPO
from tests.health_rows import call, clean_rows, episode, message, row, tool_call, tool_output

GYM_SERVE = [sys.executable, "-m", "gym_serve.cli"]


def example_rollouts(env: str) -> list[dict[str, Any]]:
    path = REPO / "envs" / env / "data" / "example_rollouts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def shapes() -> list[dict[str, Any]]:
    """Turns of every shape: reasoning, a message beside calls, a user turn, a string input, an empty answer."""
    think = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "<b>check</b> first"}]}
    both = [think, message("Let me look.", id="msg_a"), tool_call("k1", **call([1, 2], [3, 4, 5]))]
    both += [tool_output("k1", "sunny"), message("Sunny.", id="msg_b", **call([1, 2, 3, 4, 5, 6], [7]))]
    user_turn = [message("Guess 5."), {"type": "message", "role": "user", "content": "Higher."}, message("Guess 8.")]
    odd_args = [tool_call("k2", arguments='{"q":"x" }'), tool_output("k2", "x"), message("")]
    text_input = episode(4, 0, 1.0)
    text_input["responses_create_params"]["input"] = "What is 6 * 7?"
    return [
        row(1, 0, 1.0, both, usage={"input_tokens": 8, "output_tokens": 4}),
        row(2, 0, 0.5, user_turn, usage={"input_tokens": 30, "output_tokens": 9}, step_rewards=[0.0, 1.0]),
        row(3, 0, 0.0, odd_args),
        text_input,
    ]


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rows_exported_and_read_back_are_the_same_rows(tmp_path: Path) -> None:
    rows = clean_rows()[:6] + shapes() + example_rollouts("example_multi_step") + example_rollouts("grid_world")
    for k, r in enumerate(rows):  # one key per row: the manifest keys trajectories by task and rollout
        r["_ng_task_index"], r["_ng_rollout_index"], r["agent_ref"] = k, 0, {"name": "mixed"}
    result = export_atif(write(tmp_path / "rollouts.jsonl", rows))
    assert result.errors == [] and result.trajectories == len(rows)
    back = [r for _, r, error in read_atif(result.out_dir) if error is None]
    assert back == rows
    both = json.loads((result.out_dir / "6-0.json").read_text())  # shapes()[0]: says something and calls a tool
    said, acted = both["steps"][1], both["steps"][2]
    assert said["message"] == "Let me look." and said["reasoning_content"] == "<b>check</b> first"
    assert said["metrics"] == {"prompt_tokens": 2, "completion_tokens": 3, "prompt_token_ids": [1, 2],
                               "completion_token_ids": [3, 4, 5], "logprobs": [-0.5] * 3}  # fmt: skip
    assert acted["llm_call_count"] == 0 and acted["tool_calls"][0]["arguments"] == {"q": "x"}
    assert acted["observation"]["results"][0] == {"source_call_id": "k1", "content": "sunny", "extra": acted[
        "observation"]["results"][0]["extra"]}  # fmt: skip
    assert both["extra"]["gym_serve"]["row"]["reward"] == 1.0 and both["final_metrics"]["total_steps"] == 4


def test_without_token_ids_the_rows_come_back_without_them(tmp_path: Path) -> None:
    rows = clean_rows()[:2]
    result = export_atif(write(tmp_path / "r.jsonl", rows), token_ids=False)
    back = [r for _, r, _ in read_atif(result.out_dir)]
    items = [item for r in back for item in r["response"]["output"]]
    assert not any("generation_token_ids" in item for item in items)
    assert back[0]["reward"] == rows[0]["reward"] and len(items) == 6
    step = json.loads((result.out_dir / "0-0.json").read_text())["steps"][1]
    assert step["metrics"] == {"prompt_tokens": 3, "completion_tokens": 2}, "the counts stay"


def test_nemo_gyms_reader_loads_our_files(tmp_path: Path) -> None:
    from nemo_gym.atif_reverification import (
        index_materialized_inputs,
        load_atif_manifest,
        load_atif_trajectory,
        project_atif_manifest_entries,
    )
    from nemo_gym.atif_v1_7 import AtifTrajectoryV1_7
    from nemo_gym.config_types import ConfigError

    rows = clean_rows()[:6] + example_rollouts("example_multi_step")[:6]
    for k, r in enumerate(rows):
        r["_ng_task_index"], r["_ng_rollout_index"], r["agent_ref"] = k, 0, {"name": "example_multi_step"}
    source = write(tmp_path / "rollouts.jsonl", rows)
    with_ids = export_atif(source, tmp_path / "with_ids")
    for path in sorted(with_ids.out_dir.glob("*-*.json")):  # NeMo Gym's strict schema takes every file
        AtifTrajectoryV1_7.model_validate(json.loads(path.read_text()))
    with pytest.raises(ConfigError, match="training token metadata"):  # its reverify path refuses ids by design
        load_atif_trajectory(with_ids.out_dir / "0-0.json")

    plain = export_atif(source, tmp_path / "plain", token_ids=False)
    entries = load_atif_manifest(plain.out_dir / "manifest.jsonl")
    inputs = index_materialized_inputs({k: v for k, v in r.items() if k != "response"} for r in rows)
    projected = project_atif_manifest_entries(entries, inputs, manifest_directory=plain.out_dir)
    assert len(projected) == len(rows)
    for payload in projected:
        ours = rows[payload.task_index]
        theirs = payload.payload["response"]["output"]
        assert [_said(item) for item in theirs] == [_said(item) for item in ours["response"]["output"]]
        usage = ours["response"].get("usage")
        assert (payload.payload["response"]["usage"] or {}).get("input_tokens") == (usage or {}).get("input_tokens")
        task_fields = {k: v for k, v in ours.items() if k not in ("response", "responses_create_params")}
        assert {k: payload.payload[k] for k in task_fields} == task_fields, "the task fields come from the inputs"


def _said(item: dict[str, Any]) -> tuple[Any, ...]:
    """What an item says, as a verifier reads it (ids and JSON spacing aside)."""
    kind = item["type"]
    if kind == "function_call":
        return kind, item["call_id"], item["name"], json.loads(item["arguments"])
    if kind == "function_call_output":
        return kind, item["call_id"], item["output"]
    return kind, "".join(part["text"] for part in item["content"])


def test_reverify_reads_an_atif_export_and_another_exporters_trajectories(tmp_path: Path) -> None:
    rows = example_rollouts("example_multi_step")
    for k, r in enumerate(rows):
        r["_ng_task_index"], r["_ng_rollout_index"] = k, 0
    source = write(tmp_path / "rollouts.jsonl", rows)
    environments = {"*": "example_multi_step"}
    expected = reverify(str(source), environments)["agents"]
    exported = export_atif(source, token_ids=False)
    assert reverify(str(exported.out_dir), environments)["agents"] == expected
    assert json.loads((tmp_path / "rollouts_atif_reverified.jsonl").read_text().splitlines()[0])["reward"] in (0, 1)

    foreign = tmp_path / "foreign"  # the same trajectories without gym-serve's extra: another exporter's files
    foreign.mkdir()
    for path in exported.out_dir.iterdir():
        body = json.loads(path.read_text()) if path.suffix == ".json" else None
        if body is not None:
            del body["extra"]["gym_serve"]
        (foreign / path.name).write_text(json.dumps(body) if body is not None else path.read_text())
    manifest = foreign / "manifest.jsonl"
    manifest.write_text("".join(json.dumps({**json.loads(line), "expected_sha256": None}) + "\n"
                                for line in manifest.read_text().splitlines()))  # fmt: skip
    inputs = write(tmp_path / "inputs.jsonl", [{k: v for k, v in r.items() if k != "response"} for r in rows])
    assert reverify(str(foreign), environments, str(inputs))["agents"] == expected
    without = reverify(str(foreign), environments)
    assert len(without["failures"]) == len(rows) and "give the task row it is for" in without["failures"][0]["error"]


def test_bad_lines_are_listed_and_the_rest_written(tmp_path: Path) -> None:
    rows = clean_rows()
    source = tmp_path / "r.jsonl"
    lines = [json.dumps(r) for r in rows]
    lines[1] = "{oops"
    lines.insert(3, json.dumps({"responses_create_params": {"input": "hi"}}))
    source.write_text("\n".join(lines) + "\n")
    result = subprocess.run([*GYM_SERVE, "export", "--format", "atif", str(source)], capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "wrote 5 ATIF v1.7 trajectories" in result.stdout and "1 failure row(s) have no trajectory" in result.stdout
    assert f"{source}, line 2: not valid JSON" in result.stderr
    assert f"{source}, line 4: an input row (it has `responses_create_params` but no `response`)" in result.stderr
    again = subprocess.run([*GYM_SERVE, "export", "--format", "atif", str(source)], capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert again.returncode == 2 and "already exists: remove it or name another folder with --out" in again.stderr

    tasks = REPO / "envs" / "example_single_tool_call" / "data" / "example.jsonl"
    with pytest.raises(InputError, match="not a rollouts file: none of its lines is a finished rollout"):
        export_atif(tasks, tmp_path / "tasks_atif")
    assert not (tmp_path / "tasks_atif").exists(), "nothing half-written"


def test_a_changed_or_broken_trajectory_is_an_error_naming_it(tmp_path: Path) -> None:
    result = export_atif(write(tmp_path / "r.jsonl", clean_rows()[:3]))
    first, second = result.out_dir / "0-0.json", result.out_dir / "0-1.json"
    first.write_text(first.read_text().replace("What is task 0?", "What is task 9?"))
    body = json.loads(second.read_text())
    body["steps"][0]["step_id"] = 7
    second.write_text(json.dumps(body))
    manifest = result.out_dir / "manifest.jsonl"
    entries = [json.loads(line) for line in manifest.read_text().splitlines()]
    del entries[1]["expected_sha256"]  # an entry without a pinned digest: the file is read as it is
    manifest.write_text("".join(json.dumps(e) + "\n" for e in entries))
    read = list(read_atif(result.out_dir))
    assert read[0][1] is None and "0-0.json changed since the export (sha256)" in str(read[0][2])
    assert read[1][1] is None and "steps are numbered 1, 2, ..." in str(read[1][2])
    assert read[2][1] is not None and read[2][2] is None
    (body["steps"][0]).update(step_id=1, reasoning_content="x")
    lone = tmp_path / "lone.json"
    lone.write_text(json.dumps(body))
    ((_, none, error),) = list(read_atif(lone))
    assert none is None and "a user step cannot have reasoning_content (agent steps only)" in str(error)
