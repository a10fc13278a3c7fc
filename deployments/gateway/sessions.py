"""A gateway session: one rollout's endpoint, its secret, its bounds, and the record of its calls.

Between its open and its close (`gym_serve.rollout.gateway_session`) a session holds the calls' capture
(`gym_serve.rollout.capture`), the harness's call budget (a token bucket and a cap on calls in flight), and
the Model tier's errors.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
import uuid
from typing import Any

from gym_serve.errors import FailureKind, failure_kind
from gym_serve.rollout.capture import Capture
from gym_serve.rollout.gateway_session import SessionAddress, SessionRecord, SessionSpec
from gym_serve.rollout.harness_config import GatewayOptions, bounded_request
from gym_serve.rollout.loop import ModelClient
from gym_serve.wire.gateway import API, Refused, api_response, tier_request

__all__ = ["Session", "Throttled", "TierFailed"]


class Throttled(Exception):
    """Raised when a session is over its call rate or its calls in flight: answered 429 with `Retry-After`."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TierFailed(Exception):
    """Raised when the Model tier failed a call: answered 502 naming the failure kind."""


class Session:
    """One open session (see the module docstring)."""

    def __init__(self, spec: SessionSpec, options: GatewayOptions, replica: str) -> None:
        self.id = uuid.uuid4().hex
        self.key = "gs-" + secrets.token_urlsafe(32)
        self.spec = spec
        self.options = options
        self.replica = replica
        self.capture = Capture()
        self.errors: list[dict[str, Any]] = []
        self.in_flight = 0
        self.touched = time.monotonic()
        self._tokens = float(options.burst)
        self._refilled = self.touched

    def authorized(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.key.encode())

    def admit(self) -> None:
        """Take one call from the session's budget, or raise `Throttled` with when to come back."""
        now = time.monotonic()
        self.touched = now
        self._tokens = min(self.options.burst, self._tokens + (now - self._refilled) * self.options.max_calls_per_s)
        self._refilled = now
        if self.in_flight >= self.options.max_concurrent_calls:
            raise Throttled(f"this session already has {self.in_flight} calls in flight (its limit)", 1.0)
        if self._tokens < 1.0:
            wait = (1.0 - self._tokens) / self.options.max_calls_per_s
            raise Throttled(f"this session is over its {self.options.max_calls_per_s:g} calls/s", wait)
        self._tokens -= 1.0

    async def call(self, api: API, body: dict[str, Any], model: ModelClient, *, stream: bool) -> dict[str, Any]:
        """One model call: checked, bounded, sent as an extension of its segment, recorded, answered in `api`."""
        asked = body.get("model")
        if asked is not None and asked != self.spec.model:
            raise Refused("model", f"this session serves model `{self.spec.model}`, not `{asked}`")
        request = bounded_request(
            tier_request(api, body), self.spec.sampling, self.spec.rollout_sampling, len(self.capture.calls) + 1
        )
        prepared = self.capture.prepare(request)
        self.in_flight += 1
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._timeout()):  # not `wait_for`: that costs a task per call
                response = await model.responses(prepared.request, self.spec.affinity)
        except Exception as error:
            kind = failure_kind(error)
            kind = FailureKind.TRANSPORT_TIMEOUT if isinstance(error, TimeoutError) else kind
            message = _last_line(error)
            self.errors.append({"call": len(self.capture.calls) + 1, "kind": kind.value, "message": message})
            raise TierFailed(f"the model tier failed ({kind.value}): {message}") from error
        finally:
            self.in_flight -= 1
            self.touched = time.monotonic()
        self.capture.record(prepared, response, api=api, stream=stream, latency_s=time.perf_counter() - started)
        return api_response(api, response, request, self.spec.model)

    def _timeout(self) -> float:
        return self.options.call_timeout_s

    def record(self) -> SessionRecord:
        reply = "".join(
            "".join(part.get("text", "") for part in item.get("content") or [] if isinstance(part, dict))
            for item in self.capture.last_reply
            if item.get("type") == "message"
        )
        return SessionRecord(
            output=self.capture.output(),
            sequences=self.capture.sequences(),
            summary=self.capture.summary(),
            calls=len(self.capture.calls),
            reply=reply,
            errors=self.errors,
        )

    def address(self, base_url: str, socket: str | None) -> SessionAddress:
        return SessionAddress(session_id=self.id, key=self.key, replica=self.replica, base_url=base_url, socket=socket)


def _last_line(error: BaseException) -> str:
    cause = getattr(error, "cause", None)
    lines = str(cause if isinstance(cause, BaseException) else error).strip().splitlines()
    return lines[-1] if lines else type(error).__name__
