"""The commands a user types: `serve run` on our YAML, and `gym-serve collect`, each in its own process."""

from __future__ import annotations

import argparse
import json
import os
import shlex
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
from tests.conftest import REPO, interruptible

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
        preexec_fn=interruptible,  # stopped with Ctrl-C below
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
        status, error = post(url, {"no": "params"})  # rows are checked where they enter: 422 naming the field
        assert status == 422 and error["field"] == "responses_create_params" and "Field required" in error["error"]
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
    bad = [
        "not json",
        json.dumps({"responses_create_params": {"input": [{"role": "robot", "content": "hi"}]}}),
        json.dumps({"responses_create_params": {"input": "hi", "temperature": -1}}),
        json.dumps({"responses_create_params": {"input": []}}),
        json.dumps({"responses_create_params": {}}),
    ]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]) + "\n".join(bad) + "\n")
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
    assert "rollouts         6" in result.stdout and "bad_input: 5" in result.stdout
    failures = [json.loads(line) for line in (tmp_path / "out_failures.jsonl").read_text().splitlines()]
    assert [(f["line"], f["_ng_failure_class"]) for f in failures] == [(n, "bad_input") for n in range(4, 9)]
    # the errors are on the terminal (the first ten), naming file, line and field, and where all of them are
    assert "5 input row(s) skipped as bad input" in result.stderr
    assert f"{source}, line 4: not valid JSON" in result.stderr
    assert f"{source}, line 5, field `responses_create_params.input.0.role`" in result.stderr
    assert f"{source}, line 6, field `responses_create_params.temperature`" in result.stderr
    assert f"{source}, line 7" in result.stderr and f"{source}, line 8" in result.stderr
    assert f"  (all are in {tmp_path / 'out_failures.jsonl'})" in result.stderr


def test_collect_says_when_the_input_is_empty_or_an_override_is_out_of_range(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"\xef\xbb\xbf\n  \n")
    config = str(REPO / "deployments" / "example_single_tool_call.yaml")
    base = [*GYM_SERVE, "collect", "--config", config, "--output", str(tmp_path / "o.jsonl")]
    result = subprocess.run([*base, "--input", str(empty)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and f"{empty} holds no rows" in result.stderr
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"responses_create_params": {"input": "hi"}}) + "\n")
    result = subprocess.run(
        [*base, "--input", str(rows), "--temperature", "-0.5"], capture_output=True, text=True, timeout=120
    )
    assert (
        result.returncode == 2
        and "key `--temperature`" in result.stderr
        and "greater than or equal to 0" in result.stderr
    )


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
    for name in ("throughput", "autoscaling", "scale_out", "memory", "http_model"):
        assert name in unknown.stderr
    assert "harness" not in unknown.stderr.split("available:")[1]
    usage = subprocess.run([*GYM_SERVE, "bench", "memory", "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and "--rows" in usage.stdout
    usage = subprocess.run([*GYM_SERVE, "bench", "http_model", "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and "--concurrency" in usage.stdout


def test_a_mistyped_agent_in_per_agent_repeats_is_an_error_before_anything_starts(tmp_path: Path) -> None:
    result = subprocess.run(
        [*GYM_SERVE, "collect", "--config", "deployments/demo.yaml", "--output", str(tmp_path / "out.jsonl"),
         "--input", "envs/example_single_tool_call/data/example.jsonl", "--num-repeats", "example_multi_stp=8"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2 and "Ray:" not in result.stdout, "refused before joining Ray"
    assert "`example_multi_stp`, which is not an agent here; did you mean `example_multi_step`?" in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group of commands (`env`, `env test`, ...), a group before its commands."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(*prefix, name), *_commands(sub, (*prefix, name))]
    return found


def test_the_help_names_every_command_and_the_readme_shows_each() -> None:
    from gym_serve.cli import _benchmarks, _parser

    def commands(parser: argparse.ArgumentParser) -> list[str]:
        every = _commands(parser)
        return [" ".join(c) for c in every if not any(o[: len(c)] == c and len(o) > len(c) for o in every)]

    parser = _parser()
    readme = (REPO / "README.md").read_text()
    assert {"up", "collect", "env test", "env init", "list"} <= set(commands(parser))
    for name in commands(parser):
        assert f"`{name}`" in (parser.description or ""), f"`gym-serve --help` does not describe `{name}`"
        assert f"gym-serve {name}" in readme, f"the README shows no `gym-serve {name}`"
    bench_help = subprocess.run([*GYM_SERVE, "bench", "--help"], capture_output=True, text=True, timeout=60).stdout
    scripts = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py") if p.stem != "harness")
    assert _benchmarks() == scripts and all(name in bench_help for name in scripts)


@pytest.mark.timeout(240)
def test_ctrl_c_prints_the_command_that_resumes(tmp_path: Path) -> None:
    """The hint is the same command with `--resume` (which test_collection_faults resumes to completion)."""
    config = tmp_path / "slow.yaml"
    slow_model = {"kind": "synthetic", "latency": {"mean_s": 0.1}}
    app = {"environment": {"name": "example_single_tool_call"}, "model": slow_model}
    entry = {
        "name": "weather",
        "route_prefix": None,
        "import_path": "gym_serve.deployments.app:build_app",
        "args": app,
    }
    config.write_text(yaml.safe_dump({"applications": [entry]}))
    out = tmp_path / "out.jsonl"
    command = ["collect", "--config", str(config), "--input", "envs/example_single_tool_call/data/example.jsonl",
               "--output", str(out), "--num-repeats", "200", "--concurrency", "4", "--address", "local"]  # fmt: skip
    proc = subprocess.Popen(
        [*GYM_SERVE, *command], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=interruptible,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 150
        while not (out.exists() and out.read_text().count("\n") >= 5) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        _, stderr = proc.communicate(timeout=60)
    finally:
        _signal(proc, signal.SIGKILL)
        proc.communicate()  # reaped and its pipes closed even when the test failed (else a later test's warning)
    assert proc.returncode == 130
    assert 5 <= out.read_text().count("\n") < 200 * len(example_rows("example_single_tool_call")), "stopped mid-way"
    assert f"The rollouts that finished are in {out}" in stderr
    assert stderr.strip().splitlines()[-1].strip() == shlex.join(["gym-serve", *command, "--resume"]), stderr[-2000:]


MAINTAINERS_WORDS = ("400 lines", "layer", "docstring", "one short function", "logic of its own", "maintainer")
"""What a note for the people who work on the code says, and a user's help never does."""


def test_every_commands_help_is_written_for_users(capsys: pytest.CaptureFixture[str]) -> None:
    """`gym-serve --help` and every `gym-serve COMMAND --help`: a description of what the command does, every
    option explained, and none of the notes for maintainers the module's docstring holds."""
    from gym_serve import cli

    commands = _commands(cli._parser())
    assert {"up", "collect", "profile", "reverify", "env", "list", "bench", "demo", "env init", "env test"} <= {
        " ".join(c) for c in commands
    }
    for command in [(), *commands]:
        with pytest.raises(SystemExit) as exited:
            cli.main([*command, "--help"])
        shown = capsys.readouterr().out
        assert exited.value.code == 0, command
        description = shown.split("\n\n")[1].strip()
        assert description and not description.startswith(("positional arguments", "options")), (command, shown)
        assert not [w for w in MAINTAINERS_WORDS if w in shown.lower()], (command, shown)
        lines = shown.splitlines()
        unexplained = [
            line
            for line, after in zip(lines, [*lines[1:], ""], strict=True)
            if line.startswith("  -")
            and "--help" not in line  # an option, with its help beside it or below it
            and len(line.split(None, 1)) < 2
            and not line.endswith(" ...")
            and not (after.startswith(" " * 8) and after.strip())
        ]
        assert not unexplained, (command, unexplained)
    assert cli.__doc__ and "one short function per command" in cli.__doc__, "the note stays where maintainers read"
