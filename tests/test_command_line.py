"""The commands a user types: `serve run` on our YAML, and `gym-serve collect`, each in its own process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from gym_serve.testing.fixtures import example_rows
from tests.conftest import REPO

pytestmark = pytest.mark.serve

GYM_SERVE = [sys.executable, "-m", "gym_serve.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:  # before the app is up the proxy answers 404/503 in plain text
        body = e.read()
        try:
            return e.code, json.loads(body)
        except json.JSONDecodeError:
            return e.code, {"error": body.decode(errors="replace")}


@pytest.mark.timeout(240)
def test_serve_run_brings_up_an_environment_that_answers_over_http(tmp_path: Path) -> None:
    port = free_port()
    config = yaml.safe_load((REPO / "deployments" / "example_single_tool_call.yaml").read_text())
    config["http_options"] = {"host": "127.0.0.1", "port": port}
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own local cluster
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "serve"), "run", str(path)],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/example_single_tool_call"
    row = {**example_rows("example_single_tool_call")[0], "_ng_task_index": 7, "_ng_rollout_index": 0}
    try:
        deadline = time.monotonic() + 180
        status, rollout = 0, {}
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, rollout = post(url, row)
                if status == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(1)
        assert status == 200, f"no rollout over HTTP; serve run said:\n{_output(proc)}"
        assert rollout["reward"] == 1.0 and rollout["_ng_task_index"] == 7
        assert any(item["type"] == "function_call" for item in rollout["response"]["output"])
        status, error = post(url, {"no": "params"})
        assert status == 400 and "responses_create_params" in error["error"]
    finally:
        _signal(proc, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _output(proc: subprocess.Popen) -> str:
    _signal(proc, signal.SIGKILL)
    return proc.communicate(timeout=30)[0].decode(errors="replace")[-4000:]


@pytest.mark.timeout(240)
def test_collect_command_writes_rollouts_and_reports_bad_rows(tmp_path: Path) -> None:
    rows = example_rows("example_single_tool_call")
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]) + "not json\n")
    out = tmp_path / "out.jsonl"
    result = subprocess.run(
        [
            *GYM_SERVE,
            "collect",
            "--config",
            str(REPO / "deployments" / "example_single_tool_call.yaml"),
            "--input",
            str(source),
            "--output",
            str(out),
            "--num-repeats",
            "2",
            "--concurrency",
            "4",
            "--address",
            "local",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    rollouts = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in rollouts) == [
        (t, k) for t in range(3) for k in range(2)
    ]
    assert "rollouts         6" in result.stdout and "bad_input: 1" in result.stdout
    failure = json.loads((tmp_path / "out_failures.jsonl").read_text())
    assert failure["line"] == 4 and failure["_ng_failure_class"] == "bad_input"


def test_config_errors_name_the_key_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "applications:\n- name: w\n  import_path: gym_serve.deployments.app:build_app\n"
        "  args: {environment: {name: nope}}\n"
    )
    result = subprocess.run(
        [*GYM_SERVE, "collect", "--config", str(config), "--input", "x", "--output", "y"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"{config}" in result.stderr and "applications[w].args.environment.name" in result.stderr


def test_bench_runs_a_benchmark_script_and_names_the_known_ones() -> None:
    unknown = subprocess.run([*GYM_SERVE, "bench", "nope"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2
    for name in ("throughput", "autoscaling", "scale_out", "memory"):
        assert name in unknown.stderr
    assert "harness" not in unknown.stderr.split("available:")[1]
    usage = subprocess.run([*GYM_SERVE, "bench", "memory", "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and "--rows" in usage.stdout
