"""`reverify`: stored rollouts re-scored in-process, stateful environments included."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from gym_serve import ReplayModel, run_local
from gym_serve.analysis.reverify import reverify
from gym_serve.cli import main
from gym_serve.environment.registry import load_environment_class
from gym_serve.wire.jsonl import read_jsonl


async def stored(tmp_path: Path, env_name: str, error_rate: float) -> Path:
    env_cls = load_environment_class(env_name)
    model = ReplayModel.for_environment(env_cls, error_rate=error_rate)
    rows = []
    for i, (_, row) in enumerate(read_jsonl(env_cls.data_dir() / "example.jsonl")):
        for k in range(2):
            row_k = {**row, "_ng_task_index": i, "_ng_rollout_index": k, "agent_ref": {"name": env_name}}
            rows.append(await run_local(row_k, env_cls(), model))
    path = tmp_path / "out.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


async def test_a_stateful_environment_reverifies_to_the_same_rewards(tmp_path: Path) -> None:
    path = await stored(tmp_path, "example_session_state", error_rate=0.5)
    result = await reverify(path, {"*": "example_session_state"})
    stats = result["agents"]["example_session_state"]
    assert result["changed"] == [] and stats["rows"] == 12
    assert 0 < stats["before"] == stats["after"] < 1, "the counter state was rebuilt from the recorded calls"


async def test_a_wrong_stored_reward_is_reported_and_fixed(tmp_path: Path) -> None:
    path = await stored(tmp_path, "example_single_tool_call", error_rate=0.0)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[3]["reward"] = 0.0  # a verifier bug at collection time
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = await reverify(path, {"*": "example_single_tool_call"})
    assert [(c["line"], c["before"], c["after"]) for c in result["changed"]] == [(4, 0.0, 1.0)]
    fixed = [json.loads(line) for line in Path(result["output"]).read_text().splitlines()]
    assert fixed[3]["reward"] == 1.0 and fixed[3]["previous_reward"] == 0.0


def test_reverify_command(tmp_path: Path, capsys) -> None:
    path = asyncio.run(stored(tmp_path, "example_multi_step", error_rate=0.5))
    assert main(["reverify", "--rollouts", str(path), "--env", "example_multi_step"]) == 0
    assert "example_multi_step" in capsys.readouterr().out


async def test_rows_that_cannot_be_scored_are_failures_and_the_rest_go_on(tmp_path: Path) -> None:
    """Before, the first such row stopped reverify and left its output empty."""
    path = await stored(tmp_path, "example_single_tool_call", error_rate=0.0)
    good = path.read_text().splitlines()
    no_response = json.dumps({**json.loads(good[0]), "response": None})
    unknown_agent = json.dumps({**json.loads(good[1]), "agent_ref": {"name": "elsewhere"}})
    path.write_text("\n".join([good[0], "{not json", no_response, good[1], unknown_agent, *good[2:]]) + "\n")
    result = await reverify(path, {"example_single_tool_call": "example_single_tool_call"})
    assert [(f["line"], f["kind"]) for f in result["failures"]] == [
        (2, "bad_input"),
        (3, "bad_input"),
        (5, "bad_input"),
    ]
    assert "no environment for agent `elsewhere`" in result["failures"][2]["error"]
    assert result["agents"]["example_single_tool_call"]["rows"] == len(good)
    assert len(Path(result["output"]).read_text().splitlines()) == len(good)
    failed = [json.loads(line) for line in Path(result["failures_path"]).read_text().splitlines()]
    assert [f["line"] for f in failed] == [2, 3, 5] and all(f["mask_sample"] for f in failed)


async def test_an_existing_output_is_never_emptied(tmp_path: Path) -> None:
    path = await stored(tmp_path, "example_single_tool_call", error_rate=0.0)
    first = await reverify(path, {"*": "example_single_tool_call"})
    before = Path(first["output"]).read_text()
    assert before
    result = await reverify(path, {"*": "no_such_environment"})  # every row fails now
    assert len(result["failures"]) == len(before.splitlines()) and result["failures"][0]["kind"] == "env_error"
    assert Path(first["output"]).read_text() == before, "the earlier output stands"


def test_reverify_fails_when_no_row_could_be_scored(tmp_path: Path, capsys) -> None:
    """It exited 0 when every row failed; a partial failure still exits 0 (the rest were scored)."""
    path = asyncio.run(stored(tmp_path, "example_single_tool_call", error_rate=0.0))
    assert main(["reverify", "--rollouts", str(path), "--env", "no_such_environment"]) == 1
    err = capsys.readouterr().err
    assert "row(s) could not be scored" in err and f"no row of {path} could be scored" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["reverify", "--rollouts", str(empty), "--env", "example_single_tool_call"]) == 1
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    assert main(["reverify", "--rollouts", str(path), "--env", "example_single_tool_call"]) == 0


def test_reverify_of_a_missing_file_is_an_error_that_creates_nothing(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope.jsonl"
    assert main(["reverify", "--rollouts", str(missing), "--env", "example_single_tool_call"]) == 2
    assert f"{missing}: cannot open" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
