"""The one-shot sandbox's walls that need no sandbox to check: its cgroup (as root), and its seccomp program.

The cgroup: made with a memory and a process limit, a process born in it through `in_cgroup` (as the code
verifier starts its harness: the shell joins as root, `setpriv` then drops to `nobody`), a real OOM kill
counted by `oom_kills`, and nothing left after `kill` and `remove`. It needs root and a memory hierarchy
mounted read-write; where both are there it must work (a `None` from `oneshot_cgroup` fails the test).

The seccomp program: run by a small BPF interpreter for both architectures and every profile, so the aarch64
table and the argument checks are tested on any machine (the x86_64 one is also tested live, in
`tests/verifiers/test_code_containment.py`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gym_serve.sandbox import _confine, host
from gym_serve.sandbox.oneshot import in_cgroup, oneshot_cgroup

# ---- the cgroup -----------------------------------------------------------------------------------------------


def memory_hierarchy_writable() -> bool:
    """A memory cgroup hierarchy mounted read-write where `CgroupRoot` looks: v1's `memory` controller at
    `/sys/fs/cgroup/memory`, or a unified v2 hierarchy at `/sys/fs/cgroup` that has the memory controller."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        after = fields[fields.index("-") + 1 :]  # fstype, source, super options
        point, options = fields[4], fields[5].split(",")
        if "rw" not in options:
            continue
        if after[0] == "cgroup" and point == "/sys/fs/cgroup/memory" and "memory" in after[2].split(","):
            return True
        if after[0] == "cgroup2" and point == "/sys/fs/cgroup":
            return "memory" in Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()
    return False


def read(cgroup_dirs: list[Path], *names: str) -> int:
    for folder in cgroup_dirs:
        for name in names:
            if (folder / name).exists():
                return int((folder / name).read_text())
    raise AssertionError(f"none of {names} in {cgroup_dirs}")


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are written as root")
def test_a_oneshot_cgroup_bounds_memory_counts_its_oom_kills_and_leaves_nothing(tmp: Path) -> None:
    if not memory_hierarchy_writable():
        pytest.skip("no memory cgroup hierarchy mounted read-write")
    cgroup = oneshot_cgroup(64 << 20, 16)
    assert cgroup is not None, "root, and a writable memory hierarchy: the one-shot sandbox must get a cgroup"
    try:
        assert read(cgroup.dirs, "memory.limit_in_bytes", "memory.max") == 64 << 20
        assert read(cgroup.dirs, "pids.max") == 16
        assert cgroup.oom_kills() == 0
        # born in it, as the harness is: the shell joins as root, then `setpriv` drops to `nobody`; a child too
        hog = (
            "import os, sys\n"
            "if os.fork() == 0:\n"
            "    print('child', open('/proc/self/cgroup').read().replace('\\n', ' '), flush=True)\n"
            "    os._exit(0)\n"
            "os.wait()\n"
            "print('uid', os.getuid(), flush=True)\n"
            "hoard = b'x' * (256 << 20)\n"  # every page touched: past the limit, no rlimit in the way
            "print('survived', flush=True)\n"
        )
        command = in_cgroup(cgroup, [*host.identity(), host.sandbox_python(), "-I", "-c", hog])
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd="/")
        assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr)
        assert "survived" not in done.stdout
        assert f"uid {host.NOBODY if host.runs_as_root() else os.getuid()}" in done.stdout
        child = re.search(r"child (.*)", done.stdout)
        assert child is not None, done.stdout
        name = cgroup.dirs[0].name
        memory = [line for line in child.group(1).split() if line.split(":")[1] in ("", "memory")]  # v2, v1
        assert any(line.endswith(f"/{name}") for line in memory), (name, child.group(1))
        assert cgroup.oom_kills() == 1, "the kernel's OOM killer acted inside the cgroup, and it counts"
        # something left running in it: `kill` ends it, `remove` leaves no directory
        sleeper = subprocess.Popen(in_cgroup(cgroup, [*host.identity(), "sleep", "600"]), cwd="/")
        deadline = time.monotonic() + 10
        while sleeper.pid not in cgroup.pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cgroup.pids() == {sleeper.pid}
        cgroup.kill()
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
        assert cgroup.pids() == set()
    finally:
        cgroup.kill()
        cgroup.remove()
    assert not any(folder.exists() for folder in cgroup.dirs), "a removed cgroup leaves no directory"
    # a cgroup that is gone: the shell cannot join it, and the command never runs
    marker = tmp / "ran"
    gone = subprocess.run(in_cgroup(cgroup, ["/bin/sh", "-c", f"touch {marker}"]), capture_output=True, timeout=30)
    assert gone.returncode == 98 and not marker.exists()


def test_no_cgroup_leaves_the_command_as_it_is() -> None:
    assert in_cgroup(None, ["python3", "-c", "pass"]) == ["python3", "-c", "pass"]


# ---- the seccomp program ---------------------------------------------------------------------------------------

ALLOW, EPERM, ENOSYS, KILL = _confine._RET_ALLOW, _confine._RET_EPERM, _confine._RET_ENOSYS, _confine._RET_KILL_PROCESS
AF_UNIX, AF_INET = 1, 2
SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET = 1, 2, 5
SOCK_NONBLOCK, SOCK_CLOEXEC = 0o4000, 0o2000000
CODE = ["runner", "harness"]
WORKSPACE = ["workspace", "workspace_offline"]
# numbers of calls the harness and runner make that the table need not hold: (x86_64, aarch64)
EVERYDAY = {"read": (0, 63), "write": (1, 64), "pipe2": (293, 59), "close": (3, 57), "wait4": (61, 260)}


def run_filter(program: list[tuple[int, int, int, int]], data: bytes) -> int:
    """A classic BPF interpreter for what `_confine._filter` emits (32-bit loads, jumps, AND, return)."""
    pc, accumulator = 0, 0
    while True:
        op, jt, jf, k = program[pc]
        pc += 1
        if op == _confine._LD_ABS:
            accumulator = int.from_bytes(data[k : k + 4], "little")
        elif op == _confine._AND:
            accumulator &= k
        elif op == _confine._RET:
            return k
        else:
            taken = {
                _confine._JEQ: accumulator == k,
                _confine._JGE: accumulator >= k,
                _confine._JSET: bool(accumulator & k),
            }[op]
            pc += jt if taken else jf


def call(arch: str, profile: str, name: str, *args: int) -> int:
    audit_arch, numbers = _confine._ARCHES[arch]
    program = _confine._filter(audit_arch, numbers, x32_guard=arch == "x86_64", profile=profile)
    number = numbers[name] if name in numbers else EVERYDAY[name][arch == "aarch64"]
    padded = [*args, 0, 0, 0, 0, 0, 0][:6]
    data = number.to_bytes(4, "little") + audit_arch.to_bytes(4, "little") + bytes(8)
    data += b"".join((value & (1 << 64) - 1).to_bytes(8, "little") for value in padded)
    return run_filter(program, data)


@pytest.mark.parametrize("arch", sorted(_confine._ARCHES))
def test_the_code_profiles_refuse_ipc_memfds_datagram_pairs_and_sending_to_an_address(arch: str) -> None:
    refused = [
        "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd",
        "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
        "mq_getsetattr", "memfd_create", "memfd_secret", "sendmsg", "sendmmsg",
    ]  # fmt: skip
    pointer = 0x7FFF_DEAD_B000
    for profile in CODE:
        for name in refused:
            assert call(arch, profile, name, 1, 2, 3) == EPERM, (profile, name)
        for kind in (SOCK_STREAM, SOCK_STREAM | SOCK_CLOEXEC, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC):
            assert call(arch, profile, "socketpair", AF_UNIX, kind, 0, pointer) == ALLOW, (profile, kind)
        for domain, kind in ((AF_UNIX, SOCK_DGRAM), (AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC), (AF_UNIX, SOCK_SEQPACKET),
                             (AF_INET, SOCK_STREAM), (AF_UNIX | 1 << 32, SOCK_DGRAM)):  # fmt: skip
            assert call(arch, profile, "socketpair", domain, kind, 0, pointer) == EPERM, (profile, domain, kind)
        assert call(arch, profile, "sendto", 3, pointer, 10, 0, 0, 0) == ALLOW, "send(): no address"
        for address in (pointer, 0x1000, 1 << 32, 0xFFFF_FFFF_0000_0000):  # either half of the pointer
            assert call(arch, profile, "sendto", 3, pointer, 10, 0, address, 110) == EPERM, (profile, hex(address))
        for name in EVERYDAY:
            assert call(arch, profile, name, 3, pointer, 10) == ALLOW, (profile, name)
    for profile in WORKSPACE:  # a shell's tools use them; a workspace has an IPC namespace and a memory cgroup
        for name in ["shmget", "msgget", "semget", "mq_open", "memfd_create", "sendmsg", "sendmmsg"]:
            assert call(arch, profile, name, 1, 2, 3) == ALLOW, (profile, name)
        assert call(arch, profile, "socketpair", AF_UNIX, SOCK_DGRAM, 0, pointer) == ALLOW
        assert call(arch, profile, "sendto", 3, pointer, 10, 0, pointer, 110) == ALLOW


@pytest.mark.parametrize("arch", sorted(_confine._ARCHES))
def test_the_program_holds_its_older_rules_and_every_jump_is_in_reach(arch: str) -> None:
    audit_arch, numbers = _confine._ARCHES[arch]
    for profile in CODE + WORKSPACE:
        program = _confine._filter(audit_arch, numbers, x32_guard=arch == "x86_64", profile=profile)
        assert len(program) < 4096
        assert all(0 <= jt <= 255 and 0 <= jf <= 255 for _, jt, jf, _ in program), profile
    assert call(arch, "runner", "ptrace") == EPERM
    assert call(arch, "workspace", "ptrace") == EPERM
    assert call(arch, "runner", "clone3") == ENOSYS
    assert call(arch, "runner", "kill", 0, 9) == ALLOW and call(arch, "runner", "kill", 1234, 9) == EPERM
    assert call(arch, "harness", "kill", -1234, 9) == ALLOW and call(arch, "harness", "kill", -1, 9) == EPERM
    assert call(arch, "runner", "setpgid") == EPERM and call(arch, "harness", "setpgid") == ALLOW
    assert call(arch, "runner", "socket", AF_UNIX, SOCK_STREAM) == EPERM
    assert call(arch, "workspace_offline", "socket", AF_UNIX, SOCK_STREAM) == ALLOW
    assert call(arch, "workspace_offline", "socket", AF_INET, SOCK_STREAM) == EPERM
    other = _confine._ARCHES["aarch64" if arch == "x86_64" else "x86_64"][0]
    program = _confine._filter(audit_arch, numbers, x32_guard=arch == "x86_64")
    assert run_filter(program, bytes(4) + other.to_bytes(4, "little") + bytes(56)) == KILL


UNISTD = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),
}


@pytest.mark.parametrize("arch", sorted(_confine._ARCHES))
def test_the_syscall_numbers_match_the_kernel_headers(arch: str) -> None:
    header = UNISTD[arch]
    if not header.exists():
        pytest.skip(f"no kernel headers here ({header})")
    text = header.read_text()
    for name, number in _confine._ARCHES[arch][1].items():
        found = re.search(rf"#define __NR(?:3264)?_{name}\s+(\d+)\b", text)
        assert found is not None and int(found.group(1)) == number, (arch, name, number)
