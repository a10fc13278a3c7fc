"""The environment contract: tools, optional per-rollout state, and `verify`.

An environment is one class, generic in its task and state types::

    class Weather(Environment[Task, None]):
        \"\"\"What's the weather like? One tool, reward for a grounded answer.\"\"\"

        @tool
        async def get_weather(self, city: str) -> dict:
            \"\"\"Get the current weather in a city.\"\"\"
            return {"city": city, "weather_description": f"The weather in {city} is cold."}

        async def verify(self, task: Task, response: Response) -> float:
            return 1.0 if "cold" in response.output_text() else 0.0

Per-rollout state lives *in the rollout*, not in the replica: `reset(task)`
(Gymnasium's name; `seed` is its deprecated old one) returns a `State` model,
every tool that takes a `state` parameter may change it, and the agent carries
it from call to call. Any replica can therefore
serve any call of any rollout, which is what lets the environment tier
autoscale, and a replica that dies loses no rollout's state.
"""

from __future__ import annotations

import inspect
import typing
import warnings
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from gym_serve.environment.tools import ToolSpec, is_tool
from gym_serve.wire.responses import Response

__all__ = ["Environment", "NoConfig", "Task", "Turn", "Verdict"]


class Task(BaseModel):
    """The task fields of an input row. Subclass it to declare the fields `verify` needs."""

    model_config = ConfigDict(extra="allow", frozen=True)

    def prompt_text(self) -> str:
        """The text of the row's last user message: what an echoing non-answer would repeat ('' if none)."""
        params = getattr(self, "responses_create_params", None) or (self.model_extra or {}).get(
            "responses_create_params"
        )
        value = params.get("input") if isinstance(params, dict) else None
        if isinstance(value, str):
            return value
        for item in reversed(value if isinstance(value, list) else []):
            if isinstance(item, dict) and item.get("role") == "user":
                content = item.get("content")
                if isinstance(content, str):
                    return content
                return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
        return ""


class NoConfig(BaseModel):
    """The config of an environment that takes none."""

    model_config = ConfigDict(extra="forbid")


class Verdict(BaseModel):
    """What `verify` may return instead of a bare float.

    `components` becomes the rollout's `reward_components`; `fields` are
    merged into the rollout row (e.g. `extracted_answer`), as NeMo Gym's
    verify responses do. `mask_sample` marks a rollout that finished but
    must not be trained on (NeMo Gym's field of the same name).
    """

    reward: float
    components: dict[str, float] | None = None
    fields: dict[str, Any] = Field(default_factory=dict)
    mask_sample: bool = False


class Turn(BaseModel):
    """The environment's move after the model answered without a tool call (see `Environment.user_turn`).

    `message` goes to the model as the next user message (a game's observation,
    a simulated user's reply); `reward` is this step's reward, recorded in the
    rollout's `step_rewards`; `terminated` ends the episode (after `message`, if any).
    """

    message: str | None = None
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    """A budget of the environment's own ran out (Gymnasium's flag): the episode ends, not terminated."""
    tool_outputs: list[dict[str, Any]] = Field(default_factory=list)
    """The `function_call_output` items of the turn's calls, for an environment that takes every model turn as a
    step (`EnvInfo.steps_every_turn`); they go into the conversation before `message`."""


TaskT = TypeVar("TaskT", bound=Task)
StateT = TypeVar("StateT", bound=BaseModel | None)


class Environment(Generic[TaskT, StateT]):
    """Base class of every environment: `Environment[MyTask, MyState]` (`None` for no state).

    The type arguments are the environment's `Task` (a `Task` subclass declaring the row fields it reads)
    and `State` (a pydantic model for per-rollout state, or `None`); an environment may also set them as
    class attributes. `Config` is a pydantic model for its options (from the app config).

    Subclasses implement `verify`; `reset`, `user_turn` and `@tool` methods are optional.
    An environment without `State` leaves the `state` parameter out of `verify`, `user_turn` and its tools.
    """

    Task: ClassVar[type[Task]] = Task
    State: ClassVar[type[BaseModel] | None] = None
    Config: ClassVar[type[BaseModel]] = NoConfig
    verify_budget_s: ClassVar[float] = 2.0
    """How long `verify` may take on a worst-case answer; `gym-serve env test` holds every example to it."""
    verify_timeout_s: float = 60.0
    """The deadline of one `verify` call. A verification that overruns it fails the rollout as
    `verifier_timeout` (masked), never as reward 0: how busy the machine is must not change a reward.
    Set per deployment with the environment's `verify_timeout_s` arg; an environment whose checks run
    elsewhere (math-verify's worker, the code sandbox) reads it to bound them."""
    tool_turn_budget_s: ClassVar[float] = 240.0
    """The wall time one model turn's tool calls may take together, below the Agent's `tier_call_timeout_s` (300 s
    by default): a call that would start past it is not run, its output saying so, and a tool that runs something
    slow cuts it at the budget (`turn_time_left`: a workspace's `bash` does). A turn of slow calls the policy chose
    so ends in outputs it reads, never in a masked `transport_timeout`."""
    answer_key: ClassVar[str | None] = None
    """A verify field holding the model's extracted answer; when set, profiles report majority@k over it."""
    execute_tool_calls: ClassVar[bool] = True
    """False when the model's function calls *are* its answer (function-calling tasks): the episode
    ends at the first model turn with calls, which `verify` judges and nothing runs (NeMo Gym's
    `execute_tool_calls: false`). The tools the model may call come from the row's
    `responses_create_params.tools`."""
    replay_safe_tools: ClassVar[bool] = True
    """True when everything the tools change lives in the rollout's `State` (or in what `snapshot` saves), so a
    rollout can go on from its last completed turn: a retried attempt, a resumed collection, a partial a
    trainer continues (`gym_serve.rollout.checkpoint`). Set it False for tools that change something outside the
    rollout (a database, a service): such a rollout then starts over on a retry, and a trainer's pause lets it
    finish instead of stopping it."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            origin = typing.get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Environment):  # Environment or a generic subclass
                task, state = typing.get_args(base)
                if "Task" not in cls.__dict__ and isinstance(task, type) and issubclass(task, Task):
                    cls.Task = task
                if "State" not in cls.__dict__ and state is type(None):
                    cls.State = None
                elif "State" not in cls.__dict__ and isinstance(state, type) and issubclass(state, BaseModel):
                    cls.State = state
        if "seed" in cls.__dict__ and "reset" not in cls.__dict__:  # written for the old name: it still works
            warnings.warn(
                f"`{cls.__name__}.seed` is deprecated: name it `reset` (Gymnasium's name for starting an episode)",
                DeprecationWarning,
                stacklevel=2,
            )
            cls.reset = cls.__dict__["seed"]  # type: ignore[method-assign]

    @classmethod
    def reward_hacks(cls, task: Any) -> dict[str, list[list[dict[str, Any]]]]:
        """Episodes a policy might learn that must score 0 on `task` (a `Task`), beyond the text non-answers every
        environment is checked with: each is the output items of a scripted policy's model turns (tool calls and
        messages) trying to get the reward without doing the task. `gym-serve env test` plays each on an example
        row, through this environment, and fails on any that scores above 0."""
        return {}

    @classmethod
    def compute_metrics(cls, tasks: list[list[dict[str, Any]]]) -> dict[str, float]:
        """Extra aggregate metrics over an agent's rollouts (grouped by task); merged into `gym-serve profile`'s."""
        return {}

    def __init__(
        self, config: BaseModel | dict[str, Any] | None = None, *, verify_timeout_s: float | None = None
    ) -> None:
        self.config = config if isinstance(config, BaseModel) else self.Config.model_validate(config or {})
        if verify_timeout_s is not None:
            self.verify_timeout_s = verify_timeout_s

    @classmethod
    def name(cls) -> str:
        """The name the registry knows the environment by (`gym_serve.environment.registry.registered_name`)."""
        from gym_serve.environment.registry import registered_name

        return registered_name(cls)

    @classmethod
    def data_dir(cls) -> Path:
        """The folder with the environment's `example.jsonl` and replay recordings."""
        return Path(inspect.getfile(cls)).parent / "data"

    @classmethod
    def tool_specs(cls) -> dict[str, ToolSpec]:
        return {name: ToolSpec.from_function(member) for name, member in inspect.getmembers(cls) if is_tool(member)}

    async def reset(self, task: TaskT) -> StateT:
        """Start a new rollout: its state. The default is `State()` (or None without one)."""
        return typing.cast(StateT, self.State() if self.State is not None else None)

    async def seed(self, task: TaskT) -> StateT:
        """Deprecated: `reset`, under its old name."""
        warnings.warn("`Environment.seed` is deprecated: call `reset`", DeprecationWarning, stacklevel=2)
        return await self.reset(task)

    async def user_turn(self, task: TaskT, response: Response, state: StateT) -> Turn | None:
        """Optional: answer the model's message, for multi-turn games and simulated users.

        Called when the model answers without a tool call; `response.output` is
        the episode so far and `state` may be changed. Return `None` (or a
        `Turn` with `terminated=True`) to end the episode. Environments that do
        not override it end the episode at the model's first plain answer.
        """
        return None

    async def snapshot(self, state: StateT) -> str | None:
        """Optional: after every completed turn, the id of a snapshot of what the tools changed outside `state`
        (a sandbox's files), from which `restore` brings it back. The default takes none: all is in `state`."""
        return None

    async def restore(self, snapshot: str, state: StateT) -> StateT:
        """Optional: a rollout resumed from a checkpoint whose `snapshot` is this id: bring the workspace back and
        return the state to go on with."""
        return state

    async def verify(self, task: TaskT, response: Response, state: StateT) -> float | Verdict:
        """Score the finished episode: `response.output` holds every item of it."""
        raise NotImplementedError(f"{type(self).__name__} must implement `verify`")
