"""Example rows replay right (1.0) then wrong (0.0); generated rows verify; forged rows cannot change a reward."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gym_serve import EnvRunner, VerifyError
from gym_serve.testing.fixtures import replay_examples

from . import ReasoningGym
from .generation import GenerationError, extract_answer, generate_entry, normalize_config
from .make_rows import make_rows

REPO = Path(__file__).resolve().parents[2]
FAMILIES = ["basic_arithmetic", "chain_sum", "leg_counting", "letter_counting", "word_sorting", "spell_backward"]


def answer(text: str) -> dict[str, Any]:
    return {
        "id": "r",
        "object": "response",
        "status": "completed",
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}],
    }


async def test_example_rollouts_carry_the_verifier_fields() -> None:
    examples = await replay_examples(ReasoningGym)
    assert len(examples) >= 5 and len({row["dataset"] for row, _, _ in examples}) >= 5
    for row, good, bad in examples:
        assert good["reward"] == 1.0 and good["extracted_answer"] == row["answer"]
        assert good["task_name"] == row["dataset"]
        assert bad["reward"] == 0.0 and bad["extracted_answer"] not in (None, row["answer"])


@pytest.mark.parametrize("family", FAMILIES)
async def test_generated_rows_verify_with_the_datasets_own_answers(family: str) -> None:
    runner = EnvRunner(ReasoningGym())
    rows = list(make_rows(family, size=4, seed=7))
    assert [row["index"] for row in rows] == [0, 1, 2, 3]
    assert len({row["question"] for row in rows}) > 1, "different indices, different tasks"
    for row in rows:
        assert row["responses_create_params"]["input"][-1]["content"] == row["question"]
        assert row["metadata"]["source_dataset"] == family and row["dataset_config"]["seed"] == 7
        tagged = await runner.verify(row, answer(f"Thinking...\n<answer>{row['answer']}</answer>"), None)
        boxed = await runner.verify(row, answer(f"So: \\boxed{{{row['answer']}}}"), None)
        assert tagged["reward"] == boxed["reward"] == 1.0
        assert (await runner.verify(row, answer(row["answer"]), None))["reward"] == 0.0, "untagged text is no answer"


def first_row() -> dict[str, Any]:
    return next(make_rows("chain_sum", size=3, seed=11))


async def test_a_forged_answer_or_metadata_fails_instead_of_rescoring() -> None:
    runner = EnvRunner(ReasoningGym())
    row = first_row()
    wrong = str(int(row["answer"]) + 5)
    assert (await runner.verify(row, answer(f"<answer>{wrong}</answer>"), None))["reward"] == 0.0
    for forged in (
        {**row, "answer": wrong},
        {**row, "metadata": {**row["metadata"], "expression": "1 + 1"}},
        {**row, "question": "What is 1 + 1?"},
    ):
        with pytest.raises(VerifyError, match="differs from what reasoning-gym"):
            await runner.verify(forged, answer(f"<answer>{wrong}</answer>"), None)
    without_entry = {k: v for k, v in row.items() if k not in ("question", "answer", "metadata")}
    assert (await runner.verify(without_entry, answer(f"<answer>{row['answer']}</answer>"), None))["reward"] == 1.0


async def test_nemo_gym_rows_need_trust_and_the_allow_list_is_kept() -> None:
    row = first_row()
    nemo = {k: row[k] for k in ("responses_create_params", "question", "answer", "metadata")}
    with pytest.raises(VerifyError, match="trust_row_entry"):
        await EnvRunner(ReasoningGym()).verify(nemo, answer(f"<answer>{row['answer']}</answer>"), None)
    trusting = EnvRunner(ReasoningGym({"trust_row_entry": True}))
    assert (await trusting.verify(nemo, answer(f"<answer>{row['answer']}</answer>"), None))["reward"] == 1.0
    only_spelling = EnvRunner(ReasoningGym({"datasets": ["spell_backward"]}))
    with pytest.raises(VerifyError, match="`chain_sum` is not among"):
        await only_spelling.verify(row, answer("<answer>1</answer>"), None)


@pytest.mark.parametrize(
    ("dataset", "config", "index", "says"),
    [
        ("chain_sums", {"seed": 1}, 0, "did you mean `chain_sum`"),
        ("chain_sum", {"size": 5}, 0, "needs an integer `seed`"),
        ("chain_sum", {"seed": 1, "max_termz": 3}, 0, "has no field `max_termz`"),
        ("chain_sum", {"seed": 1, "min_terms": 0}, 0, "min_terms must be positive"),
        ("chain_sum", {"seed": 1, "size": 5}, 5, "index must be an integer in [0, size=5)"),
        ("basic_arithmetic", {"seed": 1, "format_style": "fancy"}, 0, "`format_style`: cannot use 'fancy'"),
        ("spell_backward", {"seed": 1, "data_file": "../../../../etc/passwd"}, 0, "shipped with reasoning-gym"),
        ("composite", {"seed": 1}, 0, "composite"),
    ],
)
def test_bad_generation_requests_are_refused_by_name(dataset: str, config: dict, index: int, says: str) -> None:
    with pytest.raises(GenerationError) as info:
        generate_entry(dataset, config, index)
    assert says in str(info.value)


def test_configs_are_written_in_full_and_read_back_the_same() -> None:
    written = normalize_config("word_sorting", {"seed": 3, "transformation": "uppercase"})
    assert written["transformation"] == "uppercase" and written["max_words"] == 10 and written["size"] == 500
    assert normalize_config("word_sorting", written) == written
    assert generate_entry("word_sorting", written, 2)["metadata"]["transformed_words"][0].isupper()
    arithmetic = normalize_config("basic_arithmetic", {"seed": 3})
    assert arithmetic["operators"] == ["+", "-", "*", "/"], "tuples travel as lists"


@pytest.mark.parametrize(
    ("text", "extracted"),
    [
        ("<answer>1</answer> then <answer> 2 </answer>", "2"),
        ("no tags, but \\boxed{\\frac{1}{2}} at the end", "\\frac{1}{2}"),
        ("<answer>tags win</answer> over \\boxed{3}", "tags win"),
        ("just a number 42", None),
        ("<answer>never closed", None),
    ],
)
def test_extract_answer(text: str, extracted: str | None) -> None:
    assert extract_answer(text) == extracted


def test_extraction_of_a_degenerate_output_is_linear() -> None:
    started = time.monotonic()
    assert extract_answer("<answer>" * 200_000) is None
    assert extract_answer("<answer>" * 100_000 + "7</answer>") == "7"
    assert time.monotonic() - started < 1


def test_make_rows_command_writes_rows_without_the_network(tmp_path: Path) -> None:
    """The generator runs with every socket refused: reasoning-gym's tasks are made offline."""
    out = tmp_path / "rows.jsonl"
    guard = (
        "import sys\n"
        "def refuse(event, args):\n"
        "    if event.startswith(('socket.', 'urllib.')):\n"
        "        raise RuntimeError(f'network use: {event}')\n"
        "sys.addaudithook(refuse)\n"
        "from gym_serve.envs.reasoning_gym.make_rows import main\n"
        f"sys.exit(main(['--dataset', 'letter_counting', '--size', '3', '--seed', '5', '--output', {str(out)!r},"
        " '--config', '{\"max_words\": 6}']))\n"
    )
    done = subprocess.run([sys.executable, "-c", guard], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2] and rows[0]["dataset_config"]["max_words"] == 6
    assert rows == list(make_rows("letter_counting", size=3, seed=5, config={"max_words": 6}))
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_serve.envs.reasoning_gym.make_rows",
            "--dataset",
            "nope",
            "--size",
            "1",
            "--seed",
            "1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "unknown reasoning-gym dataset `nope`" in bad.stderr


async def test_an_answer_that_keeps_the_scorer_busy_scores_0_not_a_masked_row() -> None:
    """`countdown` hands the answer to sympy, where `9**9**9**9` computes for ever (in a thread it would also hold
    the GIL, stalling the replica): the policy wrote it, so it scores 0, never `verifier_timeout`."""
    runner = EnvRunner(ReasoningGym(verify_timeout_s=4.0))  # 2 s to score an answer
    row = next(make_rows("countdown", size=1, seed=3))
    verdict = await runner.verify(row, answer("<answer>9**9**9**9</answer>"), None)  # a verdict: not past the deadline
    assert verdict["reward"] == 0.0 and "could not score the answer" in verdict["rejected"]
    right = await runner.verify(row, answer(f"<answer>{row['answer']}</answer>"), None)
    assert right["reward"] == 1.0 and "rejected" not in right, "a new worker scores the next answer"
