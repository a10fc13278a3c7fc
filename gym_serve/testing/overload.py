"""The ingress past its capacity: a bounded asyncio load generator, and what an overload must not do.

Three phases against `POST /run` (one rollout per request):

1. *capacity*: as many closed-loop clients as the ingress has in-flight slots, back to back: the rate it
   serves (its capacity) and the latency of a request it takes (the baseline);
2. *overload*: requests arriving open-loop at `factor` × that rate for `seconds` (a client that never waits,
   as a burst of trainers would), each answered or refused: the taken ones' latency, the refused ones'
   status and `Retry-After`, the ingress replicas' memory every second, each process's CPU;
3. *recovery*: the closed-loop clients again, right after the burst (its requests still running finish
   meanwhile): how long until they hold every slot again, i.e. the ingress serves at capacity.

`OverloadReport.problems` names what broke: a 5xx, a refusal other than 429 with `Retry-After`, a p99 of
taken requests beyond `p99_bound` × the baseline's, memory that grew past `memory_growth_mb`, or slots not all
taken again within 5 s. `cpu_s` says where the machine's time went during the burst.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any, NamedTuple

import aiohttp
import psutil
from pydantic import BaseModel, Field

from gym_serve.testing.processes import cpu_seconds_by_process, spent_since, title

__all__ = ["OverloadReport", "ingress_rss_mb", "overload"]


class Phase(BaseModel):
    seconds: float
    requests: int = 0
    taken: int = 0
    rate: float = Field(default=0.0, description="Requests taken per second.")
    p50_s: float | None = None
    p99_s: float | None = None
    statuses: dict[str, int] = Field(default_factory=dict)


class OverloadReport(BaseModel):
    slots: int
    factor: float
    capacity: Phase
    overload: Phase
    offered_per_s: float
    refused_with_retry_after: int = 0
    refused_without: int = 0
    server_errors: int = 0
    rss_mb: list[tuple[float, float]] = Field(default_factory=list, description="(seconds, ingress replicas' MB).")
    taken_per_s: list[float] = Field(default_factory=list, description="Requests taken in each second of overload.")
    refused_per_s: list[float] = Field(default_factory=list, description="Requests refused in each second of it.")
    recovery_per_s: list[float] = Field(default_factory=list, description="Requests taken in each second after.")
    recovered_after_s: float | None = None
    cpu_s: dict[str, float] = Field(
        default_factory=dict, description="CPU seconds each kind of process spent during the overload."
    )
    problems: list[str] = Field(default_factory=list)


class Call(NamedTuple):
    phase: str
    start: float
    end: float
    status: int
    retry_after: bool


class _Calls:
    """Every request, as a `Call`."""

    def __init__(self, session: aiohttp.ClientSession, url: str, row: dict[str, Any]) -> None:
        self.session, self.url, self.row = session, url, row
        self.done: list[Call] = []

    async def one(self, phase: str) -> int:
        started = time.perf_counter()
        try:
            async with self.session.post(self.url, json=self.row) as response:
                await response.read()
                status, retry_after = response.status, "Retry-After" in response.headers
        except aiohttp.ClientError:
            status, retry_after = 599, False  # no answer at all: counted as a server error
        self.done.append(Call(phase, started, time.perf_counter(), status, retry_after))
        return status

    def of(self, phase: str, taken: bool | None = None) -> list[Call]:
        """The phase's requests: all, those taken (200), or those not (`taken=False`)."""
        return [c for c in self.done if c.phase == phase and (taken is None or (c.status == 200) == taken)]


async def overload(
    base_url: str,
    row: dict[str, Any],
    *,
    slots: int,
    factor: float = 10.0,
    seconds: float = 60.0,
    capacity_s: float = 10.0,
    recovery_s: float = 10.0,
    p99_bound: float = 2.0,
    memory_growth_mb: float = 50.0,
    app: str = "ingress",
) -> OverloadReport:
    """The three phases (module docstring) against `base_url`'s `/run`, whose ingress has `slots` in flight."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        calls = _Calls(session, f"{base_url}/run", row)
        await _closed_loop(calls, "capacity", slots, capacity_s)
        capacity = _phase(calls.of("capacity"), capacity_s)

        offered = factor * max(capacity.rate, 1.0)
        rss: list[tuple[float, float]] = []
        t1 = time.perf_counter()
        sampler = asyncio.ensure_future(_sample_rss(app, rss, t1))
        cpu_before = cpu_seconds_by_process()
        stragglers = await _open_loop(calls, offered, seconds)
        cpu_s = spent_since(cpu_before)
        sampler.cancel()

        t2 = time.perf_counter()  # the burst's requests still running finish while the clients come back
        await _closed_loop(calls, "recovery", slots, recovery_s)
        await asyncio.gather(*stragglers)

    report = OverloadReport(
        slots=slots,
        factor=factor,
        capacity=capacity,
        overload=_phase(calls.of("overload"), seconds),
        offered_per_s=offered,
    )
    refused = calls.of("overload", taken=False)
    report.refused_with_retry_after = sum(1 for c in refused if c.status == 429 and c.retry_after)
    report.refused_without = len(refused) - report.refused_with_retry_after
    report.server_errors = sum(1 for c in calls.done if c.status >= 500)
    report.rss_mb, report.cpu_s = rss, cpu_s
    report.taken_per_s = _per_second(calls.of("overload", taken=True), t1, seconds)
    report.refused_per_s = _per_second(refused, t1, seconds)
    report.recovery_per_s = _per_second(calls.of("recovery", taken=True), t2, recovery_s)
    report.recovered_after_s = recovered_after(calls.of("recovery", taken=True), t2, slots)
    report.problems = _problems(report, p99_bound, memory_growth_mb)
    return report


async def _closed_loop(calls: _Calls, phase: str, clients: int, seconds: float) -> None:
    end = time.perf_counter() + seconds

    async def client() -> None:
        while time.perf_counter() < end:
            if await calls.one(phase) == 429:
                await asyncio.sleep(0.05)

    await asyncio.gather(*(client() for _ in range(clients)))


async def _open_loop(calls: _Calls, per_second: float, seconds: float) -> set[asyncio.Future[int]]:
    """Requests started at a steady `per_second` for `seconds`, none waiting for another; returns those running."""
    started, sent, running = time.perf_counter(), 0, set()
    while (now := time.perf_counter()) - started < seconds:
        due = int((now - started) * per_second) - sent
        for _ in range(due):
            task = asyncio.ensure_future(calls.one("overload"))
            running.add(task)
            task.add_done_callback(running.discard)
        sent += max(due, 0)
        await asyncio.sleep(0.005)
    return set(running)


async def _sample_rss(app: str, samples: list[tuple[float, float]], t0: float) -> None:
    while True:
        samples.append((time.perf_counter() - t0, ingress_rss_mb(app)))
        await asyncio.sleep(1.0)


def ingress_rss_mb(app: str) -> float:
    """Resident memory of the application's ingress replicas, in MB: the processes Ray titles
    `ray::ServeReplica:<app>:Ingress...` among this process's descendants (the local Ray instance it started;
    another instance on the machine may serve an application of the same name)."""
    total = 0
    for process in psutil.Process().children(recursive=True):
        try:
            if title(process).startswith(f"ray::ServeReplica:{app}:Ingress"):
                total += process.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def _phase(done: list[Call], seconds: float) -> Phase:
    taken = sorted(c.end - c.start for c in done if c.status == 200)
    statuses = Counter(str(c.status) for c in done)
    pick = lambda q: taken[min(len(taken) - 1, int(q * len(taken)))] if taken else None  # noqa: E731
    return Phase(
        seconds=seconds,
        requests=len(done),
        taken=len(taken),
        rate=len(taken) / seconds if seconds else 0.0,
        p50_s=pick(0.5),
        p99_s=pick(0.99),
        statuses=dict(statuses),
    )


def _per_second(done: list[Call], t0: float, seconds: float) -> list[float]:
    counts = Counter(int(c.end - t0) for c in done)
    return [float(counts[i]) for i in range(int(seconds))]


def recovered_after(taken: list[Call], t0: float, slots: int) -> float | None:
    """Seconds after the burst until the clients that came back hold every slot again (the `slots`-th of
    their requests taken started): from then on the ingress runs at its capacity. None if it never did."""
    starts = sorted(c.start - t0 for c in taken)
    return round(starts[slots - 1], 2) if len(starts) >= slots else None


def memory_growth(samples: list[tuple[float, float]]) -> float:
    """MB the ingress gained from a quarter into the burst to its end: the first seconds hold the burst's
    connections and buffers once (a step); memory that keeps growing after that is a leak."""
    if len(samples) < 2:
        return 0.0
    return samples[-1][1] - samples[len(samples) // 4][1]


def _problems(report: OverloadReport, p99_bound: float, memory_growth_mb: float) -> list[str]:
    problems = []
    if not report.capacity.taken:
        problems.append(f"no request was taken at capacity: {report.capacity.statuses}")
    if report.server_errors:
        problems.append(f"{report.server_errors} answers were 5xx (or no answer)")
    if report.refused_without:
        problems.append(f"{report.refused_without} refusals were not 429 with Retry-After")
    base, under = report.capacity.p99_s, report.overload.p99_s
    if base is None or under is None or under > p99_bound * base:
        problems.append(f"p99 of taken requests {under} s under overload, {base} s at capacity (bound ×{p99_bound})")
    growth = memory_growth(report.rss_mb)
    if growth > memory_growth_mb:
        problems.append(f"ingress memory grew {growth:.0f} MB after the burst's first quarter: {report.rss_mb}")
    if report.recovered_after_s is None or report.recovered_after_s > 5:
        problems.append(f"not every slot taken again within 5 s after the burst: {report.recovered_after_s}")
    return problems
