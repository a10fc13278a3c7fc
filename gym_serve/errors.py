"""The exceptions gym-serve raises, one per boundary.

```
GymServeError
├── ConfigError          a config file or argument is wrong (names the file and key)
├── InputError           an input row is wrong (names the file, line and field)
├── EnvError             an environment could not be loaded or seeded
├── ToolError            a tool call failed in a way the model must not see
├── VerifyError          an environment's verify raised
├── ModelError           the model tier failed to answer
└── RolloutError         a rollout could not finish (carries its failure class)
```

A failed rollout is data, not a crash: the driver turns every exception that
escapes a rollout into a failure row with a `_ng_failure_class`, and the
collection goes on.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EnvError",
    "GymServeError",
    "InputError",
    "ModelError",
    "RolloutError",
    "ToolError",
    "VerifyError",
]


class GymServeError(Exception):
    """Raised for every error gym-serve itself detects."""


class ConfigError(GymServeError):
    """Raised when a config file, config key or command-line argument is wrong."""

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None) -> None:
        self.source = source
        self.key = key
        self.reason = message
        where = ", ".join(part for part in (source, f"key `{key}`" if key else None) if part)
        super().__init__(f"{where}: {message}" if where else message)

    def __reduce__(self):  # keyword-only fields must survive pickling across Ray processes
        return _rebuild, (type(self), self.reason, {"source": self.source, "key": self.key})


class InputError(GymServeError):
    """Raised when an input row cannot be used; says which file, line and field."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.reason = message
        where = source or "<input>"
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field `{field}`"
        super().__init__(f"{where}: {message}")

    def __reduce__(self):
        return _rebuild, (type(self), self.reason, {"source": self.source, "line": self.line, "field": self.field})


class EnvError(GymServeError):
    """Raised when an environment cannot be found, built or seeded."""


class ToolError(GymServeError):
    """Raised when a tool call fails outside the model's view (the environment broke)."""


class VerifyError(GymServeError):
    """Raised when an environment's `verify` raised or returned something unusable."""


class ModelError(GymServeError):
    """Raised when the model tier fails to produce a response."""


class RolloutError(GymServeError):
    """Raised when a rollout cannot finish; `failure_class` says why (e.g. `timeout`)."""

    def __init__(self, message: str, *, failure_class: str) -> None:
        self.failure_class = failure_class
        super().__init__(message)

    def __reduce__(self):
        return _rebuild, (type(self), self.args[0], {"failure_class": self.failure_class})


def _rebuild(cls: type[Exception], message: str, fields: dict) -> Exception:
    return cls(message, **fields)
