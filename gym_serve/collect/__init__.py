"""Where rollouts start: the dispatcher every front door uses (`dispatch`), the file collection in the driver
actor (`driver`, with `materialize` and `resume`), the in-cluster stream (`stream`), retries (`attempts`), the
in-flight window and the staleness bound."""
