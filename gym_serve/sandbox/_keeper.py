"""The keeper of one provider's sandboxes: their layers, and the bwrap that starts each (standard library only).

Started by `gym_serve.sandbox.local` as `python -I -S -B -c <this file> FD` inside a bwrap of its
own: root of a user namespace whose mount namespace is private, with a fresh tmpfs at
`/dev/shm` that holds every layer (`bases/`, `snaps/`, and a tmpfs per sandbox sized to its disk
quota). None of it is visible on the host; when the keeper ends (it ends with its provider's
process, or when that process closes the channel), the kernel frees it all, and every sandbox it
started dies with it (`--die-with-parent`). Nothing untrusted ever runs here.

Requests are JSON lines on the UNIX socket `FD`; replies too, a sandbox's channel travelling
with its `spawn` reply as an `SCM_RIGHTS` file descriptor.
"""

import ctypes
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

LAYERS = "/dev/shm"
_libc = ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(target, size, inodes):
    options = f"size={size},nr_inodes={inodes},mode=0755".encode()
    if _libc.mount(b"sandbox", target.encode(), b"tmpfs", ctypes.c_ulong(0), options) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {target}: {os.strerror(err)}")


def _umount(target):
    _libc.umount2(target.encode(), 2)  # MNT_DETACH


class Keeper:
    def __init__(self, fd):
        self.channel = socket.socket(fileno=fd)
        self.spawned = {}  # name -> bwrap's Popen
        for folder in ("bases", "snaps", "logs"):
            os.makedirs(os.path.join(LAYERS, folder), exist_ok=True)

    def run(self):
        buffer = b""
        while True:
            chunk = self.channel.recv(1 << 20)
            if not chunk:
                return  # the provider is gone: so are we, and every sandbox with us
            buffer += chunk
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                self._handle(json.loads(line))
            for proc in self.spawned.values():
                proc.poll()  # a sandbox whose supervisor ended is reaped here; the provider asks to free its layer

    def _handle(self, request):
        fds: list[int] = []
        try:
            reply = getattr(self, "op_" + request["op"])(request, fds)
            message = {"id": request["id"], "ok": reply}
        except Exception as e:  # noqa: BLE001 - every failure is the provider's to report, by name
            message = {"id": request["id"], "error": {"type": type(e).__name__, "message": str(e)}}
        data = json.dumps(message).encode() + b"\n"
        if fds:
            socket.send_fds(self.channel, [data], fds)
            for fd in fds:
                os.close(fd)
        else:
            self.channel.sendall(data)

    # ---- sandboxes -----------------------------------------------------------------------------------------------

    def op_spawn(self, request, fds):
        """A tmpfs for the sandbox's writable layer, and its bwrap: its channel goes back with the reply."""
        name = _name(request["name"])
        home = os.path.join(LAYERS, name)
        os.mkdir(home, 0o755)
        _mount_tmpfs(home, int(request["disk_bytes"]), int(request["max_files"]))
        for part in ("upper", "work", "tmp"):
            os.mkdir(os.path.join(home, part), 0o755)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        info_r, info_w = os.pipe()
        argv = [a.replace("{channel}", str(theirs.fileno())).replace("{info}", str(info_w)) for a in request["argv"]]
        log = open(os.path.join(LAYERS, "logs", name), "wb")  # noqa: SIM115 - the child's stderr, read on failure
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(theirs.fileno(), info_w), env={}
            )
        finally:
            log.close()
            theirs.close()
            os.close(info_w)
        with os.fdopen(info_r, "rb") as info_file:
            info = info_file.read()
        try:
            child = json.loads(info)["child-pid"]
        except (ValueError, KeyError):
            proc.kill()
            proc.wait()
            ours.close()
            self._remove(name)
            raise RuntimeError(f"bwrap did not start the sandbox: {self._log(name)}") from None
        self.spawned[name] = proc
        fds.append(ours.detach())
        return {"pid": proc.pid, "child_pid": child}

    def op_reap(self, request, fds):
        """End a sandbox (its bwrap and so its whole PID namespace) and free its layer."""
        name = _name(request["name"])
        proc = self.spawned.pop(name, None)
        if proc is not None:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self._remove(name)
        return {"name": name}

    def op_log(self, request, fds):
        return {"log": self._log(_name(request["name"]))}

    def _remove(self, name):
        home = os.path.join(LAYERS, name)
        _umount(home)
        for path in (home, os.path.join(LAYERS, "logs", name)):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.unlink(path)

    def _log(self, name):
        try:
            with open(os.path.join(LAYERS, "logs", name), "rb") as f:
                return f.read()[-2000:].decode(errors="replace").strip()
        except OSError:
            return ""

    # ---- layers --------------------------------------------------------------------------------------------------

    def op_snapshot(self, request, fds):
        """An immutable copy of a sandbox's writable layer (what it changed), whiteouts and all: a new lower layer."""
        source = os.path.join(LAYERS, _name(request["name"]), "upper")
        target = os.path.join(LAYERS, "snaps", _name(request["snapshot"]))
        started = time.monotonic()
        size = _copy_tree(source, target)
        return {"bytes": size, "copy_s": time.monotonic() - started}

    def op_drop(self, request, fds):
        shutil.rmtree(os.path.join(LAYERS, "snaps", _name(request["snapshot"])), ignore_errors=True)
        return {}

    def op_base(self, request, fds):
        """A base made in the keeper's memory from host files: owned by the sandbox's user, so it can change them."""
        root = os.path.join(LAYERS, "bases", _name(request["base"]))
        if os.path.exists(root):
            return {"path": root}
        building = root + ".building"
        shutil.rmtree(building, ignore_errors=True)
        os.mkdir(building, 0o755)
        for entry in request["entries"]:
            target = os.path.join(building, entry["dest"])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if "copy" in entry:
                source = entry["copy"]
                if os.path.isdir(source):
                    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
                else:
                    shutil.copy2(source, target)
            elif "symlink" in entry:
                os.symlink(entry["symlink"], target)
            else:
                with open(target, "w") as f:
                    f.write(entry["text"])
        _writable_by_owner(building)
        os.rename(building, root)
        return {"path": root}

    def op_ping(self, request, fds):
        return {"pid": os.getpid()}


def _name(name):
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"not a layer name: {name!r}")
    return name


def _copy_tree(source, target):
    """Copy a layer (files, links, directories, whiteouts, the overlay's xattrs, owners); its size in bytes."""
    size = 0
    os.mkdir(target, 0o755)
    _copy_meta(source, target)
    for root, dirs, files in os.walk(source):
        here = os.path.join(target, os.path.relpath(root, source))
        for name in dirs + files:
            src, dst = os.path.join(root, name), os.path.join(here, name)
            info = os.lstat(src)
            if stat.S_ISDIR(info.st_mode):
                os.mkdir(dst, stat.S_IMODE(info.st_mode))
            elif stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(src), dst)
            elif stat.S_ISREG(info.st_mode):
                shutil.copyfile(src, dst, follow_symlinks=False)
                size += info.st_size
            elif stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
                os.mknod(dst, stat.S_IFCHR | 0o000, 0)  # a whiteout: the entry was deleted
            else:
                continue  # fifos, sockets, devices: not part of a workspace's files
            _copy_meta(src, dst)
    return size


def _copy_meta(src, dst):
    info = os.lstat(src)
    os.lchown(dst, info.st_uid, info.st_gid)
    if not stat.S_ISLNK(info.st_mode):
        os.chmod(dst, stat.S_IMODE(info.st_mode))
        for key in os.listxattr(src, follow_symlinks=False):
            if key.startswith("user.overlay."):
                os.setxattr(dst, key, os.getxattr(src, key, follow_symlinks=False), follow_symlinks=False)
    os.utime(dst, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)


def _writable_by_owner(root):
    for path, dirs, files in os.walk(root):
        for name in dirs + files:
            full = os.path.join(path, name)
            mode = os.lstat(full).st_mode
            if not stat.S_ISLNK(mode):
                os.chmod(full, stat.S_IMODE(mode) | stat.S_IWUSR)


if __name__ == "__main__":
    Keeper(int(sys.argv[1])).run()
