"""Bad input names where it is wrong: JSONL lines, rows, config files and keys. Index semantics follow NeMo Gym."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from gym_serve.collect.job import CollectJob
from gym_serve.collect.materialize import materialize
from gym_serve.errors import ConfigError, FailureKind, InputError, RolloutError
from gym_serve.serving.config import load_serve_config
from gym_serve.wire.jsonl import read_jsonl, scan_jsonl
from tests.conftest import REPO

GOOD = {"responses_create_params": {"input": "hi"}}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_scan_reports_bad_lines_with_numbers_and_keeps_going(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(GOOD), "{oops", "", "[1, 2]", json.dumps(GOOD)])
    results = list(scan_jsonl(path))
    assert [(n, row is not None) for n, row, _ in results] == [(1, True), (2, False), (4, False), (5, True)]
    errors = [str(e) for _, _, e in results if e]
    assert errors[0].startswith(f"{path}, line 2: not valid JSON")
    assert errors[1] == f"{path}, line 4: expected a JSON object, got list"


def test_read_jsonl_raises_at_the_first_bad_line(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(GOOD), "nope"])
    with pytest.raises(InputError, match="line 2"):
        list(read_jsonl(path))


def test_unreadable_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="missing.jsonl"):
        list(scan_jsonl(tmp_path / "missing.jsonl"))


def job(path: Path, **kwargs: Any) -> CollectJob:
    return CollectJob(
        input_path=str(path),
        output_path=str(path.with_name("out.jsonl")),
        agents=["a", "b"],
        default_agent="a",
        **kwargs,
    )


def run_materialize(j: CollectJob) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    bad: list[tuple[int, str]] = []
    rows = [rollout.row for rollout in materialize(j, lambda line, error: bad.append((line, str(error))))]
    return rows, bad


def test_materialize_indices_follow_nemo_gym(tmp_path: Path) -> None:
    other = {"responses_create_params": {"input": "other"}}
    own = {"responses_create_params": {"input": "x"}, "_ng_task_index": 42}
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(r) for r in (GOOD, other, GOOD, own)])
    rows, bad = run_materialize(job(path, num_repeats=2))
    assert not bad
    keys = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows]
    # identical rows share a task and number their rollouts on; a row's own index is kept
    assert keys == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (42, 0), (42, 1)]
    assert all(r["agent_ref"] == {"name": "a"} for r in rows)


def test_task_numbering_is_the_same_after_the_table_moves_to_disk() -> None:
    from gym_serve.collect.task_index import TaskIndex

    digests = [bytes([i % 7]) * 16 for i in range(30)]  # 7 distinct rows, each seen again and again
    with TaskIndex() as in_memory, TaskIndex(in_memory=3) as spilled:
        expected = [in_memory.claim(d, 2) for d in digests]
        assert [spilled.claim(d, 2) for d in digests] == expected
        assert spilled._db is not None and in_memory._db is None
    assert expected[:8] == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (0, 2)]


def test_shards_split_the_tasks_without_overlap_and_keep_the_numbering(tmp_path: Path) -> None:
    lines = [json.dumps({"responses_create_params": {"input": f"q{i % 5}"}}) for i in range(8)] + ["{bad"]
    path = write_lines(tmp_path / "in.jsonl", lines)
    whole, _ = run_materialize(job(path, num_repeats=2))
    shards = [run_materialize(job(path, num_repeats=2, shard_index=i, shard_count=3)) for i in range(3)]
    keys = lambda rows: {(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows}  # noqa: E731
    assert sorted(k for rows, _ in shards for k in keys(rows)) == sorted(keys(whole))
    assert all(r["_ng_task_index"] % 3 == i for i, (rows, _) in enumerate(shards) for r in rows)
    assert [len(bad) for _, bad in shards] == [1, 0, 0], "a bad row is reported once, by shard 0"
    with pytest.raises(ValueError, match="shard_index"):
        job(path, shard_index=3, shard_count=3)


def test_materialize_skips_and_reports_bad_rows(tmp_path: Path) -> None:
    lines = [
        json.dumps(GOOD),
        "{not json",
        json.dumps({"question": "no params"}),
        json.dumps({"responses_create_params": {"input": 3}}),
        json.dumps({**GOOD, "agent_ref": {"name": "nobody"}}),
        json.dumps({**GOOD, "agent_ref": {"name": "b"}}),
    ]
    rows, bad = run_materialize(job(write_lines(tmp_path / "in.jsonl", lines)))
    assert [r["agent_ref"]["name"] for r in rows] == ["a", "b"]
    assert [line for line, _ in bad] == [2, 3, 4, 5]
    assert "field `responses_create_params`" in bad[1][1]
    assert "field `responses_create_params.input`" in bad[2][1]
    assert "unknown agent `nobody`" in bad[3][1] and "field `agent_ref.name`" in bad[3][1]


def test_materialize_limit_reads_only_that_many_lines(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "in.jsonl", [json.dumps({"responses_create_params": {"input": str(i)}}) for i in range(10)]
    )
    rows, _ = run_materialize(job(path, limit=3))
    assert [r["responses_create_params"]["input"] for r in rows] == ["0", "1", "2"]


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "app.yaml"
    path.write_text(text)
    return path


APP = """
applications:
- name: weather
  import_path: gym_serve.deployments.app:build_app
  args:
    environment: {name: %s}
"""


def test_example_configs_load() -> None:
    for path in sorted((REPO / "deployments").glob("*.yaml")):
        assert load_serve_config(path), path


def test_unknown_environment_names_file_and_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, APP % "example_single_tool_cal")
    with pytest.raises(ConfigError) as info:
        load_serve_config(path)
    message = str(info.value)
    assert str(path) in message and "applications[weather].args.environment.name" in message
    assert "example_single_tool_call" in message, "suggests the closest name"


def test_unknown_arg_and_unknown_deployment_name_the_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, APP % "example_single_tool_call" + "    agent: {max_step: 3}\n")
    with pytest.raises(ConfigError, match=r"applications\[weather\]\.args\.agent\.max_step"):
        load_serve_config(path)
    path = write_config(tmp_path, APP % "example_single_tool_call" + "  deployments:\n  - name: Agnet\n")
    with pytest.raises(ConfigError, match="unknown deployment `Agnet`"):
        load_serve_config(path)


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write_config(tmp_path, "applications:\n- name: [unclosed\n")
    with pytest.raises(ConfigError, match=rf"{path}, line \d"):
        load_serve_config(path)


def test_deployment_overrides_reach_their_tier(tmp_path: Path) -> None:
    text = APP % "example_session_state" + (
        "  deployments:\n  - name: Environment\n    num_replicas: 3\n"
        "  - name: Agent\n    autoscaling_config: {min_replicas: 1, max_replicas: 4}\n    max_ongoing_requests: 100\n"
    )
    args = load_serve_config(write_config(tmp_path, text))[0].app_args()
    assert args.environment.deployment.num_replicas == 3
    assert args.agent.deployment.capacity(256) == 400
    assert "num_replicas" not in args.agent.deployment.serve_options({"num_replicas": 1})


def test_errors_survive_pickling_across_processes() -> None:
    for error in (
        ConfigError("bad", source="f.yaml", key="k"),
        InputError("bad", source="f", line=3, field="x"),
        RolloutError("failed", kind=FailureKind.AGENT_TIMEOUT),
    ):
        copy = pickle.loads(pickle.dumps(error))
        assert str(copy) == str(error) and type(copy) is type(error)
    assert pickle.loads(pickle.dumps(RolloutError("x", kind=FailureKind.AGENT_TIMEOUT))).kind == "agent_timeout"


# ---- rows are checked once, with the protocol models, where they enter -----------------------------------------

TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {}}}}
CALL = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [  # every one of these was accepted before (and, with the replay model, could score 1.0)
        ({"input": [{"role": "robot", "content": "hi"}]}, "input.0.role", "'user', 'system', 'developer' or"),
        ({"input": [{"type": "weird", "content": "hi"}]}, "input.0", "unknown item type 'weird'"),
        ({"input": []}, "input", "at least 1 item"),
        ({"input": ""}, "input", "at least 1 character"),
        ({"input": "hi", "temperature": -1}, "temperature", "greater than or equal to 0"),
        ({"input": "hi", "temperature": 2.5}, "temperature", "less than or equal to 2"),
        ({"input": "hi", "top_p": 0}, "top_p", "greater than 0"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", "greater than or equal to 1"),
        (
            {"input": "hi", "tools": [{**TOOL, "parameters": {"type": "object", "properties": {"c": {"type": 7}}}}]},
            "tools.0.parameters",
            "not a valid JSON Schema at $.properties.c.type",
        ),
        ({"input": "hi", "tools": [{**TOOL, "parameters": {"type": "string"}}]}, "tools.0.parameters", "an object"),
        ({"input": "hi", "tools": [{**TOOL, "name": "get weather!"}]}, "tools.0.name", "1-64 letters"),
        (
            {
                "input": [
                    {"role": "user", "content": "hi"},
                    {"type": "function_call_output", "call_id": "c9", "output": "x"},
                ]
            },
            "",
            "`input[1]` is a `function_call_output` for call_id `c9`",
        ),
        ({"input": [{"role": "user", "content": "hi"}, {**CALL, "call_id": ""}]}, "input.1.call_id", "at least 1"),
    ],
)
def test_rows_the_protocol_models_refuse_are_bad_input_naming_line_and_field(
    tmp_path: Path, params: dict[str, Any], field: str, message: str
) -> None:
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(GOOD), json.dumps({"responses_create_params": params})])
    rows, bad = run_materialize(job(path))
    assert len(rows) == 1 and [line for line, _ in bad] == [2]
    where = f"{path}, line 2, field `responses_create_params{'.' + field if field else ''}`: "
    assert bad[0][1].startswith(where) and message in bad[0][1], bad[0][1]


def test_a_paired_call_and_output_and_typed_items_are_fine(tmp_path: Path) -> None:
    items = [
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "be brief"}]},
        {"role": "user", "content": "weather?"},
        CALL,
        {"type": "function_call_output", "call_id": "c1", "output": "cold"},
        {"type": "reasoning", "summary": []},
    ]
    row = {"responses_create_params": {"input": items, "tools": [TOOL], "temperature": 0, "top_p": 1}}
    rows, bad = run_materialize(job(write_lines(tmp_path / "in.jsonl", [json.dumps(row)])))
    assert bad == [] and rows[0]["responses_create_params"] == row["responses_create_params"]


def test_other_row_fields_are_checked_too(tmp_path: Path) -> None:
    lines = [
        json.dumps({**GOOD, "_ng_task_index": True}),
        json.dumps({**GOOD, "_ng_task_index": -3}),
        json.dumps({**GOOD, "agent_ref": {"name": ""}}),
    ]
    _, bad = run_materialize(job(write_lines(tmp_path / "in.jsonl", lines)))
    assert [(line, "field `_ng_task_index`" in error) for line, error in bad[:2]] == [(1, True), (2, True)]
    assert bad[2][0] == 3 and "field `agent_ref.name`" in bad[2][1]


def test_sampling_overrides_are_checked_with_the_row(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(GOOD)])
    _, bad = run_materialize(job(path, params_overrides={"top_p": 1.5}))
    assert "field `responses_create_params.top_p`" in bad[0][1]


def test_a_byte_order_mark_is_accepted_and_duplicate_keys_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\n"
        b'{"responses_create_params": {"input": "a", "input": "b"}}\n'
        b'{"responses_create_params": {"input": "a"}, "expected_answer": 1, "expected_answer": 2}\n'
        b'{"responses_create_params": {"input": "a"}, "x": NaN}\n'
    )
    results = list(scan_jsonl(path))
    assert results[0][1] == GOOD, "the first row reads despite the BOM"
    assert [str(e) for _, _, e in results[1:3]] == [
        f"{path}, line 2, field `responses_create_params.input`: the key `input` is given twice in one object",
        f"{path}, line 3, field `expected_answer`: the key `expected_answer` is given twice in one object",
    ]
    assert str(results[3][2]) == f"{path}, line 4, field `x`: `NaN` is not JSON"
    rows, bad = run_materialize(job(path))
    assert len(rows) == 1 and [line for line, _ in bad] == [2, 3, 4]


def test_tool_schemas_are_judged_per_row_when_rows_repeat_them(tmp_path: Path) -> None:
    """A schema's check is remembered (rows repeat a few tools), and must stay each row's own verdict."""
    bad_schema = {"type": "object", "properties": {"c": {"type": 7}}}
    rows = [
        {"responses_create_params": {"input": "hi", "tools": [{**TOOL, "parameters": parameters}]}}
        for parameters in (bad_schema, TOOL["parameters"], bad_schema, {**bad_schema, "required": ["c"]})
    ]
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(row) for row in rows])
    good, bad = run_materialize(job(path))
    assert [row["responses_create_params"]["tools"][0]["parameters"] for row in good] == [TOOL["parameters"]]
    assert [line for line, _ in bad] == [1, 3, 4]
    assert all("not a valid JSON Schema at $.properties.c.type" in message for _, message in bad)


@pytest.mark.parametrize(
    ("agent", "key", "message"),
    [
        ("{kind: harness, callable: 'tests.harnesses:idle', isolation: sandbox}", "agent", "runs a program"),
        ("{kind: harness, command: [x], isolation: sandbox, sandbox: {binds: {bin: /usr/bin}}}", "agent.sandbox",
         "`bin` must be an absolute path"),
        ("{kind: harness, command: [x], isolation: sandbox, sandbox: {limits: {memroy_mb: 5}}}", "agent.sandbox",
         "memroy_mb"),
        ("{kind: harness, command: [x], isolation: jail}", "agent.isolation", "'sandbox'"),
    ],
)  # fmt: skip
def test_a_harness_sandbox_config_that_cannot_run_names_its_key(
    tmp_path: Path, agent: str, key: str, message: str
) -> None:
    path = write_config(tmp_path, APP % "examples.file_task_env:FileTaskEnv" + f"    agent: {agent}\n")
    with pytest.raises(ConfigError) as info:
        load_serve_config(path)
    assert f"applications[weather].args.{key}" in str(info.value) and message in str(info.value), info.value
