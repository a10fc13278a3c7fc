"""The in-replica call path: how the tiers call each other once deployed.

Micro-batched handle calls (`batching`), each tier's client over its handle (`handles`), session routing
(`routing`), replica counts to split batches by (`replica_count`), and autoscaling on calls in flight
(`autoscaling`)."""
