"""Stand-ins for tests and benchmarks: an instant OpenAI-compatible server, recording examples, pytest fixtures.
Never on a production path (an import-linter contract holds it)."""
