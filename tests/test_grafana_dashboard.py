"""`cluster/grafana_dashboard.json`: every panel's query names series that a running gym-serve really exports.

The series come from a real deployment: Ray with its metrics port, Serve's
HTTP proxy, `deployments/ingress.yaml` (the ingress, three example
environments, the replay model), a few rollouts and a refused request through
HTTP. Then both scrape targets a Prometheus would read are scraped: the
ingress's `GET /metrics` and Ray's metrics port. Every metric a query names
must be among them, and every label it groups by must be on it.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from gym_serve.serving import deploy as serving
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import load_serve_config
from gym_serve.testing.fixtures import example_rows
from tests.conftest import REPO

pytestmark = [pytest.mark.serve, pytest.mark.timeout(300)]

DASHBOARD = REPO / "cluster" / "grafana_dashboard.json"
METRIC = re.compile(r"\b((?:ray|gym_serve)_[a-z0-9_]+)\b")
GROUPING = re.compile(r"\bby\s*\(([^)]*)\)")
SCRAPE_LABELS = {"instance", "job"}  # added by Prometheus when it scrapes, never in the exposition itself


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return str(response.read().decode())


def post(url: str, body: Any) -> int:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def series(text: str) -> dict[str, set[str]]:
    """Prometheus exposition text → {metric name: the label names its samples carry}."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        name = name.split(" ")[0]
        labels = set(re.findall(r'([a-zA-Z_]\w*)="', rest.rpartition("}")[0])) if rest else set()
        found.setdefault(name, set()).update(labels)
    return found


def queries() -> list[tuple[str, str]]:
    """(panel title, query) for every target of every panel."""
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels and all(p.get("targets") for p in panels), "every panel has a query"
    return [(panel["title"], target["expr"]) for panel in panels for target in panel["targets"]]


def needed() -> set[str]:
    return {name for _, expr in queries() for name in METRIC.findall(expr)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, set[str]]]:
    import ray
    import yaml
    from ray import serve

    metrics_port, http_port = free_port(), free_port()
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False,
             _metrics_export_port=metrics_port)  # fmt: skip
    try:
        shipped = yaml.safe_load((REPO / "deployments" / "ingress.yaml").read_text())
        ingress = next(app for app in shipped["applications"] if app["name"] == "ingress")
        ingress["args"]["max_in_flight"] = 2  # so that one request can be refused as `saturated`
        config = tmp_path_factory.mktemp("grafana") / "ingress.yaml"
        config.write_text(yaml.safe_dump(shipped))
        serving.deploy(load_serve_config(config), source=str(config), http=True, http_port=http_port)
        base = f"http://127.0.0.1:{http_port}"
        row = example_rows("example_single_tool_call")[0]
        assert [post(f"{base}/run", row) for _ in range(3)] == [200] * 3
        assert post(f"{base}/run", {"not": "a row"}) == 422
        assert post(f"{base}/v1/rollouts", {"rows": [row], "num_repeats": 3}) == 429
        found: dict[str, set[str]] = {}
        deadline = time.monotonic() + 150  # Ray reports its metrics every few seconds
        while time.monotonic() < deadline:
            found = {**series(get(f"http://127.0.0.1:{metrics_port}/metrics")), **series(get(f"{base}/metrics"))}
            if needed() <= set(found):
                break
            time.sleep(3)
        yield found
    finally:
        serve.shutdown()
        ray.shutdown()


def test_every_panel_queries_series_that_exist(exported: dict[str, set[str]]) -> None:
    for title, expr in queries():
        names = METRIC.findall(expr)
        assert names, f"panel {title!r}: its query names no gym-serve or Ray series: {expr}"
        missing = [name for name in names if name not in exported]
        assert not missing, f"panel {title!r}: no series {missing} is exported (query: {expr})"
        for group in GROUPING.findall(expr):
            for label in {part.strip() for part in group.split(",")} - {"le", ""} - SCRAPE_LABELS:
                assert any(label in exported[name] for name in names), (
                    f"panel {title!r}: groups by `{label}`, which no series of {names} carries"
                )


def test_the_dashboard_covers_rollouts_serve_and_the_proxy() -> None:
    names = needed()
    assert {n for n in names if n.startswith("gym_serve_ingress_")} == {
        "gym_serve_ingress_rollouts_total",
        "gym_serve_ingress_in_flight",
        "gym_serve_ingress_rollout_seconds_bucket",
        "gym_serve_ingress_rejected_total",
        "gym_serve_ingress_replayed_total",
    }, "every series the ingress exports has a panel"
    assert any(n.startswith("ray_serve_deployment_") for n in names)
    assert any(n.startswith("ray_serve_num_http_") for n in names)
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["templating"]["list"][0]["type"] == "datasource", "the Prometheus data source is chosen on import"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
