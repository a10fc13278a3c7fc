"""One OpenTelemetry trace per rollout, across the driver actor and the Agent, Model and Environment replicas.

A real collection on Serve (the counting environment and its scripted model, `tests.fault_parts`, every
deployment `num_cpus: 0`) traced to a JSON-lines file; `gym-serve profile --trace` on that file; OTLP/HTTP
export to a real receiver decoding the protobuf; and no trace file, nor carriers, when tracing is off.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import serve

from gym_serve.calls import tracing
from gym_serve.calls.batching import MicroBatcher
from gym_serve.collect.driver import RolloutDriver
from gym_serve.collect.job import CollectJob, failures_path
from gym_serve.deployments.app import build_app
from gym_serve.serving.config import AppArgs
from gym_serve.testing.fixtures import unique
from tests.conftest import REPO

from .fault_parts import BumpModel, counter_app_args, counting_rows

pytestmark = pytest.mark.serve

ROWS = 6
HUNG = 4
"""The row whose seed never answers: its rollout fails (`transport_timeout`) and its trace says so."""


@pytest.fixture(scope="module")
def app(serve_instance: None) -> Iterator[str]:
    name = unique("traced")
    serve.run(BumpModel.bind(delay_s=0.005), name=name + "-model", route_prefix=None)
    args = counter_app_args(name + "-model", delay_s=0.005, tier_call_timeout_s=1.0)
    serve.run(build_app(AppArgs.model_validate(args)), name=name, route_prefix=None)
    yield name
    serve.delete(name)
    serve.delete(name + "-model")


def collect(name: str, tmp_path: Path, trace: str | None) -> dict[str, Any]:
    rows = counting_rows(ROWS)
    rows[HUNG]["hang"] = True
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = CollectJob(
        input_path=str(source),
        output_path=str(tmp_path / "out.jsonl"),
        agents=[name],
        default_agent=name,
        max_attempts=1,
        concurrency=4,
        trace=trace,
    )
    driver = RolloutDriver.remote()  # type: ignore[attr-defined]
    try:
        return ray.get(driver.collect.remote(job)).model_dump()
    finally:
        ray.kill(driver)


def spans_of(path: Path, wanted: int) -> list[dict[str, Any]]:
    """The file's spans once the replicas have written theirs (each exports within `EXPORT_EVERY_S`)."""
    deadline = time.monotonic() + 15
    while True:
        spans = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        names = [s["name"] for s in spans]
        if names.count("environment.verify") >= wanted or time.monotonic() > deadline:
            time.sleep(2 * tracing.EXPORT_EVERY_S)  # and the last of every process
            return [json.loads(line) for line in path.read_text().splitlines()]
        time.sleep(0.2)


@pytest.fixture(scope="module")
def traced(app: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    work = tmp_path_factory.mktemp("traced")
    summary = collect(app, work, str(work / "trace.jsonl"))
    return work, summary, spans_of(work / "trace.jsonl", ROWS - 1)


def test_each_rollout_is_one_trace_across_the_driver_and_three_tiers(traced: Any) -> None:
    work, summary, spans = traced
    assert summary["rollouts"] == ROWS - 1 and summary["failures"] == 1
    by_trace: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        by_trace[span["trace_id"]].append(span)
    roots = [s for s in spans if s["parent_span_id"] is None]
    assert len(roots) == ROWS == len(by_trace), "one trace, with one root, per rollout"
    assert all(r["name"] == "rollout" and r["resource"]["gym_serve.tier"] == "driver" for r in roots)
    keys = sorted((r["attributes"]["gym_serve.task_index"], r["attributes"]["gym_serve.rollout_index"]) for r in roots)
    assert keys == [(t, 0) for t in range(ROWS)]
    for trace in by_trace.values():
        ids = {s["span_id"]: s for s in trace}
        assert all(s["parent_span_id"] is None or s["parent_span_id"] in ids for s in trace), "no dangling parent"
        pids = {s["resource"]["process.pid"] for s in trace}
        tiers = {s["resource"]["gym_serve.tier"] for s in trace}
        assert {"driver", "agent", "environment"} <= tiers and len(pids) >= 3

        for span in trace:
            expected = {
                "queued": {"rollout"},
                "attempt": {"rollout"},
                "agent.run": {"attempt"},
                "seed": {"agent.run"},
                "model_call": {"agent.run"},
                "tool_call": {"agent.run"},
                "verify": {"agent.run"},
                "environment.seed": {"seed"},
                "environment.call_tools": {"tool_call"},
                "environment.verify": {"verify"},
                "model.responses": {"model_call"},
            }
            if span["name"] in expected:
                parent = ids[span["parent_span_id"]]["name"]
                assert parent in expected[span["name"]], (span["name"], parent)


def test_spans_carry_application_tier_replica_batch_attempt_and_tokens(traced: Any, app: str) -> None:
    _, _, spans = traced
    ok = [s for s in spans if s["name"] == "rollout" and s["status"] != "ERROR"]
    assert ok and all(s["attributes"]["gym_serve.application"] == app for s in ok)
    assert all(
        s["attributes"]["gym_serve.reward"] == 1.0 and s["attributes"]["gen_ai.usage.output_tokens"] >= 2 for s in ok
    )
    served = [s for s in spans if s["name"].startswith(("agent.", "model.", "environment."))]
    assert {s["resource"]["gym_serve.tier"] for s in served} == {"agent", "model", "environment"}
    for span in served:  # who served it is the span's resource (its process); how, its attributes
        assert span["resource"]["gym_serve.replica"] and span["resource"]["gym_serve.application"]
        assert span["attributes"]["gym_serve.batch_size"] >= 1 and span["attributes"]["gym_serve.queued_s"] >= 0
    assert {s["resource"]["gym_serve.application"] for s in served if s["name"] == "model.responses"} == {
        app + "-model"
    }
    model = [s for s in spans if s["name"] in ("model_call", "model.responses")]
    assert all(s["attributes"]["gen_ai.usage.input_tokens"] >= 1 for s in model)
    assert all(s["attributes"]["gym_serve.attempt"] == 1 for s in spans if s["name"] == "attempt")
    tools = [s for s in spans if s["name"] == "tool_call"]
    assert tools and all(s["attributes"]["gym_serve.tools"] == ["bump"] for s in tools)


def test_a_failed_rollout_has_its_failure_kind_on_its_spans(traced: Any) -> None:
    work, _, spans = traced
    failure = json.loads(failures_path(work / "out.jsonl").read_text())
    assert failure["_ng_failure_class"] == "transport_timeout"
    root = next(s for s in spans if s["name"] == "rollout" and s["attributes"]["gym_serve.task_index"] == HUNG)
    assert root["status"] == "ERROR" and root["attributes"]["gym_serve.failure_kind"] == "transport_timeout"
    mine = [s for s in spans if s["trace_id"] == root["trace_id"]]
    failed = {s["name"]: s["attributes"].get("gym_serve.failure_kind") for s in mine if s["status"] == "ERROR"}
    assert failed["attempt"] == failed["agent.run"] == "transport_timeout"
    assert "seed" in failed, "the call that hung is marked failed"
    assert "verify" not in {s["name"] for s in mine}


def test_profile_gives_time_per_tier_from_the_trace(traced: Any) -> None:
    work, _, spans = traced
    done = subprocess.run(
        [sys.executable, "-m", "gym_serve.cli", "profile", "--trace", str(work / "trace.jsonl")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((work / "trace_tier_times.json").read_text())
    assert report["traces"] == ROWS and report["spans"] == len(spans) and report["bad_lines"] == []
    assert {"driver", "agent", "model", "environment"} <= set(report["tiers"])
    assert all("queued" in report["tiers"][tier] for tier in ("driver", "agent", "model", "environment"))
    verify = report["tiers"]["environment"]["environment.verify"]
    durations = sorted(s["duration_s"] for s in spans if s["name"] == "environment.verify")
    assert verify["count"] == len(durations) == ROWS - 1
    assert verify["p50_s"] in durations and verify["p99_s"] == durations[-1] >= verify["p50_s"]
    assert report["tiers"]["driver"]["rollout"]["p99_s"] >= 1.0, "the hung rollout waited out its 1 s call timeout"
    for tier in ("driver", "agent", "model", "environment"):
        assert tier in done.stdout
    assert "environment.verify" in done.stdout and "p99 ms" in done.stdout


def test_tracing_off_writes_nothing_and_sends_no_carriers(app: str, tmp_path: Path) -> None:
    assert tracing.carrier() is None
    summary = collect(app, tmp_path, None)
    assert summary["rollouts"] == ROWS - 1
    time.sleep(2 * tracing.EXPORT_EVERY_S)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["in.jsonl", "out.jsonl", "out_failures.jsonl", "out_journal.jsonl", "out_materialized_inputs.jsonl"]
    ), "only the collection's own files (its turn journal stays: a rollout failed)"


class OtlpReceiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector's trace route: decodes each export request's protobuf, keeps its spans."""

    spans: list[tuple[dict[str, Any], Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                self.spans.extend((resource, span) for span in scope.spans)
        self.send_response(200 if self.path == "/v1/traces" else 404)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_otlp_export_reaches_a_collector_from_every_tier(app: str, tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), OtlpReceiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        collect(app, tmp_path, f"http://127.0.0.1:{server.server_port}")
        deadline = time.monotonic() + 15
        while sum(s.name == "environment.verify" for _, s in OtlpReceiver.spans) < ROWS - 1:
            assert time.monotonic() < deadline, "the replicas' spans never reached the collector"
            time.sleep(0.2)
    finally:
        server.shutdown()
        server.server_close()
    tiers = {resource["gym_serve.tier"].string_value for resource, _ in OtlpReceiver.spans}
    assert tiers == {"driver", "agent", "model", "environment"}
    roots = [s for _, s in OtlpReceiver.spans if s.name == "rollout"]
    assert len(roots) == ROWS and len({s.trace_id for s in roots}) == ROWS
    assert not any(s.parent_span_id for s in roots)


async def test_a_micro_batch_carries_a_context_per_traced_call_and_none_untraced(tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []

    async def send(items: list[int], **extra: Any) -> list[int]:
        sent.append(extra)
        return items

    batcher: MicroBatcher[int, int] = MicroBatcher(send)
    assert await asyncio.gather(batcher(1), batcher(2)) == [1, 2]
    assert sent == [{}], "untraced calls send no `traces` argument"
    to = tracing.destination(str(tmp_path / "spans.jsonl"))
    with tracing.rollout_span(to, time.time_ns(), {}) as root:
        assert root is not None
        await asyncio.gather(batcher(3), batcher(4))
    traces = sent[1]["traces"]
    trace_id = f"{root.get_span_context().trace_id:032x}"
    assert [t["traceparent"].split("-")[1] for t in traces] == [trace_id, trace_id]
    assert all(t["gs-trace-to"] == to for t in traces)
    assert tracing.carrier() is None, "the destination ends with the rollout's span"


def test_a_trace_destination_that_cannot_be_written_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gym_serve.cli import main

    monkeypatch.chdir(REPO)
    for bad, said in (
        (str(tmp_path / "missing" / "t.jsonl"), "does not exist"),
        ("grpc://collector:4317", "an http(s):// OTLP endpoint or a file path"),
    ):
        argv = ["collect", "--config", "deployments/example_single_tool_call.yaml", "--trace", bad]
        argv += ["--input", "envs/example_single_tool_call/data/example.jsonl", "--output", str(tmp_path / "o.jsonl")]
        assert main(argv) == 2
        error = capsys.readouterr().err
        assert f"--trace: `{bad}`" in error and said in error
        assert not (tmp_path / "o.jsonl").exists()


async def test_trace_sample_traces_that_share_of_the_rollouts(tmp_path: Path) -> None:
    from gym_serve.collect.dispatch import Dispatcher, Rollout

    async def send(agent: str, row: dict[str, Any], on_turn: Any = None) -> dict[str, Any]:
        return {**row, "reward": 1.0}

    to = tracing.destination(str(tmp_path / "sampled.jsonl"))
    dispatcher = Dispatcher(["a"], default_agent="a", send=send, trace=to, trace_sample=0.25, seed=1)
    rows = [(i + 1, {"responses_create_params": {"input": f"task {i}"}}) for i in range(400)]
    rollouts = [r for r in dispatcher.expand(rows) if isinstance(r, Rollout)]
    outcomes = [await dispatcher.run(r) for r in rollouts]
    tracing.flush()
    spans = [json.loads(line) for line in (tmp_path / "sampled.jsonl").read_text().splitlines()]
    roots = [s for s in spans if s["name"] == "rollout"]
    assert len(outcomes) == 400 and all(o.ok for o in outcomes), "an untraced rollout runs as a traced one does"
    assert 60 <= len(roots) <= 140, len(roots)
    assert sum(s["name"] == "attempt" for s in spans) == sum(s["name"] == "queued" for s in spans) == len(roots)
