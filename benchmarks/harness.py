"""What the benchmarks share: a local Ray + Serve, deploying app configs, CPU accounting, driving load, results.

Every benchmark runs on a fresh local Ray instance of its own (run one at a
time, with nothing else on the machine: CPU time is summed over all `ray::`
processes) and writes `benchmarks/results/<name>-<date>.json` plus PNGs.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import ray
from ray import serve

from gym_serve.collect.job import CollectJob
from gym_serve.serving import deploy as serving
from gym_serve.serving.config import AppSpec
from gym_serve.testing.processes import cpu_seconds_by_process, spent_since

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
WEATHER_ROWS = REPO / "envs" / "example_single_tool_call" / "data" / "example.jsonl"
ZERO_CPU = {"ray_actor_options": {"num_cpus": 0}}


# ---- cluster and applications -------------------------------------------------------------------------------


def start() -> None:
    """A local Ray instance with Serve (no HTTP proxy)."""
    serving.connect("local")
    serve.start(proxy_location="Disabled")


def start_with_http() -> int:
    """A local Ray instance with Serve's HTTP proxy on a free port of 127.0.0.1; returns the port."""
    serving.connect("local")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    return port


def deploy(*apps: dict[str, Any]) -> None:
    """Deploy applications given as Serve config entries (`{name, import_path, args}`), and wait for them."""
    serving.deploy([AppSpec.model_validate(app) for app in apps], source="<benchmark>")


def weather_app(
    name: str,
    *,
    model: dict[str, Any],
    env: dict[str, Any] | None = None,
    env_name: str = "synthetic_load",
    env_deployment: dict[str, Any] | None = None,
    agent_deployment: dict[str, Any] | None = None,
    model_deployment: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The weather task as a Serve config entry (`synthetic_load`, the default, is weather + dialled costs)."""
    environment = {"name": env_name, "deployment": {**ZERO_CPU, **(env_deployment or {})}}
    if env:
        environment["config"] = env
    return {
        "name": name,
        "import_path": "gym_serve.deployments.app:build_app",
        "args": {
            "environment": environment,
            "agent": {"deployment": {**ZERO_CPU, **(agent_deployment or {})}},
            "model": {
                "recordings": ["example_single_tool_call"],
                **model,
                "deployment": {**ZERO_CPU, **(model_deployment or {})},
            },
        },
    }


def heavy_tailed_app(
    name: str, *, min_tokens: int, alpha: float, max_tokens: int, seconds_per_token: float, error_rate: float = 0.0
) -> dict[str, Any]:
    """`example_multi_step` (3 to 5 model turns) on the synthetic model, its response lengths Pareto-distributed
    (shape `alpha` above `min_tokens`, capped at `max_tokens`), as a Serve config entry."""
    lengths = {"distribution": "pareto", "min_tokens": min_tokens, "alpha": alpha, "max_tokens": max_tokens}
    return {
        "name": name,
        "route_prefix": None,
        "import_path": "gym_serve.deployments.app:build_app",
        "args": {
            "environment": {"name": "example_multi_step", "deployment": ZERO_CPU},
            "agent": {"deployment": ZERO_CPU},
            "model": {
                "kind": "synthetic",
                "error_rate": error_rate,
                "lengths": lengths,
                "seconds_per_token": seconds_per_token,
                "deployment": ZERO_CPU,
            },
        },
    }


def replicas(app: str) -> dict[str, int]:
    """RUNNING replicas per deployment of an application."""
    deployments = serve.status().applications[app].deployments
    return {name: d.replica_states.get("RUNNING", 0) for name, d in deployments.items()}


# ---- CPU and memory -------------------------------------------------------------------------------------------


def session_processes() -> list[psutil.Process]:
    """This process and every process of the local Ray instance (GCS, raylet, workers, replicas, their children).

    The local instance is this process's descendants (it started them), which also keeps out the `ray::`
    workers of other Ray instances on a shared machine.
    """
    me = psutil.Process()
    return [me, *me.children(recursive=True)]


def cpu_times() -> dict[int, float]:
    """CPU seconds so far of each process of the Ray instance, by pid."""
    times = {}
    for proc in session_processes():
        try:
            t = proc.cpu_times()
            times[proc.pid] = t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return times


def cpu_since(before: dict[int, float]) -> float:
    """CPU seconds spent since `before` by the processes alive now (measure before killing actors)."""
    return sum(max(0.0, now - before.get(pid, 0.0)) for pid, now in cpu_times().items())


# ---- load -----------------------------------------------------------------------------------------------------


def rows_file(path: Path, n: int, *, source: Path = WEATHER_ROWS) -> Path:
    """`n` input rows cycling through `source`'s rows."""
    rows = source.read_text().splitlines()
    with path.open("w") as out:
        for i in range(n):
            out.write(rows[i % len(rows)] + "\n")
    return path


def collect(job: dict[str, Any], *, sample_every_s: float = 0.5) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """Run one collection in a `RolloutDriver` actor; returns its summary and progress samples over time.

    Samples carry time, rollouts done, in flight, the driver's RSS and the machine's used memory, so a benchmark
    can take the steady-state rate (the middle of the run, without ramp-up and drain) and check memory stays flat.
    The summary gains `cpu_s`: CPU seconds of every Ray process during the collection, and `cpu_s_by_process`:
    the same by process title (`gym_serve.testing.processes`).
    """
    from gym_serve.collect.driver import driver_on, follow

    samples: list[dict[str, float]] = []
    with driver_on() as driver:
        ray.get(driver.progress.remote())  # the actor is up: its start-up is not the collection's CPU
        cpu, by_process = cpu_times(), cpu_seconds_by_process()
        started = time.perf_counter()

        def sample(progress: Any) -> None:
            samples.append(
                {
                    "t": time.perf_counter() - started,
                    "done": progress.rollouts + progress.failures,
                    "in_flight": progress.in_flight,
                    "rss_mb": progress.driver_rss_mb,
                    "system_used_mb": psutil.virtual_memory().used / 2**20,
                }
            )

        summary = follow(driver, CollectJob.model_validate(job), sample, every_s=sample_every_s).model_dump()
        summary["cpu_s"], summary["cpu_s_by_process"] = cpu_since(cpu), spent_since(by_process)
    return summary, samples


def steady_rate(samples: list[dict[str, float]], low: float = 0.2, high: float = 0.8) -> float | None:
    """Rollouts/s between the times `low` and `high` of the work was done: the rate without ramp-up and drain."""
    total = samples[-1]["done"]
    inside = [s for s in samples if low * total <= s["done"] <= high * total]
    if len(inside) < 2 or inside[-1]["t"] == inside[0]["t"]:
        return None
    return (inside[-1]["done"] - inside[0]["done"]) / (inside[-1]["t"] - inside[0]["t"])


class Poller:
    """Calls `probe()` every `interval_s` in a thread, keeping `(time, result)` pairs (e.g. replicas per tier)."""

    def __init__(self, probe: Callable[[], Any], interval_s: float = 0.5) -> None:
        self.probe, self.interval_s = probe, interval_s
        self.samples: list[tuple[float, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.perf_counter()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - self.t0, self.probe()))
            self._stop.wait(self.interval_s)

    @contextmanager
    def running(self) -> Iterator[Poller]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


async def closed_loop(
    call: Callable[[int], Any], schedule: list[tuple[float, int]], t0: float
) -> list[tuple[float, float]]:
    """Closed-loop clients: during each `(seconds, clients)` phase, that many clients call `call(i)` back to back.

    Returns `(finish time, latency)` of every call. Clients beyond a phase's count
    finish their call in flight and wait for a later phase that wants them.
    """
    finished: list[tuple[float, float]] = []
    wanted = 0
    ends = []
    elapsed = 0.0
    for seconds, clients in schedule:
        elapsed += seconds
        ends.append((elapsed, clients))
    stop_at = elapsed

    async def client(i: int) -> None:
        while time.perf_counter() - t0 < stop_at:
            if i >= wanted:
                await asyncio.sleep(0.05)
                continue
            started = time.perf_counter()
            await call(i)
            finished.append((time.perf_counter() - t0, time.perf_counter() - started))

    async def conductor() -> None:
        nonlocal wanted
        for end, clients in ends:
            wanted = clients
            await asyncio.sleep(max(0.0, end - (time.perf_counter() - t0)))

    most = max(clients for _, clients in schedule)
    await asyncio.gather(conductor(), *(client(i) for i in range(most)))
    return finished


# ---- results --------------------------------------------------------------------------------------------------


def machine() -> str:
    return (
        f"{platform.machine()}, {os.cpu_count()} CPUs, {psutil.virtual_memory().total >> 30} GiB, "
        f"Python {platform.python_version()}, Ray {ray.__version__}"
    )


def cpu_calibration_s() -> float:
    """Seconds one core takes for 10M iterations of a plain Python loop: compare results across machines by it.

    (Machines of the same nominal kind differ: this project's 2-core VMs measured 0.45-1.25 s.)
    """
    started = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.perf_counter() - started


def write_result(name: str, document: dict[str, Any]) -> Path:
    """`results/<name>-<date>.json`; returns the path without suffix, for the PNGs beside it."""
    stamp = datetime.now()
    RESULTS.mkdir(exist_ok=True)
    base = RESULTS / f"{name}-{stamp:%Y%m%d-%H%M%S}"
    document = {
        "benchmark": name,
        "date": stamp.isoformat(timespec="seconds"),
        "machine": machine(),
        "cpu_calibration_s": cpu_calibration_s(),
        "load_average_at_end": os.getloadavg(),
        **document,
    }
    base.with_suffix(".json").write_text(json.dumps(document, indent=2))
    return base


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain right-aligned table (the last thing each benchmark prints)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def checklist(rows: list[tuple[str, Any]], problems: list[str], *, ok: str) -> str:
    """Labelled lines, then one `PROBLEM:` line per invariant that broke, or `ok` (a stress run's last words)."""
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"{label:<{width}}{value}" for label, value in rows]
    return "\n".join(lines + ([f"PROBLEM: {problem}" for problem in problems] or [ok]))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
