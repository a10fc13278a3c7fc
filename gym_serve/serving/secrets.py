"""Secrets for replicas (the ingress's bearer token), handed over without entering any config.

A replica on a `ray start` cluster does not inherit the environment of the
shell that deployed it, so a token set there silently never arrives. Ray's
usual way to pass it, `runtime_env: {env_vars: ...}`, stores it in the Serve
config, where `serve status`, the dashboard and its REST API show it to anyone
who looks. So the deployer publishes the value in the cluster's own key-value
store (Ray's GCS, which only holders of the cluster's address and Ray token
can read — the same people who can run code on it) under the variable's name,
and the replica reads it from there when its own environment lacks it. The
replica's environment still wins: a cluster whose nodes carry the variable
(a Kubernetes Secret) needs no publishing.
"""

from __future__ import annotations

import os

__all__ = ["lookup", "publish", "share", "withdraw"]

_NAMESPACE = "gym_serve_secrets"


def publish(name: str, value: str) -> None:
    """Store `value` as secret `name` in the connected cluster's key-value store (the deployer's side)."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(name, value, overwrite=True, namespace=_NAMESPACE)


def share(name: str) -> bool:
    """Publish this process's environment variable `name`, if it is set; True if it was."""
    value = os.environ.get(name)
    if value:
        publish(name, value)
    return bool(value)


def withdraw(name: str) -> None:
    """Remove secret `name` from the cluster, so a later deployment without it does not pick up a stale one."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_del(name, namespace=_NAMESPACE)


def lookup(name: str) -> str | None:
    """Secret `name`: this process's environment variable of that name, else the cluster's published value."""
    if value := os.environ.get(name):
        return value
    from ray.experimental import internal_kv

    if not internal_kv._internal_kv_initialized():
        return None
    stored = internal_kv._internal_kv_get(name, namespace=_NAMESPACE)
    return stored.decode() if stored else None
