"""The HTTP ingress: a FastAPI app on Serve (`api`), its routes by concern (`rollouts` and their `batches`, the
`model` proxy, `weights`), what a replica holds (`replica`: state, auth, body limit; `slots`; `idempotency`;
`metrics`) and its `errors`."""

from gym_serve.deployments.ingress.api import build_ingress

__all__ = ["build_ingress"]
