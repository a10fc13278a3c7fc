"""OpenTelemetry traces of rollouts: one trace per rollout, across the driver and the Agent, Model and Environment
tiers.

The driver opens a rollout's root span (`rollout`, with `queued`: its wait for a slot in the in-flight window,
and one `attempt` per try); the Agent replica's `agent.run` is the attempt's child, and in it the episode's
calls (`model_call`, `tool_call`, `verify`, `seed`, `user_turn`) are the parents of the Model and Environment
replicas' own spans (`model.responses`, `environment.call_tools`, ...), whose `gym_serve.queued_s` is the time
from the caller's call to the replica starting it (micro-batching, Serve's queue and routing). Who made a span
(tier, application, replica, pid) is its resource, the process's; the span's own attributes say the rest.

The context travels *per call*, not per Serve request: calls are micro-batched (`gym_serve.calls.batching`),
so one request carries calls of many rollouts, each with its own `Carrier` (W3C `traceparent`, where its
spans go, when it was queued) in the request's `traces` argument. A replica traces a call only when its
carrier says so, and exports to the destination the carrier names, so `gym-serve collect --trace` traces a
collection on applications that are already running, and a collection without it costs one context-variable
read per call: no carriers, no spans, no SDK work.

A destination is an OTLP/HTTP endpoint (`http://collector:4318`, spans go to its `/v1/traces`) or a JSON-lines
file (one span per line, every process of the run appending to it: for one machine; on a cluster use OTLP).
Each process exports through a `BatchSpanProcessor` of its own, so spans reach the destination within
`EXPORT_EVERY_S` of ending. Ray's and Serve's own tracing (`ray.init(_tracing_startup_hook=...)`,
`RAY_SERVE_TRACING_*`) are set for a whole cluster at its start and trace each Ray call or Serve request, one
of which carries many rollouts here; the global tracer provider they install is left alone (ours are our own).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gym_serve.errors import failure_kind

__all__ = [
    "EXPORT_EVERY_S",
    "Carrier",
    "carrier",
    "destination",
    "failed",
    "flush",
    "result_attributes",
    "rollout_span",
    "served",
    "span",
    "span_row",
]

Carrier = dict[str, str]
"""A call's trace context: `traceparent` (W3C), `gs-trace-to` (where spans go), `gs-queued-at` (ns, caller's clock)."""

EXPORT_EVERY_S = 0.5
"""How often each process writes the spans that ended (`BatchSpanProcessor`'s schedule)."""

_TO = "gs-trace-to"
_QUEUED_AT = "gs-queued-at"
_FAILURE = "gym_serve.failure_kind"
_OFF = contextlib.nullcontext(None)
_PROPAGATOR = TraceContextTextMapPropagator()

_destination: contextvars.ContextVar[str | None] = contextvars.ContextVar("gym_serve_trace_to", default=None)
_tracers: dict[str, Tracer] = {}
_providers: list[TracerProvider] = []
_lock = threading.Lock()


def destination(text: str) -> str:
    """A `--trace` value checked: an `http(s)://` OTLP endpoint as given, or a file path made absolute (replicas
    run elsewhere); raises `ValueError` naming what is wrong."""
    if text.startswith(("http://", "https://")):
        return text
    if "://" in text:
        raise ValueError(f"`{text}`: a trace destination is an http(s):// OTLP endpoint or a file path")
    path = Path(text).expanduser().resolve()
    if not path.parent.is_dir():
        raise ValueError(f"`{text}`: its folder {path.parent} does not exist")
    return str(path)


def carrier() -> Carrier | None:
    """The current call's trace context, for the callee; None (and nothing done) when this rollout is not traced."""
    to = _destination.get()
    if to is None:
        return None
    found: Carrier = {_TO: to, _QUEUED_AT: str(time.time_ns())}
    _PROPAGATOR.inject(found)
    return found


def span(name: str, attributes: dict[str, Any] | None = None) -> contextlib.AbstractContextManager[Span | None]:
    """A child span of the current one (the span, or None when not tracing); an exception through it is recorded
    with its failure kind."""
    to = _destination.get()
    if to is None:
        return _OFF
    return _Traced(_tracer(to), name, attributes or {}, None, None)


def served(
    found: Carrier | None, name: str, attributes: dict[str, Any] | None = None
) -> contextlib.AbstractContextManager[Span | None]:
    """A replica's span (`<tier>.<name>`) of a call whose caller sent `found` (None: not traced); its
    `gym_serve.queued_s` is the time from the caller's call to now."""
    if not found or _TO not in found:
        return _OFF
    return _Traced(
        _tracer(found[_TO]),
        f"{_process_attributes()['gym_serve.tier']}.{name}",
        attributes or {},
        _PROPAGATOR.extract(found),
        found,
    )


def rollout_span(
    to: str | None, queued_at_ns: int, attributes: dict[str, Any]
) -> contextlib.AbstractContextManager[Span | None]:
    """The driver's root span of one rollout, started when it was queued (`queued_at_ns`), with its `queued` span
    up to now; everything the rollout does inside is traced to `to`. None: not traced."""
    if to is None:
        return _OFF
    return _Traced(_tracer(to), "rollout", attributes, None, {_TO: to, _QUEUED_AT: str(queued_at_ns)}, root=True)


def failed(current: Span | None, kind: str, error: str = "") -> None:
    """Mark a span as failed with a failure kind (a rollout that ended as a failure row)."""
    if current is None:
        return
    current.set_attribute(_FAILURE, kind)
    current.set_status(Status(StatusCode.ERROR, error[:300]))


def result_attributes(current: Span | None, result: Any) -> None:
    """Token counts (a model response's `usage`) and the reward (a verdict) of a call's result, on its span."""
    if current is None or not isinstance(result, dict):
        return
    usage = result.get("usage") or (result.get("response") or {}).get("usage")
    if isinstance(usage, dict):
        current.set_attribute("gen_ai.usage.input_tokens", int(usage.get("input_tokens") or 0))
        current.set_attribute("gen_ai.usage.output_tokens", int(usage.get("output_tokens") or 0))
    if isinstance(result.get("reward"), int | float):
        current.set_attribute("gym_serve.reward", float(result["reward"]))


def flush(timeout_s: float = 10.0) -> None:
    """Write every span this process has ended (the driver does at the end of a collection)."""
    for provider in list(_providers):
        provider.force_flush(int(timeout_s * 1000))


class _Traced:
    """A span made current for the block (in `context`, else the current one), and with `queued` (a carrier)
    its destination too. When the work was queued: a root starts then, with a `queued` child up to now; a served
    call's span has the wait as `gym_serve.queued_s`."""

    def __init__(
        self,
        tracer: Tracer,
        name: str,
        attributes: dict[str, Any],
        context: Any,
        queued: Carrier | None,
        *,
        root: bool = False,
    ) -> None:
        self._tracer, self._name, self._attributes = tracer, name, dict(attributes)
        self._context, self._queued, self._root = context, queued, root
        self._scope: Any = None
        self._token: contextvars.Token[str | None] | None = None

    def __enter__(self) -> Span:
        start = None
        if self._queued is not None:
            now = time.time_ns()
            queued_at = min(int(self._queued[_QUEUED_AT]), now)  # another host's clock may run ahead
            if self._root:
                start = queued_at
            else:
                self._attributes["gym_serve.queued_s"] = (now - queued_at) / 1e9
            self._token = _destination.set(self._queued[_TO])
        self._scope = self._tracer.start_as_current_span(
            self._name,
            context=self._context,
            attributes=self._attributes,
            start_time=start,
            record_exception=False,
            set_status_on_exception=False,
        )
        current: Span = self._scope.__enter__()
        if self._root and start is not None:
            self._tracer.start_span("queued", start_time=start).end()
        return current

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        try:
            if error is not None:
                current = trace.get_current_span()
                reason = failure_kind(error).value if isinstance(error, Exception) else "cancelled"
                failed(current, reason, f"{type(error).__name__}: {error}")
        finally:
            self._scope.__exit__(kind, error, traceback)
            if self._token is not None:
                _destination.reset(self._token)


def _tracer(to: str) -> Tracer:
    tracer = _tracers.get(to)
    if tracer is None:
        with _lock:
            tracer = _tracers.get(to)
            if tracer is None:
                tracer = _tracers[to] = _new_provider(to).get_tracer("gym_serve")
    return tracer


def _new_provider(to: str) -> TracerProvider:
    exporter: SpanExporter
    if to.startswith(("http://", "https://")):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=to if to.endswith("/v1/traces") else to.rstrip("/") + "/v1/traces")
    else:
        exporter = _JsonlExporter(to)
    attributes = _process_attributes()
    provider = TracerProvider(
        resource=Resource.create({"service.name": f"gym-serve-{attributes['gym_serve.tier']}", **attributes})
    )
    provider.add_span_processor(
        BatchSpanProcessor(exporter, schedule_delay_millis=int(EXPORT_EVERY_S * 1000), max_queue_size=_QUEUE)
    )
    _providers.append(provider)
    return provider


_process: dict[str, Any] | None = None


def _process_attributes() -> dict[str, Any]:
    """Who this process is: the tier (`driver` outside a Serve replica), the application, the replica, the pid."""
    global _process
    if _process is None:
        _process = {"gym_serve.tier": "driver", "process.pid": os.getpid()}
        try:
            from ray import serve

            context = serve.get_replica_context()
        except Exception:  # not in a replica (Serve says so with RayServeException)
            return _process
        _process["gym_serve.tier"] = _TIERS.get(context.deployment, context.deployment.lower())
        _process["gym_serve.application"] = context.app_name
        _process["gym_serve.replica"] = context.replica_id.unique_id
    return _process


_TIERS = {"Agent": "agent", "Model": "model", "Environment": "environment"}
_QUEUE = 1 << 16
"""Spans a process holds before export: at 256 rollouts in flight a few seconds' worth (none is dropped)."""


def span_row(span: ReadableSpan) -> dict[str, Any]:
    """One span as a JSON-lines row: ids in hex as OTLP/JSON writes them, times in ns, its attributes and its
    process's (the resource's)."""
    context, parent = span.context, span.parent
    start, end = span.start_time or 0, span.end_time or 0
    return {
        "trace_id": f"{context.trace_id:032x}" if context else None,
        "span_id": f"{context.span_id:016x}" if context else None,
        "parent_span_id": f"{parent.span_id:016x}" if parent else None,
        "name": span.name,
        "start_ns": start,
        "end_ns": end,
        "duration_s": (end - start) / 1e9,
        "status": span.status.status_code.name,
        "status_message": span.status.description,
        "attributes": dict(span.attributes or {}),
        "resource": dict(span.resource.attributes),
    }


class _JsonlExporter(SpanExporter):
    """Spans appended to a JSON-lines file, each export one `write` on an O_APPEND descriptor, so that the
    processes of a run writing to one file on one machine do not interleave their lines."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        data = b"".join(orjson.dumps(span_row(s), default=str) + b"\n" for s in spans)
        while data:
            data = data[os.write(self._fd, data) :]
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        os.close(self._fd)
