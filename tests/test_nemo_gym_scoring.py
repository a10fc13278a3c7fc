"""Our environments score NeMo Gym's rows as NeMo Gym 0.7.0 scores them, case by case.

The cases and NeMo Gym's verdicts are in `tests/data/nemo_gym/scoring_cases.json` (its `/verify`
of `mcqa`, `structured_outputs` and `math_with_judge`, called on hand-made answers; see the README
there). Each case goes through our environment's `verify` as a rollout would, so the row fields
(`options`, `grading_mode`, `template_metadata`, `schema_str`, `expected_answer`) are read the way
NeMo Gym's rows carry them.
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from gym_serve import EnvRunner
from gym_serve.environment.registry import load_environment_class
from gym_serve.errors import FailureKind, failure_kind

CASES = json.loads((Path(__file__).parent / "data" / "nemo_gym" / "scoring_cases.json").read_text())
REGEX_KEY = next(k for k in CASES if k.startswith("mcqa/template_metadata"))


def answer(text: str) -> dict[str, Any]:
    return {
        "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]},
        ]
    }


def row(**fields: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, **fields}


async def verdict(env: str, text: str, **fields: Any) -> dict[str, Any]:
    runner = EnvRunner(load_environment_class(env)())
    return await runner.verify(row(**fields), answer(text), None)


def mcqa_cases() -> list[tuple[str, dict[str, Any]]]:
    return [(key, case) for key in CASES if key.startswith("mcqa/") for case in CASES[key]]


@pytest.mark.parametrize(("key", "case"), mcqa_cases(), ids=lambda v: v if isinstance(v, str) else v["text"])
async def test_multiple_choice_agrees_with_nemo_gyms_mcqa(key: str, case: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"options": CASES["mcqa_options"], "expected_answer": "B"}
    if key == REGEX_KEY:
        fields["template_metadata"] = {"output_regex": r"Final Choice:\s*\(?([A-Za-z])"}
    else:
        fields["grading_mode"] = key.split("/", 1)[1]
    got = await verdict("multiple_choice", case["text"], **fields)
    assert (got["reward"], got["extracted_answer"]) == (case["reward"], case["extracted"])


def test_every_mcqa_case_is_held() -> None:
    assert len(mcqa_cases()) == 3 * 22 + 3


@pytest.mark.parametrize("case", [c for c in CASES["structured_outputs/json"] if "text" in c], ids=lambda c: c["text"])
async def test_structured_outputs_agrees_with_nemo_gym(case: dict[str, Any]) -> None:
    schema = json.dumps(CASES["structured_outputs_schema"])
    got = await verdict("structured_outputs", case["text"], schema_str=schema, schema_type="json")
    assert (got["reward"], got["error_type"]) == (case["reward"], case["error_type"])


@pytest.mark.parametrize(
    "case", [c for c in CASES["structured_outputs/json"] if "tool_call_arguments" in c], ids=lambda c: str(c)
)
async def test_structured_outputs_tool_call_rows_agree_with_nemo_gym(case: dict[str, Any]) -> None:
    """NeMo Gym's v4 rows answer with a function call: its arguments (or their payload key) are the JSON."""
    runner = EnvRunner(load_environment_class("structured_outputs")())
    call = {"type": "function_call", "call_id": "c1", "name": "submit", "arguments": case["tool_call_arguments"]}
    fields = {"schema_str": json.dumps(CASES["structured_outputs_schema"]), "response_mode": "tool_call"}
    fields |= {"tool_name": "submit", "tool_payload_key": case["tool_payload_key"]}
    got = await runner.verify(row(**fields), {"output": [call]}, None)
    assert (got["reward"], got["error_type"]) == (case["reward"], case["error_type"])


ANTLR_4_9_PERCENT = {r"\boxed{10\%}": (1.0, r"10\%"), r"\boxed{0.1}": (0.0, "0.100000000000000")}
r"""What math-verify gives for `10\%` under antlr4-python3-runtime 4.9.3, which NeMo Gym's hydra-core pins (the
`nemo-gym` extra installs it): latex2sympy2_extended 1.11's parser for 4.9.3 cannot read a percentage, so `10\%`
stays text. NeMo Gym's verdicts were taken with antlr 4.13.2; NeMo Gym in its own environment (hydra, so 4.9.3)
scores these as we do here."""


@pytest.mark.parametrize("case", CASES["math_with_judge/should_use_judge=false"], ids=lambda c: c["text"])
async def test_math_agrees_with_nemo_gyms_math_with_judge(case: dict[str, Any]) -> None:
    got = await verdict("math", case["text"], expected_answer=case["expected_answer"])
    expected = (case["reward"], case["extracted_answer"])
    if metadata.version("antlr4-python3-runtime").startswith("4.9.") and case["text"] in ANTLR_4_9_PERCENT:
        expected = ANTLR_4_9_PERCENT[case["text"]]
    assert (got["reward"], got["extracted_answer"]) == expected


# ---- NeMo Gym's own recorded rollouts (tests/data/nemo_gym/<server>/), re-scored by our environments ----------

SERVERS = {
    "code_gen": "code_generation",
    "mcqa": "multiple_choice",
    "instruction_following": "instruction_following",
    "math_with_judge": "math",
}
RECORDED_BY_AN_OLDER_NEMO_GYM = {("mcqa", 2): 1.0}
"""NeMo Gym 0.7.0 itself re-scores this recording 1.0 (`\\boxed{C: ...}` reads as C); it was recorded as 0.0."""
SLOW_TO_CHECK = {("math_with_judge", 1)}
"""math-verify needs 5-40 s for this answer on this machine: its reward is 1.0, or (past the deadline) 0 with
`rejected` (the answer, `(1+\\sqrt{3})^{4033}...`, is what took the time), or no reward on a machine too busy to
check even the reference against itself."""


def recorded(server: str) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    folder = Path(__file__).parent / "data" / "nemo_gym" / server

    def key(row: dict[str, Any]) -> str:
        return json.dumps([(i.get("role"), i.get("content")) for i in row["responses_create_params"]["input"]])

    rows = {key(r): r for r in map(json.loads, (folder / "example.jsonl").read_text().splitlines())}
    rollouts = list(map(json.loads, (folder / "example_rollouts.jsonl").read_text().splitlines()))
    return [(i, rows[key(rollout)], rollout) for i, rollout in enumerate(rollouts)]


async def test_bigcodebench_rows_whose_packages_the_sandbox_lacks_are_missing_package_not_zero() -> None:
    """NeMo Gym's BigCodeBench recordings: a row whose task imports a package the sandbox's Python lacks (`wordcloud`,
    and here `pandas`, `psutil`) cannot be scored there: a typed failure naming it, never the silent 0 it was."""
    from gym_serve.envs.code_generation import task_modules
    from gym_serve.errors import MissingPackageError
    from gym_serve.verifiers.code import sandbox_lacks

    runner = EnvRunner(load_environment_class("code_generation")())
    lacked = []
    for index, row, rollout in recorded("bigcodebench"):
        try:
            got = await runner.verify(row, rollout["response"], None)
        except MissingPackageError as e:
            named = set(re.findall(r"`(\w+)`", str(e)))
            needed = task_modules(runner.env.Task.model_validate(row))
            assert named and named <= needed and sandbox_lacks(sorted(named)) == sorted(named), (index, str(e))
            assert failure_kind(e) is FailureKind.MISSING_PACKAGE
            lacked += named
            continue
        assert got["reward"] == rollout["reward"], index
    assert "wordcloud" in lacked  # BigCodeBench/34's; installed nowhere here


@pytest.mark.parametrize("server", sorted(SERVERS))
async def test_nemo_gyms_recorded_rollouts_get_nemo_gyms_rewards(server: str) -> None:
    from gym_serve.errors import VerifierTimeoutError

    runner = EnvRunner(load_environment_class(SERVERS[server])())
    for index, row, rollout in recorded(server):
        expected = RECORDED_BY_AN_OLDER_NEMO_GYM.get((server, index), rollout["reward"])
        try:
            got = await runner.verify(row, rollout["response"], None)
        except VerifierTimeoutError:
            assert (server, index) in SLOW_TO_CHECK
            continue
        if (server, index) in SLOW_TO_CHECK and "rejected" in got:
            assert got["reward"] == 0.0, (server, index)
            continue
        assert got["reward"] == expected, (server, index)
        if server == "instruction_following":  # instruction by instruction, too
            assert got["follow_instruction_list"] == rollout["follow_instruction_list"], index
