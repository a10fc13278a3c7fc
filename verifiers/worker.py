"""A worker process for a check the answer can keep busy: killed and replaced when the check overruns.

A check that runs the answer's text through a library (math-verify's parser, reasoning-gym's scorers, sympy)
can compute for ever and, in a thread, holds the GIL: the replica's event loop, every other rollout on it and
the deadline meant to stop it stall with it. Here it runs in one worker process, one check at a time (the
deadline times the check, never its wait in a queue, and killing an overrunning worker kills no other caller's
check), and a check past its deadline kills the worker, which a fresh one replaces.

Workers come from a fork server, never from forking the caller: a Serve replica (or any process that has started
Ray) runs gRPC threads, and a child forked from it can die on their locks. The server preloads the check's
library (so a replacement starts fast) and not the caller's `__main__`, which multiprocessing would otherwise
re-import there.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import weakref
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

__all__ = ["Worker"]

T = TypeVar("T")


class Worker:
    """One worker process preloading `preload`; `warm` (run in it, off any check's clock) readies a new one."""

    def __init__(self, preload: list[str], warm: Callable[[], Any] | None = None) -> None:
        self.preload = preload
        self.warm = warm
        self._pool: ProcessPoolExecutor | None = None
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(self.preload)
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=context)
        return self._pool

    def reset(self) -> None:
        """Kill the worker (and the check it runs); its replacement starts now (readied by `warm`)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.kill()
            pool.shutdown(wait=False, cancel_futures=True)
        if self.warm is not None:
            self.pool().submit(self.warm)

    def turn(self) -> asyncio.Semaphore:
        """One check at a time in the worker; one semaphore per event loop (a primitive is bound to its loop)."""
        loop = asyncio.get_running_loop()
        if loop not in self._turns:
            self._turns[loop] = asyncio.Semaphore(1)
        return self._turns[loop]

    async def call(
        self, check: Callable[..., T], *args: Any, timeout_s: float, before: tuple[Any, ...] = ()
    ) -> T | None:
        """`check(*args)` in the worker within `timeout_s`, or None when it overran (the worker is then replaced).
        `before` (a function and its arguments) runs there first, off the clock: a started worker, a built dataset.
        Call it inside `turn()`."""
        loop = asyncio.get_running_loop()
        if before:
            await loop.run_in_executor(self.pool(), *before)
        try:
            return await asyncio.wait_for(loop.run_in_executor(self.pool(), check, *args), timeout_s)
        except TimeoutError:
            self.reset()
            return None
        except asyncio.CancelledError:  # the caller's deadline came first: the check it abandons must not run on
            self.reset()
            raise
