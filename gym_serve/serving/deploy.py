"""Bringing applications up from Python: connect to Ray, deploy a Serve config, report status.

This is what `gym-serve up`, `collect` and `demo` share. It deploys the same
Serve config files `serve run` takes, so a config behaves the same either way.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from ray import serve

from gym_serve.errors import ConfigError
from gym_serve.serving.cluster import connect
from gym_serve.serving.config import BUILDER, AppSpec, DeploymentOptions

__all__ = ["agent_capacity", "connect", "deploy", "describe_status", "env_apps", "http_address"]

_DEFAULT_AGENT_MAX_ONGOING = 256


def deploy(
    specs: list[AppSpec], *, source: str, http: bool = False, http_port: int = 8000, http_host: str = "127.0.0.1"
) -> None:
    """Deploy every application of a config and wait until all are running."""
    if http:
        serve.start(http_options={"host": http_host, "port": http_port})
    else:
        serve.start(proxy_location="Disabled")
    targets = []
    for spec in sorted(specs, key=lambda s: s.args.get("environment") is not None):  # shared models first
        app = _build(spec, source)
        targets.append(serve.RunTarget(target=app, name=spec.name, route_prefix=spec.route_prefix if http else None))
    try:
        serve.run_many(targets)
    except RuntimeError as e:  # Serve names the deployment; the replica's own error is in its status
        raise ConfigError(_deploy_failure([s.name for s in specs]) or str(e), source=source) from None


def _deploy_failure(app_names: list[str]) -> str:
    """What the replicas of the applications that failed to deploy raised, one line per deployment."""
    reasons = []
    for app_name, app in serve.status().applications.items():
        if app_name not in app_names:
            continue
        for dep_name, dep in app.deployments.items():
            if dep.status.value not in ("DEPLOY_FAILED", "UNHEALTHY") or not dep.message:
                continue
            errors = re.findall(r"^(?:[\w.]+\.)?\w*(?:Error|Exception): (.+)$", dep.message, flags=re.M)
            lines = [line.strip() for line in dep.message.splitlines() if line.strip()]
            reasons.append(f"`{app_name}` ({dep_name}) failed to start: {errors[-1] if errors else lines[-1]}")
    return "; ".join(reasons)


def http_address() -> tuple[str, int]:
    """Where Serve's HTTP proxies listen, as the running Serve instance has it (host, port).

    On a cluster where Serve already ran, its options win over the ones `deploy`
    asked for, so this is what URLs must be built from.
    """
    from ray.serve.context import _get_global_client  # Serve keeps its HTTP options on its controller client

    config = _get_global_client().http_config
    return config.host, config.port


def _build(spec: AppSpec, source: str) -> Any:
    module_name, _, attr = spec.import_path.partition(":")
    try:
        builder = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(
            f"cannot import `{spec.import_path}`: {e}", source=source, key=f"applications[{spec.name}].import_path"
        ) from e
    args = spec.app_args(source) if spec.import_path == BUILDER else spec.args
    return builder(args) if callable(builder) else builder


def env_apps(specs: list[AppSpec]) -> list[str]:
    """The applications that run episodes (ours with an environment): the agents rows route to."""
    return [s.name for s in specs if s.import_path == BUILDER and s.args.get("environment") is not None]


def agent_capacity(specs: list[AppSpec], source: str) -> int:
    """Rollouts the agent tiers can hold at once: Σ replicas × `max_ongoing_requests`."""
    total = 0
    for spec in specs:
        if spec.import_path == BUILDER and spec.args.get("environment") is not None:
            options: DeploymentOptions = spec.app_args(source).agent.deployment
            total += options.capacity(_DEFAULT_AGENT_MAX_ONGOING)
    return total or _DEFAULT_AGENT_MAX_ONGOING


def describe_status(app_names: list[str] | None = None) -> str:
    """A table of the applications and their deployments' replicas, as Serve reports them."""
    status = serve.status()
    lines = [f"{'application':<28} {'status':<10} {'deployment':<12} {'replicas'}"]
    for app_name, app in sorted(status.applications.items()):
        if app_names is not None and app_name not in app_names:
            continue
        for dep_name, dep in sorted(app.deployments.items()):
            replicas = ", ".join(f"{n} {state.lower()}" for state, n in sorted(dep.replica_states.items())) or "-"
            lines.append(f"{app_name:<28} {app.status.value:<10} {dep_name:<12} {replicas}")
    return "\n".join(lines)
