"""The exceptions gym-serve raises, and the one vocabulary of rollout failures.

```
GymServeError
├── ConfigError          a config file or argument is wrong (names the file and key)
├── ClusterError         the Ray cluster cannot be reached or refuses us (names the fix)
├── InputError           an input row is wrong (names the file, line and field)       bad_input
├── EnvError             an environment could not be loaded, seeded or asked for its turn   env_error
├── ToolError            running a turn's tool calls broke outside the model's view   tool_error
├── VerifyError          an environment's verify raised or returned nothing usable    verifier_error
│   ├── JudgeError       a judge model gave no usable verdict                          judge_failed
│   ├── VerifierTimeoutError  verification did not finish within its deadline          verifier_timeout
│   └── MissingPackageError   the check needs a package the verifier's sandbox lacks   missing_package
├── ModelError           the model tier failed to answer                               model_error
│   ├── ModelUnreachableError   its endpoint refused or dropped the connection         transport_unreachable
│   ├── ModelTimeoutError       its endpoint did not answer in time                    transport_timeout
│   └── ReplayMissError  the replay model has no recording of the conversation         replay_miss
├── SessionLostError     the replica holding the rollout's session state went away      session_lost
├── StalePolicy          a rollout's oldest token is further behind the policy than allowed   stale_policy
├── HarnessError         a harness agent exited non-zero or raised                      harness_error
│   ├── HarnessIdle      a harness agent ended without calling the model               harness_no_model_calls
│   └── HarnessTimeout   a harness agent outlived its deadline (it was killed)         harness_timeout
├── WeightsError         a weight update was refused; no replica changed its weights
│   ├── InvalidWeights   the new weights do not fit the served model (names, shapes, values)
│   ├── NoWeights        the Model tier takes no weights (only vLLM tiers do)
│   └── VersionNotNewer  the new version is not above the current one
└── RolloutError         a rollout could not finish, with the kind it names            (its own)
```

A failed rollout is data, not a crash: whatever escapes a rollout becomes a
failure row whose `_ng_failure_class` is a `FailureKind`, and the collection
goes on. The exception's type decides the kind (`failure_kind`); nothing
passes kinds around as strings.

Who a failure belongs to. A failure row is masked (`mask_sample: true`, no
reward): it is left out of training. So it must be the system's failure only (a
sandbox gone, an endpoint down, a verifier that breaks on pristine input, a judge
that gives no verdict); a failure the policy's own output can cause (a hang, a
huge reply, unparsable code, a crash of code it wrote) is a reward of 0, never
one of these, or a policy that cannot solve a task learns to produce whatever
drops its sample from training. Each kind's docstring says whether the policy
could cause it and what keeps it from doing so; CONTRIBUTING.md says how an
environment keeps to the rule.
"""

from __future__ import annotations

import asyncio
from enum import StrEnum
from typing import Any, ClassVar

__all__ = [
    "ClusterError",
    "ConfigError",
    "EnvError",
    "FailureKind",
    "GymServeError",
    "HarnessError",
    "HarnessIdle",
    "HarnessTimeout",
    "InputError",
    "InvalidWeights",
    "NoWeights",
    "JudgeError",
    "MissingPackageError",
    "ModelError",
    "ModelTimeoutError",
    "ModelUnreachableError",
    "ReplayMissError",
    "RolloutError",
    "SessionLostError",
    "StalePolicy",
    "ToolError",
    "VerifierTimeoutError",
    "VerifyError",
    "VersionNotNewer",
    "WeightsError",
    "failure_kind",
]


class FailureKind(StrEnum):
    """What went wrong with a rollout: the `_ng_failure_class` of its failure row.

    The names NeMo Gym 0.7.0 defines (`nemo_gym/failure_kinds.py`) are used
    where they mean the same thing, so its tooling groups our failures with its
    own; the rest are gym-serve's. A name says what went wrong, not whether to
    retry: that is the caller's policy (`gym_serve.collect.attempts`).
    """

    # NeMo Gym's names
    TRANSPORT_UNREACHABLE = "transport_unreachable"
    """An endpoint (a model server) refused or dropped the connection. Not the policy's: nothing it outputs reaches
    a connection."""
    TRANSPORT_TIMEOUT = "transport_timeout"
    """A call to another tier or an endpoint did not answer within its timeout. The policy's output can be what is
    slow (a turn of tool calls, a user turn reading its message): a turn's calls share the environment's
    `tool_turn_budget_s` (240 s), within the agent's `tier_call_timeout_s` (300 s), past which a call is answered
    unrun (and a slow tool, a workspace's `bash`, cuts its work at it), and what reads its text does so in linear
    time."""
    AGENT_RUN_ERROR = "agent_run_error"
    """The episode broke on something no more specific kind names. Not the policy's in gym-serve's own loop, where
    nothing its output holds raises; a NeMo Gym agent's `/run` that failed may have broken on it (NeMo Gym's code)."""
    AGENT_TIMEOUT = "agent_timeout"
    """A rollout attempt did not finish before its deadline. The policy decides how long an episode runs within
    `max_steps` and each call's bounds: an `attempt_timeout_s` above what those allow keeps this the system's."""
    VERIFIER_ERROR = "verifier_error"
    """The environment's verify raised, or returned something that is not a reward. Only the row's or the
    verifier's fault: a verify scores 0 whatever in the answer would break it (and a hosted NeMo Gym server's verify
    is its own code, which may not)."""
    JUDGE_FAILED = "judge_failed"
    """The judge model behind a verifier gave no usable verdict. The judge's failure; the answer is in its prompt,
    so one too long for the judge's context scores 0 unsent (`llm_judge_qa`'s `max_answer_bytes`), and one that talks
    the judge out of its verdict line is what the delimiters and the instructions around it are there to stop."""
    SESSION_LOST = "session_lost"
    """The replica that held the rollout's session state went away (or the rollout's sandbox). Not the policy's: its
    commands cannot end their own sandbox (`kill -9 -1` in one leaves it answering), and a session idles out only
    after `session_idle_s` (30 min) without a call."""
    CANCELLED = "cancelled"
    """The caller gave up on the rollout (a client went away). Not the policy's."""
    KILL_SHAPED = "kill_shaped"
    """A replica or actor died under the rollout (NeMo Gym's name for a dead Ray actor). Not the policy's while no
    check of its output can exhaust a replica: those that could run bounded (math-verify and reasoning-gym's scorers
    in a worker process, SQLite with value and result limits, code in a sandbox)."""
    # gym-serve's own
    BAD_INPUT = "bad_input"
    """The input row cannot be run (it names file, line and field). Not the policy's: found before it acts."""
    BACKPRESSURE = "backpressure"
    """Serve refused the request because the tier's queue was full. Not the policy's (and waited out, not a row,
    until its waits run out)."""
    MODEL_ERROR = "model_error"
    """The model tier answered with an error. Not the policy's with a vLLM tier, which answers a conversation past
    its context `incomplete`; an OpenAI-compatible endpoint answers one with a 400, which lands here."""
    ENV_ERROR = "env_error"
    """The environment's seed or user turn raised. A seed runs before the policy acts; a user turn reads its message
    and answers what it cannot read (a move it cannot parse is a penalty), except a hosted Gymnasium server's `/step`,
    which is its own code."""
    TOOL_ERROR = "tool_error"
    """Running a turn's tool calls broke outside the model's view (not a tool's own error, which the model sees).
    Not the policy's: arguments it garbles (not JSON, nested past the parser's stack, a number past 4300 digits) are
    an error text it reads."""
    VERIFIER_TIMEOUT = "verifier_timeout"
    """Verification did not finish within the environment's deadline: no verdict, so no reward (not a 0). Only the
    machine's: a check the answer can keep busy runs under a deadline of its own, and an answer whose check overruns
    it while the same check on pristine input (the reference against itself) does not scores 0; the rest of a verify
    is linear in the answer, or bounded by a size it refuses past."""
    MISSING_PACKAGE = "missing_package"
    """The check needs a package the verifier's sandbox lacks (it names it): no answer could be scored there. Not the
    policy's: only a package the task imports counts; one the answer alone imports is its 0."""
    REPLAY_MISS = "replay_miss"
    """The replay model has no recording of the conversation: nothing the policy did, so nothing to score."""
    STALE_POLICY = "stale_policy"
    """The rollout's oldest token came from a policy version more than `max_policy_lag` behind the current one. Not
    the policy's output: the trainer's pace (and it is run again)."""
    HARNESS_ERROR = "harness_error"
    """A harness agent (an SDK callable or a program) raised or exited non-zero: its episode has no verdict. The
    policy can cause it (a reply the harness cannot handle, a command that kills it), and nothing yet tells that from
    the harness's own bug: an open exception to the rule (a Model tier failure under it is named as the tier's)."""
    HARNESS_NO_MODEL_CALLS = "harness_no_model_calls"
    """A harness agent ended without one call to the model: nothing the policy did, so nothing to score (nor could
    it have caused this: it never ran)."""
    HARNESS_TIMEOUT = "harness_timeout"
    """A harness agent was still running at its deadline; it was killed with everything it started. The policy can
    cause it (it keeps working, or starts a command that never ends): an open exception to the rule, until a timed-out
    episode's workspace is verified as it was left."""
    STRAGGLER = "straggler"
    """The rollout's group finished without it (a long-tail policy cut it): masked, never scored. The policy's pace
    decides it; with `stragglers: partial` the rollout goes on next step instead, and nothing is masked."""


class GymServeError(Exception):
    """Raised for every error gym-serve itself detects; `kind` is the failure kind it means for a rollout."""

    kind: ClassVar[FailureKind] = FailureKind.AGENT_RUN_ERROR


class ConfigError(GymServeError):
    """Raised when a config file, config key or command-line argument is wrong."""

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None) -> None:
        self.source = source
        self.key = key
        self.reason = message
        where = ", ".join(part for part in (source, f"key `{key}`" if key else None) if part)
        super().__init__(f"{where}: {message}" if where else message)

    def __reduce__(self) -> tuple[Any, ...]:  # keyword-only fields must survive pickling across Ray processes
        return _rebuild, (type(self), self.reason, {"source": self.source, "key": self.key})


class ClusterError(GymServeError):
    """Raised when the Ray cluster at an address cannot be reached or refuses us; the message names the fix."""

    kind = FailureKind.TRANSPORT_UNREACHABLE


class InputError(GymServeError):
    """Raised when an input row cannot be used; says which file, line and field."""

    kind = FailureKind.BAD_INPUT

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.reason = message
        where = source or "<input>"
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field `{field}`"
        super().__init__(f"{where}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.reason, {"source": self.source, "line": self.line, "field": self.field})


class EnvError(GymServeError):
    """Raised when an environment cannot be found, built or seeded, or its user turn raised."""

    kind = FailureKind.ENV_ERROR


class ToolError(GymServeError):
    """Raised when running a turn's tool calls breaks outside the model's view (e.g. the rollout's state is invalid).

    A tool's own exception is not this: it becomes a tool output the model reads.
    """

    kind = FailureKind.TOOL_ERROR


class VerifyError(GymServeError):
    """Raised when an environment's `verify` raised or returned something unusable."""

    kind = FailureKind.VERIFIER_ERROR


class JudgeError(VerifyError):
    """Raised when the judge model behind a verifier gives no usable verdict."""

    kind = FailureKind.JUDGE_FAILED


class VerifierTimeoutError(VerifyError):
    """Raised when verification does not finish within its deadline (an environment's `verify_timeout_s`).

    A slow check says nothing about the answer: a busy machine must not turn a right answer into a 0.
    """

    kind = FailureKind.VERIFIER_TIMEOUT


class MissingPackageError(VerifyError):
    """Raised when the task's check needs a package the verifier's sandbox lacks (the message names it).

    Not the answer's fault, nor a 0: the row cannot be scored where it ran, whatever the answer.
    """

    kind = FailureKind.MISSING_PACKAGE


class ModelError(GymServeError):
    """Raised when the model tier fails to produce a response."""

    kind = FailureKind.MODEL_ERROR


class ModelUnreachableError(ModelError):
    """Raised when a model endpoint refuses or drops the connection, after the tier's retries."""

    kind = FailureKind.TRANSPORT_UNREACHABLE


class ModelTimeoutError(ModelError):
    """Raised when a model endpoint does not answer within the tier's timeout, after its retries."""

    kind = FailureKind.TRANSPORT_TIMEOUT


class ReplayMissError(ModelError):
    """Raised when the replay model is asked a conversation none of its recordings holds.

    The answer it could give ("no recording matches") is not the policy's: scoring it would train on noise.
    """

    kind = FailureKind.REPLAY_MISS


class SessionLostError(GymServeError):
    """Raised when a call of a rollout reaches a replica that does not hold the rollout's session.

    Environments that keep a rollout's state in replica memory (hosted NeMo Gym
    servers) pin each rollout to the replica that seeded it; when that replica
    went away, the rollout cannot go on, and a new attempt seeds a new session.
    """

    kind = FailureKind.SESSION_LOST


class StalePolicy(GymServeError):
    """Raised when a rollout sampled by an older policy than the caller's `max_policy_lag` allows (it is re-run)."""

    kind = FailureKind.STALE_POLICY


class HarnessError(GymServeError):
    """Raised when a harness agent raises or exits non-zero; the message holds the end of its output."""

    kind = FailureKind.HARNESS_ERROR


class HarnessIdle(HarnessError):
    """Raised when a harness agent ends without calling the model: there is no policy output to score."""

    kind = FailureKind.HARNESS_NO_MODEL_CALLS


class HarnessTimeout(HarnessError):
    """Raised when a harness agent outlives its deadline; it and everything it started were killed."""

    kind = FailureKind.HARNESS_TIMEOUT


class WeightsError(GymServeError):
    """Raised when a weight update is refused; every replica keeps the version it served."""


class InvalidWeights(WeightsError):
    """Raised when new weights do not fit the served model: unknown or missing tensors, wrong shapes, NaN or inf."""


class NoWeights(WeightsError):
    """Raised when weights are pushed to a Model tier that takes none (replay, synthetic, an OpenAI-compatible
    endpoint: only the vLLM tiers load weights)."""


class VersionNotNewer(WeightsError):
    """Raised when an update's version is not above the policy's current version (versions only increase)."""


class RolloutError(GymServeError):
    """Raised when a rollout cannot finish for a reason its raiser names (e.g. a tier call timed out)."""

    def __init__(self, message: str, *, kind: FailureKind) -> None:
        self._kind = kind
        super().__init__(message)

    @property  # per instance, over the class-level kind of the other errors
    def kind(self) -> FailureKind:  # type: ignore[override]
        """Read through `_kind`, so that Ray's wrapper of a raised `RolloutError` (which answers attribute
        lookups it cannot resolve from the original) gives the original's kind, not the class default."""
        return self._kind

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args[0], {"kind": self._kind})


def _rebuild(cls: type[Exception], message: str, fields: dict[str, Any]) -> Exception:
    return cls(message, **fields)


_RAY_KINDS = {
    "ActorDiedError": FailureKind.KILL_SHAPED,
    "ActorUnavailableError": FailureKind.KILL_SHAPED,
    "RayActorError": FailureKind.KILL_SHAPED,
    "ReplicaUnavailableError": FailureKind.KILL_SHAPED,
    "DeploymentUnavailableError": FailureKind.KILL_SHAPED,
    "BackPressureError": FailureKind.BACKPRESSURE,
    "GetTimeoutError": FailureKind.TRANSPORT_TIMEOUT,
}
"""Ray's exceptions, recognised by name so that this module imports no Ray."""


def failure_kind(exc: BaseException) -> FailureKind:
    """The failure kind `exc` means for a rollout.

    An exception that crossed a Serve handle is Ray's wrapper *and* the original
    class (`RayTaskError(VerifyError)`); it keeps the original as `cause`, whose
    own `kind` (a `RolloutError`'s is per instance) is the one that counts.

    >>> failure_kind(ModelError("503 from the endpoint")).value
    'model_error'
    >>> failure_kind(TimeoutError()).value
    'agent_timeout'
    >>> failure_kind(ValueError("anything else")).value
    'agent_run_error'
    """
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    if isinstance(exc, GymServeError):
        return exc.kind
    if isinstance(exc, asyncio.CancelledError):
        return FailureKind.CANCELLED
    if isinstance(exc, TimeoutError):
        return FailureKind.AGENT_TIMEOUT
    for cls in type(exc).__mro__:
        if cls.__name__ in _RAY_KINDS:
            return _RAY_KINDS[cls.__name__]
    return FailureKind.AGENT_RUN_ERROR
