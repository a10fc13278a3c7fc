"""What a sandbox operation raises: one base class, one subclass per thing that can be wrong.

```
SandboxError                 a sandbox operation failed (the sandbox itself broke: no verdict, no result)
├── IsolationUnavailable     this host cannot make the namespaces a sandbox needs (names the cause)
├── BaseNotFound             the base folder does not exist (names it)
├── SandboxGone              no live sandbox by that id: destroyed, expired, or its replica died
├── SandboxCapacity          no room for another sandbox (the provider's `max_sandboxes`)
├── ForkLimitExceeded        a fork of more copies than the provider allows
├── PathOutsideWorkspace     a file path leads outside the workspace (`..`, absolute, or a link)
├── SandboxFileNotFound      no such file in the workspace
├── NotAFile                 a directory where a file was asked for, or the reverse
├── FileTooLarge             a read of a file over the read limit
├── DiskFull                 the workspace's disk quota is used up
├── CommandNotFound          the program of an exec does not exist in the sandbox
└── ProcessNotFound          no started command by that pid
```

The package imports nothing of gym-serve; `gym_serve.environment.workspace` turns these into the
rollout failure kinds (`SandboxGone` is `session_lost`, ...).
"""

from __future__ import annotations

__all__ = [
    "BaseNotFound",
    "CommandNotFound",
    "DiskFull",
    "FileTooLarge",
    "ForkLimitExceeded",
    "IsolationUnavailable",
    "NotAFile",
    "PathOutsideWorkspace",
    "ProcessNotFound",
    "SandboxCapacity",
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxGone",
    "error_named",
]


class SandboxError(RuntimeError):
    """Raised when a sandbox operation fails for a reason of the sandbox's own (not the code's result)."""


class IsolationUnavailable(SandboxError):
    """Raised when this host cannot make a sandbox's namespaces (no user namespaces, no bwrap); says why."""


class BaseNotFound(SandboxError):
    """Raised when a sandbox's base folder does not exist."""


class SandboxGone(SandboxError):
    """Raised when no live sandbox has the id: it was destroyed, its TTL ran out, or the replica holding it died."""


class SandboxCapacity(SandboxError):
    """Raised when the provider holds as many sandboxes as it may (`max_sandboxes`)."""


class ForkLimitExceeded(SandboxError):
    """Raised when a fork asks for more copies than the provider allows (`max_fork`, or the room left)."""


class PathOutsideWorkspace(SandboxError):
    """Raised when a file path leads outside the workspace: `..`, an absolute path elsewhere, or a symlink out."""


class SandboxFileNotFound(SandboxError):
    """Raised when a file or folder does not exist in the workspace."""


class NotAFile(SandboxError):
    """Raised when a path names a directory where a file was asked for, or the reverse."""


class FileTooLarge(SandboxError):
    """Raised when a file is larger than a read may return."""


class DiskFull(SandboxError):
    """Raised when a write finds the workspace's disk quota used up."""


class CommandNotFound(SandboxError):
    """Raised when the program an exec names does not exist in the sandbox."""


class ProcessNotFound(SandboxError):
    """Raised when no command started in the sandbox has the pid."""


_BY_NAME: dict[str, type[SandboxError]] = {
    cls.__name__: cls
    for cls in (
        SandboxError, IsolationUnavailable, BaseNotFound, SandboxGone, SandboxCapacity, ForkLimitExceeded,
        PathOutsideWorkspace, SandboxFileNotFound, NotAFile, FileTooLarge, DiskFull, CommandNotFound, ProcessNotFound,
    )
}  # fmt: skip
_BY_NAME["FileNotFound"] = SandboxFileNotFound


def error_named(name: str, message: str) -> SandboxError:
    """The error a sandbox's supervisor named in its reply (an unknown name is a plain `SandboxError`)."""
    return _BY_NAME.get(name, SandboxError)(message)
