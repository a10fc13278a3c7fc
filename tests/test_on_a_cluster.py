"""On a separate `ray start` cluster (Ray's token auth on), driven by `gym-serve` commands in their own processes.

Where a command joined and how it fails (fast, one line naming the fix); the ingress's bearer token holding on
the cluster, though its replicas never see the deployer's environment, while the token stays out of every
output, log file and config Ray shows; an ingress asked for auth without a token refusing to start; and the
URLs `gym-serve up` prints answering.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml

from gym_serve.testing.fixtures import example_rows
from tests.conftest import REPO
from tests.ray_start_cluster import RayStartCluster, free_port, plain_env, ray_start_cluster

pytestmark = [pytest.mark.serve, pytest.mark.timeout(300)]

GYM_SERVE = [sys.executable, "-m", "gym_serve.cli"]
TOKEN = "tok-cluster-test-8c1d5e"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayStartCluster]:
    with ray_start_cluster(tmp_path_factory.mktemp("cluster")) as started:
        yield started


def gym_serve(*args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GYM_SERVE, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def request(url: str, body: Any = None, token: str | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def printed_urls(stdout: str) -> dict[str, str]:
    """`METHOD URL` lines of `gym-serve up`'s output, keyed by the URL's path."""
    found = re.findall(r"^\s+(GET|POST)\s+(http://\S+)", stdout, flags=re.M)
    return {re.sub(r"^http://[^/]+", "", url) or "/": url for _, url in found}


def test_commands_say_which_cluster_they_joined(cluster: RayStartCluster) -> None:
    result = gym_serve("list", "--address", cluster.address, env=cluster.env())
    assert result.returncode == 0, result.stderr
    assert f"the Ray cluster at {cluster.address} (Ray {ray.__version__}, 1 node, 4 CPU)" in result.stdout


@pytest.mark.parametrize(
    ("auth", "fix"),
    [
        ({"RAY_AUTH_MODE": None}, "set RAY_AUTH_MODE=token"),
        ({"RAY_AUTH_TOKEN": "f" * 32}, "refused this machine's Ray token"),
    ],
    ids=["no-auth-mode", "wrong-token"],
)
def test_a_cluster_that_refuses_us_is_one_line_naming_the_fix_within_seconds(
    cluster: RayStartCluster, auth: dict[str, str | None], fix: str
) -> None:
    env = {k: v for k, v in (cluster.env() | auth).items() if v is not None}
    started = time.monotonic()
    result = gym_serve("up", "deployments/example_single_tool_call.yaml", "--address", cluster.address, env=env)
    elapsed = time.monotonic() - started
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"one line, no traceback, no Ray warnings: {result.stderr}"
    assert lines[0].startswith(f"gym-serve: error: the Ray cluster at {cluster.address} ") and fix in lines[0]
    assert elapsed < 20, f"took {elapsed:.1f} s (ray.init alone spends 20 s of retries)"


def test_an_address_nobody_listens_on_is_one_line_naming_ray_start() -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = gym_serve("collect", "--config", "deployments/math.yaml", "--input", "envs/math/data/example.jsonl",
                       "--output", "/dev/null", "--address", address, env=plain_env(), timeout=60)  # fmt: skip
    assert result.returncode == 2 and time.monotonic() - started < 20
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"no Ray cluster at {address}" in result.stderr and "ray start --head" in result.stderr


def test_the_ingress_holds_its_token_on_a_cluster_and_the_token_is_in_no_config_or_log(
    cluster: RayStartCluster, tmp_path: Path
) -> None:
    port = free_port()
    result = gym_serve(
        "up", "deployments/ingress.yaml", "--address", cluster.address, "--http-port", str(port),
        env=cluster.env(GYM_SERVE_TOKEN=TOKEN),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    urls = printed_urls(result.stdout)
    assert {"/run", "/v1/rollouts", "/v1/responses", "/v1/chat/completions", "/healthz"} <= set(urls), result.stdout
    assert all(url.startswith(f"http://127.0.0.1:{port}/") for url in urls.values())

    row = example_rows("example_single_tool_call")[0]
    assert request(urls["/healthz"])[0] == 200, "health needs no token"
    assert request(urls["/run"], row)[0] == 401, "no token: the replicas know one though their environment has none"
    assert request(urls["/run"], row, token="wrong")[0] == 401
    status, body = request(urls["/run"], row, token=TOKEN)
    assert status == 200 and json.loads(body)["reward"] == 1.0
    status, listing = request(urls["/v1/environments"], token=TOKEN)
    assert status == 200

    dashboard_api = f"{cluster.dashboard_url}/api/serve/applications/"
    seen = {
        "gym-serve up's output": result.stdout + result.stderr,
        "GET /v1/environments": listing,
        "the dashboard's Serve API": request(dashboard_api, token=cluster.token)[1],
        "serve status": subprocess.run(
            [str(Path(sys.executable).parent / "serve"), "status", "-a", cluster.dashboard_url],
            env=cluster.env(), capture_output=True, text=True, timeout=120,
        ).stdout,
    }  # fmt: skip
    assert "ingress" in seen["the dashboard's Serve API"] and "ingress" in seen["serve status"], seen
    for where, text in seen.items():
        assert TOKEN not in text, f"the token is in {where}"
    for path in cluster.temp_dir.rglob("*"):
        if path.is_file() and not path.is_socket():
            assert TOKEN.encode() not in path.read_bytes(), f"the token is in {path}"


def test_up_prints_the_urls_serve_really_serves(cluster: RayStartCluster) -> None:
    """Serve runs already (the test above started its proxy); its port wins over the one asked for here."""
    asked = free_port()
    result = gym_serve(
        "up", "deployments/example_single_tool_call.yaml", "--address", cluster.address, "--http-port", str(asked),
        env=cluster.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    url = printed_urls(result.stdout).get("/example_single_tool_call")
    assert url is not None and f":{asked}/" not in url, result.stdout
    status, body = request(url, example_rows("example_single_tool_call")[1])
    assert status == 200 and json.loads(body)["reward"] == 1.0


def test_an_ingress_asked_for_auth_that_finds_no_token_refuses_to_start(
    cluster: RayStartCluster, tmp_path: Path
) -> None:
    config = yaml.safe_load((REPO / "deployments" / "ingress.yaml").read_text())
    config.pop("http_options")
    ingress = config["applications"][-1]
    ingress.update(name="guarded", route_prefix="/guarded")
    ingress["args"] |= {"require_token": True, "token_env": "GYM_SERVE_TEST_UNSET_TOKEN"}
    config["applications"] = [ingress]
    path = tmp_path / "guarded.yaml"
    path.write_text(yaml.safe_dump(config))
    result = gym_serve("up", str(path), "--address", cluster.address, env=cluster.env(), timeout=280)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "requires a bearer token" in result.stderr and "GYM_SERVE_TEST_UNSET_TOKEN" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_address_that_is_not_one_is_refused_before_anything_starts() -> None:
    from gym_serve.errors import ClusterError
    from gym_serve.serving.cluster import connect

    with pytest.raises(ClusterError, match=r"`head-node` is not a Ray address: expected HOST:PORT"):
        connect("head-node")
    assert not ray.is_initialized()


def test_a_local_start_that_fails_before_any_node_exists_is_not_tried_again(monkeypatch: Any) -> None:
    """`start_local` tries again only a node that failed to come up: any other error is raised at once."""
    from gym_serve.serving import cluster

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(cluster.ray, "init", lambda **options: calls.append(options) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cluster.start_local(num_cpus=1)
    assert calls == [{"address": "local", "num_cpus": 1}], "raised at once"


A_START_WHOSE_NODE_FAILS = """
import gc, json, sys, warnings

import psutil
import ray
from ray._private import node, services

from gym_serve.serving.cluster import start_local

where, failures = sys.argv[1], int(sys.argv[2])
warnings.simplefilter("error")  # as the suite runs: a collected Popen's "still running" warning is an error
unraisable = []
sys.unraisablehook = lambda hook: unraisable.append(repr(hook.exc_value))
started = []  # each failed attempt's processes, as they were when Ray gave up
attempts = []
get_node, wait_for_port = services.get_node, node.wait_for_persisted_port


def give_up(error):  # where Ray gives up after its 30 s in real life
    started.extend(psutil.Process().children(recursive=True))
    raise error


def raylet_never_registers(*args, **kwargs):
    if where == "raylet" and len(attempts) < failures:
        attempts.append(where)
        give_up(Exception("The current node timed out during startup. (as Ray words it)"))
    return get_node(*args, **kwargs)


def gcs_never_writes_its_port(*args, timeout_ms, **kwargs):
    if where == "gcs" and timeout_ms and len(attempts) < failures:
        attempts.append(where)
        give_up(RuntimeError("Timed out waiting for file .../gcs_server_port_... (as Ray words it)"))
    return wait_for_port(*args, timeout_ms=timeout_ms, **kwargs)


services.get_node, node.wait_for_persisted_port = raylet_never_registers, gcs_never_writes_its_port
try:
    start_local(num_cpus=1, include_dashboard=False, log_to_driver=False)
    alive = ray.get(ray.remote(lambda: "up").remote())
except Exception as e:
    alive = f"raised: {e}"
gc.collect()
left = [p.name() for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
ray.shutdown()
print(json.dumps({"alive": alive, "started": len(started), "left": left, "unraisable": unraisable}))
"""


@pytest.mark.parametrize(
    ("where", "failures", "outcome"),
    [("raylet", 1, "up"), ("gcs", 1, "up"), ("gcs", 2, "raised: Timed out waiting for file")],
)
def test_a_local_start_whose_node_never_comes_up_is_ended_cleanly_and_started_again(
    tmp_path: Path, where: str, failures: int, outcome: str
) -> None:
    """A real Ray start whose node fails where Ray gives up after its 30 s (the raylet never registers, the GCS
    never writes its port; both seen in CI runs): that node's processes are ended and reaped through their
    `Popen`s — a CI run failed on one's "subprocess is still running" warning, raised when the half-built node
    was collected — and the second start works; if it fails too, Ray's error is raised, that node ended as well."""
    script = tmp_path / "start.py"
    script.write_text(A_START_WHOSE_NODE_FAILS)
    done = subprocess.run([sys.executable, str(script), where, str(failures)], capture_output=True, text=True,
                          timeout=170, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["alive"].startswith(outcome), result["alive"]
    assert result["started"] >= failures, "each failed attempt had started its processes"
    assert result["left"] == [], "nothing of a failed attempt is left running"
    assert result["unraisable"] == [], "no warning from a collected Popen of a failed attempt"
    assert done.stderr.count("starting it again") == 1, done.stderr[-3000:]
    state = re.search(r"its processes then: (.*)\); starting it again", done.stderr)
    assert state and state[1].startswith("gcs_server "), "the retry says what state the node's processes were in"
    assert ("raylet " in state[1]) == (where == "raylet"), "the GCS-port failure comes before the raylet starts"


def test_a_ray_start_whose_node_never_registers_is_started_again(tmp_path: Path, monkeypatch: Any) -> None:
    """The test clusters' `ray start` is tried once more on the same failure (here a stand-in `ray` says Ray's
    words and exits the first time, then runs the real one); any other failure is raised with its log."""
    from tests import ray_start_cluster as module

    first = tmp_path / "failed-once"
    wrapper = tmp_path / "ray"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ ! -e {first} ]; then touch {first}; echo "The current node timed out during startup."; exit 1; fi\n'
        f'exec {module.RAY} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setattr(module, "RAY", str(wrapper))
    with module.ray_start_cluster(tmp_path) as started:
        assert b"Ray runtime started" in started.log.read_bytes()
        assert "timed out during startup" in started.log.read_text(), "the first attempt's output is kept"
        status = subprocess.run([str(wrapper), "status", "--address", started.address], env=started.env(),
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert status.returncode == 0, status.stderr[-2000:]

    wrapper.write_text("#!/bin/sh\necho 'the raylet cannot bind its port'; exit 1\n")
    (tmp_path / "other").mkdir()
    with pytest.raises(RuntimeError, match="cannot bind its port"), module.ray_start_cluster(tmp_path / "other"):
        pass
