"""Runs inside the sandbox, before and around the untrusted code (see `gym_serve.verifiers.code`).

Invoked as `python -I -B _sandbox_harness.py SPEC.json`. It lowers its own
resource limits first (lowering needs no privilege, and doing it here rather
than in a `preexec_fn` keeps the parent's many threads out of `fork()`), then:

- mode `stdio`: runs `solution.py` as `__main__`; stdin/stdout are the test case's.
- mode `asserts`: reads a one-time marker from stdin, runs `solution.py`, then each
  test snippet in the solution's namespace, printing `MARKER <i> ok|fail` per test.
  A solution that exits early (`sys.exit(0)`, `os._exit(0)`) prints no markers, so
  it passes nothing.

Where the platform gave no network namespace, `block_network` installs an
audit hook that refuses sockets, starting programs and writes outside the work dir.
This file imports only the standard library: it runs with `-I`.
"""

import json
import os
import resource
import sys


def _limit(kind, value):
    soft, hard = resource.getrlimit(kind)
    new_hard = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (min(value, new_hard), new_hard))


def _set_limits(spec):
    _limit(resource.RLIMIT_CPU, spec["cpu_s"] + 1)
    resource.setrlimit(resource.RLIMIT_CPU, (spec["cpu_s"], spec["cpu_s"] + 1))
    _limit(resource.RLIMIT_AS, spec["memory_bytes"])
    _limit(resource.RLIMIT_FSIZE, spec["file_size_bytes"])
    _limit(resource.RLIMIT_NPROC, spec["max_processes"])
    _limit(resource.RLIMIT_CORE, 0)


_NO_PROGRAMS = ("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "pty.spawn", "ctypes.")


def _other_process(path):
    """`/proc/<pid>/...` of a process other than this one (its environ could hold the caller's secrets)."""
    parts = path.split(os.sep)
    return len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and int(parts[2]) != os.getpid()


def _install_guard(work_dir):
    """Fallback isolation: refuse sockets, new programs and writes outside the work dir."""
    root = os.path.realpath(work_dir)

    def hook(event, args):
        if event.startswith("socket."):
            raise PermissionError(f"network access is disabled in the sandbox ({event})")
        if event.startswith(_NO_PROGRAMS):  # a new program would run without this hook
            raise PermissionError(f"starting programs is disabled in the sandbox ({event})")
        if event == "open" and len(args) >= 3:
            path, mode, flags = args[0], args[1], args[2]
            if isinstance(path, (str, bytes)) and _other_process(os.path.realpath(os.fsdecode(path))):
                raise PermissionError("reading other processes' /proc entries is disabled in the sandbox")
            writing = (mode and any(c in str(mode) for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            )
            if writing and isinstance(path, (str, bytes)):
                target = os.path.realpath(os.fsdecode(path))
                inside = target == root or target.startswith(root + os.sep)
                if not inside and target != os.devnull:
                    raise PermissionError(f"writing outside the sandbox work dir is disabled: {target}")

    sys.addaudithook(hook)


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    marker = sys.stdin.readline().strip() if spec["mode"] == "asserts" else None
    with open(spec["solution"]) as f:
        source = f.read()
    tests = spec.get("tests", [])
    _set_limits(spec)
    if spec.get("block_network"):
        _install_guard(spec["work_dir"])
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    if marker is None:
        exec(compile(source, "solution.py", "exec"), namespace)
        return
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
    except BaseException as e:  # the solution failed to load: every test fails
        print(f"{marker} load fail {type(e).__name__}", flush=True)
        return
    for i, test in enumerate(tests):
        try:
            exec(compile(test, f"test_{i}.py", "exec"), namespace)
            outcome = "ok"
        except BaseException:
            outcome = "fail"
        print(f"{marker} {i} {outcome}", flush=True)


if __name__ == "__main__":
    main()
