"""The dispatcher: the one way rollouts start, whichever front door they come through.

Rollouts enter by three doors: a collection of a file (`gym_serve.collect.driver`, in the driver actor), the
in-cluster stream to a trainer (`gym_serve.collect.stream`), and the HTTP ingress (`gym_serve.deployments.
ingress`). Each hands its rows to a `Dispatcher`, which does the same jobs the same way for all of them:

1. resolving a row: its problems (`gym_serve.wire.responses.row_problems`, with the sampling overrides
   applied: what runs is what is checked), then its agent (`agent_ref.name`, else the default);
2. expanding rows × repeats (one count, or one per agent) with NeMo Gym's numbering (`TaskIndex`: identical
   rows are one task, numbered in order of first appearance; a row's own `_ng_task_index` stands);
3. merging the sampling overrides into each row's `responses_create_params`;
4. bounding what is in flight (`AdaptiveWindow`: it halves on Serve's back-pressure and grows back);
5. sending each rollout to its agent (`gym_serve.calls.handles.AgentBatchers`: one micro-batcher per agent),
   with retries, deadlines and failure rows (`gym_serve.collect.attempts`) and the staleness bound
   (`gym_serve.collect.staleness`);
6. keeping each rollout's progress at its turn boundaries (`gym_serve.collect.progress`): a retried attempt
   goes on from the last completed turn, and a door's journal hears every turn (a collection's file);
7. stopping rollouts at their next turn boundary when a trainer pauses a batch (`RolloutStream.pause`) or a
   group's long tail is cut (`RolloutStream.stop`), and continuing partials (`continued`).

A door adds only its own medium: the file collection reads lines, shards and resumes, and writes files; the
stream and the ingress yield results as they finish. A row that cannot run is a `Rejected` (its `InputError`
names line and field): a door writes it as a `bad_input` failure row, or refuses the whole request with it.

The seams later work builds on: `send` is any `(agent, row, on_turn) → rollout` (another kind of agent
application is another Serve application behind the same `run_batch`); `run` takes the attempts a rollout
already spent, so a resumed rollout continues its count, and a `Rollout` may carry the checkpoint it resumes
from; `window` is the one in-flight bound a door may pause or resize.

With `trace` (a destination, `gym_serve.calls.tracing`), each rollout is one OpenTelemetry trace: its root span
`rollout` from the moment it was queued, `queued` (its wait for a slot), one `attempt` per try; the Agent's
spans and theirs below; `trace_sample` < 1 traces that share of the rollouts, drawn at random (what a
trace costs is per rollout). Without `trace`, nothing of OpenTelemetry runs.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import itertools
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from gym_serve.calls import tracing
from gym_serve.collect.attempts import Outcome, RetryPolicy, failure_row, run_attempts
from gym_serve.collect.progress import AgentControl, OnRecord, RolloutRun, ServeAgents, Stop
from gym_serve.collect.staleness import Staleness
from gym_serve.collect.task_index import TaskIndex
from gym_serve.collect.window import AdaptiveWindow
from gym_serve.errors import FailureKind, InputError, StalePolicy
from gym_serve.rollout.checkpoint import CHECKPOINT, PAUSED, Checkpoint, PartialRefused, continued, segments
from gym_serve.rollout.loop import OnTurn
from gym_serve.wire.responses import row_problems

__all__ = [
    "Dispatcher",
    "Rejected",
    "Repeats",
    "Rollout",
    "RolloutStream",
    "RowProblems",
    "Send",
    "UnknownAgent",
    "check_repeats",
    "repeats_for",
]

Repeats = int | Mapping[str, int]
"""Rollouts per task: one count for every agent, or a count per agent name (1 for an agent it leaves out)."""


class Send(Protocol):
    """Runs one rollout row on the named agent and returns the rollout row; `on_turn` hears each completed turn."""

    def __call__(
        self, agent: str, row: dict[str, Any], on_turn: OnTurn | None = None
    ) -> Awaitable[dict[str, Any]]: ...


class RowProblems(InputError):
    """Raised when an input row does not fit the protocol models; `problems` holds every `(field, what is wrong)`."""

    def __init__(self, problems: list[tuple[str, str]], *, source: str | None = None, line: int | None = None) -> None:
        (field, first), rest = problems[0], problems[1:]
        more = "; ".join(f"`{f}`: {m}" for f, m in rest[:4])
        super().__init__(
            first + (f" (and {len(rest)} more: {more})" if rest else ""), source=source, line=line, field=field
        )
        self.problems = problems

    def __reduce__(self) -> tuple[Any, ...]:
        return _row_problems, (self.problems, self.source, self.line)


def _row_problems(problems: list[tuple[str, str]], source: str | None, line: int | None) -> RowProblems:
    return RowProblems(problems, source=source, line=line)


class UnknownAgent(InputError):
    """Raised when a row names an agent that is not deployed here (the ingress answers it with 404)."""


@dataclass(frozen=True, eq=False)
class Rollout:
    """One rollout to run: its agent, and its row with `_ng_task_index` and `_ng_rollout_index` set."""

    agent: str
    row: dict[str, Any]
    line: int
    """The input row's position: a file's line, a request's row number (from 1)."""
    resume: Checkpoint | None = None
    """Where it starts: a collection's journal's last turn, or a partial continued; None: from the beginning."""

    @property
    def task(self) -> int:
        return int(self.row["_ng_task_index"])

    @property
    def key(self) -> tuple[str, int, int]:
        """(agent, task, rollout): the rollout's identity in a collection's files."""
        return self.agent, self.task, int(self.row["_ng_rollout_index"])


@dataclass(frozen=True)
class Rejected:
    """An input row that cannot run; its `error` names the line and the field."""

    line: int
    error: InputError

    def failure_row(self, source: str | None) -> dict[str, Any]:
        """The `bad_input` row it leaves among the failures (NeMo Gym's failures-sidecar shape)."""
        return failure_row({"line": self.line, "source": source}, FailureKind.BAD_INPUT, str(self.error), 0)


def repeats_for(num_repeats: Repeats, agent: str) -> int:
    return num_repeats if isinstance(num_repeats, int) else num_repeats.get(agent, 1)


def check_repeats(num_repeats: Repeats, agents: Sequence[str]) -> None:
    """A mistyped agent in per-agent repeats would silently run 1 repeat: it is a `ValueError` instead."""
    if isinstance(num_repeats, int):
        return
    for name in sorted(set(num_repeats) - set(agents)):
        close = difflib.get_close_matches(name, agents, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        raise ValueError(
            f"num_repeats names `{name}`, which is not an agent here; {hint}"
            f"the agents are: {', '.join(agents) or 'none'}"
        )


class Dispatcher:
    """Resolves, expands and runs rollout rows on the agent applications `agents` (see the module docstring).

    `agents` may be a callable giving the names (read once, at the first row that needs them): the in-cluster
    stream asks Serve which applications are agents.
    """

    def __init__(
        self,
        agents: Sequence[str] | Callable[[], Sequence[str]],
        *,
        default_agent: str | None = None,
        policy: RetryPolicy | None = None,
        max_in_flight: int = 64,
        staleness: Staleness | None = None,
        send: Send | None = None,
        seed: int | None = None,
        trace: str | None = None,
        trace_sample: float = 1.0,
        control: AgentControl | None = None,
        journal: OnRecord | None = None,
        checkpoints: bool = True,
    ) -> None:
        self._agents = agents
        self.trace = trace
        self.trace_sample = trace_sample
        self._sampler = random.Random(seed)
        self.default_agent = default_agent
        self.policy = policy or RetryPolicy()
        self.window = AdaptiveWindow(max_in_flight)
        self.staleness = staleness
        self.send = send if send is not None else _agent_batchers()
        self.control: AgentControl = control if control is not None else ServeAgents()
        self.journal = journal
        self.checkpoints = checkpoints
        """Agents report every completed turn, and retries go on from the last (False: every try starts over)."""
        self.backpressure_waits = 0
        self._rng = random.Random(seed)
        self._id = uuid.uuid4().hex[:12]
        self._numbers = itertools.count()

    @property
    def agents(self) -> Sequence[str]:
        if callable(self._agents):
            self._agents = list(self._agents())
        return self._agents

    # ---- resolving and expanding rows ---------------------------------------------------------------------

    def resolve(self, row: Any, *, line: int, source: str | None = None) -> str:
        """The agent of a row that can run (overrides already merged); raises `InputError` naming what is wrong."""
        problems = row_problems(row)
        if problems:
            raise RowProblems(problems, source=source, line=line)
        name = (row.get("agent_ref") or {}).get("name") or self.default_agent
        if not name:
            deployed = ", ".join(self.agents)
            raise InputError(
                f"no `agent_ref.name` and no default agent (deployed: {deployed})",
                source=source,
                line=line,
                field="agent_ref",
            )
        if name not in self.agents:
            raise UnknownAgent(
                f"unknown agent `{name}`; deployed: {', '.join(self.agents)}",
                source=source,
                line=line,
                field="agent_ref.name",
            )
        return str(name)

    def expand(
        self,
        rows: Iterable[tuple[int, Any]],
        *,
        num_repeats: Repeats = 1,
        overrides: Mapping[str, Any] | None = None,
        source: str | None = None,
    ) -> Iterator[Rollout | Rejected]:
        """`(line, row)` pairs → every rollout to run, in order, or the row's `Rejected`; lazily, in bounded memory."""
        with TaskIndex() as tasks:
            for line, raw in rows:
                row = _overridden(raw, overrides)
                try:
                    agent = self.resolve(row, line=line, source=source)
                except InputError as e:
                    yield Rejected(line, e)
                    continue
                repeats = repeats_for(num_repeats, agent)
                task, first = tasks.claim_row(raw, repeats)  # identical raw rows (as read, before defaults): one task
                row = {**row, "_ng_task_index": task}
                if not row.get("agent_ref"):
                    row = {**row, "agent_ref": {"name": agent}}
                for index in range(first, first + repeats):
                    yield Rollout(agent, {**row, "_ng_rollout_index": index}, line)

    async def continued(
        self, partials: Iterable[tuple[int, Any]], *, source: str | None = None
    ) -> list[Rollout | Rejected]:
        """`(line, partial row)` pairs → the rollouts that go on from them, or the partial's `Rejected`.

        A partial goes on only where it was paused: the same agent application, whose Model tier is still the
        same policy; its digest must match what it holds (`gym_serve.rollout.checkpoint.continued`).
        """
        found: list[Rollout | Rejected] = []
        where = source or "partials"
        for line, partial in partials:
            try:
                agent, policy, row, checkpoint = continued(partial, line=line, source=where)
                named = (row.get("agent_ref") or {}).get("name")
                if agent not in self.agents:
                    raise PartialRefused(
                        f"paused on application `{agent}`, which is not deployed here "
                        f"(deployed: {', '.join(self.agents)}): a partial goes on where it was paused",
                        source=where,
                        line=line,
                        field=f"{CHECKPOINT}.agent",
                    )
                if named != agent:
                    raise PartialRefused(
                        f"names application `{named}`, but the partial was paused on `{agent}`: "
                        "a partial goes on where it was paused",
                        source=where,
                        line=line,
                        field="agent_ref.name",
                    )
                serving = await self.control.policy(agent)
                if serving != policy:
                    raise PartialRefused(
                        f"sampled by policy `{policy}`, but application `{agent}` now samples from `{serving}`",
                        source=where,
                        line=line,
                        field=f"{CHECKPOINT}.policy",
                    )
            except InputError as e:
                found.append(Rejected(line, e))
                continue
            if checkpoint.turn > checkpoint.segments[-1]:
                checkpoint.segments.append(checkpoint.turn)  # what runs from here on is a new segment
            found.append(Rollout(agent, row, line, checkpoint))
        return found

    # ---- running rollouts ---------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self.window.in_flight

    def run_of(self, rollout: Rollout, *stop_keys: str) -> RolloutRun:
        """The progress of `rollout` across its attempts; stopping any of `stop_keys` (or its own) stops it."""
        own = f"{self._id}:{next(self._numbers)}"
        return RolloutRun(rollout, [*stop_keys, own], report=self.checkpoints, journal=self.journal)

    async def start(
        self,
        rollout: Rollout,
        *,
        spent: int = 0,
        staleness: Staleness | None = None,
        run: RolloutRun | None = None,
    ) -> asyncio.Task[Outcome]:
        """Wait for a slot in the window, then start the rollout; its task gives the slot back when it ends.

        `spent`: attempts the rollout used before (a resumed collection); `staleness`: this rollout's bound, in
        place of the dispatcher's own (an ingress request sets its own); `run`: its progress, kept by a stream.
        """
        queued_at = time.time_ns() if self._traces_one() else None
        await self.window.acquire()
        run = run if run is not None else self.run_of(rollout)
        try:
            return asyncio.ensure_future(self._run_holding_a_slot(run, spent, staleness or self.staleness, queued_at))
        except BaseException:
            self.window.release()
            raise

    async def run(self, rollout: Rollout, *, spent: int = 0) -> Outcome:
        """The rollout's outcome: its rollout row, or its failure row; never raises but cancellation."""
        return await (await self.start(rollout, spent=spent))

    def stream(
        self,
        rollouts: Iterable[Rollout],
        staleness: Staleness | None = None,
        *,
        batch: str | None = None,
        on_outcome: OnOutcome | None = None,
    ) -> RolloutStream:
        """`rollouts` run within the window, each yielded with its outcome as it finishes (see `RolloutStream`)."""
        return RolloutStream(self, rollouts, staleness, batch, on_outcome)

    def _traces_one(self) -> bool:
        """Whether the next rollout is traced: always with a destination, or its share `trace_sample`."""
        return self.trace is not None and (self.trace_sample >= 1.0 or self._sampler.random() < self.trace_sample)

    async def partial(self, run: RolloutRun, outcome: Outcome) -> Outcome:
        """`outcome`, made the partial of a rollout that stopped at its last completed turn."""
        outcome.row = run.partial(await self.control.policy(run.rollout.agent))
        outcome.kind, outcome.partial, outcome.stopped = None, True, True
        return outcome

    async def _run_holding_a_slot(
        self, run: RolloutRun, spent: int, staleness: Staleness | None, queued_at: int | None
    ) -> Outcome:
        """`queued_at`: when a traced rollout was queued (None: not traced)."""
        try:
            if run.stopping is not None:  # stopped before its first attempt
                return await self.partial(run, Outcome(run.rollout.row, None, spent))
            to = self.trace if queued_at is not None else None
            attributes = _rollout_attributes(run.rollout) if to is not None else {}
            with tracing.rollout_span(to, queued_at or 0, attributes) as root:
                tries = itertools.count(spent + 1)
                outcome = await run_attempts(
                    lambda: self._attempt(run, staleness, next(tries) if root is not None else None),
                    run.rollout.row,
                    self.policy,
                    self._rng,
                    spent=spent,
                    on_backpressure=self._on_backpressure,
                    stopping=lambda: run.stopping is not None,
                )
                if outcome.stopped or (outcome.ok and PAUSED in outcome.row):
                    return await self.partial(run, outcome)
                _annotate(root, outcome)
            if outcome.ok:
                self.window.on_success()
                outcome.row = await self._finished(run, outcome)
            return outcome
        finally:
            self.window.release()

    async def _attempt(self, run: RolloutRun, staleness: Staleness | None, attempt: int | None) -> dict[str, Any]:
        """One try at the rollout; `attempt`: its number in a traced rollout (None: not traced)."""
        traced = tracing.span("attempt", {"gym_serve.attempt": attempt}) if attempt is not None else nullcontext()
        with traced:
            agent = run.rollout.agent
            result = await self.send(agent, run.attempt_row(), on_turn=run.on_turn)
            if staleness is None or PAUSED in result:
                return result
            try:
                return await staleness.checked(agent, result)
            except StalePolicy:
                run.restart()  # its oldest tokens, in its first turn, are too old: nothing of it can be kept
                raise

    async def _finished(self, run: RolloutRun, outcome: Outcome) -> dict[str, Any]:
        """A finished rollout's row, saying how it got there: its attempts, and where each segment came from."""
        row = outcome.row
        if outcome.attempts > 1 or "resumed_at_turn" in row:
            row = {**row, "attempts": outcome.attempts}
        progress = run.progress
        if len(progress.segments) > 1 and progress.turn_ends:
            found = segments((row.get("response") or {}).get("output") or [], progress.turn_ends, progress.segments)
            if any("policy_version_min" in s for s in found):
                current = await self.control.current_version(run.rollout.agent)
                for segment in found:
                    if "policy_version_min" in segment:
                        segment["policy_lag"] = current - segment["policy_version_min"]
            row = {**row, "segments": found}
        return row

    def _on_backpressure(self) -> None:
        self.window.on_backpressure()
        self.backpressure_waits += 1


OnOutcome = Callable[[Rollout, Outcome], None]
"""Hears every rollout's outcome as soon as it is known (yielded, or resolved by `RolloutStream.stop`)."""


class RolloutStream:
    """`async for rollout, outcome in stream`: rollouts started as the window allows, yielded as they finish.

    `cancel()` (synchronous, so a response's `finally` may call it) stops the rollouts still running and starts
    no more; ending the iteration early does the same. `pause()` stops the whole batch at its rollouts' next
    turn boundaries: each unfinished rollout is yielded as a partial and the iteration ends; `stop(rollouts)`
    does that to some of them (a group's stragglers), or cuts them at once (masked rows).
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        rollouts: Iterable[Rollout],
        staleness: Staleness | None,
        batch: str | None = None,
        on_outcome: OnOutcome | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._rollouts = rollouts
        self._staleness = staleness
        self.batch = batch or uuid.uuid4().hex
        self._on_outcome = on_outcome
        self._finished: asyncio.Queue[tuple[Rollout, Outcome]] = asyncio.Queue()
        self._running: dict[asyncio.Task[Outcome], RolloutRun] = {}
        self._tasks: dict[int, asyncio.Task[Outcome]] = {}  # by id(rollout)
        self._runs: dict[int, RolloutRun] = {}  # by id(rollout), from the moment it is started
        self._resolved: set[int] = set()  # rollouts with an outcome (the feed skips those stopped before a start)
        self._feeding: asyncio.Task[None] | None = None
        self._cancelled = False
        self.paused = False

    def __aiter__(self) -> AsyncIterator[tuple[Rollout, Outcome]]:
        return self._outcomes()

    def ready(self) -> list[tuple[Rollout, Outcome]]:
        """The outcomes waiting to be yielded, taken now (a group closing takes its members that just finished)."""
        for task, run in list(self._running.items()):
            if task.done():  # finished, its callback not run yet
                self._ended(run.rollout, task)
        taken = []
        while not self._finished.empty():
            taken.append(self._finished.get_nowait())
        return taken

    def ended(self, rollout: Rollout) -> bool:
        """The rollout has its outcome (yielded, about to be, or resolved by `stop`)."""
        return id(rollout) in self._resolved

    def cancel(self) -> None:
        self._cancelled = True
        if self._feeding is not None:
            self._feeding.cancel()
        for task in self._running:
            task.cancel()

    async def pause(self) -> int:
        """Stop every rollout at its next turn boundary (the rest are not started); returns how many were running.

        The rollouts that finish their episode first are yielded as they are; the others as partials.
        """
        if self.paused or self._cancelled:
            return 0
        self.paused = True
        runs = [run for key, run in self._runs.items() if key not in self._resolved]
        for run in runs:
            run.stopping = Stop.PAUSE
        running = sum(id(run.rollout) in self._tasks for run in runs)
        agents = {run.rollout.agent for run in runs}
        await asyncio.gather(*(self._dispatcher.control.stop(agent, [self.batch], False) for agent in agents))
        return running

    async def stop(self, rollouts: Iterable[Rollout], mode: Stop) -> list[tuple[Rollout, Outcome]]:
        """Stop these rollouts (a group's stragglers): with `Stop.PAUSE` at their next turn boundary, yielded as
        partials later; with `Stop.ABORT` now, each a masked `straggler` row, returned here (not yielded)."""
        now: list[tuple[Rollout, Outcome]] = []
        stopped: list[RolloutRun] = []
        why = "its group finished without it (the batch's group policy)"
        for rollout in rollouts:
            if id(rollout) in self._resolved:
                continue
            run = self._runs.get(id(rollout))
            if run is None:  # not started yet: it never will be
                self._resolved.add(id(rollout))
                run = self._dispatcher.run_of(rollout)
                if mode is Stop.ABORT:
                    now.append((rollout, Outcome(run.masked(0, why), FailureKind.STRAGGLER, 0)))
                else:
                    now.append((rollout, await self._dispatcher.partial(run, Outcome(rollout.row, None, 0))))
                continue
            if run.stopping is not None:
                continue
            task = self._tasks.get(id(rollout))
            if task is not None and task.done():  # it finished: its outcome is on its way
                continue
            run.stopping = mode
            stopped.append(run)
            if mode is Stop.ABORT:
                self._resolved.add(id(rollout))
                if task is not None:
                    task.cancel()
                now.append((rollout, Outcome(run.masked(1, why), FailureKind.STRAGGLER, 1)))
        by_agent: dict[str, list[str]] = {}
        for run in stopped:
            by_agent.setdefault(run.rollout.agent, []).append(run.stop_keys[-1])
        abort = mode is Stop.ABORT
        control = self._dispatcher.control
        await asyncio.gather(*(control.stop(agent, keys, abort) for agent, keys in by_agent.items()))
        if self._on_outcome is not None:
            for rollout, outcome in now:
                self._on_outcome(rollout, outcome)
        return now

    async def _outcomes(self) -> AsyncIterator[tuple[Rollout, Outcome]]:
        feeding = self._feeding = asyncio.ensure_future(self._feed())
        try:
            while not self._cancelled:
                if feeding.done():
                    feeding.result()  # feeding failed: its error is the stream's
                    if not self._running and self._finished.empty():
                        return
                    yield await self._finished.get()
                else:  # still starting rollouts: wait for one to finish, or for the last to start
                    waiter = asyncio.ensure_future(self._finished.get())
                    await asyncio.wait({waiter, feeding}, return_when=asyncio.FIRST_COMPLETED)
                    if not waiter.done():
                        waiter.cancel()
                        continue
                    yield waiter.result()
        finally:
            self.cancel()

    async def _feed(self) -> None:
        for rollout in self._rollouts:
            if id(rollout) in self._resolved:
                continue
            run = self._dispatcher.run_of(rollout, self.batch)
            if self.paused:  # never started: a partial as it came (a continued one keeps its progress)
                self._finished.put_nowait(
                    (rollout, await self._dispatcher.partial(run, Outcome(rollout.row, None, 0)))
                )
                continue
            self._runs[id(rollout)] = run
            task = await self._dispatcher.start(rollout, staleness=self._staleness, run=run)
            if id(rollout) in self._resolved:  # cut (`stop`) while it waited for its slot
                task.cancel()
            if self.paused:
                run.stopping = Stop.PAUSE
            self._running[task] = run
            self._tasks[id(rollout)] = task
            task.add_done_callback(functools.partial(self._ended, rollout))

    def _ended(self, rollout: Rollout, task: asyncio.Task[Outcome]) -> None:
        self._running.pop(task, None)
        self._tasks.pop(id(rollout), None)
        if not task.cancelled() and id(rollout) not in self._resolved:  # else: the stream was cancelled, or the
            # rollout was cut (`stop`) and resolved there
            self._resolved.add(id(rollout))
            self._put(rollout, task.result())

    def _put(self, rollout: Rollout, outcome: Outcome) -> None:
        if self._on_outcome is not None:
            self._on_outcome(rollout, outcome)
        self._finished.put_nowait((rollout, outcome))


def _rollout_attributes(rollout: Rollout) -> dict[str, Any]:
    """Who the rollout is; a row sent alone (`POST /run`) has no task or rollout index."""
    found: dict[str, Any] = {"gym_serve.application": rollout.agent}
    for key, name in (("_ng_task_index", "gym_serve.task_index"), ("_ng_rollout_index", "gym_serve.rollout_index")):
        if isinstance(rollout.row.get(key), int):
            found[name] = rollout.row[key]
    return found


def _annotate(root: Any, outcome: Outcome) -> None:
    """The rollout's attempts, tokens and reward on its root span; a failure row's kind and error."""
    if root is None:
        return
    root.set_attribute("gym_serve.attempts", outcome.attempts)
    if outcome.kind is not None:
        tracing.failed(root, outcome.kind.value, str(outcome.row.get("error") or ""))
    else:
        tracing.result_attributes(root, outcome.row)


def _overridden(row: Any, overrides: Mapping[str, Any] | None) -> Any:
    """`row` with `overrides` merged into its `responses_create_params` (what will run is what must be valid)."""
    if not overrides or not isinstance(row, dict) or not isinstance(row.get("responses_create_params"), dict):
        return row
    return {**row, "responses_create_params": {**row["responses_create_params"], **overrides}}


def _agent_batchers() -> Send:
    from gym_serve.calls.handles import AgentBatchers  # Serve's handles: imported where rollouts really run

    return AgentBatchers()
