"""Kernel walls around a sandbox's processes: the code verifier's runners and harness, and a workspace's commands.

Standard library only (`ctypes`): this runs inside the sandbox under the sandbox's interpreter,
which may be a bare system Python (its source is sent there). Every wall is enforced by the
kernel, not by Python, so native code in the sandbox cannot take it down; each is applied where
the kernel has it and named in the return value, which the caller reports.

Three profiles:

- `confine()`: a code-verifier runner, between fork and exec (the strictest: no sockets, no
  signal but to its own process group, no leaving it).
- `confine_harness()`: the code verifier's trusted harness, on itself, before it starts any
  runner: the runner's walls but two (it may signal process groups, its runners', and put a
  child in a process group of its own); so if code ever ran inside it, it could neither undo the
  mounts, nor reach the network, the caller, its secrets or the host's files.
- `confine_workspace()`: a workspace's supervisor, on itself, once its mounts are made; every
  command it starts inherits the walls. Commands may signal each other and use sockets (the
  namespace's loopback is all there is; with `network="none"`, only UNIX sockets), but never
  trace, mount, make namespaces, or load kernel programs.

The walls:

- `no_new_privs` and a parent-death signal: no set-uid gains; a runner dies with its harness.
- capabilities dropped (bounding set, ambient set, `noroot` securebits, then the process's own
  sets): in a user namespace the sandbox starts as that namespace's root, to mount its
  filesystem; it drops every capability before anything untrusted runs, so nothing in the
  sandbox can unmount a tmpfs or remount a read-only mount writable, ptrace or read a
  (non-dumpable) trusted process, or regain capabilities by exec.
- seccomp: no ptrace or cross-process memory access, no new namespaces, mounts, keyrings, BPF,
  perf or io_uring; the code profiles also refuse signals to other processes and:
  - sockets (`socket`), but a connected UNIX stream pair (`socketpair(AF_UNIX, SOCK_STREAM)`,
    its own pipes); sending to an address (`sendto` with one, `sendmsg`, `sendmmsg`: their
    address sits behind a pointer): a datagram socket could reach any socket file on the host;
  - SysV IPC (shared memory, semaphores, message queues) and POSIX message queues: without an
    IPC namespace (the `fallback` mode) they outlive the sandbox on the host, and an id is a
    small number another process's object can be reached by;
  - `memfd_create`, `memfd_secret`: memory no rlimit counts (a memfd filled with `write()` is
    never mapped, so `RLIMIT_AS` does not see it).
  The workspace profiles keep all of these (a shell's tools use them; their sandboxes have an
  IPC namespace and a memory cgroup). x86_64 and aarch64; other architectures go without it.
- Landlock: reads only beneath the given directories, writes only beneath the writable ones,
  no signals and no abstract UNIX sockets out of the sandbox (ABI 6+); TCP refused (ABI 4+)
  where the profile has no network; also, by Landlock's design, no ptrace of (or
  `/proc/<pid>/mem`, `environ`, `fd` access to) any process outside it.
"""

import ctypes
import os
import platform
import struct

_libc = ctypes.CDLL(None, use_errno=True)

_PR_SET_PDEATHSIG = 1
_PR_SET_SECCOMP = 22
_PR_CAPBSET_READ = 23
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SECUREBITS_LOCKED_NOROOT = 0xEF  # noroot, no_setuid_fixup, keep_caps_locked, no_cap_ambient_raise, all locked
_SECCOMP_MODE_FILTER = 2

_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_EPERM = 0x00050000 | 1
_RET_ENOSYS = 0x00050000 | 38
_LD_ABS, _JEQ, _JGE, _JSET, _AND, _RET = 0x20, 0x15, 0x35, 0x45, 0x54, 0x06
_CLONE_NEW_ANY = 0x7E020080  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWTIME
_F_SETOWN, _F_SETOWN_EX = 8, 15

_DENIED = (
    "ptrace process_vm_readv process_vm_writev tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo pidfd_open "
    "pidfd_send_signal pidfd_getfd setsid socket unshare setns mount umount2 pivot_root chroot keyctl "
    "add_key request_key bpf perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register kcmp "
    "open_by_handle_at name_to_handle_at fsopen fsmount move_mount open_tree fspick mount_setattr"
).split()
_RUNNER_ONLY_DENIED = ["setpgid"]  # the harness puts each runner in a process group of its own
_CODE_DENIED = (
    "shmget shmat shmdt shmctl semget semop semtimedop semctl msgget msgsnd msgrcv msgctl mq_open mq_unlink "
    "mq_timedsend mq_timedreceive mq_notify mq_getsetattr memfd_create memfd_secret sendmsg sendmmsg"
).split()  # the runner and the harness: none of them is needed there (module docstring)
_WORKSPACE_ALLOWED = {
    "socket",
    "setsid",
    "tkill",
    "tgkill",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "pidfd_open",
    "pidfd_send_signal",
}  # a shell's job control and servers; the PID namespace bounds their reach
_AF_UNIX = 1
_SOCK_STREAM, _SOCK_TYPE_MASK = 1, 0xF  # the type's other bits are SOCK_NONBLOCK and SOCK_CLOEXEC
_ARCHES = {
    "x86_64": (
        0xC000003E,
        {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kill": 62, "tkill": 200,
         "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "pidfd_open": 434,
         "pidfd_send_signal": 424, "pidfd_getfd": 438, "setsid": 112, "setpgid": 109, "socket": 41,
         "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
         "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
         "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
         "clone3": 435, "kcmp": 312, "open_by_handle_at": 304, "name_to_handle_at": 303, "clone": 56,
         "fcntl": 72, "fsopen": 430, "fsmount": 432, "move_mount": 429, "open_tree": 428, "fspick": 433,
         "mount_setattr": 442, "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65,
         "semctl": 66, "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240,
         "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245,
         "memfd_create": 319, "memfd_secret": 447, "socketpair": 53, "sendto": 44, "sendmsg": 46,
         "sendmmsg": 307},
    ),
    "aarch64": (
        0xC00000B7,
        {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kill": 129, "tkill": 130,
         "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "pidfd_open": 434,
         "pidfd_send_signal": 424, "pidfd_getfd": 438, "setsid": 157, "setpgid": 154, "socket": 198,
         "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
         "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
         "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
         "clone3": 435, "kcmp": 272, "open_by_handle_at": 265, "name_to_handle_at": 264, "clone": 220,
         "fcntl": 25, "fsopen": 430, "fsmount": 432, "move_mount": 429, "open_tree": 428, "fspick": 433,
         "mount_setattr": 442, "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190,
         "semop": 193, "semctl": 191, "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188,
         "msgctl": 187, "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182, "mq_timedreceive": 183,
         "mq_notify": 184, "mq_getsetattr": 185, "memfd_create": 279, "memfd_secret": 447, "socketpair": 199,
         "sendto": 206, "sendmsg": 211, "sendmmsg": 269},
    ),
}  # fmt: skip

# Landlock (linux/landlock.h)
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446
_LL_VERSION = 1
_LL_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_ABI1 = (1 << 13) - 1  # execute .. make_sym
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_TCP = 1 | 2  # bind, connect
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    return _libc.prctl(
        ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), ctypes.c_ulong(0), ctypes.c_ulong(0)
    )


def make_undumpable() -> None:
    """The harness: no ptrace, `/proc/<pid>/mem`, `environ` or `fd` access by anything without CAP_SYS_PTRACE."""
    prctl(4, 0)  # PR_SET_DUMPABLE


def die_with_parent(signal_number: int) -> None:
    prctl(_PR_SET_PDEATHSIG, signal_number)


def confine(work_dir: str, read_dirs: list[str]) -> list[str]:
    """Raise every wall this kernel has on the calling process (a runner about to exec); return their names."""
    import signal

    die_with_parent(signal.SIGKILL)
    return _walls([work_dir], read_dirs, profile="runner")


def confine_harness(work_dir: str, read_dirs: list[str]) -> list[str]:
    """The same walls on the harness itself, before it starts any runner; return their names.

    In the `namespaces` mode this is where the harness stops being the namespace's root: with no
    capability left, the read-only mounts and the tmpfs over `/tmp` are locked as they are.
    """
    return _walls([work_dir], read_dirs, profile="harness")


def confine_workspace(write_dirs: list[str], read_dirs: list[str], *, network: str) -> list[str]:
    """A workspace's supervisor, on itself, after its mounts: every command it starts inherits these walls.

    `network` is `loopback` (sockets allowed: the network namespace has only its loopback) or
    `none` (only UNIX sockets, and Landlock refuses TCP).
    """
    if network not in ("loopback", "none"):
        raise ValueError(f"network must be `loopback` or `none`, got `{network}`")
    return _walls(write_dirs, read_dirs, profile="workspace" if network == "loopback" else "workspace_offline")


def _walls(write_dirs: list[str], read_dirs: list[str], *, profile: str) -> list[str]:
    layers = ["no_new_privs"]
    if _drop_capabilities():
        layers.append("no_capabilities")
    if prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
    abi = _landlock(write_dirs, read_dirs, refuse_tcp=profile != "workspace")
    if abi:
        layers.append(f"landlock_abi{abi}")
    if _seccomp(profile=profile):
        layers.append("seccomp")
    return layers


def planned() -> list[str]:
    """The names `confine` will return in a child of this (already confined) harness: it runs after fork, so it
    cannot tell us."""
    layers = ["no_new_privs"]
    if _bounding_set_empty():
        layers.append("no_capabilities")
    if landlock_abi():
        layers.append(f"landlock_abi{landlock_abi()}")
    if platform.machine() in _ARCHES:
        layers.append("seccomp")
    return layers


def _drop_capabilities() -> bool:
    """Empty the bounding and ambient sets, lock `noroot` (exec as uid 0 then grants nothing), then drop the
    process's own capabilities; True when it holds none and can gain none by exec.

    An unprivileged process (no `CAP_SETPCAP`) cannot empty its bounding set: it has no capabilities
    to drop, and `no_new_privs` keeps it from gaining any.
    """
    prctl(_PR_SET_SECUREBITS, _SECUREBITS_LOCKED_NOROOT)  # refused without CAP_SETPCAP; then already locked, or moot
    for cap in range(64):
        if prctl(_PR_CAPBSET_DROP, cap) != 0:
            break  # past the last capability this kernel knows, or no CAP_SETPCAP
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    empty = ctypes.create_string_buffer(4 * 6)  # two {effective, permitted, inheritable} words, all zero
    if _libc.capset(ctypes.create_string_buffer(header), empty) != 0:
        raise OSError(ctypes.get_errno(), "dropping the process's capabilities failed")
    return _bounding_set_empty()


def _bounding_set_empty() -> bool:
    for cap in range(64):
        held = prctl(_PR_CAPBSET_READ, cap)
        if held < 0:
            return True  # past the last capability this kernel knows
        if held:
            return False
    return True


def _seccomp(*, profile: str) -> bool:
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        return False
    audit_arch, numbers = arch
    program = _filter(audit_arch, numbers, x32_guard=platform.machine() == "x86_64", profile=profile)
    buffer = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *ins) for ins in program))
    fprog = struct.pack("=HxxxxxxQ", len(program), ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog)
    if prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog_buffer)) != 0:
        raise OSError(ctypes.get_errno(), "installing the seccomp filter failed")
    return True


def _filter(
    audit_arch: int, nr: dict[str, int], *, x32_guard: bool, profile: str = "runner"
) -> list[tuple[int, int, int, int]]:
    """The BPF program: labels resolved to forward jumps (every jump here is short).

    A runner may `kill` only its own process group (`kill(0, sig)`) and may not change group; the
    harness may `kill` only process groups (`kill(-pgid, sig)`: its runners'), never one process nor
    every process (`-1`), and may put a child in a group of its own, but never leave its session.
    A workspace may signal and make sockets (offline: UNIX sockets only) within its namespaces.
    The code profiles may make a UNIX stream pair only, and send only on a connected socket (no address).
    """
    harness = profile == "harness"
    workspace = profile.startswith("workspace")
    code: list[list] = []  # [opcode, jt, jf, k] where jt/jf may be label names
    labels: dict[str, int] = {}

    def emit(op: int, k: int, jt: object = 0, jf: object = 0) -> None:
        code.append([op, jt, jf, k])

    def label(name: str) -> None:
        labels[name] = len(code)

    emit(_LD_ABS, 4)  # arch
    emit(_JEQ, audit_arch, 1, 0)
    emit(_RET, _RET_KILL_PROCESS)  # another ABI (i386 via int 0x80) would read other syscall numbers
    emit(_LD_ABS, 0)  # nr
    if x32_guard:
        emit(_JGE, 0x40000000, "deny", 0)
    denied = [n for n in _DENIED if not (workspace and n in _WORKSPACE_ALLOWED)]
    denied += [] if workspace else _CODE_DENIED
    for name in denied + ([] if harness or workspace else _RUNNER_ONLY_DENIED):
        emit(_JEQ, nr[name], "deny", 0)
    emit(_JEQ, nr["clone3"], "nosys", 0)  # its flags sit behind a pointer; glibc falls back to clone
    emit(_JEQ, nr["clone"], "clone", 0)
    if profile == "workspace_offline":
        emit(_JEQ, nr["socket"], "socket", 0)
    if not workspace:
        emit(_JEQ, nr["kill"], "kill", 0)
        emit(_JEQ, nr["fcntl"], "fcntl", 0)
        emit(_JEQ, nr["socketpair"], "socketpair", 0)
        emit(_JEQ, nr["sendto"], "sendto", 0)
    emit(_RET, _RET_ALLOW)
    label("socket")  # offline: a UNIX socket only (the domain, the low 32 bits of the first argument)
    emit(_LD_ABS, 16)
    emit(_JEQ, _AF_UNIX, "allow", "deny")
    label("kill")
    emit(_LD_ABS, 16)  # the pid (the kernel reads a pid_t: the low 32 bits)
    if harness:  # a process group: -pgid, as a 32-bit two's complement below -1
        emit(_JEQ, 0xFFFFFFFF, "deny", 0)
        emit(_JGE, 0x80000000, "allow", "deny")
    else:  # kill(0, sig): its own process group only
        emit(_JEQ, 0, 0, "deny")
        emit(_LD_ABS, 20)
        emit(_JEQ, 0, "allow", "deny")
    label("clone")
    emit(_LD_ABS, 16)
    emit(_JSET, _CLONE_NEW_ANY, "deny", "allow")
    label("socketpair")  # a connected UNIX stream pair: a datagram or seqpacket one could send to any socket file
    emit(_LD_ABS, 16)  # the domain (an int: the low 32 bits)
    emit(_JEQ, _AF_UNIX, 0, "deny")
    emit(_LD_ABS, 24)  # the type, its flags masked out
    emit(_AND, _SOCK_TYPE_MASK)
    emit(_JEQ, _SOCK_STREAM, "allow", "deny")
    label("sendto")  # only without an address (`send()` is `sendto(..., NULL, 0)`): a pointer, both 32-bit halves
    emit(_LD_ABS, 48)
    emit(_JEQ, 0, 0, "deny")
    emit(_LD_ABS, 52)
    emit(_JEQ, 0, "allow", "deny")
    label("fcntl")  # F_SETOWN would aim SIGIO at any process
    emit(_LD_ABS, 24)
    emit(_JEQ, _F_SETOWN, "deny", 0)
    emit(_JEQ, _F_SETOWN_EX, "deny", "allow")
    label("allow")
    emit(_RET, _RET_ALLOW)
    label("deny")
    emit(_RET, _RET_EPERM)
    label("nosys")
    emit(_RET, _RET_ENOSYS)
    program = []
    for index, (op, jt, jf, k) in enumerate(code):
        jt = labels[jt] - index - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - index - 1 if isinstance(jf, str) else jf
        if not (0 <= jt <= 255 and 0 <= jf <= 255):  # a conditional jump's offsets are one byte each
            raise ValueError(f"seccomp: a jump at instruction {index} is out of reach ({jt}, {jf})")
        program.append((op, jt, jf, k))
    return program


def landlock_abi() -> int:
    return max(0, _libc.syscall(_LL_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_LL_VERSION)))


def _landlock(write_dirs: list[str], read_dirs: list[str], *, refuse_tcp: bool = True) -> int:
    abi = landlock_abi()
    if abi < 1:
        return 0
    fs = _FS_ABI1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    fs |= _FS_IOCTL_DEV if abi >= 5 else 0
    net = _NET_TCP if abi >= 4 and refuse_tcp else 0
    scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("=QQQ", fs, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    attr_buffer = ctypes.create_string_buffer(attr)
    ruleset = _libc.syscall(_LL_CREATE, attr_buffer, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        for path in read_dirs:
            _allow(ruleset, path, read)
        for device in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full", "/dev/tty"):
            _allow(ruleset, device, _FS_READ_FILE | _FS_WRITE_FILE)
        for path in write_dirs:
            _allow(ruleset, path, fs)
        if prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0 or _libc.syscall(_LL_RESTRICT, ruleset, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def _allow(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not on this system
    try:
        if not os.path.isdir(path):
            access &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
        rule = ctypes.create_string_buffer(struct.pack("=Qi", access, fd))  # packed: u64 access, s32 fd
        if _libc.syscall(_LL_ADD_RULE, ruleset, _LL_RULE_PATH_BENEATH, rule, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)
