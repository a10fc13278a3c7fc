"""cluster/: the Serve configs in the cluster manifests validate; the local multi-node run shards a collection."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import yaml

from gym_serve.serving.config import load_serve_config
from tests.conftest import REPO


def test_the_rayservice_serve_config_validates(tmp_path: Path) -> None:
    manifest = yaml.safe_load((REPO / "cluster" / "rayservice.yaml").read_text())
    config = tmp_path / "serve.yaml"
    config.write_text(manifest["spec"]["serveConfigV2"])
    specs = load_serve_config(config)
    assert {s.name for s in specs} == {"policy_model", "math", "ingress"}
    math = next(s for s in specs if s.name == "math").app_args(str(config))
    assert math.environment.deployment.autoscaling_config["max_replicas"] == 16


def test_the_cluster_launcher_config_is_yaml_with_a_cpu_less_head() -> None:
    launcher = yaml.safe_load((REPO / "cluster" / "ray-cluster.yaml").read_text())
    assert launcher["available_node_types"]["head"]["resources"] == {"CPU": 0}
    assert set(launcher["available_node_types"]) == {"head", "cpu_worker", "gpu_worker"}


@pytest.mark.serve
@pytest.mark.timeout(300)
def test_two_nodes_two_driver_shards_every_rollout_once(tmp_path: Path) -> None:
    import json

    main = runpy.run_path(str(REPO / "cluster" / "local_cluster.py"))["main"]
    result = main(["--nodes", "2", "--repeats", "20", "--out", str(tmp_path)])
    assert result["shards"] == 2 and result["failures"] == 0
    keys = [
        (r["_ng_task_index"], r["_ng_rollout_index"])
        for path in result["outputs"]
        for r in map(json.loads, Path(path).read_text().splitlines())
    ]
    rows = len((REPO / "envs" / "example_single_tool_call" / "data" / "example.jsonl").read_text().splitlines())
    assert len(keys) == len(set(keys)) == rows * 20, "every key once, across the shards"
    assert all(n > 0 for n in result["rollouts_per_shard"])
