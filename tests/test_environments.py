"""Every registered environment: its example rows, played back in-process, score their right and wrong recordings.

One parametrized test instead of a copy per environment; an environment's own
tests check what is particular to it (its verifier's fields, its tools).
"""

from __future__ import annotations

from typing import Any

import pytest

from gym_serve.environment.registry import available_environments, load_environment_class
from gym_serve.testing.fixtures import replay_examples

EXAMPLE_CONFIG: dict[str, dict[str, Any]] = {
    "llm_judge_qa": {"judge_recordings": ["judge_recordings.jsonl"]},  # its judge, played back in-process
}
"""Environments whose examples need a config to run without Ray."""


@pytest.mark.parametrize("name", available_environments())
async def test_every_example_row_replays_right_then_wrong(name: str) -> None:
    examples = await replay_examples(load_environment_class(name), EXAMPLE_CONFIG.get(name))
    assert len(examples) >= 5
    for row, right, wrong in examples:
        assert right["reward"] == 1.0 and wrong["reward"] == 0.0, row["_ng_task_index"]
        assert right["mask_sample"] is False and right["terminated"] is True, row["_ng_task_index"]
