"""Stand-ins for tests and benchmarks: synthetic latency and load, the tiny local model, pytest fixtures.
Never on a production path."""
