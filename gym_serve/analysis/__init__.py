"""After (and around) a collection: reward profiles, pass@k metrics, plots, re-scoring, environment checks."""
