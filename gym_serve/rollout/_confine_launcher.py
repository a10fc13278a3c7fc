"""Starts one harness program confined (standard library only: run as `python -I this_file SPEC_JSON`).

In `namespaces` mode the launcher moves itself into new network, mount and PID namespaces (and a user
namespace when it is not root), then:

- brings up the namespace's own loopback and listens on `127.0.0.1:<port>` there, relaying every connection
  to the gateway replica's Unix socket (`forward`): the program's only way out is its gateway session;
- mounts an empty tmpfs over each `hide` folder (Ray's session folder: its sockets; `/dev/shm`);
- forks the namespace's PID 1, which mounts a fresh `/proc`, forks the program (rlimits set, in its
  workspace, with exactly the environment given) and waits for it. When the program ends, or PID 1 is
  killed, the kernel kills every process left in the namespace: nothing the program started outlives it.

In `process` mode it only sets the rlimits and becomes the program (its caller gave it a session and
process group of its own). Exit status: the program's (128 + N when signal N killed it); 125 with a line
on stderr when the confinement itself could not be set up.
"""

import ctypes
import fcntl
import json
import os
import resource
import signal
import socket
import struct
import sys
import threading

_NEWNS, _NEWUSER, _NEWPID, _NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
_PR_SET_PDEATHSIG = 1
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 1
_libc = ctypes.CDLL(None, use_errno=True)
_LIMITS = {
    "cpu_s": resource.RLIMIT_CPU,
    "file_bytes": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
    "address_space_bytes": resource.RLIMIT_AS,
}


def _fail(message):
    sys.stderr.write(f"gym-serve confinement: {message}\n")
    sys.stderr.flush()
    os._exit(125)


def _check(result, what):
    if result != 0:
        _fail(f"{what}: {os.strerror(ctypes.get_errno())}")


def _die_with_parent():
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _enter_namespaces(hide):
    """New user (unless root), network and mount namespaces for this process; the PID namespace comes later:
    once asked for, this process could start no thread (and the relay starts threads)."""
    uid, gid = os.getuid(), os.getgid()
    flags = _NEWNET | _NEWNS | (0 if uid == 0 else _NEWUSER)
    _check(_libc.unshare(flags), "unshare")
    if uid != 0:  # root of a user namespace of our own, mapped to the caller's ids
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "making mounts private")
    for folder in hide:
        if os.path.isdir(folder):
            _check(
                _libc.mount(b"tmpfs", folder.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=1m,mode=755"),
                f"hiding {folder}",
            )
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # the namespace's loopback starts down
        request = struct.pack("16sh22x", b"lo", 0)
        current = struct.unpack("16sh", fcntl.ioctl(s, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", current | _IFF_UP))


def _relay(source, target):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((target, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def _forward(listener, path):
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_relay, args=(a, b), daemon=True).start()


def _set_limits(limits):
    for name, value in limits.items():
        if value is not None:
            resource.setrlimit(_LIMITS[name], (value, value))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _become_program(spec):
    _set_limits(spec["limits"])
    os.chdir(spec["cwd"])
    try:
        os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
    except OSError as e:
        sys.stderr.write(f"gym-serve confinement: cannot run `{spec['argv'][0]}`: {e.strerror}\n")
        os._exit(127)


def _status(wait_status):
    return os.waitstatus_to_exitcode(wait_status) if os.WIFEXITED(wait_status) else 128 + os.WTERMSIG(wait_status)


def _pid_one(spec):
    """The namespace's init: a fresh /proc, the program, its status; every orphan reaped until it ends."""
    _die_with_parent()
    _check(_libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None), "mounting /proc")
    program = os.fork()
    if program == 0:
        _become_program(spec)
    while True:
        pid, wait_status = os.wait()
        if pid == program:
            os._exit(_status(wait_status))


def main():
    spec = json.loads(sys.argv[1])
    _die_with_parent()
    if not spec["namespaces"]:
        _become_program(spec)
    _enter_namespaces(spec.get("hide") or [])
    relay = None
    forward = spec.get("forward")
    if forward:  # a process of its own, in the new network namespace, before the PID namespace
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", forward["port"]))
        listener.listen(64)
        relay = os.fork()
        if relay == 0:
            _die_with_parent()
            _forward(listener, forward["socket"])
        listener.close()
    _check(_libc.unshare(_NEWPID), "unshare of the PID namespace")
    init = os.fork()  # the first child in a new PID namespace is its PID 1
    if init == 0:
        _pid_one(spec)
    _, wait_status = os.waitpid(init, 0)
    if relay is not None:
        os.kill(relay, signal.SIGKILL)
    os._exit(_status(wait_status))


if __name__ == "__main__":
    main()
