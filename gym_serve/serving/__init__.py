"""Serving plumbing: application config, deploying Serve applications, micro-batched handle calls,
replica counts and the autoscaling policy of the batched tiers."""
