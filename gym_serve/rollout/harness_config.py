"""The options of a harness agent (`agent: {kind: harness, ...}`) and of the gateway sessions it opens.

A harness agent runs an agent that brings its own loop: an async Python callable (`callable:
"module:function"`, run in the Agent replica) or a program (`command: [...]`, run as a confined subprocess,
`gym_serve.rollout.confined`, or with `isolation: sandbox` in a sandbox of the application's Sandbox tier,
`HarnessSandbox`). Either gets a gateway session (an OpenAI- and Anthropic-compatible endpoint
whose every call is recorded, `gym_serve.rollout.capture`) and a private workspace, and runs under
`timeout_s`; the environment then verifies what it left (`gym_serve.wire.harness.HarnessResult`).

Sampling is the application's to bound (`SamplingBounds`): a harness asking for more output tokens than
`max_output_tokens` gets that many; temperature and top-p come from the rollout (its row, as a trainer or
`collect --temperature` set it), else the config, and `prefer` says whether a value the harness sends wins.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gym_serve.sandbox import Limits as SandboxLimits

__all__ = ["GatewayOptions", "HarnessConfig", "HarnessSandbox", "Limits", "SamplingBounds", "bounded_request"]

PLACEHOLDERS = ("{task}", "{task_file}", "{workspace}", "{model}", "{openai_base_url}", "{anthropic_base_url}")
"""What a command's arguments and `env` values may name; each is replaced per rollout (the key never is: it
reaches the program only as `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`)."""


class SamplingBounds(BaseModel):
    """What a harness may ask of the model, and who decides temperature and top-p."""

    model_config = ConfigDict(extra="forbid")

    max_output_tokens: int = Field(default=1024, ge=1, description="The most tokens one call may generate.")
    temperature: float | None = Field(default=1.0, ge=0.0, le=2.0, description="The rollout's temperature.")
    top_p: float | None = Field(default=1.0, gt=0.0, le=1.0)
    prefer: Literal["config", "harness"] = Field(
        default="config",
        description="`config`: temperature and top-p are the rollout's (its row's, else these), whatever the "
        "harness sends (on-policy sampling for training); `harness`: a value the harness sends wins.",
    )
    force_tool_calls: int = Field(
        default=0,
        ge=0,
        description="The first N calls of a session that offer tools must call one (structured outputs): for "
        "smoke runs and tests on a model that cannot act yet. 0: the model is free.",
    )
    answer_regex: str | list[str] | None = Field(
        default=None,
        description="Every other call's text must match this regex (structured outputs), unless the harness asks "
        "for JSON: a short answer an untrained model ends, for smoke runs and tests. A list scripts a session: "
        "call N matches the Nth pattern (the last, the calls after), e.g. a tool call that acts, then an answer "
        "that ends the turn. None: the model is free.",
    )

    def answer_pattern(self, call_number: int) -> str | None:
        """The pattern call `call_number` (from 1) of a session must match, if any.

        >>> bounds = SamplingBounds(answer_regex=["act", "done"])
        >>> [bounds.answer_pattern(n) for n in (1, 2, 3)]
        ['act', 'done', 'done']
        """
        if isinstance(self.answer_regex, list):
            return self.answer_regex[min(call_number, len(self.answer_regex)) - 1] if self.answer_regex else None
        return self.answer_regex


def bounded_request(
    request: dict[str, Any], bounds: SamplingBounds, rollout: dict[str, Any], call_number: int
) -> dict[str, Any]:
    """`request` within the bounds: max tokens capped, temperature/top-p per `prefer`, a forced tool call if due.

    `rollout` holds the rollout's own sampling (its row's `temperature`, `top_p`), which beats the config.

    >>> bounds = SamplingBounds(max_output_tokens=64, temperature=0.7)
    >>> r = bounded_request({"max_output_tokens": 5000, "temperature": 0.0}, bounds, {}, 1)
    >>> r["max_output_tokens"], r["temperature"]
    (64, 0.7)
    >>> bounded_request({"temperature": 0.0}, bounds.model_copy(update={"prefer": "harness"}), {}, 1)["temperature"]
    0.0
    """
    out = dict(request)
    asked = out.get("max_output_tokens")
    out["max_output_tokens"] = min(int(asked), bounds.max_output_tokens) if asked else bounds.max_output_tokens
    for key in ("temperature", "top_p"):
        own = rollout.get(key) if rollout.get(key) is not None else getattr(bounds, key)
        if bounds.prefer == "config" or out.get(key) is None:
            out[key] = own
    if out.get("tools") and call_number <= bounds.force_tool_calls:
        out["tool_choice"] = "required"
    elif (pattern := bounds.answer_pattern(call_number)) is not None and not (out.get("text") or {}).get("format"):
        out["structured_outputs"] = {"regex": pattern}
    return out


class Limits(BaseModel):
    """Resource limits of a harness program (`setrlimit`; unset: the Agent replica's own)."""

    model_config = ConfigDict(extra="forbid")

    cpu_s: int | None = Field(default=3600, ge=1, description="CPU seconds of each of its processes.")
    file_bytes: int | None = Field(default=1 << 30, ge=1, description="The largest file it may write.")
    open_files: int | None = Field(default=4096, ge=16)
    address_space_bytes: int | None = Field(
        default=None, ge=1 << 24, description="Virtual memory per process (JavaScript runtimes reserve a lot)."
    )


class HarnessSandbox(BaseModel):
    """The workspace a program gets with `isolation: sandbox`: a sandbox of the application's Sandbox tier.

    Its view is the sandbox's (`gym_serve.sandbox`: the system's folders read-only, nothing else of the host),
    its workspace `/workspace` an overlay over `base`; what the program needs beyond the system's folders (its
    installation, a runtime) is bound in read-only by `binds`. Its network is its own loopback, where its gateway
    session is relayed; its limits are the Sandbox tier's unless `limits` names any (then `Limits`' defaults
    for the rest).
    """

    model_config = ConfigDict(extra="forbid")

    base: str | None = Field(
        default=None, description="A host folder the workspace starts from (read-only under it). None: empty."
    )
    binds: dict[str, str] = Field(
        default_factory=dict,
        description="Further host paths, read-only in the sandbox: `{path inside: host path}` (the harness's "
        "installation). The sandbox's user (`nobody` when the Sandbox replica runs as root) must be able to read "
        "them.",
    )
    limits: dict[str, Any] = Field(
        default_factory=dict,
        description="The sandbox's limits (`gym_serve.sandbox.Limits`: memory_mb, max_processes, disk_mb, cpus, "
        "...); none given: the Sandbox tier's; any given: the rest are `Limits`' own defaults.",
    )

    @model_validator(mode="after")
    def _valid(self) -> HarnessSandbox:
        for inside in self.binds:
            if not inside.startswith("/") or inside.startswith(("/workspace", "/tmp", "/proc", "/dev")):
                raise ValueError(f"`binds`: `{inside}` must be an absolute path outside /workspace, /tmp, /proc, /dev")
        try:
            SandboxLimits(**self.limits)
        except (TypeError, ValueError) as e:
            raise ValueError(f"`limits`: {e}") from None
        return self


class GatewayOptions(BaseModel):
    """The gateway's bounds on one session (each a clear error in the API's own shape when crossed)."""

    model_config = ConfigDict(extra="forbid")

    max_body_bytes: int = Field(default=16 << 20, ge=1024, description="Larger requests get 413.")
    max_calls_per_s: float = Field(default=20.0, gt=0, description="A session's sustained call rate; past it, 429.")
    burst: int = Field(default=40, ge=1, description="Calls a session may make at once above its rate.")
    max_concurrent_calls: int = Field(default=8, ge=1, description="A session's calls in flight; past it, 429.")
    call_timeout_s: float = Field(default=300.0, gt=0, description="Deadline of one call to the Model tier.")
    session_idle_s: float = Field(
        default=3600.0, gt=0, description="A session no call or close touched this long is ended (its Agent died)."
    )
    host: str = Field(
        default="127.0.0.1",
        description="Where each Gateway replica serves its sessions' HTTP: loopback when harnesses run on its node "
        "(the usual case, and the only one a namespace-confined program reaches), else this node's address.",
    )


class HarnessConfig(BaseModel):
    """A harness agent: the callable or program, how it gets its task, its limits, and its sessions' bounds."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["harness"] = "harness"
    callable: str | None = Field(
        default=None, description="`module:function`, an `async def run(task, endpoint, workspace) -> HarnessResult`."
    )
    command: list[str] | None = Field(
        default=None, description=f"A program and its arguments; they may name {', '.join(PLACEHOLDERS)}."
    )
    task_via: Literal["argument", "stdin", "file"] | None = Field(
        default=None,
        description="How a program gets its task: `{task}` in its arguments, on stdin, or in `task_file` in its "
        "workspace (`{task_file}`). Default: `argument` when an argument names `{task}`, else `stdin`.",
    )
    task_file: str = Field(default="TASK.md", description="The task's file name in the workspace (`task_via: file`).")
    env: dict[str, str] = Field(
        default_factory=dict, description="More variables for a program (placeholders allowed; never secrets)."
    )
    model_name: str = Field(default="policy", description="The model name the harness is told, and must send.")
    timeout_s: float = Field(default=600.0, gt=0, description="The harness's deadline; past it, killed.")
    max_output_bytes: int = Field(default=64 << 10, ge=1024, description="A program's stdout and stderr, each.")
    isolation: Literal["auto", "namespaces", "process", "sandbox"] = Field(
        default="auto",
        description="`namespaces`: its own network (only its session reachable), PID and mount namespaces, so "
        "nothing it starts survives it; `process`: its own session and process group only; `auto`: namespaces "
        "where the kernel allows them, else process; `sandbox`: a sandbox of the application's Sandbox tier "
        "(`sandbox:`; its overlay workspace, kernel walls and cgroup limits), made from `sandbox`.",
    )
    limits: Limits = Field(default_factory=Limits, description="rlimits of a confined subprocess (not `sandbox`).")
    sandbox: HarnessSandbox = Field(
        default_factory=HarnessSandbox, description="The workspace of `isolation: sandbox`: its base, binds, limits."
    )
    snapshot_max_files: int = Field(default=256, ge=0, description="Workspace files `verify` gets as text.")
    snapshot_max_bytes: int = Field(default=1 << 20, ge=0, description="Their total size.")
    sampling: SamplingBounds = Field(default_factory=SamplingBounds)
    gateway: GatewayOptions = Field(default_factory=GatewayOptions)

    @model_validator(mode="after")
    def _one_form(self) -> HarnessConfig:
        if (self.callable is None) == (self.command is None):
            raise ValueError("a harness is either `callable: module:function` or `command: [program, args...]`")
        if self.callable is not None and ":" not in self.callable:
            raise ValueError(f"`callable` is `module:function`, got {self.callable!r}")
        if self.command is not None and not self.command:
            raise ValueError("`command` names a program")
        if self.callable is not None and self.isolation == "sandbox":
            raise ValueError("`isolation: sandbox` runs a program (`command`); a `callable` runs in the Agent replica")
        return self

    @property
    def delivery(self) -> str:
        """How a program gets its task."""
        if self.task_via is not None:
            return self.task_via
        return "argument" if any("{task}" in arg for arg in self.command or []) else "stdin"
