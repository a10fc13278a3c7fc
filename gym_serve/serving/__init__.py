"""Deploy-time: application config, joining a cluster, deploying Serve applications, secrets for replicas.

What runs inside the replicas once deployed (the calls between tiers) is `gym_serve.calls`."""
