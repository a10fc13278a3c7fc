"""NeMo Gym's resources servers, hosted unchanged: a server is an environment named `nemo_gym:<server>`.

`catalog` finds the installed servers, their configs, data and dependencies by
reading files (it never imports NeMo Gym); `host` runs one server in this
process behind the runner interface the Environment tier calls.
"""

from gym_serve.environment.nemo_gym.catalog import (
    PREFIX,
    available_servers,
    check_server,
    data_dir,
    hosted_name,
    model_references,
    server_config_defaults,
    server_name,
)

__all__ = [
    "PREFIX",
    "available_servers",
    "check_server",
    "data_dir",
    "hosted_name",
    "model_references",
    "server_config_defaults",
    "server_name",
]
