"""Every standard-library module whose import does something, found by importing each one (nothing hand-picked).

The modules are every name of `sys.stdlib_module_names` and every submodule `pkgutil` finds beneath
a package of them (the `__main__` of each package, the packages' own test suites, `idlelib`,
`lib2to3`...), as the sandbox's interpreter (`host.sandbox_python()`) has them. Each is imported in a child
forked from a bare interpreter, as `nobody` when we are root (so no import can change this machine),
in an empty directory that holds a planted `test_planted.py` (what `unittest.__main__`'s discovery
runs), with the harness's `sys.argv`, `BROWSER` set (so `antigravity`'s `webbrowser.open` shows)
and its output on a pipe.
An import has a side effect when it

- prints (`output`), exits (`exits`), raises anything but `ImportError` (`raises`), blocks for
  seconds (`blocks`), or dies of a signal;
- runs a file from its working directory (`runs_files_in_cwd`) or writes one there (`writes_cwd`);
- raises an audit event (PEP 578) that acts outside the interpreter: starting or signalling a
  process, a socket, a file opened for writing, removing or renaming a file, changing directory,
  the environment, a tracer, a thread, reading input, opening a browser.

Every `*.__main__` is on the list whatever the probe saw: running a program is what it is for.
`side_effect_modules()` probes once per test session (about 20 s of CPU for ~1,000 modules, spread
over the CPUs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache

from gym_serve.sandbox import host

_PROBE = r"""
import importlib, importlib.util, json, os, pkgutil, select, shutil, signal, sys, tempfile, time

WATCHED = ("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty", "os.spawn", "os.kill",
           "os.killpg", "signal.", "socket.", "webbrowser.open", "os.remove", "os.rmdir", "os.rename", "os.mkdir",
           "os.chdir", "os.truncate", "os.chmod", "os.chown", "os.link", "os.symlink", "os.utime", "os.putenv",
           "os.unsetenv", "shutil.", "pty.", "builtins.input", "sys.settrace", "sys.setprofile",
           "_thread.start_new_thread", "sys.unraisablehook")


def stdlib_modules():
    names = set()

    def walk(prefix, path):
        for info in pkgutil.iter_modules([path]):
            names.add(prefix + info.name)
            if info.ispkg:
                walk(prefix + info.name + ".", os.path.join(path, info.name))

    for top in sys.stdlib_module_names:
        names.add(top)
        spec = None if top in sys.builtin_module_names else importlib.util.find_spec(top)
        for location in (spec.submodule_search_locations or []) if spec else []:
            walk(top + ".", location)
    return sorted(names)


def start(name, workspace):
    work = tempfile.mkdtemp(dir=workspace)
    with open(os.path.join(work, "test_planted.py"), "w") as f:
        f.write("open(__file__ + '.ran', 'w').close()\n")
    out_r, out_w = os.pipe()
    events_r, events_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setpgid(0, 0)
            os.chdir(work)
            sys.argv = ["-c"]  # what the harness's (python -I -B -c) is
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            events = os.fdopen(events_w, "w", buffering=1)

            def hook(event, args):
                writes = event == "open" and len(args) > 1 and isinstance(args[1], str) and set(args[1]) & set("wax+")
                if event.startswith(WATCHED) or writes:
                    events.write(event + "\n")

            sys.addaudithook(hook)
            signal.alarm(10)
            importlib.import_module(name)
        except ImportError:
            pass
        except SystemExit:
            code = 11
        except BaseException:
            code = 12
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code)
    os.close(out_w)
    os.close(events_w)
    return {"name": name, "pid": pid, "work": work, "fds": {out_r: "output", events_r: "events"},
            "output": b"", "events": b"", "started": time.monotonic()}


def finish(child):
    try:
        os.killpg(child["pid"], signal.SIGKILL)
    except ProcessLookupError:
        pass
    _, status = os.waitpid(child["pid"], 0)
    effects = set(child["events"].decode(errors="replace").split())
    effects |= {"output"} if child["output"] else set()
    effects |= {"blocks"} if child.get("blocks") else set()
    code = os.waitstatus_to_exitcode(status)
    effects |= {11: {"exits"}, 12: {"raises"}, 0: set(), -signal.SIGKILL: set()}.get(code, {f"exit_{code}"})
    left = set(os.listdir(child["work"]))
    effects |= {"runs_files_in_cwd"} if "test_planted.py.ran" in left else set()
    effects |= {"writes_cwd"} if left - {"test_planted.py", "test_planted.py.ran"} else set()
    shutil.rmtree(child["work"], ignore_errors=True)
    return sorted(effects)


def main():
    workspace = sys.argv[1]
    os.environ["BROWSER"] = "true"
    pending, running, found = stdlib_modules(), [], {}
    while pending or running:
        while pending and len(running) < int(sys.argv[2]):
            running.append(start(pending.pop(), workspace))
        fds = {fd: child for child in running for fd in child["fds"]}
        ready, _, _ = select.select(list(fds), [], [], 0.05)
        for fd in ready:
            child = fds[fd]
            chunk = os.read(fd, 65536)
            if chunk:
                child[child["fds"][fd]] += chunk
            else:
                os.close(fd)
                del child["fds"][fd]
        for child in list(running):
            late = time.monotonic() - child["started"] > 5
            if not child["fds"] or late:
                child["blocks"] = bool(child["fds"])
                for fd in child["fds"]:
                    os.close(fd)
                running.remove(child)
                found[child["name"]] = finish(child)
    print(json.dumps(found))


main()
"""


@lru_cache(maxsize=1)
def probe() -> dict[str, list[str]]:
    """Every standard-library module of the sandbox's interpreter → the side effects its import had (maybe none)."""
    python = host.sandbox_python()
    workspace = os.path.realpath(tempfile.mkdtemp(prefix="gs-stdlib-probe-"))
    os.chmod(workspace, 0o777)
    command = [python, "-I", "-B", "-c", _PROBE, workspace, str(max(1, os.cpu_count() or 1))]
    if os.geteuid() == 0:
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=workspace, check=True)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    return json.loads(done.stdout)


def side_effect_modules() -> list[str]:
    """The standard-library modules whose import does something (see the module docstring), sorted."""
    return sorted(name for name, effects in probe().items() if effects or name.endswith(".__main__"))
