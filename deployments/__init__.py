"""Ray Serve deployments of the three tiers, and the application builder `serve run` imports."""
