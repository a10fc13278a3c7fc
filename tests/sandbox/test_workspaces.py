"""Workspace sandboxes on this machine (`LocalProvider`): what each operation does, each bad input, and what is left.

One provider for the module (its keeper started once); the tests that need their own (the copy
fallback, a reaper, a provider killed outright) make it and check it leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from gym_serve.sandbox import (
    Base,
    BaseFile,
    BaseNotFound,
    Endpoint,
    ForkLimitExceeded,
    Limits,
    LocalProvider,
    PathOutsideWorkspace,
    SandboxFileNotFound,
    SandboxGone,
)
from tests.sandbox.leftovers import left, mounts

BASE = Base(
    files=(BaseFile(dest="repo/app.py", text="print('hello')\n"), BaseFile(dest="repo/data/keep.txt", text="base\n")),
    name="tiny",
)
SMALL = Limits(disk_mb=16, max_files=2000, output_bytes=4096, wall_s=10.0)

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the tests and the module's provider share one loop


@pytest.fixture(scope="module")
async def provider() -> AsyncIterator[LocalProvider]:
    before = mounts()
    async with LocalProvider(warm=2, max_fork=4, max_sandboxes=16) as provider:
        yield provider
    assert left((provider.tag,), before) == {}, "a closed provider leaves no process, mount or cgroup"


async def test_create_exec_files_destroy(provider: LocalProvider) -> None:
    sandbox = await provider.create(BASE, limits=SMALL)
    done = await provider.exec(sandbox, "cd repo && python3 app.py && echo oops >&2 && exit 3")
    assert (done.exit_code, done.stdout, done.stderr, done.truncated) == (3, "hello\n", "oops\n", False)
    assert (await provider.exec(sandbox, ["cat", "repo/data/keep.txt"])).stdout == "base\n"
    await provider.write_file(sandbox, "repo/new/notes.md", b"# notes\n", make_dirs=True)
    assert await provider.read_file(sandbox, "/workspace/repo/new/notes.md") == b"# notes\n"
    names = {(e.name, e.kind) for e in await provider.list_files(sandbox, "repo")}
    assert names == {("app.py", "file"), ("data", "dir"), ("new", "dir")}
    assert (await provider.exec(sandbox, "echo -n hi | tr a-z A-Z", stdin=b"")).stdout == "HI"
    assert (await provider.exec(sandbox, "cat", stdin=b"fed on stdin")).stdout == "fed on stdin"
    described = provider.describe(sandbox)
    assert {"no_new_privs", "no_capabilities", "seccomp"} <= set(described["walls"]) and described["cow"] == "overlay"
    await provider.destroy(sandbox)
    with pytest.raises(SandboxGone, match="no live sandbox"):
        await provider.exec(sandbox, "true")
    await provider.destroy(sandbox)  # destroying one that is gone is no error


async def test_the_base_is_read_only_and_each_sandbox_writes_its_own_layer(provider: LocalProvider, tmp: Path) -> None:
    folder = tmp / "base"
    (folder / "repo").mkdir(parents=True)
    (folder / "repo" / "app.py").write_text("original\n")
    in_place = Base(folder=str(folder))
    first, second = await provider.create(in_place), await provider.create(in_place)
    # a base used in place keeps its host owners: the sandbox's user changes only what it owns (as root, nothing)
    changed = await provider.exec(first, "echo changed > repo/app.py; echo new > repo/other.py; cat repo/app.py")
    assert changed.stdout == ("original\n" if os.geteuid() == 0 else "changed\n"), changed
    assert (await provider.exec(second, "cat repo/app.py; ls repo")).stdout == "original\napp.py\n"
    assert (folder / "repo" / "app.py").read_text() == "original\n" and not (folder / "repo" / "other.py").exists()
    mine = await provider.create(BASE)  # a base the provider copied in: the sandbox's user owns it, and may change it
    await provider.exec(mine, "echo changed > repo/app.py && rm repo/data/keep.txt")
    fresh = await provider.create(BASE)
    assert (await provider.exec(fresh, "cat repo/app.py repo/data/keep.txt")).stdout == "print('hello')\nbase\n"
    for sandbox in (first, second, mine, fresh):
        await provider.destroy(sandbox)


async def test_fork_copies_only_what_the_parent_changed(provider: LocalProvider) -> None:
    parent = await provider.create(BASE, limits=SMALL)
    await provider.exec(parent, "echo fixed > repo/app.py && rm repo/data/keep.txt && mkdir -p out && echo 1 > out/a")
    children = await provider.fork(parent, 3)
    assert len(set(children)) == 3 and parent not in children
    await provider.exec(parent, "echo later > repo/app.py")  # after the fork: no child sees it
    for i, child in enumerate(children):
        seen = await provider.exec(child, f"cat repo/app.py out/a; ls repo/data; echo {i} > mine")
        assert seen.stdout == "fixed\n1\n", seen
        assert (await provider.exec(child, "cat mine")).stdout == f"{i}\n"
    assert (await provider.exec(children[0], "ls")).stdout.split() == ["mine", "out", "repo"]
    grandchild = (await provider.fork(children[1], 1))[0]  # a fork of a fork stacks its layers
    assert (await provider.exec(grandchild, "cat repo/app.py mine")).stdout == "fixed\n1\n"
    for sandbox in (parent, *children, grandchild):
        await provider.destroy(sandbox)


async def test_a_snapshot_is_addressable_until_dropped(provider: LocalProvider) -> None:
    sandbox = await provider.create(BASE, limits=SMALL)
    await provider.exec(sandbox, "echo turn-3 > state.txt")
    snapshot = await provider.snapshot(sandbox)
    await provider.destroy(sandbox)  # the snapshot outlives the sandbox it was taken of
    restored = await provider.create(BASE, limits=SMALL, snapshot=snapshot)
    assert (await provider.exec(restored, "cat state.txt")).stdout == "turn-3\n"
    await provider.drop_snapshot(snapshot)
    assert (await provider.exec(restored, "cat state.txt")).stdout == "turn-3\n"  # still held by its sandbox
    await provider.destroy(restored)
    with pytest.raises(SandboxGone, match="no snapshot"):
        await provider.create(BASE, snapshot=snapshot)


async def test_long_running_commands_are_started_waited_for_and_killed(provider: LocalProvider) -> None:
    sandbox = await provider.create(BASE, limits=SMALL)
    pid = await provider.start_process(sandbox, "echo started; sleep 30; echo never", env={"GREETING": "hi"})
    state = await provider.wait_process(sandbox, pid, timeout_s=0.5)
    assert state.running and state.result is None
    await provider.kill_process(sandbox, pid)
    ended = await provider.wait_process(sandbox, pid, timeout_s=10)
    assert not ended.running and ended.result is not None and ended.result.stdout == "started\n"
    quick = await provider.start_process(sandbox, 'echo "$GREETING"', env={"GREETING": "hi"})
    await asyncio.sleep(0.5)  # it ends before anyone waits: its result is kept for the wait
    assert (await provider.wait_process(sandbox, quick)).result.stdout == "hi\n"  # type: ignore[union-attr]
    await provider.destroy(sandbox)


async def test_a_command_past_its_deadline_is_stopped_and_says_so(provider: LocalProvider) -> None:
    sandbox = await provider.create(BASE, limits=SMALL)
    started = time.monotonic()
    done = await provider.exec(sandbox, "echo before; sleep 60", timeout_s=1.0)
    assert done.timed_out and done.stdout == "before\n" and time.monotonic() - started < 15
    assert (await provider.exec(sandbox, "echo still serving")).stdout == "still serving\n"
    await provider.destroy(sandbox)


async def test_output_over_the_cap_is_truncated_and_flagged(provider: LocalProvider) -> None:
    sandbox = await provider.create(BASE, limits=SMALL)
    done = await provider.exec(sandbox, "head -c 1000000 /dev/zero | tr '\\0' x; echo tail >&2")
    assert done.stdout_truncated and not done.stderr_truncated and done.ok
    assert done.stdout == "x" * SMALL.output_bytes and done.stderr == "tail\n"
    await provider.destroy(sandbox)


async def test_bad_inputs_are_clear_errors_and_the_provider_goes_on(provider: LocalProvider, tmp_path: Path) -> None:
    with pytest.raises(BaseNotFound, match="does not exist"):
        await provider.create(Base(folder=str(tmp_path / "no-such-folder")))
    with pytest.raises(BaseNotFound, match="which does not exist"):
        await provider.create(Base(files=(BaseFile(dest="x", copy=str(tmp_path / "missing")),)))
    sandbox = await provider.create(BASE, limits=SMALL)
    await provider.exec(sandbox, "ln -s /etc/passwd repo/link && ln -s ../../.. repo/up")
    for path in ("../etc/passwd", "/etc/passwd", "repo/../../etc/passwd", "repo/link", "repo/up/etc/passwd"):
        with pytest.raises(PathOutsideWorkspace):
            await provider.read_file(sandbox, path)
    with pytest.raises(PathOutsideWorkspace):
        await provider.write_file(sandbox, "/tmp/x", b"x")
    with pytest.raises(SandboxFileNotFound):
        await provider.read_file(sandbox, "repo/missing.txt")
    with pytest.raises(ForkLimitExceeded, match="at most 4"):
        await provider.fork(sandbox, 5)
    with pytest.raises(ForkLimitExceeded):
        await provider.fork(sandbox, 0)
    await provider.destroy(sandbox)
    with pytest.raises(SandboxGone):
        await provider.exec(sandbox, "true")
    with pytest.raises(SandboxGone):
        await provider.read_file(sandbox, "repo/app.py")
    sandbox = await provider.create(BASE, limits=SMALL)  # none of it hurt the provider
    assert (await provider.exec(sandbox, "echo ok")).stdout == "ok\n"
    await provider.destroy(sandbox)


class _Gateway(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _UnixHTTPServer(HTTPServer):
    address_family = socket.AF_UNIX

    def server_bind(self) -> None:
        self.socket.bind(self.server_address)

    def get_request(self):  # type: ignore[no-untyped-def]
        request, _ = self.socket.accept()
        return request, ("sandbox", 0)


async def test_a_gateway_socket_bound_in_is_reachable_on_loopback_and_nothing_else_is(
    provider: LocalProvider, tmp: Path
) -> None:
    """The harness-agent path (issue 26): a host UNIX socket bound into the sandbox, served on 127.0.0.1 inside."""
    path = tmp / "gateway.sock"
    server = _UnixHTTPServer(str(path), _Gateway)
    os.chmod(path, 0o777)  # the sandbox's user (nobody, as root) connects to it
    threading.Thread(target=server.serve_forever, daemon=True).start()
    outside = socket.create_server(("127.0.0.1", 0))
    try:
        sandbox = await provider.create(BASE, endpoints=(Endpoint(socket=str(path), port=8080),))
        fetch = (
            "import json, sys, urllib.request\nprint(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\n"
        )
        done = await provider.exec(sandbox, ["python3", "-c", fetch, "http://127.0.0.1:8080/v1/models"])
        assert json.loads(done.stdout) == {"path": "/v1/models"}, done
        unix = "import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/gateway.sock'); print('ok')"
        assert (await provider.exec(sandbox, ["python3", "-c", unix])).stdout == "ok\n"
        port = outside.getsockname()[1]
        host = await provider.exec(
            sandbox, ["python3", "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}), 2)"]
        )
        assert host.exit_code != 0 and "Connection refused" in host.stderr
        await provider.destroy(sandbox)
    finally:
        server.shutdown()
        server.server_close()
        outside.close()


async def test_idle_sandboxes_and_those_of_a_dead_holder_are_reaped() -> None:
    before = mounts()
    alive = {"agent-1": True, "agent-2": True}

    async def holder_alive(holder: object) -> bool:
        return alive[str(holder)]

    async with LocalProvider(warm=0, sweep_every_s=3600, holder_alive=holder_alive) as provider:
        idle = await provider.create(BASE, limits=Limits(ttl_s=0.3))
        held = [await provider.create(BASE, holder=name) for name in ("agent-1", "agent-2", "agent-2")]
        await provider.exec(held[1], "sleep 300 & sleep 300 &")
        await asyncio.sleep(0.5)
        alive["agent-2"] = False
        assert sorted(await provider.sweep()) == sorted([idle, held[1], held[2]])
        assert provider.live == 1 and (await provider.exec(held[0], "echo kept")).stdout == "kept\n"
        for sandbox in (idle, held[2]):
            with pytest.raises(SandboxGone):
                await provider.exec(sandbox, "true")
    assert left((provider.tag, "sleep 300"), before) == {}


async def test_the_copy_fallback_gives_the_same_workspace() -> None:
    """Where the kernel refuses an unprivileged overlay, the layers are copied: forced here with `cow="copy"`."""
    before = mounts()
    async with LocalProvider(warm=0, cow="copy") as provider:
        parent = await provider.create(BASE, limits=SMALL)
        assert provider.describe(parent)["cow"] == "copy"
        await provider.exec(parent, "echo fixed > repo/app.py && rm -r repo/data && echo n > new.txt")
        (child,) = await provider.fork(parent, 1)
        assert (await provider.exec(child, "cat repo/app.py new.txt; ls repo")).stdout == "fixed\nn\napp.py\n"
    assert left((provider.tag,), before) == {}


async def test_a_provider_killed_outright_leaves_nothing_running() -> None:
    """SIGKILL of the process that holds the provider (a Sandbox replica dying): its keeper and every sandbox end
    (parent-death signals all the way down); its cgroups are swept by the next provider on the machine."""
    before = mounts()
    tag = f"{os.getpid()}{int(time.time() * 1000) % 100000}"
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from gym_serve.sandbox import Base, BaseFile, LocalProvider
        async def main():
            provider = LocalProvider(warm=1)
            base = Base(files=(BaseFile(dest="x", text="x"),))
            for _ in range(3):
                sandbox = await provider.create(base)
                await provider.exec(sandbox, "sleep {tag} & sleep {tag} &")
            print(provider.tag, flush=True)
            await asyncio.sleep(600)
        asyncio.run(main())
        """
    )
    holder = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdout=subprocess.PIPE)
    assert holder.stdout is not None
    provider_tag = (await holder.stdout.readline()).decode().strip()
    assert provider_tag
    holder.send_signal(signal.SIGKILL)
    await holder.wait()
    found = await asyncio.to_thread(left, (provider_tag, f"sleep {tag}"), before)
    assert set(found) <= {"cgroups"}, found  # processes and mounts: none
    async with LocalProvider(warm=0) as provider:
        await provider.create(BASE)  # a provider's first create starts it (and its sweep of dead providers' cgroups)
    assert await asyncio.to_thread(left, (provider_tag, f"sleep {tag}"), before) == {}
