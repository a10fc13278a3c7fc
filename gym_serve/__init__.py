"""gym-serve: RL environments for LLMs and verified rollouts at scale, on Ray Serve.

The environment contract (`Environment`, `tool`, `Task`, `Verdict`) and the
wire types import without Ray; the driver, CLI and deployments use it.
"""

from gym_serve.environment.core import Environment, Task, Turn, Verdict
from gym_serve.environment.runner import EnvInfo, EnvRunner
from gym_serve.environment.tools import tool
from gym_serve.errors import (
    ClusterError,
    ConfigError,
    EnvError,
    FailureKind,
    GymServeError,
    InputError,
    JudgeError,
    ModelError,
    RolloutError,
    SessionLostError,
    ToolError,
    VerifyError,
)
from gym_serve.rollout.local import run_local
from gym_serve.rollout.loop import AgentConfig, run_episode
from gym_serve.rollout.replay import ReplayModel
from gym_serve.wire.responses import InputRow, Response, RolloutRow
from gym_serve.wire.tokens import ContiguityReport, check_contiguity

__all__ = [
    "AgentConfig",
    "ClusterError",
    "ConfigError",
    "ContiguityReport",
    "EnvError",
    "EnvInfo",
    "EnvRunner",
    "Environment",
    "FailureKind",
    "GymServeError",
    "InputError",
    "InputRow",
    "JudgeError",
    "ModelError",
    "ReplayModel",
    "Response",
    "RolloutError",
    "SessionLostError",
    "RolloutRow",
    "Task",
    "ToolError",
    "Turn",
    "Verdict",
    "VerifyError",
    "check_contiguity",
    "run_episode",
    "run_local",
    "tool",
]
