"""The trusted supervisor of one workspace: PID 1 of its namespaces, and the only way in (standard library only).

Started by bwrap (`gym_serve.sandbox.local`) as `python -I -S -B -c <this file> FD <_confine.py>`, as root of a
fresh user namespace that holds `CAP_SYS_ADMIN` and nothing of the host but read-only binds and
the keeper's layers at `/.layers`. It talks JSON lines over the UNIX socket on `FD` (the only
channel to the host) and waits there, unclaimed, while the sandbox sits in a warm pool.

`setup` (the claim) makes the workspace: an overlay of the base and any snapshot layers under
the sandbox's own writable layer (on the tmpfs the keeper sized to its disk quota), or a copy of
them where the kernel refuses an unprivileged overlay; `/tmp` on the same tmpfs; the gateway
forwarders. It then unmounts `/.layers` (no other sandbox's layer stays reachable), makes itself
non-dumpable and raises the kernel's walls on itself (`_confine.confine_workspace`: no
capability left, seccomp, Landlock), so every command it starts inherits them. Nothing
untrusted runs before that.

Afterwards: `start` a command (a process group of its own, rlimits, capped output), `wait` for
it, `kill` it, `exec` (start and wait in one), and `read`/`write`/`list` files beneath the
workspace (`openat2` with `RESOLVE_BENEATH`: no `..`, absolute path or symlink leads out).

As PID 1 it is safe from the commands: the kernel delivers no signal to a namespace's init from
inside unless it handles it (only SIGCHLD is handled, which wakes the loop), it is non-dumpable
(no ptrace, no `/proc/1/mem`), and seccomp refuses ptrace anyway. When it ends, the kernel ends
every process of the namespace; it ends when the host closes the channel.
"""

import base64
import ctypes
import errno
import json
import os
import resource
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
import types

WORKSPACE = "/workspace"
_libc = ctypes.CDLL(None, use_errno=True)
_MS_BIND, _MS_REC, _MNT_DETACH = 0x1000, 0x4000, 2
_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS, _RESOLVE_BENEATH = 0x02, 0x08
_MAX_READ = 16 << 20
_DRAIN_S = 0.05


class RequestError(Exception):
    """A request the sandbox refuses; `kind` names it for the host (`PathOutsideWorkspace`, ...)."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def _mount(source, target, fstype, flags, data):
    if _libc.mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(flags), data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype} on {target}: {os.strerror(err)}")


def _umount(target):
    if _libc.umount2(target.encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


class _Child:
    """A command the supervisor started: its pipes, capped output and deadline."""

    def __init__(self, proc, limits, deadline):
        self.proc = proc
        self.pid = proc.pid
        self.out = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = {"stdout": False, "stderr": False}
        self.cap = limits["output_bytes"]
        self.streams = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
        for fd in self.streams:
            os.set_blocking(fd, False)
        self.stdin = proc.stdin.fileno() if proc.stdin else None
        self.pending = b""
        self.started = time.monotonic()
        self.deadline = deadline
        self.status: int | None = None
        self.exited_at = 0.0
        self.timed_out = False
        self.waiters = []  # (request id, reply deadline or None)

    def feed(self, data):
        self.pending = data
        if self.stdin is not None:
            os.set_blocking(self.stdin, False)
            if not data:
                self.close_stdin()

    def close_stdin(self):
        if self.stdin is not None:
            try:
                os.close(self.stdin)
            except OSError:
                pass
            self.proc.stdin = None
            self.stdin = None

    def keep(self, name, chunk):
        buffer = self.out[name]
        room = self.cap - len(buffer)
        buffer.extend(chunk[: max(0, room)])
        if len(chunk) > room:
            self.truncated[name] = True

    def kill(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass

    @property
    def done(self):
        """Exited, and its pipes empty (or held open only by what it left running, past the drain time)."""
        if self.status is None:
            return False
        return not self.streams or time.monotonic() - self.exited_at > _DRAIN_S

    def result(self):
        assert self.status is not None
        code = os.waitstatus_to_exitcode(self.status)
        return {
            "pid": self.pid,
            "exit_code": code if code >= 0 else None,
            "signal": -code if code < 0 else None,
            "stdout": base64.b64encode(bytes(self.out["stdout"])).decode(),
            "stderr": base64.b64encode(bytes(self.out["stderr"])).decode(),
            "stdout_truncated": self.truncated["stdout"],
            "stderr_truncated": self.truncated["stderr"],
            "timed_out": self.timed_out,
            "wall_s": self.exited_at - self.started,
        }


class _Forwarder:
    """`127.0.0.1:port` inside the sandbox, relayed to a UNIX socket the host bound in (a gateway's endpoint)."""

    def __init__(self, port, path):
        self.path = path
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(64)
        self.listener.setblocking(False)


class Supervisor:
    def __init__(self, channel_fd, confine_source):
        self.channel = socket.socket(fileno=channel_fd)
        self.channel.setblocking(False)
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.children = {}
        self.finished = {}  # pid -> result of a started command nobody waited for yet
        self.pipes = {}  # relay fd -> its peer fd
        self.forwarders = {}
        self.limits = {}
        self.env = {}
        self.claimed = False
        self.confine = types.ModuleType("_confine")  # compiled while the sandbox waits in its pool, not at the claim
        exec(compile(confine_source, "_confine.py", "exec"), self.confine.__dict__)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        self.wake = wake_r
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # the only signal PID 1 takes: it wakes the loop
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(number, signal.SIG_IGN)

    # ---- the loop ----------------------------------------------------------------------------------------------

    def run(self):
        while True:
            readers = [self.channel, self.wake, *self._child_fds(), *self.forwarders, *self.pipes]
            writers = [c.stdin for c in self.children.values() if c.stdin is not None and c.pending]
            if self.outbox:
                writers.append(self.channel)
            try:
                ready, writable, _ = select.select(readers, writers, [], self._timeout())
            except InterruptedError:
                ready, writable = [], []
            for item in ready:
                if item is self.channel:
                    if not self._read_channel():
                        return  # the host closed the channel: the sandbox ends with us
                elif item == self.wake:
                    self._drain_wake()
                elif item in self.forwarders:
                    self._accept(item)
                elif item in self.pipes:
                    self._relay(item)
                else:
                    self._read_child(item)
            for item in writable:
                if item is self.channel:
                    self._flush()
                else:
                    self._write_child(item)
            self._reap()
            self._expire()

    def _timeout(self):
        now = time.monotonic()
        soonest = 1.0
        for child in self.children.values():
            if child.status is None and child.deadline is not None:
                soonest = min(soonest, child.deadline - now)
            if child.status is not None:
                soonest = min(soonest, _DRAIN_S)
            for _, until in child.waiters:
                if until is not None:
                    soonest = min(soonest, until - now)
        return max(0.0, soonest)

    def _child_fds(self):
        return [fd for child in self.children.values() for fd in child.streams]

    def _drain_wake(self):
        try:
            while os.read(self.wake, 512):
                pass
        except BlockingIOError:
            pass

    def _read_channel(self):
        try:
            chunk = self.channel.recv(1 << 20)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        self.inbox.extend(chunk)
        while b"\n" in self.inbox:
            line, _, rest = bytes(self.inbox).partition(b"\n")
            self.inbox = bytearray(rest)
            self._dispatch(json.loads(line))
        return True

    def _send(self, message):
        self.outbox.extend(json.dumps(message).encode() + b"\n")
        self._flush()

    def _flush(self):
        try:
            while self.outbox:
                sent = self.channel.send(self.outbox)
                del self.outbox[:sent]
        except BlockingIOError:
            pass

    def _dispatch(self, request):
        rid = request.get("id")
        try:
            op = request["op"]
            if op != "setup" and not self.claimed:
                raise RequestError("SandboxError", "the sandbox is not set up")
            handler = getattr(self, "op_" + op, None)
            if handler is None:
                raise RequestError("SandboxError", f"unknown operation `{op}`")
            reply = handler(request)
        except RequestError as e:
            self._send({"id": rid, "error": {"type": e.kind, "message": str(e)}})
            return
        except OSError as e:
            self._send({"id": rid, "error": {"type": "SandboxError", "message": f"{e.strerror or e}"}})
            return
        if reply is not None:
            self._send({"id": rid, "ok": reply})

    # ---- setup ---------------------------------------------------------------------------------------------------

    def op_setup(self, request):
        if self.claimed:
            raise RequestError("SandboxError", "the sandbox is already set up")
        layers = request["lowers"]
        upper, work, tmp = request["upper"], request["work"], request["tmp"]
        os.makedirs(tmp, mode=0o1777, exist_ok=True)
        os.chmod(tmp, 0o1777)
        cow = request["cow"]
        if cow == "overlay":
            options = f"lowerdir={':'.join(layers)},upperdir={upper},workdir={work},userxattr"
            try:
                _mount("overlay", WORKSPACE, "overlay", 0, options)
            except OSError:
                cow = "copy"  # the kernel refuses an unprivileged overlay: a copy of the layers instead
        if cow == "copy":
            for layer in reversed(layers):  # the bottom layer first
                _copy_layer(layer, upper)
            _mount(upper, WORKSPACE, "", _MS_BIND, "")
        _mount(tmp, "/tmp", "", _MS_BIND, "")
        for port, path in request.get("forward", {}).items():
            self.forwarders[_Forwarder(int(port), path).listener] = path
        _umount("/.layers")  # every layer of the keeper, this sandbox's own included, out of reach
        os.chdir(WORKSPACE)
        self.confine.make_undumpable()
        walls = self.confine.confine_workspace([WORKSPACE, "/tmp"], ["/"], network=request["network"])
        self.limits = request["limits"]
        self.env = request["env"]
        self.claimed = True
        return {"walls": walls, "cow": cow}

    # ---- commands ------------------------------------------------------------------------------------------------

    def op_exec(self, request):
        child = self._start(request)
        child.waiters.append((request.get("id"), None))
        return None  # answered when it ends

    def op_start(self, request):
        return {"pid": self._start(request).pid}

    def op_wait(self, request):
        pid = int(request["pid"])
        if pid in self.finished:
            return self.finished.pop(pid)
        child = self.children.get(pid)
        if child is None:
            raise RequestError("ProcessNotFound", f"no command with pid {pid} in this sandbox")
        timeout = request.get("timeout_s")
        child.waiters.append((request.get("id"), None if timeout is None else time.monotonic() + float(timeout)))
        return None

    def op_kill(self, request):
        pid = int(request["pid"])
        child = self.children.get(pid)
        if child is None and pid not in self.finished:
            raise RequestError("ProcessNotFound", f"no command with pid {pid} in this sandbox")
        if child is not None:
            child.kill()
        return {"pid": pid}

    def op_kill_all(self, request):
        """End every process of the sandbox but this one (what a rollout left running, before its verdict)."""
        try:
            os.kill(-1, signal.SIGKILL)  # PID 1's kill(-1): every process of the namespace, never itself
        except ProcessLookupError:
            pass
        return {}

    def _start(self, request):
        limits = {**self.limits, **{k: v for k, v in request.get("limits", {}).items() if v is not None}}
        env = {**self.env, **request.get("env", {})}
        cwd = self._directory(request.get("cwd") or ".")
        argv = request["argv"]
        timeout = request.get("timeout_s")
        deadline = None if timeout is None else time.monotonic() + float(timeout)

        def prepare():
            os.setsid()  # a process group of its own, which a timeout or `kill` ends as a whole
            _rlimits(limits)

        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                preexec_fn=prepare,
            )
        except OSError as e:
            raise RequestError("CommandNotFound", f"cannot run `{argv[0]}`: {e.strerror}") from None
        child = _Child(proc, limits, deadline)
        child.feed(base64.b64decode(request.get("stdin", "")))
        self.children[child.pid] = child
        return child

    def _read_child(self, fd):
        for child in self.children.values():
            name = child.streams.get(fd)
            if name is None:
                continue
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            if chunk:
                child.keep(name, chunk)
            else:
                del child.streams[fd]
                os.close(fd)
            return

    def _write_child(self, fd):
        for child in self.children.values():
            if child.stdin == fd:
                try:
                    written = os.write(fd, child.pending[: 1 << 16])
                    child.pending = child.pending[written:]
                except BlockingIOError:
                    return
                except OSError:
                    child.pending = b""
                if not child.pending:
                    child.close_stdin()
                return

    def _reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            child = self.children.get(pid)
            if child is not None and child.status is None:
                child.status = status
                child.exited_at = time.monotonic()
                child.proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        for pid in [pid for pid, child in self.children.items() if child.done]:
            self._finish(self.children.pop(pid))

    def _finish(self, child):
        child.close_stdin()  # what it left running stays in the workspace (until `kill`, destroy or the TTL)
        for fd in list(child.streams):
            os.close(fd)
        child.streams.clear()
        result = child.result()
        if child.waiters:
            for rid, _ in child.waiters:
                self._send({"id": rid, "ok": result})
        else:
            self.finished[child.pid] = result

    def _expire(self):
        now = time.monotonic()
        for child in self.children.values():
            if child.status is None and child.deadline is not None and now >= child.deadline:
                child.timed_out = True
                child.kill()
            for waiter in [w for w in child.waiters if w[1] is not None and now >= w[1]]:
                child.waiters.remove(waiter)
                self._send({"id": waiter[0], "ok": {"pid": child.pid, "running": True}})

    # ---- files ---------------------------------------------------------------------------------------------------

    def op_read(self, request):
        fd = self._open(request["path"], os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang the supervisor
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise RequestError("NotAFile", f"`{request['path']}` is not a regular file")
            limit = min(int(request.get("max_bytes") or _MAX_READ), _MAX_READ)
            data = os.read(fd, limit + 1)
            while len(data) <= limit:
                more = os.read(fd, limit + 1 - len(data))
                if not more:
                    break
                data += more
        finally:
            os.close(fd)
        if len(data) > limit:
            raise RequestError("FileTooLarge", f"`{request['path']}` is larger than {limit} bytes")
        return {"data": base64.b64encode(data).decode()}

    def op_write(self, request):
        path = request["path"]
        parent, _, _ = _relative(path).rpartition("/")
        if request.get("make_dirs") and parent:
            self._make_dirs(parent)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        fd = self._open(path, flags, int(request.get("mode", 0o644)))
        try:
            data = base64.b64decode(request["data"])
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return {"bytes": len(data)}

    def op_list(self, request):
        fd = self._open(request.get("path") or ".", os.O_RDONLY | os.O_DIRECTORY)
        entries = []
        try:
            with os.scandir(fd) as listing:
                for entry in listing:
                    info = entry.stat(follow_symlinks=False)
                    kind = "dir" if stat.S_ISDIR(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode) else "file"
                    entries.append({"name": entry.name, "kind": kind, "size": info.st_size})
        finally:
            os.close(fd)
        return {"entries": sorted(entries, key=lambda e: e["name"])}

    def op_usage(self, request):
        info = os.statvfs(WORKSPACE)
        return {
            "disk_bytes": (info.f_blocks - info.f_bfree) * info.f_frsize,
            "files": info.f_files - info.f_ffree,
            "running": len(self.children),
        }

    def _directory(self, path):
        fd = self._open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)

    def _make_dirs(self, path):
        done = []
        for part in path.split("/"):
            done.append(part)
            try:
                fd = self._open("/".join(done), os.O_RDONLY | os.O_DIRECTORY)
                os.close(fd)
            except RequestError as e:
                if e.kind != "FileNotFound":
                    raise
                parent_fd = self._open("/".join(done[:-1]) or ".", os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.mkdir(part, 0o755, dir_fd=parent_fd)
                except FileExistsError:
                    pass
                finally:
                    os.close(parent_fd)

    def _open(self, path, flags, mode=0):
        """Open `path` beneath the workspace: `..`, an absolute path outside it, or a symlink out is refused."""
        relative = _relative(path)
        root = os.open(WORKSPACE, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            how = ctypes.create_string_buffer(
                struct.pack("=QQQ", flags | os.O_CLOEXEC, mode, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
            )
            fd = _libc.syscall(_OPENAT2, root, relative.encode(), how, ctypes.c_size_t(24))
        finally:
            os.close(root)
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err == errno.EXDEV:
            raise RequestError("PathOutsideWorkspace", f"`{path}` leads outside the workspace (`..` or a link)")
        if err == errno.ENOENT:
            raise RequestError("FileNotFound", f"`{path}` does not exist in the workspace")
        if err in (errno.ENOTDIR, errno.EISDIR):
            raise RequestError("NotAFile", f"`{path}`: {os.strerror(err)}")
        if err in (errno.ENOSPC, errno.EDQUOT):
            raise RequestError("DiskFull", "the sandbox's disk quota is used up")
        raise RequestError("SandboxError", f"`{path}`: {os.strerror(err)}")

    # ---- the gateway's endpoints ---------------------------------------------------------------------------------

    def _accept(self, listener):
        try:
            client, _ = listener.accept()
        except OSError:
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.forwarders[listener])
        except OSError:
            client.close()
            upstream.close()
            return
        for sock in (client, upstream):
            sock.setblocking(False)
        self.pipes[client] = upstream
        self.pipes[upstream] = client

    def _relay(self, sock):
        peer = self.pipes.get(sock)
        try:
            data = sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data and peer is not None:
            try:
                peer.setblocking(True)
                peer.sendall(data)
                peer.setblocking(False)
                return
            except OSError:
                pass
        for end in (sock, peer):
            if end is not None:
                self.pipes.pop(end, None)
                end.close()


def _relative(path):
    """The workspace-relative form of `path`: an absolute path must lie under the workspace."""
    if path.startswith("/"):
        if path != WORKSPACE and not path.startswith(WORKSPACE + "/"):
            raise RequestError("PathOutsideWorkspace", f"`{path}` is outside the workspace ({WORKSPACE})")
        path = path[len(WORKSPACE) :].lstrip("/")
    return path or "."


def _rlimits(limits):
    def lower(kind, value):
        soft, hard = resource.getrlimit(kind)
        hard = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (min(value, hard), hard))

    if limits.get("cpu_s"):
        lower(resource.RLIMIT_CPU, int(limits["cpu_s"]) + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (int(limits["cpu_s"]), int(limits["cpu_s"]) + 1))
    if limits.get("address_space_bytes"):
        lower(resource.RLIMIT_AS, int(limits["address_space_bytes"]))
    if limits.get("max_processes"):
        lower(resource.RLIMIT_NPROC, int(limits["max_processes"]))
    if limits.get("file_size_bytes"):
        lower(resource.RLIMIT_FSIZE, int(limits["file_size_bytes"]))
    lower(resource.RLIMIT_CORE, 0)


def _copy_layer(layer, into):
    """Put one layer's entries over `into` (the copy fallback): whiteouts delete, opaque directories replace."""
    for root, dirs, files in os.walk(layer):
        relative = os.path.relpath(root, layer)
        target_dir = os.path.normpath(os.path.join(into, relative))
        if relative != "." and _opaque(root):
            _remove(target_dir)
        os.makedirs(target_dir, exist_ok=True)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            source, target = os.path.join(root, name), os.path.join(target_dir, name)
            info = os.lstat(source)
            _remove(target)
            if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
                continue  # a whiteout: the entry is deleted in this layer
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(source), target)
            elif stat.S_ISREG(info.st_mode):
                with open(source, "rb") as src, open(target, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                os.chmod(target, stat.S_IMODE(info.st_mode))


def _opaque(path):
    try:
        return os.getxattr(path, "user.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


def _remove(path):
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        for root, dirs, files in os.walk(path, topdown=False):
            for name in files:
                os.unlink(os.path.join(root, name))
            for name in dirs:
                full = os.path.join(root, name)
                os.unlink(full) if os.path.islink(full) else os.rmdir(full)
        os.rmdir(path)


if __name__ == "__main__":
    Supervisor(int(sys.argv[1]), sys.argv[2]).run()
