"""Collections: the rollout driver actor, input materialization, resume, and the in-flight window."""
