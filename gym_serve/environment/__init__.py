"""The environment contract: what an environment author implements (`Environment`, `@tool`), the runner
that puts it behind plain-dict calls, and the registry that finds environments by name. Imports no Ray."""
