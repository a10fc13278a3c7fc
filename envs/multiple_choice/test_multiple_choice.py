"""Every example row: the recorded right answer scores 1, the recorded wrong answer 0, through the agent loop."""

from __future__ import annotations

from gym_serve import ReplayModel, run_local
from gym_serve.jsonl import read_jsonl

from . import MultipleChoice


async def test_every_example_row_replays_right_then_wrong() -> None:
    rows = [row for _, row in read_jsonl(MultipleChoice.data_dir() / "example.jsonl")]
    assert len(rows) >= 5
    right = ReplayModel.for_environment(MultipleChoice)
    wrong = ReplayModel.for_environment(MultipleChoice, error_rate=1.0)
    for row in rows:
        good = await run_local(row, MultipleChoice(), right)
        assert good["reward"] == 1.0 and good["extracted_answer"] is not None
        assert (await run_local(row, MultipleChoice(), wrong))["reward"] == 0.0
