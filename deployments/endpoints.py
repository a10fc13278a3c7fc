"""The URLs a Serve config's applications answer on: what `gym-serve up` prints.

An environment application takes one input row per POST at its route prefix; the HTTP
ingress answers on the paths its FastAPI app declares (read from the app itself, so a new
endpoint is listed without anyone updating a list).
"""

from __future__ import annotations

import importlib

import ray
from fastapi.routing import APIRoute

from gym_serve.deployments.ingress.api import app as ingress_app
from gym_serve.deployments.ingress.api import build_ingress
from gym_serve.serving.config import BUILDER, AppSpec

__all__ = ["describe_endpoints"]


def describe_endpoints(specs: list[AppSpec], host: str, port: int) -> str:
    """The URLs the applications of a config answer on, for Serve's proxy at `host:port` (as it really runs)."""
    shown = ray.util.get_node_ip_address() if host in ("0.0.0.0", "::") else host  # all interfaces: this node's
    base = f"http://{shown}:{port}"
    lines = []
    for spec in specs:
        if spec.route_prefix is None:
            continue
        prefix = spec.route_prefix.rstrip("/")
        if _is_ingress(spec):
            lines.append(f"{spec.name}: the HTTP ingress")
            for route in ingress_app.routes:
                if isinstance(route, APIRoute):  # the endpoints, not FastAPI's own /openapi.json
                    lines += [f"  {method:<5} {base}{prefix}{route.path}" for method in sorted(route.methods)]
        elif spec.import_path == BUILDER and spec.args.get("environment") is not None:
            lines.append(f"{spec.name}: one input row in, one rollout row out\n  POST  {base}{prefix or '/'}")
        else:
            lines.append(f"{spec.name}:\n  {base}{prefix or '/'}")
    return "HTTP:\n" + "\n".join(lines) if lines else "HTTP: no application has a route_prefix"


def _is_ingress(spec: AppSpec) -> bool:
    """Does the application's import path name our HTTP ingress's builder (by any of its module paths)?"""
    module, _, attr = spec.import_path.partition(":")
    return module.startswith("gym_serve.deployments.ingress") and (
        getattr(importlib.import_module(module), attr, None) is build_ingress
    )
