"""The trusted side of the code sandbox (see `gym_serve.verifiers.code` for the threat model).

Started by the verifier as `python -I -B -c <this file>`, inside the sandbox's namespaces (or,
in the fallback, as a plain child process). It reads one JSON spec from stdin (the tests and
expected values live only here, in this process's memory, never in a file), makes itself
non-dumpable, leaves the work dir (its working directory is `/`), raises the kernel's walls on
itself (`gym_serve.sandbox._confine.confine_harness`: no capabilities, so the mounts stay as they are;
seccomp; Landlock), and runs the solution in separate *runner* processes (`_judge_runner.py`),
each confined by `gym_serve.sandbox._confine.confine` before it execs. It writes one JSON result line to
its stdout, which no runner inherits or can reach.

Nothing the solution names is ever imported here: a module the solution's namespace holds
reaches the tests as the harness's own copy only when it is on `TEST_MODULES` (standard-library
modules that run no code of consequence when imported, imported by a fixed name); any other is
an opaque handle to the solution's object, like any value it defined. Whatever ends the harness
early once the solution runs (an exception of any kind) is reported as `harness_error`, which
scores 0; a failure before (the harness could not confine itself) gives no verdict at all.

- `stdio`: one fresh runner per case, fed the case's input; its output goes back to the
  verifier, which compares it with the expected output (never sent here).
- `asserts`: the test snippets run *here*, in a namespace of this process. The solution's
  names are proxies: calling one asks the runner over a pipe, and what comes back is plain data
  decoded into fresh builtins (or an opaque handle), so the solution cannot reach a test's
  frames, patch its builtins or assert, hand back an object whose `__eq__` lies, or print a
  result: the verdict is taken here. unittest `TestCase`s a snippet defines are run too.
- `calls`: LiveCodeBench's call-based tests (a function, or a method of `Solution`), compared
  here with its rules.

Standard library only.
"""

import base64
import builtins
import importlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import time
import types
import unittest

_DEFAULT_TAIL = 4000
TEST_MODULES = frozenset(
    """abc array base64 binascii bisect calendar cmath collections collections.abc copy dataclasses datetime
    decimal difflib enum fractions functools hashlib heapq io itertools json keyword math numbers operator
    os os.path posixpath pprint random re statistics string struct sys textwrap time types typing unicodedata
    """.split()
)
"""Modules the tests get as the harness's own copy when the solution's namespace holds them (`import math` in
the solution, `math.isclose` in a test): side-effect-free standard-library modules, imported by these fixed
names only, never by a name the solution sends. Any other module the solution holds is a handle to its object."""


class _Timeout(Exception):
    """The solution did not answer within its time."""


class _Died(Exception):
    """The runner exited or was killed; what it answered so far stands."""


class SolutionError(Exception):
    """An exception the solution raised that is not a builtin one (its type name and message)."""


class _Runner:
    """One confined runner process and the pipes around it."""

    def __init__(self, harness, mode, stdin_bytes=b""):
        self.h = harness
        rpc = mode == "serve"
        command = [sys.executable, "-I", "-B", "-c", harness.spec["runner_source"], mode]
        pass_fds: tuple[int, ...] = ()
        if rpc:  # requests go in on one pipe, replies come out on another; the solution's stdout stays its own
            to_runner, from_runner = os.pipe(), os.pipe()
            pass_fds = (to_runner[0], from_runner[1])
            command += [str(to_runner[0]), str(from_runner[1])]

        def confine():
            os.setpgid(0, 0)  # a process group of its own, which the harness kills; it stays in the harness's session
            harness.limits()
            harness.confine.confine(harness.work, harness.read_dirs)

        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=harness.work,
            env=harness.env,
            pass_fds=pass_fds,
            preexec_fn=confine,
        )
        harness.report_group(self.proc.pid)
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        self.requests = self.replies = None
        if rpc:
            os.close(to_runner[0])
            os.close(from_runner[1])
            self.requests, self.replies = to_runner[1], from_runner[0]
        self.streams = {self.proc.stdout.fileno(): "stdout", self.proc.stderr.fileno(): "stderr"}
        if self.replies is not None:
            self.streams[self.replies] = "replies"
        for fd in self.streams:
            os.set_blocking(fd, False)
        self.pending_stdin = stdin_bytes
        self.stdin_fd = self.proc.stdin.fileno()
        os.set_blocking(self.stdin_fd, False)
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.reply_buffer = bytearray()
        self.output_exceeded = self.disk_exceeded = self.timed_out = False
        self.started = time.monotonic()
        if not self.pending_stdin:
            self._close_stdin()

    def _close_stdin(self):
        self.pending_stdin = b""
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]  # a PIPE
        except OSError:
            pass

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def pump(self, deadline, want_reply=False):
        """Move bytes until the runner exits (or, with `want_reply`, a reply line is in), or the deadline."""
        exited = drained = False
        while True:
            if want_reply and b"\n" in self.reply_buffer:
                line, _, rest = bytes(self.reply_buffer).partition(b"\n")
                self.reply_buffer = bytearray(rest)
                return line
            if (self.output_exceeded or self.disk_exceeded) and want_reply:
                self.proc.wait()
                raise _Died()
            if drained:  # its own process is gone and its pipes are empty: what leftovers hold open does not count
                if want_reply:
                    raise _Died()
                return None
            exited = self.proc.poll() is not None  # then read what is there, and stop
            writers = [self.stdin_fd] if self.pending_stdin else []
            if not self.streams and not writers:
                self.proc.wait()
                if want_reply:
                    raise _Died()
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.timed_out = True
                self.kill()
                self.proc.wait()
                raise _Timeout()
            ready, writable, _ = select.select(list(self.streams), writers, [], 0 if exited else min(remaining, 0.05))
            drained = exited and not ready
            for fd in ready:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                kind = self.streams[fd]
                if not chunk:
                    del self.streams[fd]
                    os.close(fd) if kind == "replies" else None
                elif kind == "stdout":
                    self._keep(chunk)
                elif kind == "stderr":
                    self.stderr.extend(chunk)
                    del self.stderr[: max(0, len(self.stderr) - _DEFAULT_TAIL)]
                else:
                    self.reply_buffer.extend(chunk)
                    if len(self.reply_buffer) > self.h.spec["max_message_bytes"]:
                        self.kill()
                        raise _Died()
            if writable:
                try:
                    self.pending_stdin = self.pending_stdin[os.write(self.stdin_fd, self.pending_stdin[:65536]) :]
                except BlockingIOError:
                    pass
                except BrokenPipeError:
                    self.pending_stdin = b""
                if not self.pending_stdin:
                    self._close_stdin()
            if self.h.over_quota():
                self.disk_exceeded = True
                self.kill()

    def _keep(self, chunk):
        room = self.h.spec["output_bytes"] - len(self.stdout)
        self.stdout.extend(chunk[: max(0, room)])
        if len(chunk) > room:
            self.output_exceeded = True
            self.kill()

    def finish(self, deadline):
        try:
            self.pump(deadline)
        except _Timeout:
            pass
        self.kill()  # whatever it left in its group
        self.proc.wait()
        return {
            "exit_code": self.proc.returncode,
            "stdout": self.stdout.decode(errors="replace"),
            "stderr": self.stderr.decode(errors="replace"),
            "timed_out": self.timed_out,
            "output_exceeded": self.output_exceeded,
            "disk_exceeded": self.disk_exceeded,
            "wall_s": time.monotonic() - self.started,
        }


class Remote:
    """A value that stayed in the solution's process: usable, never trusted (its `==` is identity)."""

    __slots__ = ("_session", "_handle")

    def __init__(self, session, handle):
        self._session = session
        self._handle = handle

    def __call__(self, *args, **kwargs):
        return self._session.call(self, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._session.request("getattr", self, name=name)

    def __getitem__(self, key):
        return self._session.request("getitem", self, key=self._session.encode(key))

    def __len__(self):
        value = self._session.request("len", self)
        if type(value) is not int:
            raise TypeError("len() of the solution's object is not an int")
        return value

    def __iter__(self):
        iterator = self._session.request("iter", self)
        while True:
            message = self._session.exchange("next", iterator)
            if message.get("stop"):
                return
            yield self._session.decode(message["ok"])

    def __contains__(self, key):
        return self._session.request("contains", self, key=self._session.encode(key)) is True

    def __str__(self):
        value = self._session.request("str", self)
        return value if type(value) is str else "<solution object>"

    def __repr__(self):
        value = self._session.request("repr", self)
        return value if type(value) is str else "<solution object>"


class _Session:
    """The solution, loaded in a runner, and the calls made into it."""

    def __init__(self, harness):
        self.h = harness
        self.runner = _Runner(harness, "serve")
        self.next_id = 0
        self.deadline = time.monotonic() + harness.spec["wall_s"]
        self.names = {}

    def load(self):
        """Wait for the solution to load; learn the names it defined."""
        try:
            loaded = json.loads(self.runner.pump(self.deadline, want_reply=True))
        except (ValueError, RecursionError):
            raise _Died() from None
        if not isinstance(loaded, dict) or not isinstance(loaded.get("names", {}), dict):
            raise _Died()
        if not loaded.get("loaded"):
            raise SolutionError(f"the solution failed to load: {str(loaded.get('error', '?'))[:300]}")
        for name, desc in loaded["names"].items():
            if not isinstance(desc, dict) or not ("module" in desc or "value" in desc):
                raise _Died()
            if hasattr(builtins, name):
                continue  # never let the solution stand in for a builtin the tests use
            self.names[name] = for_tests(desc, self.decode)

    def exchange(self, op, target, **fields):
        self.next_id += 1
        message = {"id": self.next_id, "op": op, "target": self.encode(target), **fields}
        data = (json.dumps(message) + "\n").encode()
        requests = self.runner.requests
        assert requests is not None  # a serving runner's
        try:
            while data:
                _, ready, _ = select.select([], [requests], [], max(0.0, self.deadline - time.monotonic()))
                if not ready:
                    self.runner.kill()
                    raise _Timeout()
                data = data[os.write(requests, data) :]
        except BrokenPipeError:
            raise _Died() from None
        line = self.runner.pump(self.deadline, want_reply=True)
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            raise _Died() from None
        if not isinstance(reply, dict) or reply.get("id") != self.next_id:
            raise _Died()
        return reply

    def request(self, op, target, **fields):
        return self._answer(self.exchange(op, target, **fields))

    def _answer(self, reply):
        if "raise" in reply:
            raise self._exception(reply["raise"])
        if "ok" not in reply:
            raise _Died()
        return self.decode(reply["ok"])

    def call(self, target, args, kwargs):
        encoded = [self.encode(a) for a in args]
        reply = self.exchange("call", target, args=encoded, kwargs={k: self.encode(v) for k, v in kwargs.items()})
        result = self._answer(reply)
        after_all = reply.get("args_after")
        for original, after in zip(args, after_all if type(after_all) is list else [], strict=False):
            if after is not None:
                _copy_back(original, self.decode(after))
        return result

    def _exception(self, raised):
        if not isinstance(raised, dict):
            raise _Died()
        name, message = str(raised.get("type")), str(raised.get("message"))
        cls = getattr(builtins, name, None)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls is not StopIteration:
            try:
                return cls(message)
            except Exception:
                pass
        return SolutionError(f"{name}: {message}")

    def encode(self, value, depth=0):
        kind = type(value)
        if depth > 100:
            raise ValueError("a value nested too deeply to pass to the solution")
        if value is None or kind in (bool, str, int):
            return value
        if kind is float:
            return value if math.isfinite(value) else {"$f": repr(value)}
        if kind is list:
            return [self.encode(v, depth + 1) for v in value]
        if kind is tuple:
            return {"$t": [self.encode(v, depth + 1) for v in value]}
        if kind is dict:
            return {"$d": [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()]}
        if kind in (set, frozenset):
            return {"$s" if kind is set else "$fs": [self.encode(v, depth + 1) for v in value]}
        if kind in (bytes, bytearray):
            return {"$b" if kind is bytes else "$ba": base64.b64encode(value).decode()}
        if kind is complex:
            return {"$c": [self.encode(value.real), self.encode(value.imag)]}
        if kind is Remote and value._session is self:
            return {"$h": value._handle}
        raise TypeError(f"cannot pass a `{kind.__name__}` to the solution (only plain data and its own objects)")

    def decode(self, value):
        """Fresh builtins from the solution's answer; anything malformed ends the session."""
        if value is None or type(value) in (bool, str, int, float):
            return value
        if type(value) is list:
            return [self.decode(v) for v in value]
        if type(value) is not dict or len(value) != 1:
            raise _Died()
        ((tag, inner),) = value.items()
        try:
            if tag == "$h" and type(inner) is int:
                return Remote(self, inner)
            if tag == "$f" and inner in ("nan", "inf", "-inf"):
                return float(inner)
            if tag == "$t":
                return tuple(self.decode(v) for v in inner)
            if tag == "$d":
                return {self.decode(k): self.decode(v) for k, v in inner}
            if tag in ("$s", "$fs"):
                items = [self.decode(v) for v in inner]
                return set(items) if tag == "$s" else frozenset(items)
            if tag in ("$b", "$ba"):
                raw = base64.b64decode(inner, validate=True)
                return raw if tag == "$b" else bytearray(raw)
            if tag == "$c":
                return complex(float(inner[0]), float(inner[1]))
        except (TypeError, ValueError):
            pass
        raise _Died()

    def close(self):
        self.runner.kill()
        self.runner.proc.wait()


def for_tests(desc, decode):
    """What a name the solution defined is in the tests' namespace: the harness's own copy of a module on
    `TEST_MODULES` (imported by the list's fixed name, never by the name the solution sent), else the value it
    described (plain data, or a handle to its object: a module not on the list stays in the solution's process)."""
    module = desc.get("module")
    if isinstance(module, str) and module in TEST_MODULES:
        return importlib.import_module(module)
    if "value" not in desc:
        raise _Died()  # a module described without its handle: not what the runner sends
    return decode(desc["value"])


def _copy_back(original, after):
    """In-place changes the solution made to a list/dict/set/bytearray argument show in the caller's value."""
    if type(original) is list and type(after) is list or type(original) is bytearray and type(after) is bytearray:
        original[:] = after
    elif type(original) is dict and type(after) is dict or type(original) is set and type(after) is set:
        original.clear()
        original.update(after)


class Harness:
    def __init__(self, spec):
        self.spec = spec
        self.work = spec["work_dir"]
        self.env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.work, "TMPDIR": self.work, "LANG": "C.UTF-8"}
        self.confine = types.ModuleType("_confine")
        exec(compile(spec["confine_source"], "_confine.py", "exec"), self.confine.__dict__)
        self.groups = []
        self.read_dirs = sorted(
            {"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", sys.prefix, sys.base_prefix,
             sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
            | {p for p in sys.path if p and os.path.isdir(p)}
        )  # fmt: skip
        self._quota_checked = 0.0

    def limits(self):
        import resource

        spec = self.spec

        def lower(kind, value):
            soft, hard = resource.getrlimit(kind)
            hard = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(kind, (min(value, hard), hard))

        lower(resource.RLIMIT_CPU, spec["cpu_s"] + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (spec["cpu_s"], spec["cpu_s"] + 1))
        lower(resource.RLIMIT_AS, spec["memory_bytes"])
        lower(resource.RLIMIT_FSIZE, spec["file_size_bytes"])
        lower(resource.RLIMIT_NPROC, spec["max_processes"])
        lower(resource.RLIMIT_CORE, 0)

    def report_group(self, pgid):
        """Tell the verifier each runner's process group (fallback: it kills them, whatever becomes of us)."""
        self.groups.append(pgid)
        if self.spec["report_groups"]:
            os.write(2, f"@@group {pgid}\n".encode())

    def kill_groups(self):
        for pgid in self.groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def over_quota(self, force=False):
        """Fallback only (a namespace's tmpfs enforces its size itself): total bytes and files in the work dir."""
        quota = self.spec["watch_disk_bytes"]
        now = time.monotonic()
        if not quota or (now - self._quota_checked < 0.02 and not force):
            return False
        self._quota_checked = now
        used, files = 0, 0
        for root, dirs, names in os.walk(self.work):
            for name in names + dirs:
                files += 1
                try:
                    used += os.lstat(os.path.join(root, name)).st_blocks * 512
                except OSError:
                    pass
                if files > self.spec["max_files"] or used > quota:
                    return True
        return False

    # ---- modes ----------------------------------------------------------------------------------------------

    def run_stdio(self):
        self._write_solution(self.spec["solution"])
        runs = []
        for case_input in self.spec["stdin"]:
            runner = _Runner(self, "stdio", case_input.encode())
            runs.append(runner.finish(time.monotonic() + self.spec["wall_s"]))
        return {"runs": runs}

    def run_asserts(self):
        self._write_solution(self.spec["solution"])
        tests = self.spec["tests"]
        outcomes: list[list[str]] = []
        namespace = {"__builtins__": builtins, "__name__": "__gs_tests__"}
        session = self._load(outcomes, len(tests))
        if session is None:
            return {"tests": outcomes}
        namespace.update(session.names)
        for index, test in enumerate(tests):
            if session is None:  # the last test ended the solution's process: a fresh one for the next
                session = self._load(outcomes, len(tests) - index)
                if session is None:
                    break
                namespace.update(session.names)
            try:
                session.deadline = time.monotonic() + self.spec["wall_s"]
                _run_test(test, index, namespace)
                outcomes.append(["ok", ""])
            except AssertionError as e:
                outcomes.append(["fail", f"AssertionError: {str(e)[:200]}"])
            except _Timeout:
                outcomes.append(["fail", "timed out"])
            except _Died:
                outcomes.append(["fail", self._death(session)])
            except Exception as e:  # noqa: BLE001 - a test that raises fails; the harness goes on
                outcomes.append(["fail", f"{type(e).__name__}: {str(e)[:200]}"])
            if self.over_quota(force=True):
                session.runner.disk_exceeded = True
                session.runner.kill()
            if session.runner.proc.poll() is not None or session.runner.timed_out:
                session.close()
                session = None
        if session is not None:
            session.close()
        return {"tests": outcomes}

    def _load(self, outcomes, remaining):
        """The solution loaded in a fresh runner, or None with every remaining test failed (it did not load)."""
        session = _Session(self)
        try:
            session.load()
            return session
        except SolutionError as e:
            why = str(e)
        except _Timeout:
            why = "timed out while loading"
        except _Died:
            why = self._death(session)
        session.close()
        outcomes.extend([["fail", why]] * remaining)
        return None

    def run_calls(self):
        self._write_solution(self.spec["solution"])
        outcomes: list[list[str]] = []
        session = self._load(outcomes, len(self.spec["cases"]))
        if session is None:
            return {"tests": outcomes}
        try:
            target = _call_target(session, self.spec["fn_name"])
        except Exception as e:  # noqa: BLE001 - whatever the solution made of it, no target: every case fails
            session.close()
            return {"tests": [["fail", f"{type(e).__name__.strip('_')}: {e}"]] * len(self.spec["cases"])}
        for case in self.spec["cases"]:
            try:
                session.deadline = time.monotonic() + self.spec["wall_s"]
                if session.runner.proc.poll() is not None:
                    raise _Died()
                result = target(*case["args"])
                ok = _lcb_equal(result, case["expected"])
                outcomes.append(["ok" if ok else "fail", "" if ok else "wrong answer"])
            except _Timeout:
                outcomes.append(["fail", "timed out"])
            except _Died:
                outcomes.append(["fail", self._death(session)])
            except Exception as e:  # noqa: BLE001
                outcomes.append(["fail", f"{type(e).__name__}: {str(e)[:200]}"])
        session.close()
        return {"tests": outcomes}

    def _death(self, session):
        runner = session.runner if session is not None else None
        if runner is None:
            return "the solution's process ended"
        if runner.disk_exceeded:
            return "disk quota exceeded"
        if runner.output_exceeded:
            return "output limit exceeded"
        tail = runner.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return f"the solution's process ended (exit code {runner.proc.returncode}) {tail[0][:200]}".strip()

    def _write_solution(self, source):
        with open(os.path.join(self.work, "solution.py"), "w") as f:
            f.write(source)


def _run_test(source, index, namespace):
    before = set(namespace)
    exec(compile(source, f"test_{index}.py", "exec"), namespace)
    cases = [
        value
        for name, value in namespace.items()
        if name not in before and isinstance(value, type) and issubclass(value, unittest.TestCase)
    ]
    if cases:
        suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in cases)
        result = unittest.TestResult()
        suite.run(result)
        if not result.wasSuccessful() or result.testsRun == 0:
            problems = result.failures + result.errors
            raise AssertionError(problems[0][1].strip().splitlines()[-1] if problems else "no test ran")


def _call_target(session, fn_name):
    solution_class = session.names.get("Solution")
    if isinstance(solution_class, Remote):
        return getattr(solution_class(), fn_name)
    target = session.names.get(fn_name)
    if not isinstance(target, Remote):
        raise SolutionError(f"the solution defines no function `{fn_name}`")
    return target


def _lcb_equal(prediction, expected):
    """LiveCodeBench's call-based comparison: tuples as lists, equality, equal JSON, close floats."""
    if isinstance(prediction, tuple):
        prediction = list(prediction)
    if type(prediction) is Remote:
        return False
    if prediction == expected:
        return True
    try:
        if json.dumps(prediction) == json.dumps(expected):
            return True
    except (TypeError, ValueError):
        pass
    if _close(expected, prediction):
        return True
    return (
        isinstance(prediction, list)
        and isinstance(expected, list)
        and len(prediction) == len(expected)
        and all(_close(e, p) for p, e in zip(prediction, expected, strict=True))
    )


def _close(expected, predicted):
    if expected == predicted:
        return True
    if isinstance(expected, bool) or isinstance(predicted, bool):
        return False
    if not (isinstance(expected, float) or isinstance(predicted, float)):
        return False
    if not isinstance(expected, (int, float, str)) or not isinstance(predicted, (int, float, str)):
        return False
    try:
        e, p = float(expected), float(predicted)
    except (TypeError, ValueError):
        return False
    return abs(p - e) <= 1e-8 + 1e-5 * abs(e)  # numpy.allclose's defaults


def _start_reaper(work):
    """Fallback: a process that removes the work dir once the harness is gone, even if the verifier died first.

    Forked before the harness confines itself: Landlock lets the harness write only beneath the work dir, so it
    cannot remove the directory itself. The reaper runs nothing but this, and waits on a pipe only the harness
    holds (close-on-exec: no runner inherits it), which closes when the harness ends, however it ends.
    """
    import shutil

    wait, alive = os.pipe()
    if os.fork() == 0:
        for fd in (alive, 0, 1, 2):  # the verifier reads to the end of the harness's output: hold none of it open
            os.close(fd)
        os.read(wait, 1)
        for _ in range(100):  # the killed runners' last files may still be closing: until it is gone
            shutil.rmtree(work, ignore_errors=True)
            if not os.path.exists(work):
                break
            time.sleep(0.02)
        os._exit(0)
    os.close(wait)


def main():
    sys.set_int_max_str_digits(0)
    os.chdir("/")  # never the work dir the solution writes: nothing here may find its files
    spec = json.loads(sys.stdin.buffer.readline())
    harness = Harness(spec)
    harness.confine.make_undumpable()
    if spec["caller_pid"]:  # fallback: die (cleanly) with the verifier that started us
        harness.confine.die_with_parent(signal.SIGTERM)
        if os.getppid() != spec["caller_pid"]:
            sys.exit(3)
        _start_reaper(harness.work)

    def stop(signum, frame):  # the verifier died (fallback) or is ending us: leave nothing running
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second SIGTERM must not cut the cleanup short
        harness.kill_groups()
        os._exit(4)

    signal.signal(signal.SIGTERM, stop)
    result: dict[str, object] = {"tests": [], "runs": []}
    # before any of the solution runs: a failure here is the sandbox's, so no verdict (the traceback says why)
    result["harness_layers"] = harness.confine.confine_harness(harness.work, harness.read_dirs)
    result["layers"] = harness.confine.planned()
    try:
        result.update(getattr(harness, f"run_{spec['mode']}")())
    except BaseException as e:  # noqa: BLE001 - fail closed: whatever ended the harness scores nothing, and says so
        result["harness_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        harness.kill_groups()
    os.write(1, (json.dumps(result) + "\n").encode())


if __name__ == "__main__":
    main()
