"""Token capture's segment logic without a server: which call extends which segment, and what the tier is sent.

The tier here is a function that answers like a token-exact one (the prompt ids extend the last bundle the
request carries, unless told to render afresh); the real engine's capture is `tests/test_harness_agents.py`.
"""

from __future__ import annotations

from typing import Any

from gym_serve.rollout.capture import Capture, Prepared
from gym_serve.wire.tokens import token_calls

USER = {"type": "message", "role": "user", "content": "What's the weather in Paris?"}
TOOL = {"type": "function", "name": "weather", "parameters": {"type": "object"}}


def answer(prepared: Prepared, *, rerender: bool = False) -> dict[str, Any]:
    """A token-exact tier's answer: a function call whose prompt extends the request's last bundle."""
    before = token_calls(prepared.request["input"])
    last = before[-1] if before and not rerender else None
    prompt = last["prompt_token_ids"] + last["generation_token_ids"] if last else [1, 2, 3]
    call = {"type": "function_call", "call_id": f"c{len(prompt)}", "name": "weather", "arguments": '{"city": "Paris"}'}
    bundle = {"prompt_token_ids": [*prompt, 9], "generation_token_ids": [7, 8], "generation_log_probs": [-0.5, -0.5]}
    return {"output": [{**call, **bundle}], "status": "completed"}


def turn(capture: Capture, items: list[dict[str, Any]], **options: Any) -> tuple[Prepared, list[dict[str, Any]]]:
    """One call sent with `items`; returns what was prepared, and the conversation a harness sends next."""
    request = {"model": "m", "input": items, "tools": options.pop("tools", [TOOL])}
    prepared = capture.prepare(request)
    reply = answer(prepared, **options)["output"]
    capture.record(prepared, {"output": reply, "status": "completed"}, api="chat", stream=False, latency_s=0.0)
    public = [{k: v for k, v in item.items() if "token" not in k and "log_probs" not in k} for item in reply]
    output = {"type": "function_call_output", "call_id": reply[0]["call_id"], "output": "sunny"}
    return prepared, [*items, *public, output]


def test_calls_that_extend_the_conversation_stay_in_one_segment_and_send_only_the_new_turns() -> None:
    capture = Capture()
    _, history = turn(capture, [USER])
    prepared, history = turn(capture, history)
    assert prepared.new_items == [history[2]], "only the tool output is new"
    assert token_calls(prepared.request["input"]), "the segment's own reply, its token bundle on it, is sent back"
    turn(capture, history)
    assert [call.segment for call in capture.calls] == [0, 0, 0]
    assert [call.new_items for call in capture.calls] == [1, 1, 1]


def test_each_way_a_call_breaks_its_segment_starts_a_new_one_named_for_it() -> None:
    capture = Capture()
    _, history = turn(capture, [USER])
    turn(capture, [{**USER, "content": "A summary of it all"}])  # the harness compacted its history
    turn(capture, history, tools=[{**TOOL, "description": "another"}])  # the same history, other tools
    _, history = turn(capture, history)  # extends the first segment again
    turn(capture, history, rerender=True)  # the tier rendered the history anew
    first, second = (
        capture.prepare({"input": history, "tools": [TOOL]}),
        capture.prepare({"input": history, "tools": [TOOL]}),
    )
    for prepared in (first, second):  # two calls at once on one segment: the second branches
        capture.record(prepared, answer(prepared), api="chat", stream=True, latency_s=0.0)
    reasons = [segment.reason for segment in capture.segments]
    assert reasons == ["first", "history_rewritten", "tools_changed", "rerendered", "branched"]
    assert [call.segment for call in capture.calls] == [0, 1, 2, 0, 3, 0, 4]


def test_a_segment_extends_from_its_latest_call_after_a_branch_elsewhere() -> None:
    """The forms a call records are the ones it was prepared with, even when another call moved the segment on."""
    capture = Capture()
    _, history = turn(capture, [USER])
    _, extended = turn(capture, history)
    prepared, _ = turn(capture, extended)
    assert prepared.segment is capture.segments[0] and len(capture.segments) == 1
    assert capture.prepare({"input": [USER], "tools": [TOOL]}).segment is None, "a shorter history extends nothing"
