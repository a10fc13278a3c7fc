"""Sandboxes: workspaces for rollouts, and the walls the code verifier's one-shot runs stand behind.

One implementation for both (the threat model is in this folder's README.md):

- `LocalProvider` (`local`): workspace sandboxes on this machine (bubblewrap namespaces, an overlay
  of a read-only base under a copy-on-write layer, limits, warm pools, snapshots and forks, a
  reaper), behind the `SandboxProvider` interface (`provider`) that remote providers implement too.
- `oneshot`: a program run once in a fresh sandbox, to its end: the code verifier's harness.
- `host`, `_confine`: what both stand on: bwrap, who a sandbox runs as, what it sees, and the
  kernel walls (capabilities, seccomp, Landlock) raised inside it.

The package imports nothing else of gym-serve: the code verifier (`gym_serve.verifiers.code`) is its
client, and verifiers import nothing else of gym-serve.
"""

from gym_serve.sandbox.errors import (
    BaseNotFound,
    CommandNotFound,
    DiskFull,
    FileTooLarge,
    ForkLimitExceeded,
    IsolationUnavailable,
    NotAFile,
    PathOutsideWorkspace,
    ProcessNotFound,
    SandboxCapacity,
    SandboxError,
    SandboxFileNotFound,
    SandboxGone,
)
from gym_serve.sandbox.limits import Limits
from gym_serve.sandbox.local import LocalProvider
from gym_serve.sandbox.provider import Base, BaseFile, Endpoint, ExecResult, FileEntry, ProcessState, SandboxProvider

__all__ = [
    "Base",
    "BaseFile",
    "BaseNotFound",
    "CommandNotFound",
    "DiskFull",
    "Endpoint",
    "ExecResult",
    "FileEntry",
    "FileTooLarge",
    "ForkLimitExceeded",
    "IsolationUnavailable",
    "Limits",
    "LocalProvider",
    "NotAFile",
    "PathOutsideWorkspace",
    "ProcessNotFound",
    "ProcessState",
    "SandboxCapacity",
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxGone",
    "SandboxProvider",
]
