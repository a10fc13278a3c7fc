"""The rest of NeMo Gym's catalogue, in-process: judge models, Gymnasium-style servers, NeMo Gym's own agents, and
per-server dependencies; the deploy-time errors of each. One real server (or agent) from the installed nemo-gym
per class; the same pieces through Serve are in `tests/test_nemo_gym_catalogue_serve.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from gym_serve.analysis.check import recorded_rollouts
from gym_serve.environment.nemo_gym import catalog, requirements
from gym_serve.environment.nemo_gym.agents import NemoGymAgent
from gym_serve.environment.nemo_gym.host import NemoGymServer, hosted_server
from gym_serve.environment.nemo_gym.routes import Routes, UnroutedServerError
from gym_serve.errors import ConfigError, EnvError, FailureKind, failure_kind
from gym_serve.rollout.loop import AgentConfig, run_episode
from gym_serve.rollout.replay import ReplayModel, recorded_judge_calls
from gym_serve.serving.config import validate_app_args
from gym_serve.wire.pieces import assistant_message


@pytest.fixture(autouse=True)
def _cwd_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path.cwd())  # `built` runs each server in its own folder, as a replica does


def built(server: str, **options: Any) -> NemoGymServer:
    """The server hosted in its own folder (server configs name files relative to it), as a replica runs it."""
    os.chdir(catalog.server_dir(server))
    return hosted_server(server, **options)


def recording(tmp: Path, rows: list[dict[str, Any]], name: str = "recording.jsonl") -> Path:
    path = tmp / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


async def own_loop(host: NemoGymServer, row: dict[str, Any], model: ReplayModel) -> dict[str, Any]:
    return await run_episode(row, model=model, env=host, env_info=host.describe(), config=AgentConfig(max_steps=50))


def hosted_agent(agent: str, server: str, policy: ReplayModel, **config: Any) -> NemoGymAgent:
    """NeMo Gym's `agent`, its model calls to `policy`, its calls to `server` over the server's HTTP protocol."""
    routes = Routes(models={"policy_model": policy.responses})
    host = built(server, routes=routes)

    async def to_server(method: str, path: str, body: bytes, cookies: dict[str, str]) -> Any:
        return await host.http(path, body, cookies)

    routes.apps[server] = to_server
    return NemoGymAgent(agent, instance=f"{server}_{agent}", routes=routes, config=config, resources_server=server)


# Judge models


@pytest.mark.parametrize("server", ["equivalence_llm_judge", "aegis_v4_safety"])
async def test_a_judge_backed_server_gives_the_recorded_rewards_with_a_judge_that_gives_the_recorded_verdicts(
    server: str, tmp_path: Path
) -> None:
    """The judge is a Model tier (here the replay model over the judge calls NeMo Gym kept in each recording),
    reached by the name the server's config gives it (`judge_model_server.name`), never over HTTP."""
    (name,) = set(catalog.model_references(catalog.server_config_defaults(server)).values())
    for row, recorded in recorded_rollouts(server):
        judge = ReplayModel([recording(tmp_path, recorded_judge_calls(recorded), "judge.jsonl")])
        calls = []

        async def judged(request: dict[str, Any], judge: ReplayModel = judge, calls: list[Any] = calls) -> Any:
            calls.append(request)
            return await judge.responses(request)

        host = built(server, routes=Routes(models={name: judged}))
        rollout = await own_loop(host, row, ReplayModel([recording(tmp_path, [recorded])]))
        assert calls, "the verdict came through the judge"
        assert rollout["reward"] == float(recorded["reward"])


async def test_a_judge_call_that_fails_is_judge_failed_even_where_the_server_scores_it_zero(tmp_path: Path) -> None:
    """text_to_sql catches its judge's failure and scores 0; equivalence_llm_judge lets NeMo Gym's failsafe mark it.
    Either way the rollout fails `judge_failed` (masked), never reward 0."""
    for server in ("text_to_sql", "equivalence_llm_judge"):
        row, recorded = recorded_rollouts(server)[0]
        (name,) = set(catalog.model_references(catalog.server_config_defaults(server)).values())

        async def down(request: dict[str, Any]) -> dict[str, Any]:
            raise ConnectionError("the judge's replicas are gone")

        host = built(server, routes=Routes(models={name: down}))
        with pytest.raises(Exception) as failed:
            await own_loop(host, row, ReplayModel([recording(tmp_path, [recorded])]))
        assert failure_kind(failed.value) is FailureKind.JUDGE_FAILED, server
        assert "ConnectionError: the judge's replicas are gone" in str(failed.value)


def test_a_model_reference_the_config_does_not_map_is_a_deploy_time_error_naming_it_and_the_key() -> None:
    environment = {"kind": "nemo_gym", "server": "simpleqa"}
    with pytest.raises(ConfigError) as e:
        validate_app_args({"environment": environment}, source="app.yaml", app="qa")
    message = str(e.value)
    assert "key `applications[qa].args.environment.models`" in message
    assert "calls model server `genrm_model` (its config's `judge_model_server.name`)" in message
    assert "`args.environment.models.genrm_model`" in message
    mapped = {**environment, "models": {"genrm_model": "judge"}}
    assert validate_app_args({"environment": mapped}, source="app.yaml", app="qa").environment is not None


# Gymnasium-style servers


async def test_a_gymnasium_server_runs_through_the_tool_loops_user_turn_with_per_step_rewards(tmp_path: Path) -> None:
    server = "example_multi_turn_gymnasium"
    host = built(server)
    info = host.describe()
    assert info.has_user_turn and info.steps_every_turn
    for row, recorded in recorded_rollouts(server):
        rollout = await own_loop(host, row, ReplayModel([recording(tmp_path, [recorded])]))
        assert rollout["reward"] == float(recorded["reward"])
        assert rollout["terminated"] is recorded["terminated"] and rollout["truncated"] is recorded["truncated"]
        assert rollout["step_rewards"][-1] == rollout["reward"] and sum(rollout["step_rewards"]) == rollout["reward"]
        follow_ups = row["follow_ups"] if "follow_ups" in row else row.get("verifier_metadata", {}).get("follow_ups")
        users = [i["content"] for i in rollout["response"]["output"] if i.get("role") == "user"]
        assert users == (follow_ups or users), "each observation is the next user turn"
    assert host.open_sessions == 0


async def test_a_gymnasium_steps_truncation_ends_the_episode_unterminated() -> None:
    host = built("example_multi_turn_gymnasium")
    row = {"responses_create_params": {"input": "hi"}, "follow_ups": ["more?"], "expected_answer": "yes"}
    state = await host.seed(row)
    answer = {"output": [assistant_message("no", "msg_no")]}
    turn, state = await host.user_turn(row, answer, state)
    assert turn == {"message": "more?", "reward": 0.0, "terminated": False, "truncated": False, "tool_outputs": []}
    turn, state = await host.user_turn(row, answer, state)
    assert turn["terminated"] and turn["reward"] == 0.0
    assert (await host.verify(row, answer, state))["reward"] == 0.0


# NeMo Gym's own agents, hosted unchanged


@pytest.mark.parametrize("server", ["example_single_tool_call", "example_session_state_mgmt", "xlam_fc"])
async def test_simple_agent_hosted_unchanged_gives_what_gym_serves_own_loop_gives(server: str, tmp_path: Path) -> None:
    for row, recorded in recorded_rollouts(server):
        path = recording(tmp_path, [recorded])
        ours = await own_loop(built(server), row, ReplayModel([path]))
        theirs = await hosted_agent("simple_agent", server, ReplayModel([path])).run(row)
        assert theirs["reward"] == ours["reward"] == float(recorded["reward"])
        kinds = [item["type"] for item in theirs["response"]["output"]]
        assert kinds == [item["type"] for item in ours["response"]["output"]], "the same episode, item by item"


@pytest.mark.parametrize(
    ("agent", "server"),
    [("tool_simulation_agent", "swe_pivot"), ("gymnasium_agent", "example_multi_turn_gymnasium")],
)
async def test_nemo_gyms_agents_hosted_unchanged_give_the_recorded_rewards(
    agent: str, server: str, tmp_path: Path
) -> None:
    for row, recorded in recorded_rollouts(server):
        rollout = await hosted_agent(agent, server, ReplayModel([recording(tmp_path, [recorded])])).run(row)
        assert rollout["reward"] == float(recorded["reward"])
        assert rollout["responses_create_params"]["input"], "the row NeMo Gym's /run returns"


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")  # NeMo Gym's own model_dump
async def test_an_agent_calling_a_server_name_the_application_lacks_fails_typed_at_once(tmp_path: Path) -> None:
    """simple_agent_with_compaction calls its model `policy_model_for_compaction`: unrouted, it fails naming it."""
    row, recorded = recorded_rollouts("example_single_tool_call")[0]
    agent = hosted_agent(
        "simple_agent_with_compaction", "example_single_tool_call", ReplayModel([recording(tmp_path, [recorded])])
    )
    with pytest.raises(UnroutedServerError) as e:
        await asyncio.wait_for(agent.run(row), 30)
    assert failure_kind(e.value) is FailureKind.ENV_ERROR
    assert "server `policy_model_for_compaction`" in str(e.value) and "`policy_model`" in str(e.value)


def test_an_unknown_agent_names_the_near_ones() -> None:
    agent = {"max_steps": 5, "nemo_gym": {"agent": "simple_agnt"}}
    environment = {"kind": "nemo_gym", "server": "example_single_tool_call"}
    with pytest.raises(ConfigError) as e:
        validate_app_args({"environment": environment, "agent": agent}, source="a.yaml", app="a")
    assert "key `applications[a].args.agent.nemo_gym.agent`" in str(e.value)
    assert "unknown NeMo Gym agent `simple_agnt`: did you mean `simple_agent`" in str(e.value)


# Per-server dependencies


def test_a_servers_runtime_env_installs_only_what_is_missing_and_keeps_gym_serves_versions() -> None:
    env = requirements.runtime_env("structeval")
    packages = env["pip"]["packages"]
    assert packages[0] == "toml", "the missing requirement"
    assert "ray==" + __import__("ray").__version__ in packages and any(p.startswith("openai==") for p in packages)
    assert requirements.runtime_env("structeval", "uv") == {"uv": {"packages": packages}}
    assert requirements.runtime_env("example_single_tool_call") == {}, "nothing missing: no environment to build"
    environment = {"kind": "nemo_gym", "server": "structeval", "dependencies": "pip"}
    assert validate_app_args({"environment": environment}, source="x", app="a").environment is not None
    with pytest.raises(ConfigError, match=r"imports what is not installed here: module `toml`"):
        validate_app_args({"environment": {**environment, "dependencies": "installed"}}, source="x", app="a")


def test_requirements_that_cannot_be_installed_are_named_at_deploy_time_with_their_line() -> None:
    environment = {"kind": "nemo_gym", "server": "instruction_following", "dependencies": "pip"}
    with pytest.raises(ConfigError) as e:
        validate_app_args({"environment": environment}, source="app.yaml", app="a")
    message = str(e.value)
    assert "key `applications[a].args.environment.server`" in message
    assert "`git+https://github.com/abukharin-nv/verifiable-instructions.git`: a URL, not a package" in message
    assert message.endswith("instruction_following/requirements.txt)")


def test_packages_a_server_lists_in_its_pyproject_are_read_and_a_git_source_is_named_as_a_url() -> None:
    """code_fim lists `human-eval-infilling` in pyproject.toml only, taken from git by `[tool.uv.sources]`."""
    lines = [line for line, _ in catalog.requirements(catalog.server_dir("code_fim"))]
    assert lines == ["human-eval-infilling @ git+https://github.com/wasiahmad/human-eval-infilling.git"]
    found = requirements.problems("code_fim")
    assert found == [f"`{lines[0]}`: a URL, not a package on the registries (install it into the image yourself)"]
    environment = {"kind": "nemo_gym", "server": "code_fim", "dependencies": "pip"}
    with pytest.raises(ConfigError) as e:
        validate_app_args({"environment": environment}, source="app.yaml", app="a")
    assert str(e.value).endswith("code_fim/pyproject.toml)")


def test_a_pyproject_dependency_from_a_registry_stays_a_plain_requirement(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("tiktoken\n")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["nemo-gym[dev]", "json-repair==0.53.0", "tiktoken>=0.7", "pkg"]\n'
        '[tool.uv.sources]\nnemo-gym = { path = "../..", editable = true }\n'
        'pkg = { git = "https://example.org/pkg.git", rev = "abc123" }\n'
    )
    lines = [line for line, _ in catalog.requirements(tmp_path)]
    assert lines == ["tiktoken", "json-repair==0.53.0", "pkg @ git+https://example.org/pkg.git@abc123"]


def test_a_config_value_that_selects_a_global_key_gets_its_default() -> None:
    """finance_sec_search's `${oc.select:use_cache,false}`: a hosted server's global config has no such key."""
    defaults = catalog.server_config_defaults("finance_sec_search")
    assert defaults["use_cache"] is False and defaults["cache_dir"] is None
    assert not any("${" in str(value) for value in defaults.values())


def test_an_agent_in_a_nested_folder_is_found_with_its_config() -> None:
    agent = "conversational_tool_use/simulation"
    assert catalog.agent_of("conversational_tool_use_agent") == agent
    folder = catalog.agent_dir(agent)
    assert catalog.module_of(folder) == "responses_api_agents.conversational_tool_use.simulation.app"
    assert catalog.agent_config_defaults(agent)["seed_first_user_message"] is True
    with pytest.raises(EnvError, match=r"unknown NeMo Gym agent `\.\./resources_servers/mcqa`"):
        catalog.agent_dir("../resources_servers/mcqa")


@pytest.mark.asyncio
async def test_every_answer_within_a_session_sets_its_cookie_again_as_nemo_gyms_session_middleware_does() -> None:
    """Some agents (conversational_tool_use/simulation) carry on with only the cookies of the last answer."""
    from gym_serve.environment.nemo_gym.host import SESSION_COOKIE

    host = built("example_single_tool_call")
    row = json.loads((catalog.data_dir("example_single_tool_call") / "example.jsonl").read_text().splitlines()[0])
    status, _, cookies = await host.http("/seed_session", json.dumps(row).encode(), {})
    assert status == 200 and set(cookies) == {SESSION_COOKIE}
    status, body, again = await host.http("/get_weather", b'{"city": "sf"}', cookies)
    assert status == 200 and b"sf" in body.lower()
    assert again == cookies
    verify = {**row, "response": {"output": [assistant_message("It is cold.", "msg_1")]}}
    *_, after = await host.http("/verify", json.dumps(verify).encode(), again)
    assert after == {} and host.open_sessions == 0  # the session ended: nothing names it any more


def test_an_agent_instance_gives_the_config_its_rollouts_were_recorded_with() -> None:
    """grl_sokoban's recordings ran 20 steps under `grl_sokoban_gymnasium_agent` (gymnasium_agent's default: 10)."""
    shipped = catalog.agent_instance_config("grl_sokoban_gymnasium_agent")
    assert shipped["max_steps"] == 20 and shipped["resources_server"]["name"] == "grl_sokoban"
    assert catalog.agent_instance_config("no_such_instance") == {}


def test_the_agent_instances_a_servers_own_configs_define_are_named() -> None:
    """circle_click's recordings name no agent; its one instance caps simple_agent at one step."""
    assert catalog.shipped_agent_instances("circle_click") == ["circle_click_simple_agent"]
    assert catalog.agent_instance_config("circle_click_simple_agent")["max_steps"] == 1
    instances = catalog.shipped_agent_instances("single_step_tool_use_with_argument_comparison")
    assert len(instances) == 6 and {catalog.agent_of(name) for name in instances} == {"tool_simulation_agent"}
