"""The ingress past its capacity: a bounded asyncio load generator, and what an overload must not do.

Three phases against `POST /run` (one rollout per request):

1. *capacity*: as many closed-loop clients as the ingress has in-flight slots, back to back: the rate it
   serves (its capacity) and the latency of a request it takes (the baseline);
2. *overload*: requests arriving open-loop at `factor` × that rate for `seconds` (a client that never waits,
   as a burst of trainers would), each answered or refused: the taken ones' latency, the refused ones'
   status and `Retry-After`, the ingress replicas' memory every second, each process's CPU;
3. *recovery*: the closed-loop clients again, right after the burst: requests per second until the rate is
   back to capacity.

`OverloadReport.problems` names what broke: a 5xx, a refusal other than 429 with `Retry-After`, a p99 of
taken requests beyond `p99_bound` × the baseline's, memory that grew past `memory_growth_mb`, or a rate not
back to 90 % of capacity within 5 s. `cpu_s` says where the machine's time went during the burst.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import Counter
from typing import Any

import aiohttp
import psutil
from pydantic import BaseModel, Field

__all__ = ["OverloadReport", "cpu_seconds_by_process", "ingress_rss_mb", "overload"]


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


class _Calls:
    """Every request's (finish time, seconds, status, had Retry-After)."""

    def __init__(self, session: aiohttp.ClientSession, url: str, row: dict[str, Any]) -> None:
        self.session, self.url, self.row = session, url, row
        self.done: list[tuple[float, float, int, bool]] = []

    async def one(self) -> int:
        started = time.perf_counter()
        try:
            async with self.session.post(self.url, json=self.row) as response:
                await response.read()
                status, retry_after = response.status, "Retry-After" in response.headers
        except aiohttp.ClientError:
            status, retry_after = 599, False  # no answer at all: counted as a server error
        now = time.perf_counter()
        self.done.append((now, now - started, status, retry_after))
        return status


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
        t0 = time.perf_counter()
        await _closed_loop(calls, slots, capacity_s)
        capacity = _phase(calls.done, t0, capacity_s)

        offered = factor * max(capacity.rate, 1.0)
        mark = len(calls.done)
        rss: list[tuple[float, float]] = []
        t1 = time.perf_counter()
        sampler = asyncio.ensure_future(_sample_rss(app, rss, t1))
        cpu_before = cpu_seconds_by_process()
        await _open_loop(calls, offered, seconds)
        cpu_after = cpu_seconds_by_process()
        sampler.cancel()
        overload_calls = calls.done[mark:]
        burst = _phase(overload_calls, t1, time.perf_counter() - t1)

        mark = len(calls.done)
        t2 = time.perf_counter()
        await _closed_loop(calls, slots, recovery_s)
        per_second = _per_second([c for c in calls.done[mark:] if c[2] == 200], t2, recovery_s)

    report = OverloadReport(slots=slots, factor=factor, capacity=capacity, overload=burst, offered_per_s=offered)
    refused = [c for c in overload_calls if c[2] != 200]
    report.refused_with_retry_after = sum(1 for c in refused if c[2] == 429 and c[3])
    report.refused_without = len(refused) - report.refused_with_retry_after
    report.server_errors = sum(1 for c in calls.done if c[2] >= 500)
    report.rss_mb, report.recovery_per_s = rss, per_second
    spent = {name: after - cpu_before.get(name, 0.0) for name, after in cpu_after.items()}
    report.cpu_s = {name: round(seconds, 2) for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1])}
    report.taken_per_s = _per_second([c for c in overload_calls if c[2] == 200], t1, seconds)
    report.refused_per_s = _per_second([c for c in overload_calls if c[2] != 200], t1, seconds)
    report.recovered_after_s = recovered_after(per_second, capacity)
    report.problems = _problems(report, p99_bound, memory_growth_mb)
    return report


async def _closed_loop(calls: _Calls, clients: int, seconds: float) -> None:
    end = time.perf_counter() + seconds

    async def client() -> None:
        while time.perf_counter() < end:
            if await calls.one() == 429:
                await asyncio.sleep(0.05)

    await asyncio.gather(*(client() for _ in range(clients)))


async def _open_loop(calls: _Calls, per_second: float, seconds: float) -> None:
    """Requests started at a steady `per_second` for `seconds`, none waiting for another; then the stragglers."""
    started, sent, running = time.perf_counter(), 0, set()
    while (now := time.perf_counter()) - started < seconds:
        due = int((now - started) * per_second) - sent
        for _ in range(due):
            task = asyncio.ensure_future(calls.one())
            running.add(task)
            task.add_done_callback(running.discard)
        sent += max(due, 0)
        await asyncio.sleep(0.005)
    await asyncio.gather(*running)


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
            if _title(process).startswith(f"ray::ServeReplica:{app}:Ingress"):
                total += process.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def cpu_seconds_by_process() -> dict[str, float]:
    """CPU seconds so far of this process and each of its descendants, summed by title (`ray::ProxyActor`,
    `ray::ServeReplica:<app>:<deployment>`, `raylet`, ...): where the time of a phase went."""
    seconds: Counter[str] = Counter()
    for process in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            title, times = _title(process), process.cpu_times()
        except psutil.Error:
            continue
        name = "load generator" if process.pid == os.getpid() else title.split(".")[0].split(" ")[0]
        seconds[name] += times.user + times.system
    return dict(seconds)


def _title(process: psutil.Process) -> str:
    return (process.cmdline() or [""])[0]


def _phase(done: list[tuple[float, float, int, bool]], t0: float, seconds: float) -> Phase:
    taken = sorted(latency for end, latency, status, _ in done if status == 200 and end >= t0)
    statuses = Counter(str(status) for end, _, status, _ in done if end >= t0)
    pick = lambda q: taken[min(len(taken) - 1, int(q * len(taken)))] if taken else None  # noqa: E731
    return Phase(
        seconds=seconds,
        requests=sum(statuses.values()),
        taken=len(taken),
        rate=len(taken) / seconds if seconds else 0.0,
        p50_s=pick(0.5),
        p99_s=pick(0.99),
        statuses=dict(statuses),
    )


def _per_second(done: list[tuple[float, float, int, bool]], t0: float, seconds: float) -> list[float]:
    counts = Counter(int(end - t0) for end, *_ in done)
    return [float(counts[i]) for i in range(int(seconds))]


def recovered_after(per_second: list[float], capacity: Phase) -> float | None:
    """Seconds after the burst until a window of one rollout's latency (at least 1 s) has taken requests at
    90 % of capacity: the end of the first such window, or None."""
    window = max(1, math.ceil(capacity.p50_s or 1.0))
    for start in range(len(per_second) - window + 1):
        if sum(per_second[start : start + window]) / window >= 0.9 * capacity.rate > 0:
            return float(start + window)
    return None


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
        problems.append(f"not back to 90 % of capacity within 5 s: {report.recovery_per_s}")
    return problems
