"""A seeded chaos loop: a random replica of each tier killed in turn, every few seconds, while rollouts run.

The tiers are named by Serve deployment (`Agent`, `Environment`, `Model`, `Ingress`); each may span several
applications. Every `every_s / len(tiers)` seconds the next tier in turn loses one replica, picked by a
seeded generator among its running ones (so the same seed kills the same way on the same deployments), by
`ray.kill` of Serve's replica actor: the process is gone at once, as on a node failure, and Serve starts a
replacement. A tier is spared while a deployment of it is short of replicas (a replacement still starting),
so the loop never takes a tier's last replica: what it tests is recovery, not an outage.

    loop = ChaosLoop({"Agent": [("weather", "Agent")], ...}, every_s=8.0, seed=0)
    stop = asyncio.Event()
    task = asyncio.ensure_future(loop.run(stop))
    ...
    stop.set(); await task
    loop.kills   # Counter: tier -> replicas killed
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import ray
from ray import serve

__all__ = ["ChaosLoop", "replica_actors"]


def replica_actors(app: str, deployment: str) -> list[str]:
    """The names of a deployment's replica actors (Serve names them `SERVE_REPLICA::<app>#<deployment>#<id>`)."""
    prefix = f"SERVE_REPLICA::{app}#{deployment}#"
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix))


class ChaosLoop:
    """Kills one replica of each tier in turn (see the module docstring); `kills` and `spared` count per tier."""

    def __init__(self, tiers: dict[str, list[tuple[str, str]]], *, every_s: float, seed: int = 0) -> None:
        self.tiers = tiers
        self.every_s = every_s
        self.kills: Counter[str] = Counter()
        self.spared: Counter[str] = Counter()
        self.log: list[tuple[str, str]] = []
        """(tier, replica actor) of every kill, in order."""
        self._rng = random.Random(seed)

    async def run(self, stop: asyncio.Event) -> None:
        """Kill until `stop` is set."""
        order = sorted(self.tiers)
        turn = 0
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.every_s / len(order))
            except TimeoutError:
                tier = order[turn % len(order)]
                turn += 1
                await asyncio.to_thread(self.kill_one, tier)

    def kill_one(self, tier: str) -> str | None:
        """Kill a random running replica of `tier`; None (and counted as spared) when the tier is recovering."""
        deployments = self.tiers[tier]
        if not all(_complete(app, deployment) for app, deployment in deployments):
            self.spared[tier] += 1
            return None
        candidates = [name for app, deployment in deployments for name in replica_actors(app, deployment)]
        if not candidates:
            self.spared[tier] += 1
            return None
        victim = self._rng.choice(candidates)
        try:
            ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
        except ValueError:  # it died between the listing and the kill
            self.spared[tier] += 1
            return None
        self.kills[tier] += 1
        self.log.append((tier, victim))
        return victim


def _complete(app: str, deployment: str) -> bool:
    """Every replica the deployment wants is running (none starting, none stopping)."""
    status = serve.status().applications.get(app)
    if status is None or deployment not in status.deployments:
        return False
    states = status.deployments[deployment].replica_states
    return states.get("RUNNING", 0) >= 2 and sum(states.values()) == states.get("RUNNING", 0)
