"""Faults during real collections on Serve: hung tools, flaky tiers, replicas killed mid-run, a SIGKILLed driver."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from ray import serve

from gym_serve.collect.driver import RolloutDriver
from gym_serve.collect.job import CollectJob, failures_path, journal_path
from gym_serve.collect.journal import load_journal
from gym_serve.deployments.app import build_app
from gym_serve.serving.config import AppArgs
from gym_serve.testing.fixtures import unique
from gym_serve.wire.tokens import check_contiguity
from tests.conftest import REPO

from .fault_parts import BumpModel, counter_app_args, counting_rows

pytestmark = pytest.mark.serve


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def keys(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows)


def deploy_counter(name: str, model: Any, **kwargs: Any) -> None:
    serve.run(model, name=name + "-model", route_prefix=None)
    serve.run(
        build_app(AppArgs.model_validate(counter_app_args(name + "-model", **kwargs))), name=name, route_prefix=None
    )


async def collect(name: str, source: Path, out: Path, **job: Any) -> dict[str, Any]:
    driver = RolloutDriver.remote()
    try:
        job_ = CollectJob(input_path=str(source), output_path=str(out), agents=[name], default_agent=name, **job)
        return (await driver.collect.remote(job_)).model_dump()
    finally:
        ray.kill(driver)


def teardown(name: str) -> None:
    serve.delete(name)
    serve.delete(name + "-model")


async def test_a_hung_call_times_out_and_the_rest_finish(serve_instance: None, tmp_path: Path) -> None:
    name = unique("hang")
    deploy_counter(name, BumpModel.bind(), tier_call_timeout_s=0.5)
    rows = counting_rows(12)
    rows[3]["hang"] = rows[7]["hang"] = True
    out = tmp_path / "out.jsonl"
    started = time.monotonic()
    summary = await collect(name, write_rows(tmp_path / "in.jsonl", rows), out, max_attempts=2, concurrency=16)
    assert time.monotonic() - started < 30
    assert summary["rollouts"] == 10 and all(r["reward"] == 1.0 for r in read(out))
    failures = read(failures_path(out))
    assert sorted(f["task_id"] for f in failures) == [3, 7]
    assert all(f["_ng_failure_class"] == "transport_timeout" and f["attempts"] == 2 for f in failures)
    assert "did not answer within 0.5 s" in failures[0]["error"]
    teardown(name)


async def test_a_flaky_model_costs_retries_not_rollouts(serve_instance: None, tmp_path: Path) -> None:
    name = unique("flaky")
    deploy_counter(name, BumpModel.bind(fail_first=True))
    out = tmp_path / "out.jsonl"
    summary = await collect(name, write_rows(tmp_path / "in.jsonl", counting_rows(20)), out, num_repeats=2)
    assert summary["rollouts"] == 40 and summary["failures"] == 0
    assert summary["retries"] == 40, "each session's first model call failed once"
    assert all(r["reward"] == 1.0 for r in read(out))
    teardown(name)


def replica_actors(app: str) -> dict[str, list[str]]:
    """Serve's replica actor names of an application, by deployment."""
    found: dict[str, list[str]] = {}
    for actor in ray.util.list_named_actors(all_namespaces=True):
        parts = actor["name"].split("::", 1)[-1].split("#")
        if actor["name"].startswith("SERVE_REPLICA::") and parts[0] == app:
            found.setdefault(parts[1], []).append(actor["name"])
    return found


async def written_at_least(out: Path, n: int, collection: asyncio.Future[Any]) -> None:
    """Wait until `n` rollouts are on disk: a kill then lands mid-run, whatever this machine's speed."""
    deadline = time.monotonic() + 120
    while len(read_lines(out)) < n and not collection.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


@pytest.mark.timeout(300)
async def test_killing_replicas_of_every_tier_loses_no_rollout(serve_instance: None, tmp_path: Path) -> None:
    name = unique("kill")
    deploy_counter(
        name, BumpModel.options(num_replicas=2).bind(delay_s=0.02), env_replicas=2, agent_replicas=2, delay_s=0.02
    )
    out = tmp_path / "out.jsonl"
    source = write_rows(tmp_path / "in.jsonl", counting_rows(200))
    collection = asyncio.ensure_future(collect(name, source, out, num_repeats=3, concurrency=48, max_attempts=8))
    killed: list[str] = []
    # One replica of each tier (each has 2, so the tier keeps serving), after 100, 200 and 300 of 600 rollouts.
    for step, (app, deployment) in enumerate([(name, "Agent"), (name, "Environment"), (name + "-model", "Model")]):
        await written_at_least(out, 100 * (step + 1), collection)
        assert not collection.done(), "the collection should still be running while replicas die"
        victim = replica_actors(app)[deployment][0]
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=False)
        killed.append(f"{deployment}:{victim}")
    summary = await collection

    rollouts = read(out)
    assert keys(rollouts) == [(t, k) for t in range(200) for k in range(3)], "every key exactly once"
    assert summary["failures"] == 0 and read(failures_path(out)) == []
    assert summary["retries"] > 0, "the kills cost retries"
    print(
        f"kill test: killed {killed}; expected 600, written {len(rollouts)}, failures {summary['failures']}, "
        f"duplicates {len(rollouts) - len(set(keys(rollouts)))}, retries {summary['retries']}"
    )
    assert all(r["reward"] == 1.0 for r in rollouts)
    teardown(name)


@pytest.mark.timeout(400)
def test_a_sigkilled_collection_resumes_to_completion(tmp_path: Path) -> None:
    """SIGKILL mid-collection, then `--resume`: every key once, and no turn the journal holds runs again.

    The model logs every call (`<session> <turn>`) to a file per run; the journal, read as the kill left it,
    says which turns of the unfinished rollouts had completed.
    """

    def config(log: Path) -> Path:
        applications = [
            {
                "name": "bump-model",
                "route_prefix": None,  # two applications: Serve's schema wants distinct route prefixes
                "import_path": "tests.fault_parts:build_bump_model",
                "args": {"delay_s": 0.05, "tokens": True, "log": str(log)},
            },
            {
                "name": "counter",
                "route_prefix": None,
                "import_path": "gym_serve.deployments.app:build_app",
                "args": counter_app_args("bump-model"),
            },
        ]
        path = tmp_path / f"{log.stem}.yaml"
        path.write_text(yaml.safe_dump({"applications": applications}))
        return path

    source = write_rows(tmp_path / "in.jsonl", counting_rows(150))
    out = tmp_path / "out.jsonl"

    def command(log: Path) -> list[str]:
        return [
            sys.executable, "-m", "gym_serve.cli", "collect", "--config", str(config(log)), "--input", str(source),
            "--output", str(out), "--num-repeats", "2", "--concurrency", "8", "--address", "local",
        ]  # fmt: skip

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    first = subprocess.Popen(
        command(tmp_path / "calls-1.log"),
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline and len(read_lines(out)) < 60 and first.poll() is None:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the CLI, its local Ray, the driver actor: everything, mid-write
    first.wait(timeout=30)
    time.sleep(3)  # a worker of the killed Ray may write its last flushed line as it notices
    whole = [json.loads(line) for line in out.read_bytes().splitlines(keepends=True) if line.endswith(b"\n")]
    written_before = {(r["_ng_task_index"], r["_ng_rollout_index"]) for r in whole}
    assert 60 <= len(written_before) < 300, "the kill landed in the middle of the collection"
    shutil.copy(journal_path(out), tmp_path / "journal-as-killed.jsonl")
    journal = load_journal(tmp_path / "journal-as-killed.jsonl", {("counter", *k) for k in written_before})
    journaled = {(f"{t}:{k}", turn) for (_, t, k), c in journal.checkpoints.items() for turn in range(1, c.turn + 1)}
    assert journaled, "some rollouts were killed after a completed turn"

    second = subprocess.run(
        [*command(tmp_path / "calls-2.log"), "--resume"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    rollouts = read(out)
    assert keys(rollouts) == [(t, k) for t in range(150) for k in range(2)], "every key once, nothing lost"
    assert read(failures_path(out)) == []
    assert all(r["reward"] == 1.0 for r in rollouts)
    assert "300 expected" in second.stdout and "from before" in second.stdout
    calls = [tuple(line.split()) for line in (tmp_path / "calls-2.log").read_text().splitlines()]
    again = [(session, int(turn)) for session, turn in calls if (session, int(turn)) in journaled]
    finished_again = [session for session, _ in calls if tuple(map(int, session.split(":"))) in written_before]
    assert again == [] and finished_again == [], "no completed turn, and no finished rollout, ran again"
    resumed = [r for r in rollouts if "resumed_at_turn" in r]
    assert len(resumed) == len(journal.checkpoints) and all(check_contiguity(r).ok for r in resumed)
    assert f"resumed mid-way  {len(journal.checkpoints)} rollout(s)" in second.stdout
    assert f"({len(journaled)} turn(s) not run again)" in second.stdout
    print(
        f"resume test: written before SIGKILL {len(written_before)}, after resume {len(rollouts)} "
        f"(unique {len(set(keys(rollouts)))}), failures 0; {len(journal.checkpoints)} rollouts resumed mid-way, "
        f"{len(journaled)} completed turns not run again, {len(calls)} model calls after the kill\n{second.stdout}"
    )


def read_lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []
