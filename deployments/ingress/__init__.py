"""The HTTP ingress: the FastAPI app on Serve (`api`), its idempotency cache and its Prometheus series."""

from gym_serve.deployments.ingress.api import build_ingress

__all__ = ["build_ingress"]
