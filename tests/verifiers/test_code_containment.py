"""What the code's runner could once hold or reach past its sandbox, in both isolation modes: each is refused.

A red team found, in a runner of the code verifier: SysV shared memory, message queues and semaphores and POSIX
message queues that outlived the sandbox on the host (the `fallback` mode has no IPC namespace); a datagram
`socketpair` that could `sendto` any host UNIX socket file the sandbox user may write; and memfds filled with
`write()` (never mapped, so `RLIMIT_AS` never saw them) holding 770 MB past a 512 MB limit. The code profiles'
seccomp now refuses each (`gym_serve.sandbox._confine`); these run the attacks and look on the host afterwards.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import uuid
from pathlib import Path

import pytest

from gym_serve.verifiers.code import SandboxLimits, run_python, verify_asserts

MODES = ["namespaces", "fallback"]
LIMITS = SandboxLimits(cpu_s=5, wall_s=20.0, memory_mb=512, disk_mb=64)
IPC_CREAT = 0o1000


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


def sysv() -> set[tuple[str, int, int]]:
    """The host's SysV objects: (kind, key, id) of each shared memory segment, message queue, semaphore set."""
    found = set()
    for kind in ("shm", "msg", "sem"):
        for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]:
            if line.strip():
                key, ident = line.split()[:2]
                found.add((kind, int(key), int(ident)))
    return found


def host_mq_exists(name: bytes) -> bool:
    """Whether a POSIX message queue `name` is on the host (opened, and removed so none outlives the test)."""
    libc = ctypes.CDLL(None, use_errno=True)
    found = libc.mq_open(name, os.O_RDONLY)
    if found == -1:
        assert ctypes.get_errno() == errno.ENOENT, os.strerror(ctypes.get_errno())
        return False
    os.close(found)  # a queue descriptor is a file descriptor on Linux
    libc.mq_unlink(name)
    return True


async def test_sysv_ipc_and_posix_message_queues_are_refused_and_nothing_outlives_the_run(mode: str) -> None:
    key = 0x6500_0000 + uuid.uuid4().int % 0x00FF_0000  # the test's own keys, far from any other's
    queue = f"/gs-test-{uuid.uuid4().hex[:12]}".encode()
    attack = (
        "import ctypes, errno, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def tried(name, *args):\n"
        "    ctypes.set_errno(0)\n"
        "    made = getattr(libc, name)(*args)\n"
        "    return 'made' if made != -1 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))\n"
        f"print(tried('shmget', {key}, 1 << 20, {IPC_CREAT | 0o666}))\n"
        f"print(tried('shmget', 0, 1 << 20, {IPC_CREAT | 0o666}))\n"  # IPC_PRIVATE
        f"print(tried('msgget', {key + 1}, {IPC_CREAT | 0o666}))\n"
        f"print(tried('semget', {key + 2}, 1, {IPC_CREAT | 0o666}))\n"
        f"print(tried('mq_open', {queue!r}, os.O_CREAT | os.O_RDWR, 0o666, None))\n"
    )
    before = sysv()
    run = await run_python(attack, limits=LIMITS, mode=mode)
    assert run.ok, run.stderr
    assert run.stdout.split() == ["EPERM"] * 5, "seccomp refuses each (the code's own IPC namespace or not)"
    assert sysv() - before == set(), "no SysV object outlives the run on the host"
    assert not host_mq_exists(queue), "no message queue outlives the run on the host"


async def test_no_datagram_socket_pair_and_no_sending_to_a_host_socket(mode: str, tmp: Path) -> None:
    """The host binds a datagram socket every user may write (a world-writable folder); nothing reaches it."""
    path = tmp / "host.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(path))
    os.chmod(path, 0o777)
    listener.setblocking(False)
    attack = (
        "import errno, socket\n"
        f"PATH = {str(path)!r}\n"
        "def tried(step):\n"
        "    try:\n"
        "        step()\n"
        "        return 'done'\n"
        "    except OSError as e:\n"
        "        return errno.errorcode.get(e.errno, str(e.errno))\n"
        "pair = lambda kind: socket.socketpair(socket.AF_UNIX, kind)\n"
        "print(tried(lambda: pair(socket.SOCK_DGRAM)[0].sendto(b'dgram', PATH)))\n"
        "print(tried(lambda: pair(socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)))\n"
        "print(tried(lambda: pair(socket.SOCK_SEQPACKET)))\n"
        "print(tried(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'socket', PATH)))\n"
        "a, b = pair(socket.SOCK_STREAM | socket.SOCK_CLOEXEC)\n"  # its own pipe: allowed, and works
        "a.sendall(b'own')\n"
        "print(b.recv(3).decode())\n"
        "print(tried(lambda: a.sendto(b'stream', PATH)))\n"
        "print(tried(lambda: a.sendmsg([b'msg'], [], 0, PATH)))\n"
        "print(tried(lambda: a.sendmsg([b'msg'])))\n"
    )
    try:
        run = await run_python(attack, limits=LIMITS, mode=mode)
        assert run.ok, run.stderr
        assert run.stdout.split() == ["EPERM"] * 4 + ["own"] + ["EPERM"] * 3, run.stdout
        with pytest.raises(BlockingIOError):
            listener.recv(100)  # nothing arrived
    finally:
        listener.close()


async def test_memory_no_rlimit_counts_is_refused_and_files_stay_within_the_quota(mode: str) -> None:
    """770 MB past a 512 MB limit: memfds are refused, `/dev/shm` is not writable, files stop at the disk quota."""
    hoard = (
        "import errno, os\n"
        "def tried(step):\n"
        "    try:\n"
        "        step()\n"
        "        return 'done'\n"
        "    except OSError as e:\n"
        "        return errno.errorcode.get(e.errno, str(e.errno))\n"
        "print(tried(lambda: os.memfd_create('hoard')), flush=True)\n"
        "print('shm', tried(lambda: open('/dev/shm/hoard', 'wb').write(b'x')) == 'done', flush=True)\n"
        "chunk = b'x' * (1 << 20)\n"
        "for i in range(770):\n"  # one file each: under the per-file size limit
        "    with open(f'hoard{i}', 'wb') as f:\n"
        "        f.write(chunk)\n"
        "    print(i + 1, flush=True)\n"
    )
    run = await run_python(hoard, limits=LIMITS, mode=mode)
    lines = run.stdout.splitlines()
    assert lines[:2] == ["EPERM", "shm False"], run.stdout[:200]
    assert not run.ok, "stopped before it wrote 770 MB"
    written = [int(line) for line in lines[2:] if line.isdigit()][-1:] or [0]
    if mode == "namespaces":  # the tmpfs's own size: the write fails at the quota
        assert "No space left on device" in run.stderr and written[0] <= LIMITS.disk_mb, (written, run.stderr[-300:])
    else:  # polled every 20 ms: stopped just past the quota
        assert run.disk_exceeded and written[0] < LIMITS.disk_mb + 64, written


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are written as root; a non-root caller bounds each process")
async def test_children_past_the_sandbox_s_memory_are_oom_killed_and_score_0(mode: str) -> None:
    """As root a one-shot sandbox's memory is bounded as a whole (its cgroup): children that each stay under the
    runner's `RLIMIT_AS`, together past the sandbox's memory, are OOM-killed, and the run scores 0 (the code's
    doing), not a masked failure; one process within its limit is fine."""
    limits = SandboxLimits(cpu_s=10, wall_s=30.0, memory_mb=256, disk_mb=64, max_processes=64)
    children = limits.cgroup_bytes() // (200 << 20) + 2
    hoard = (
        "import os, time\n"
        f"for _ in range({children}):\n"
        "    if os.fork() == 0:\n"
        "        x = b'x' * (200 << 20)\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        f"for _ in range({children}):\n    os.wait()\n"
        "def add(a, b):\n    return a + b\n"
    )
    result = await verify_asserts(hoard, ["assert add(1, 2) == 3"], limits=limits, mode=mode)
    assert result.reward == 0.0
    assert any("out of memory" in detail for detail in result.details), result.details
    run = await run_python("x = b'x' * (200 << 20)\nprint(len(x))", limits=limits, mode=mode)
    assert run.ok and run.stdout.strip() == str(200 << 20), run.stderr
