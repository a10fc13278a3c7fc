"""Where a local Ray instance's CPU time goes: its processes by the titles Ray gives them.

The local instance is this process's descendants (it started them), which keeps out the processes of other
Ray instances on a shared machine.
"""

from __future__ import annotations

import os
from collections import Counter

import psutil

__all__ = ["cpu_seconds_by_process", "spent_since", "title"]


def cpu_seconds_by_process() -> dict[str, float]:
    """CPU seconds so far of this process and each of its descendants, summed by title (`ray::ProxyActor`,
    `ray::ServeReplica:<app>:<deployment>`, `raylet`, ...): where the time of a phase went."""
    seconds: Counter[str] = Counter()
    for process in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            name, times = title(process), process.cpu_times()
        except psutil.Error:
            continue
        seconds["this process" if process.pid == os.getpid() else name] += times.user + times.system
    return dict(seconds)


def title(process: psutil.Process) -> str:
    """The name Ray gives a worker process, without the method it runs (`ray::ServeReplica:<app>:<deployment>`
    of `ray::ServeReplica:<app>:<deployment>.handle_request`), else the program's name (`raylet`, `gcs_server`,
    or the script a Python runs: `log_monitor.py`)."""
    command = process.cmdline() or [""]
    if command[0].startswith("ray::"):
        return command[0].split(" ")[0].split(".")[0]
    program = os.path.basename(command[0])
    scripts = [os.path.basename(arg) for arg in command[1:] if arg.endswith(".py")]
    return scripts[0] if program.startswith("python") and scripts else program


def spent_since(before: dict[str, float]) -> dict[str, float]:
    """CPU seconds by title since `before` (a `cpu_seconds_by_process()`), largest first."""
    spent = {name: now - before.get(name, 0.0) for name, now in cpu_seconds_by_process().items()}
    return {name: round(seconds, 2) for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1])}
