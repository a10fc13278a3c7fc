"""A chaos soak: rollouts of three environments under replica kills, collector kills and model faults, checked.

What runs (`run_soak`, on a Ray cluster with Serve's HTTP proxy that the caller started):

- three applications on one model behind HTTP (the instant OpenAI-compatible server): the weather task
  (`weather`: multi-turn, a tool), multiple choice (`choice`: single turn) and customer support with a
  simulated user (`support`: multi-turn, user turns); each tier with two replicas; and the HTTP ingress
  (two replicas) in front of the three;
- an undisturbed run first: every row once through `gym-serve collect`, whose rewards are the reference
  (the policy and the environments are deterministic: a row's reward is a function of the row);
- then the same rows under chaos: the model server injects faults at set rates (`gym_serve.testing.faults`),
  a seeded loop kills a replica of each tier in turn (`gym_serve.testing.chaos`), the collector (the command
  and its driver actor) is SIGKILLed `collector_kills` times and resumed with `--resume`, and a client streams
  a share of the rows through the ingress (`GymClient`, which re-sends a batch whose connection dropped).

What must hold (`SoakReport.problems` lists every breach): every rollout of the collection and of the
ingress batch exactly once (none lost, none twice), in the output or as a failure row; every failure row
typed with a `FailureKind`; every finished rollout's reward equal to the undisturbed run's; the output file
valid JSONL at every kill. The report also gives faults per kind, kills per tier, retries and the rates of
the chaotic and the undisturbed run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import yaml
from pydantic import BaseModel, Field
from ray import serve

from gym_serve.client import GymClient
from gym_serve.errors import FailureKind
from gym_serve.serving import deploy as serving
from gym_serve.serving.config import BUILDER, AppSpec
from gym_serve.testing.chaos import ChaosLoop
from gym_serve.testing.faults import FaultRates
from gym_serve.testing.fixtures import example_rows
from gym_serve.testing.instant_openai_server import start_instant_server

__all__ = ["ENVIRONMENTS", "SoakConfig", "SoakReport", "run_soak"]

ENVIRONMENTS = {"weather": "example_single_tool_call", "choice": "multiple_choice", "support": "simulated_user"}
"""Application → environment: a multi-turn tool task, a single-turn task, a multi-turn user simulation."""
ZERO_CPU = {"ray_actor_options": {"num_cpus": 0}}


class SoakConfig(BaseModel):
    rollouts: int = Field(default=5000, ge=3, description="Rollouts through the collector (one per row).")
    ingress_rollouts: int = Field(default=500, ge=0, description="Rollouts through the ingress, alongside.")
    concurrency: int = Field(default=64, ge=1, description="The collector's rollouts in flight.")
    kill_every_s: float = Field(default=8.0, gt=0, description="Each tier loses a replica this often.")
    collector_kills: int = Field(default=2, ge=0)
    faults: FaultRates = Field(
        default_factory=lambda: FaultRates(
            http_5xx=0.02, http_429=0.01, timeout=0.003, drop=0.01, malformed=0.005, slow=0.02, slow_s=0.5, hang_s=20
        )
    )
    model_timeout_s: float = Field(default=2.0, gt=0, description="The Model tier's HTTP timeout (a hang's end).")
    max_attempts: int = Field(default=10, ge=1, description="Tries per rollout, for the collector and the ingress.")
    seed: int = 0


class RunStats(BaseModel):
    rollouts: int = 0
    failures: int = 0
    seconds: float = 0.0
    rollouts_per_s: float = 0.0


class SoakReport(BaseModel):
    config: SoakConfig
    quiet: RunStats = Field(default_factory=RunStats)
    chaos: RunStats = Field(default_factory=RunStats)
    ingress: RunStats = Field(default_factory=RunStats)
    faults: dict[str, int] = Field(default_factory=dict, description="Faults the model server injected, by kind.")
    model_calls: int = 0
    kills: dict[str, int] = Field(default_factory=dict, description="Replicas killed, by tier.")
    kill_log: list[tuple[str, str]] = Field(default_factory=list, description="(tier, replica actor) per kill.")
    spared: dict[str, int] = Field(default_factory=dict, description="Turns a recovering tier was spared.")
    collector_kills: int = 0
    retries_last_run: int = Field(
        default=0, description="Rollout retries in the collector's last (uninterrupted) run."
    )
    failures_by_kind: dict[str, int] = Field(default_factory=dict)
    lost: int = 0
    duplicated: int = 0
    untyped_failures: int = 0
    reward_mismatches: int = 0
    jsonl_checks: list[str] = Field(default_factory=list, description="At each kill: the output's lines, all valid.")
    problems: list[str] = Field(default_factory=list, description="Every invariant that did not hold.")


async def run_soak(config: SoakConfig, work: Path, *, address: str, http_port: int) -> SoakReport:
    """The soak (module docstring) on the cluster at `address`, Serve's proxy at `http_port`; files in `work`."""
    report = SoakReport(config=config)
    base_url, server = start_instant_server(faults=FaultRates(), seed=config.seed)
    try:
        specs = _applications(base_url, config)
        serving.deploy(specs, source="<soak>", http=True, http_port=http_port)
        _deploy_ingress(config)
        yaml_path = work / "soak.yaml"
        yaml_path.write_text(yaml.safe_dump({"applications": [s.model_dump() for s in specs]}))
        rows = _rows(config.rollouts)
        source = _write_rows(work / "rows.jsonl", rows)
        collector = Collector(yaml_path, source, address, config)

        started = time.perf_counter()
        quiet = await collector.run(work / "quiet.jsonl")
        report.quiet = _stats(quiet, time.perf_counter() - started)
        reference = {r["soak_id"]: r["reward"] for r in _read(quiet)}
        if len(reference) != len(rows) or _read(_failures(quiet)):
            report.problems.append(f"the undisturbed run finished {len(reference)} of {len(rows)} rows")

        await _set_faults(base_url, config.faults)
        chaos = ChaosLoop(_tiers(), every_s=config.kill_every_s, seed=config.seed)
        stop = asyncio.Event()
        chaos_task = asyncio.ensure_future(chaos.run(stop))
        ingress_rows = rows[: config.ingress_rollouts]
        ingress_task = asyncio.ensure_future(_through_ingress(f"http://127.0.0.1:{http_port}", ingress_rows))
        started = time.perf_counter()
        out = await collector.run(work / "chaos.jsonl", kills=config.collector_kills, report=report)
        report.chaos = _stats(out, time.perf_counter() - started)
        ingress_results, ingress_s = await ingress_task
        stop.set()
        await chaos_task
        answered = [r for r in ingress_results if "_ng_failure_class" not in r]
        report.ingress = RunStats(
            rollouts=len(answered),
            failures=len(ingress_results) - len(answered),
            seconds=ingress_s,
            rollouts_per_s=len(answered) / ingress_s if ingress_s else 0.0,
        )
        counts = await _set_faults(base_url, FaultRates())
        report.faults, report.model_calls = counts["faults"], counts["calls"]
        report.kills, report.spared, report.kill_log = dict(chaos.kills), dict(chaos.spared), chaos.log
        report.collector_kills = collector.kills
        report.retries_last_run = collector.retries

        _check(report, rows, [*_read(out), *_read(_failures(out))], reference, "collection")
        _check(report, ingress_rows, ingress_results, reference, "ingress batch")
    finally:
        server.kill()
        server.wait()
    return report


# ---- the applications -----------------------------------------------------------------------------------------


def _applications(base_url: str, config: SoakConfig) -> list[AppSpec]:
    two = {"num_replicas": 2, **ZERO_CPU}
    model = {
        "kind": "openai",
        "base_url": base_url,
        "model": "instant",
        "api_key_env": "GYM_SERVE_SOAK_NO_KEY",
        "timeout_s": config.model_timeout_s,
        "max_retries": 6,
        "deployment": two,
    }
    specs = []
    for app, env in ENVIRONMENTS.items():
        args = {
            "environment": {"name": env, "deployment": two},
            "agent": {"tier_call_timeout_s": 120.0, "deployment": two},
            "model": model if app == "weather" else {"kind": "app", "app": "weather"},
        }
        specs.append(AppSpec(name=app, import_path=BUILDER, route_prefix=None, args=args))
    return specs


def _deploy_ingress(config: SoakConfig) -> None:
    from gym_serve.deployments.ingress.api import Ingress, IngressArgs

    args = IngressArgs(
        agents=list(ENVIRONMENTS),
        token_env="GYM_SERVE_SOAK_NO_TOKEN",
        max_attempts=config.max_attempts,
        max_in_flight=4096,
    )
    deployment: Any = Ingress
    serve.run(deployment.options(num_replicas=2).bind(args), name="ingress", route_prefix="/")


def _tiers() -> dict[str, list[tuple[str, str]]]:
    tiers = {tier: [(app, tier) for app in ENVIRONMENTS] for tier in ("Agent", "Environment")}
    return {**tiers, "Model": [("weather", "Model")], "Ingress": [("ingress", "Ingress")]}


async def _through_ingress(url: str, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    """The rows as rollouts through the ingress, in batches of 32, and the seconds it took: `GymClient` re-sends
    a batch whose connection dropped (an ingress replica killed mid-stream) and yields each rollout once."""
    started = time.perf_counter()
    if not rows:
        return [], 0.0
    async with GymClient(url, max_in_flight=8, max_retries=12) as client:
        results = [result async for result in client.rollouts(rows, batch_size=32)]
    return results, time.perf_counter() - started


async def _set_faults(base_url: str, rates: FaultRates) -> dict[str, Any]:
    import aiohttp

    root = base_url.removesuffix("/v1")
    async with aiohttp.ClientSession() as session:
        async with session.put(f"{root}/faults", json={"rates": rates.model_dump()}) as response:
            answer: dict[str, Any] = await response.json()
    return answer


# ---- rows, files, checks --------------------------------------------------------------------------------------


def _rows(n: int) -> list[dict[str, Any]]:
    """`n` rows cycling through the three environments' example rows, each a task of its own (`soak_id`)."""
    examples = [(app, row) for app, env in ENVIRONMENTS.items() for row in example_rows(env)]
    return [
        {**examples[i % len(examples)][1], "agent_ref": {"name": examples[i % len(examples)][0]}, "soak_id": i}
        for i in range(n)
    ]


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def _failures(out: Path) -> Path:
    return out.with_name(out.stem + "_failures.jsonl")


def _stats(out: Path, seconds: float) -> RunStats:
    done, failed = len(_read(out)), len(_read(_failures(out)))
    return RunStats(rollouts=done, failures=failed, seconds=seconds, rollouts_per_s=done / seconds if seconds else 0.0)


def jsonl_problem(path: Path) -> str | None:
    """What makes a file not valid JSONL (a line cut short, a line that does not parse), or None."""
    data = path.read_bytes() if path.exists() else b""
    if data and not data.endswith(b"\n"):
        return f"{path.name}: the last line is cut short"
    for number, line in enumerate(data.splitlines(), 1):
        try:
            json.loads(line)
        except ValueError as e:
            return f"{path.name}, line {number}: {e}"
    return None


def _check(
    report: SoakReport,
    rows: list[dict[str, Any]],
    results: list[dict[str, Any]],
    reference: dict[int, float],
    door: str,
) -> None:
    """Every row once (a rollout or a typed failure), and each rollout's reward the undisturbed run's."""
    seen = Counter(r.get("soak_id") for r in results)
    lost = [row["soak_id"] for row in rows if seen[row["soak_id"]] == 0]
    twice = [key for key, n in seen.items() if n > 1]
    kinds = {kind.value for kind in FailureKind}
    failures = [r for r in results if "_ng_failure_class" in r]
    untyped = [f for f in failures if f["_ng_failure_class"] not in kinds]
    wrong = [r for r in results if "_ng_failure_class" not in r and r.get("reward") != reference.get(r["soak_id"])]
    report.lost += len(lost)
    report.duplicated += len(twice)
    report.untyped_failures += len(untyped)
    report.reward_mismatches += len(wrong)
    for f in failures:
        report.failures_by_kind[f["_ng_failure_class"]] = report.failures_by_kind.get(f["_ng_failure_class"], 0) + 1
    for what, found in (("lost", lost), ("twice", twice), ("untyped failures", untyped), ("other rewards", wrong)):
        if found:
            report.problems.append(f"{door}: {len(found)} {what}: {found[:5]}")


# ---- the collector, and its kills -------------------------------------------------------------------------------


class Collector:
    """`gym-serve collect` over the rows (joined to the cluster, applications already deployed), killed and
    resumed as a soak asks."""

    def __init__(self, config_path: Path, source: Path, address: str, config: SoakConfig) -> None:
        self.config_path, self.source, self.address, self.config = config_path, source, address, config
        self.kills = 0
        self.retries = 0

    async def run(self, out: Path, *, kills: int = 0, report: SoakReport | None = None) -> Path:
        """Collect into `out`; SIGKILL the collector (the command and its driver actor) after each `1/(kills+1)`
        of the rows is written, check the files are valid JSONL, and resume, until the collection completes."""
        for attempt in range(kills + 1):
            process = self._start(out, resume=attempt > 0)
            if attempt < kills:
                target = (attempt + 1) * self.config.rollouts // (kills + 1)
                while process.poll() is None and len(_read_lines(out)) < target:
                    await asyncio.sleep(0.1)
                if process.poll() is None:
                    _kill_collector(process)
                    self.kills += 1
                    for path in (out, _failures(out)):
                        problem = jsonl_problem(path)
                        if report is not None:
                            line = problem or f"{path.name}: {len(_read_lines(path))} lines, all valid JSON"
                            report.jsonl_checks.append(f"kill {self.kills}: {line}")
                            if problem:
                                report.problems.append(f"not valid JSONL at kill {self.kills}: {problem}")
                    continue
            stdout, stderr = await asyncio.to_thread(process.communicate)
            if process.returncode != 0:
                raise RuntimeError(f"gym-serve collect exited {process.returncode}: {stderr[-3000:]}")
            found = re.search(r"^retries\s+(\d+)", stdout, re.M)
            self.retries = int(found.group(1)) if found else 0
            return out
        raise AssertionError("unreachable")

    def _start(self, out: Path, *, resume: bool) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "gym_serve.cli", "collect", "--config", str(self.config_path)]
        command += ["--input", str(self.source), "--output", str(out), "--no-deploy", "--address", self.address]
        command += ["--concurrency", str(self.config.concurrency), "--max-attempts", str(self.config.max_attempts)]
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        return subprocess.Popen(
            [*command, *(["--resume"] if resume else [])],
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def _read_lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []


def _kill_collector(process: subprocess.Popen[str]) -> None:
    """SIGKILL the command's process group and its driver actor (a Ray worker, not in that group): a collector
    that vanished at once, mid-write, as with a lost machine."""
    drivers = [p for p in psutil.Process().children(recursive=True) if _is_driver(p)]  # this cluster's only
    os.killpg(process.pid, signal.SIGKILL)
    for driver in drivers:
        try:
            driver.kill()
        except psutil.NoSuchProcess:
            pass
    process.communicate()


def _is_driver(process: psutil.Process) -> bool:
    try:
        command = process.cmdline()
    except psutil.Error:
        return False
    return bool(command) and command[0].startswith("ray::RolloutDriver")
