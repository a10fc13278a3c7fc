"""What tests that run the repository's files share: its root folder, Ctrl-C for the processes they start, a
folder every user can reach, how far a file being written has got, and a replica killed for good."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def tmp() -> Iterator[Path]:
    """A folder every user can reach and write (pytest's own `tmp_path` is private to root): for callers and
    sandboxes running as `nobody`; removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="gs-isolation-"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def interruptible() -> None:
    """Ctrl-C's default in a child process (`Popen(preexec_fn=interruptible)`), as a terminal gives it.

    A suite started in the background by a non-interactive shell (`cmd &`, as a CI runner starts it) ignores
    SIGINT, and children inherit that: a server stopped with Ctrl-C would then never see it, and its stop
    would wait out its timeout (90 s) and kill it, leaving its Ray processes behind.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def written_lines(path: Path) -> int:
    """Complete lines so far of a file a collection is writing: its last line may be half written, so a test
    that waits for N rows counts newlines instead of parsing."""
    return path.read_bytes().count(b"\n") if path.exists() else 0


async def killed(actor: str, namespace: str = "serve") -> None:
    """Kill the named actor (a Serve replica: Serve never restarts one) and return once it is dead.

    `ray.kill` only asks: until the process is gone, a call it holds can still finish (a gate opened just after
    the kill let one through, and the rollout it belonged to never saw the death it was testing).
    """
    import ray

    handle = ray.get_actor(actor, namespace=namespace)
    ray.kill(handle, no_restart=False)
    for _ in range(600):
        try:
            await asyncio.wait_for(handle.__ray_ready__.remote(), timeout=1)
        except ray.exceptions.RayActorError:
            return
        except TimeoutError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{actor} still answers 30 s after it was killed")
