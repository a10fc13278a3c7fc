"""Rollout rows for the health checks' and the viewer's tests: clean ones, and one that trips each check.

`clean_rows()` is a small collection in which no check finds anything: token
bundles that extend each other, usage that matches them, rewards that differ
within every task, a verify well inside its deadline. `tripping_rows()` adds,
per check, a task built to trip it, and says which checks each task trips.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

AGENT = "health_env"


def call(prompt: list[int], generated: list[int], **extra: Any) -> dict[str, Any]:
    """A token bundle, as the vLLM tier puts it on a model call's last item."""
    return {
        "prompt_token_ids": prompt,
        "generation_token_ids": generated,
        "generation_log_probs": [-0.5] * len(generated),
        **extra,
    }


def message(text: str, **bundle: Any) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": content, **bundle}


def tool_call(call_id: str, name: str = "lookup", arguments: str = '{"q": "x"}', **bundle: Any) -> dict[str, Any]:
    item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name, "arguments": arguments}
    return {**item, "status": "completed", **bundle}


def tool_output(call_id: str, output: str = "42") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def episode(
    task: int, rollout: int, reward: float, *, answer: str = "42", first_gen: list[int] | None = None, **extra: Any
) -> dict[str, Any]:
    """A clean two-call episode: a tool call, its output, an answer; contiguous bundles, matching usage."""
    first_prompt, first_gen = [1, 2, 3], first_gen if first_gen is not None else [4, 5]
    second_prompt = [*first_prompt, *first_gen, 6, 7]
    second_gen = [8, 9, 10]
    output = [
        tool_call(f"c{task}_{rollout}", **call(first_prompt, first_gen, policy_version=3)),
        tool_output(f"c{task}_{rollout}"),
        message(answer, **call(second_prompt, second_gen, policy_version=3)),
    ]
    return row(task, rollout, reward, output, usage=_usage(output), **extra)


def row(task: int, rollout: int, reward: float, output: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    usage = fields.pop("usage", None)
    response: dict[str, Any] = {
        "id": f"resp_{task}_{rollout}",
        "model": "tiny",
        "status": "completed",
        "output": output,
    }
    if usage is not None:
        response["usage"] = usage
    response.update(fields.pop("response_fields", {}))
    return {
        "responses_create_params": {"input": [{"role": "user", "content": f"What is task {task}?"}]},
        "expected": "42",
        "agent_ref": {"name": AGENT},
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        "response": response,
        "reward": reward,
        "mask_sample": False,
        "policy_version_min": 3,
        "policy_version_max": 3,
        "_gs_timings": {"model_s": 0.2, "tool_s": 0.01, "verify_s": 0.05, "verify_deadline_s": 60.0},
        **fields,
    }


def failure(task: int, rollout: int, kind: str, error: str) -> dict[str, Any]:
    input_row = {
        k: v for k, v in episode(task, rollout, 0.0).items() if k not in ("response", "reward", "_gs_timings")
    }
    return {**input_row, "_ng_failure_class": kind, "error": error, "attempts": 3, "mask_sample": True}


def _usage(output: list[dict[str, Any]]) -> dict[str, Any]:
    bundles = [item for item in output if "generation_token_ids" in item]
    prompt = sum(len(b["prompt_token_ids"]) for b in bundles)
    completion = sum(len(b["generation_token_ids"]) for b in bundles)
    return {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}


def clean_rows() -> list[dict[str, Any]]:
    """Three tasks, rewards that differ within each; one rollout failed on a timeout (no check's business)."""
    rows = [episode(task, k, reward) for task in range(3) for k, reward in enumerate((1.0, 0.0))]
    rows.append(failure(2, 2, "agent_timeout", "rollout attempt did not finish within 600.0 s"))
    return rows


def tripping_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, set[int | None]]]:
    """(rollout rows, failure rows, {check: the tasks its findings must be on}); the unreadable line is task None."""
    rows, failures = clean_rows(), []

    def pair(task: int, tripping: dict[str, Any]) -> None:  # the tripping rollout and a clean sibling
        rows.extend([tripping, episode(task, 1, 1.0 - tripping["reward"])])

    pair(11, episode(11, 0, 1.0, response_fields={"incomplete_details": "max_output_tokens"}))  # a check raises
    rows.extend([episode(12, 0, 1.0), episode(12, 0, 1.0), episode(12, 1, 0.0)])  # rollout 0 twice
    pair(13, row(13, 0, 0.0, [], usage={"input_tokens": 0, "output_tokens": 0}))  # the model produced nothing
    failures.append(failure(14, 0, "model_error", "model `responses` failed: 503 from the endpoint"))
    rows.append(episode(14, 1, 0.0))
    hollow = [
        tool_call("h1", **call([1, 2, 3], [4, 5])),
        tool_output("h1"),
        message("", **call([1, 2, 3, 4, 5, 6, 7], [2])),  # the model said nothing but its end token
    ]
    pair(15, row(15, 0, 0.0, hollow, usage=_usage(hollow)))
    pair(16, episode(16, 0, 1.0, first_gen=[]))  # a call that generated no token (yet the row goes on)
    pair(17, row(17, 0, 1.0, [message("42")], usage={"input_tokens": 5}))  # usage without output_tokens
    uncaptured = [tool_call("u1", **call([1, 2, 3], [4, 5])), tool_output("u1"), message("42")]
    pair(18, row(18, 0, 1.0, uncaptured, usage=_usage(uncaptured)))
    miscounted = episode(19, 0, 1.0)
    miscounted["response"]["usage"]["input_tokens"] += 1
    pair(19, miscounted)
    cut = [tool_call("r1", **call([1, 2, 3], [4, 5])), tool_output("r1"), message("", **call([1, 2, 3, 4, 5, 6], []))]
    cut[-1]["status"] = "incomplete"
    runaway = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    pair(20, row(20, 0, 0.0, cut, usage=_usage(cut), response_fields=runaway))
    rows.extend([episode(21, k, float(k), mask_sample=True) for k in range(2)])  # both masked: the task is
    failures.append(failure(22, 0, "transport_timeout", "model `responses` did not answer within 300.0 s"))
    broken = episode(23, 0, 1.0)
    broken["response"]["output"][2]["prompt_token_ids"][1] = 99  # history re-tokenized differently
    pair(23, broken)
    pair(24, episode(24, 0, 1.0, policy_stale=True, policy_lag=5))
    rows.extend([episode(25, k, 1.0) for k in range(2)])  # every rollout right: nothing to learn from
    slow = episode(26, 0, 1.0)
    slow["_gs_timings"].update(verify_s=55.0, verify_deadline_s=60.0)
    pair(26, slow)
    expected: dict[str, set[int | None]] = {
        "check_execution_error": {11},
        "record_unreadable": {None},
        "rollout_duplicate_identity": {12},
        "rollout_missing_agent_turns": {13},
        "rollout_ended_on_failed_model_call": {14, 22},
        "model_call_failed": {14, 22},
        "agent_turn_hollow": {15, 20},
        "model_call_zero_completion_tokens": {16, 20},
        "model_call_missing_token_counts": {17},
        "trajectory_capture_mismatch": {18},
        "rollout_token_count_mismatch": {19},
        "model_call_runaway_generation": {20},
        "rollout_masked": {21},
        "task_consistently_unhealthy": {21},
        "task_no_successful_model_calls": {22},
        "token_contiguity_break": {23},
        "policy_stale": {24},
        "group_identical_rewards": {25},
        "verify_near_deadline": {26},
    }
    return rows, failures, expected


def write_collection(
    folder: Path, rows: list[dict[str, Any]], failures: list[dict[str, Any]], *, bad: str = ""
) -> Path:
    """`rollouts.jsonl` (with `bad` as its third line, if given) and `rollouts_failures.jsonl`."""
    lines = [json.dumps(r) for r in rows]
    if bad:
        lines.insert(2, bad)
    out = folder / "rollouts.jsonl"
    out.write_text("\n".join(lines) + "\n")
    (folder / "rollouts_failures.jsonl").write_text("".join(json.dumps(f) + "\n" for f in failures))
    return out
