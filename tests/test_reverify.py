"""`reverify`: stored rollouts re-scored in-process, stateful environments included."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gym_serve import InputError, ReplayModel, run_local
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


def test_a_failed_reverify_leaves_an_earlier_output_as_it_was(tmp_path: Path, capsys) -> None:
    path = asyncio.run(stored(tmp_path, "example_single_tool_call", error_rate=0.0))
    assert main(["reverify", "--rollouts", str(path), "--env", "example_single_tool_call"]) == 0
    output = tmp_path / "out_reverified.jsonl"
    before = output.read_bytes()
    assert before.count(b"\n") == 12  # 6 rows, 2 rollouts each
    with path.open("a") as rollouts:
        rollouts.write("{not json\n")  # the run now fails at the last line
    assert main(["reverify", "--rollouts", str(path), "--env", "example_single_tool_call"]) == 2
    assert f"{path}, line 13" in capsys.readouterr().err
    assert output.read_bytes() == before, "the earlier output is untouched"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "out_reverified.jsonl"], "no temporary left"


def test_reverify_of_a_missing_file_is_an_error_that_creates_nothing(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope.jsonl"
    assert main(["reverify", "--rollouts", str(missing), "--env", "example_single_tool_call"]) == 2
    assert f"{missing}: cannot open" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_row_of_an_agent_the_config_does_not_name_is_an_error_with_its_line(tmp_path: Path) -> None:
    path = asyncio.run(stored(tmp_path, "example_single_tool_call", error_rate=0.0))
    with pytest.raises(InputError, match=r"line 1, field `agent_ref.name`: no environment for agent"):
        asyncio.run(reverify(path, {"other_agent": "example_single_tool_call"}))
    assert not (tmp_path / "out_reverified.jsonl").exists()
