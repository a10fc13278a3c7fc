"""Rollout rows ⇄ ATIF v1.7 trajectories: every turn as ATIF says it, and back to the very same row.

To ATIF (`to_trajectory`): the input messages become `system` / `user`
steps; each turn (`gym_serve.wire.turns`) becomes an `agent` step — its
message, its reasoning as `reasoning_content`, its function calls as
`tool_calls` with their outputs as the `observation`, the token bundle as
`metrics` (counts, and the ids and log-probs unless left out) — and a user
message the environment answered with becomes a `user` step. A turn that both
says something and calls tools is two agent steps (the message, then the calls
with their observation, `llm_call_count` 0), the shape NeMo Gym's reader takes:
ATIF does not order a step's message against its calls.

Back (`to_row`): what ATIF has a field for is read from that field; what it
has none for (item ids, statuses, the row's task fields and `reward`, the
response's `usage`) is kept under `extra.gym_serve` and put back, so a row
exported and read back is equal to the row (`to_trajectory` checks that, for
every row it writes). A trajectory from another exporter (no `extra.gym_serve`)
reads as a response built from its steps, joined to the task row it is for.

Over 400 lines: the two directions are one mapping, and each field's way there
is read beside its way back.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from gym_serve.errors import InputError
from gym_serve.wire.atif import (
    AtifAgent,
    AtifFinalMetrics,
    AtifObservationResult,
    AtifStep,
    AtifToolCall,
    AtifTrajectory,
)
from gym_serve.wire.tokens import TOKEN_FIELDS
from gym_serve.wire.turns import Turn, content_text, split_turns

__all__ = ["to_row", "to_trajectory"]

OURS = "gym_serve"
_SOURCES = {"system": "system", "developer": "system", "user": "user"}


def to_trajectory(
    row: dict[str, Any], *, session_id: str, agent_version: str, token_ids: bool = True
) -> AtifTrajectory:
    """The ATIF trajectory of a finished rollout row; raises `InputError` (naming the field) for what has no place.

    `token_ids=False` leaves the token ids and log-probs out (their counts stay):
    NeMo Gym's reverify reader refuses a trajectory that has them.
    """
    response = row.get("response")
    if not isinstance(response, dict):
        raise InputError("not a finished rollout: no `response` object", field="response")
    params = row.get("responses_create_params") or {}
    steps = [_input_step(item, n) for n, item in enumerate(_input_items(params.get("input")))]
    for turn in split_turns([item for item in response.get("output") or [] if isinstance(item, dict)]):
        steps += _turn_steps(turn, token_ids)
    for number, step in enumerate(steps, start=1):
        step["step_id"] = number
    usage: dict[str, Any] = response["usage"] if isinstance(response.get("usage"), dict) else {}
    kept = {k: v for k, v in row.items() if k != "response"}
    if isinstance(row.get("responses_create_params"), dict):
        kept["responses_create_params"] = {k: v for k, v in params.items() if k != "input" or isinstance(v, str)}
    source = {
        name: row.get(key)
        for name, key in (("task_index", "_ng_task_index"), ("rollout_index", "_ng_rollout_index"))
        if type(row.get(key)) is int and row[key] >= 0
    }
    trajectory = AtifTrajectory(
        schema_version="ATIF-v1.7",
        session_id=session_id,
        trajectory_id=f"{session_id}:{row.get('_ng_task_index')}:{row.get('_ng_rollout_index')}",
        agent=AtifAgent(
            name=str((row.get("agent_ref") or {}).get("name") or "gym-serve"),
            version=agent_version,
            model_name=response.get("model") if isinstance(response.get("model"), str) else None,
            tool_definitions=params.get("tools") or None,
        ),
        steps=[AtifStep.model_validate(step) for step in steps],
        final_metrics=AtifFinalMetrics(
            total_prompt_tokens=_count(usage.get("input_tokens")),
            total_completion_tokens=_count(usage.get("output_tokens")),
            total_cached_tokens=_count((usage.get("input_tokens_details") or {}).get("cached_tokens")),
            total_steps=len(steps),
        ),
        extra={
            OURS: {"row": kept, "response": {k: v for k, v in response.items() if k != "output"}},
            "nemo_gym": {"source": source},  # NeMo Gym's reader checks these against its manifest
        },
    )
    expected, back = (row if token_ids else _without_token_ids(row)), to_row(trajectory)
    if back != expected:
        raise InputError(f"cannot be written to ATIF exactly: {_first_difference(back, expected)}")
    return trajectory


def to_row(trajectory: AtifTrajectory, *, task_row: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rollout row a trajectory holds; `task_row` (a materialized input) for one without `extra.gym_serve`."""
    ours = (trajectory.extra or {}).get(OURS) or {}
    base = copy.deepcopy(ours.get("row")) if "row" in ours else copy.deepcopy(task_row)
    if base is None:
        raise InputError("not written by gym-serve (no `extra.gym_serve.row`): give the task row it is for")
    inputs: list[dict[str, Any]] = []
    output: list[dict[str, Any]] = []
    groups: list[list[AtifStep]] = []
    for step in trajectory.steps:
        turn = _step_extra(step).get("turn")
        if not groups and turn is None and (step.source != "agent" or step.is_copied_context):
            inputs.append(_restored_input(step))
        elif turn is not None and groups and _step_extra(groups[-1][0]).get("turn") == turn:
            groups[-1].append(step)
        elif turn is None and step.source != "agent" and groups:
            groups[-1].append(step)  # another exporter's user step: it answers the turn before it
        else:
            groups.append([step])
    for group in groups:
        output += _turn_items(group)
    params = base.setdefault("responses_create_params", {})
    if "input" not in params:
        params["input"] = inputs
    response = copy.deepcopy(ours["response"]) if "response" in ours else _response_of(trajectory)
    base["response"] = {**response, "output": output}
    return base


# ---- to ATIF ----------------------------------------------------------------------------------------------------


def _input_items(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return [item for item in value or [] if isinstance(item, dict)]


def _input_step(item: dict[str, Any], number: int) -> dict[str, Any]:
    role = item.get("role")
    if item.get("type", "message") != "message" or role not in (*_SOURCES, "assistant"):
        raise InputError(
            f"input item {number} ({item.get('type', 'message')}, role {role!r}) has no ATIF step: "
            "only system, developer, user and assistant messages start a trajectory",
            field=f"responses_create_params.input.{number}",
        )
    content = item.get("content")
    kept = {k: v for k, v in item.items() if k != "content" or not isinstance(v, str)}
    step: dict[str, Any] = {"message": content if isinstance(content, str) else content_text(content)}
    if role == "assistant":
        return {**step, "source": "agent", "is_copied_context": True, "extra": {OURS: {"item": kept}}}
    return {**step, "source": _SOURCES[role], "extra": {OURS: {"item": kept}}}


def _turn_steps(turn: Turn, token_ids: bool) -> list[dict[str, Any]]:
    calls = turn.calls
    messages = [item for item in turn.items if item.get("type", "message") == "message"]
    reasonings = [item for item in turn.items if item.get("type") == "reasoning"]
    bundle = turn.bundle if turn.items and turn.bundle is turn.items[-1] else None
    kept = [_kept(item, messages, reasonings, bundle, token_ids) for item in turn.items]
    said: dict[str, Any] = {"source": "agent", "message": turn.text, "llm_call_count": 1 if turn.items else 0}
    if turn.reasoning:
        said["reasoning_content"] = turn.reasoning
    if bundle is not None and _complete(bundle):
        said["metrics"] = _metrics(bundle, token_ids)
    acted: dict[str, Any] = {}
    if calls:
        acted["tool_calls"] = [_tool_call(call) for call in calls]
    results = [_result(answer, calls) for answer in turn.answers if answer.get("type") == "function_call_output"]
    if results:
        acted["observation"] = {"results": results}
    extra = {OURS: {"turn": turn.index}}
    if turn.text and acted:  # ATIF orders no message against calls: the message, then the calls
        steps = [{**said, "extra": {OURS: {"turn": turn.index, "items": kept}}}]
        steps.append({"source": "agent", "message": "", "llm_call_count": 0, **acted, "extra": extra})
    else:
        steps = [{**said, **acted, "extra": {OURS: {"turn": turn.index, "items": kept}}}]
    for answer in turn.answers:
        if answer.get("type") != "function_call_output":
            steps.append(_input_step(answer, turn.start))
            steps[-1]["extra"][OURS]["turn"] = turn.index
    return steps


def _kept(
    item: dict[str, Any],
    messages: list[dict[str, Any]],
    reasonings: list[dict[str, Any]],
    bundle: dict[str, Any] | None,
    token_ids: bool,
) -> dict[str, Any]:
    """An item without what its step already says (so it is said once), where that is said exactly."""
    carried: set[str] = set()
    kind = item.get("type", "message")
    if (
        kind == "message"
        and len(messages) == 1
        and messages[0] is item
        and item.get("content") == _output_text(content_text(item.get("content")))
    ):
        carried.add("content")
    if (
        kind == "reasoning"
        and len(reasonings) == 1
        and reasonings[0] is item
        and "content" not in item
        and item.get("summary") == _summary(content_text(item.get("summary")))
    ):
        carried.add("summary")
    if kind == "function_call":
        carried.add("name")
        arguments = _arguments(item)
        if arguments is not None and _text_of(arguments) == item.get("arguments"):
            carried.add("arguments")
    if item is bundle and _complete(item):
        carried.update(TOKEN_FIELDS)
    elif not token_ids:
        carried.update(field for field in TOKEN_FIELDS if field in item)
    return {k: v for k, v in item.items() if k not in carried}


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "tool_call_id": str(call.get("call_id") or ""),
        "function_name": str(call.get("name") or ""),
        "arguments": _arguments(call) or {},
    }


def _result(answer: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    call_id = answer.get("call_id")
    output = answer.get("output")
    named = call_id if any(call.get("call_id") == call_id for call in calls) else None
    kept = {k: v for k, v in answer.items() if k not in ("output", "call_id") or (k == "call_id" and named is None)}
    if not isinstance(output, str):
        kept["output"] = output
    result = {"source_call_id": named, "content": output if isinstance(output, str) else content_text(output)}
    return {**result, "extra": {OURS: {"item": kept}}}


def _metrics(bundle: dict[str, Any], token_ids: bool) -> dict[str, Any]:
    prompt, generated, logprobs = (bundle[field] for field in TOKEN_FIELDS)
    metrics: dict[str, Any] = {"prompt_tokens": len(prompt), "completion_tokens": len(generated)}
    if token_ids:
        metrics.update(prompt_token_ids=prompt, completion_token_ids=generated, logprobs=logprobs)
    return metrics


def _complete(bundle: dict[str, Any]) -> bool:
    prompt, generated, logprobs = (bundle.get(field) for field in TOKEN_FIELDS)
    return (
        isinstance(prompt, list)
        and isinstance(generated, list)
        and isinstance(logprobs, list)
        and len(generated) == len(logprobs)
    )


def _arguments(call: dict[str, Any]) -> dict[str, Any] | None:
    try:
        parsed = json.loads(call.get("arguments") or "")
    except (TypeError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _text_of(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments)


def _output_text(text: str) -> list[dict[str, Any]]:
    return [{"type": "output_text", "text": text, "annotations": []}]


def _summary(text: str) -> list[dict[str, Any]]:
    return [{"type": "summary_text", "text": text}]


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _without_token_ids(row: dict[str, Any]) -> dict[str, Any]:
    row = copy.deepcopy(row)
    for item in row["response"].get("output") or []:
        for field in TOKEN_FIELDS:
            item.pop(field, None) if isinstance(item, dict) else None
    return row


def _first_difference(got: Any, want: Any, path: str = "") -> str:
    if isinstance(got, dict) and isinstance(want, dict):
        for key in sorted(set(got) | set(want), key=str):
            if got.get(key) != want.get(key):
                return _first_difference(got.get(key), want.get(key), f"{path}.{key}" if path else str(key))
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            if a != b:
                return _first_difference(a, b, f"{path}.{i}")
    return f"`{path}` would read back as {json.dumps(got)[:120]} instead of {json.dumps(want)[:120]}"


# ---- back to a row ----------------------------------------------------------------------------------------------


def _step_extra(step: AtifStep) -> dict[str, Any]:
    return (step.extra or {}).get(OURS) or {}


def _message_text(step: AtifStep) -> str:
    return step.message if isinstance(step.message, str) else "".join(p.text or "" for p in step.message)


def _restored_input(step: AtifStep) -> dict[str, Any]:
    kept = _step_extra(step).get("item")
    if kept is None:
        return {"role": "assistant" if step.source == "agent" else step.source, "content": _message_text(step)}
    return {"content": _message_text(step)} | kept


def _turn_items(group: list[AtifStep]) -> list[dict[str, Any]]:
    """A turn's items, its tool outputs, then its user answers, from the turn's steps."""
    agent = [step for step in group if step.source == "agent"]
    said = next((step for step in agent if "items" in _step_extra(step)), None)
    calls = {call.tool_call_id: call for step in agent for call in step.tool_calls or []}
    if said is not None:
        items = [_restored_item(kept, said, calls) for kept in _step_extra(said)["items"]]
        metrics = said.metrics
    else:  # another exporter's step: the items it stands for
        items = _items_of(agent[0]) if agent else []
        metrics = agent[0].metrics if agent else None
    if items and metrics is not None and metrics.completion_token_ids is not None:
        last = items[-1]
        last.setdefault("prompt_token_ids", metrics.prompt_token_ids or [])
        last.setdefault("generation_token_ids", metrics.completion_token_ids)
        last.setdefault("generation_log_probs", metrics.logprobs or [])
    outputs = [_tool_output(result) for step in agent if step.observation for result in step.observation.results]
    answers = [_restored_input(step) for step in group if step.source != "agent"]
    return items + outputs + answers


def _restored_item(kept: dict[str, Any], said: AtifStep, calls: dict[str, AtifToolCall]) -> dict[str, Any]:
    item = dict(kept)
    kind = item.get("type", "message")
    if kind == "message" and "content" not in item:
        item["content"] = _output_text(_message_text(said))
    elif kind == "reasoning" and "summary" not in item:
        item["summary"] = _summary(said.reasoning_content or "")
    elif kind == "function_call":
        call = calls.get(str(item.get("call_id")))
        if call is not None:
            item.setdefault("name", call.function_name)
            item.setdefault("arguments", _text_of(call.arguments))
    return item


def _items_of(step: AtifStep) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if step.reasoning_content:
        items.append({"type": "reasoning", "id": f"rs_{step.step_id}", "summary": _summary(step.reasoning_content)})
    if _message_text(step) or not step.tool_calls:
        content = _output_text(_message_text(step))
        items.append(
            {
                "type": "message",
                "id": f"msg_{step.step_id}",
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        )
    for call in step.tool_calls or []:
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{call.tool_call_id}",
                "call_id": call.tool_call_id,
                "name": call.function_name,
                "arguments": _text_of(call.arguments),
                "status": "completed",
            }
        )
    return items


def _tool_output(result: AtifObservationResult) -> dict[str, Any]:
    kept = ((result.extra or {}).get(OURS) or {}).get("item")
    content = result.content
    text = content if isinstance(content, str) else "".join(p.text or "" for p in content or [])
    item = {"type": "function_call_output", "call_id": result.source_call_id, "output": text}
    return item | kept if kept is not None else item


def _response_of(trajectory: AtifTrajectory) -> dict[str, Any]:
    totals = trajectory.final_metrics or AtifFinalMetrics()
    usage = None
    if totals.total_prompt_tokens is not None and totals.total_completion_tokens is not None:
        usage = {
            "input_tokens": totals.total_prompt_tokens,
            "output_tokens": totals.total_completion_tokens,
            "total_tokens": totals.total_prompt_tokens + totals.total_completion_tokens,
            "input_tokens_details": {"cached_tokens": totals.total_cached_tokens or 0},
        }
    response: dict[str, Any] = {
        "id": trajectory.trajectory_id or "",
        "object": "response",
        "model": trajectory.agent.model_name,
        "status": "completed",
    }
    return response | ({"usage": usage} if usage else {})
