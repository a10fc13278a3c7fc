"""NeMo Gym's own config files (`+config_paths=[...]`) mapped to Serve applications, on the configs nemo-gym 0.7.0
ships (several servers, agents and model servers); their bad input; and one real `gym-serve collect` with NeMo
Gym's config paths, as the README shows it, against the replay model: NeMo Gym's recorded rewards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_serve.cli import main
from gym_serve.environment import nemo_gym
from gym_serve.environment.nemo_gym import configs
from gym_serve.errors import ConfigError
from gym_serve.serving.config import load_serve_config
from tests.test_nemo_gym_serve import read, readme_command, run_readme_command

SINGLE_TOOL = "resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml"
OPENAI = "responses_api_models/openai_model/configs/openai_model.yaml"
VLLM = "responses_api_models/vllm_model/configs/vllm_model.yaml"
POLICY = ["+policy_base_url=http://127.0.0.1:9/v1", "+policy_api_key=sk-not-in-files", "+policy_model_name=gpt-x"]


def paths(*files: str) -> str:
    return f"+config_paths=[{','.join(files)}]"


def mapped(tmp: Path, overrides: list[str], **options: Any) -> dict[str, Any]:
    """The Serve config the overrides map to, as written, after the deploy-time validation of every application."""
    written = configs.write_serve_config(configs.read(overrides, cwd=tmp), tmp / "serve.yaml", **options)
    load_serve_config(written)
    return {app["name"]: app for app in yaml.safe_load(written.read_text())["applications"]}


@pytest.fixture(autouse=True)
def _keys_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("POLICY_MODEL", "JUDGE_MODEL"):
        monkeypatch.delenv(f"GYM_SERVE_NEMO_GYM_{name}_API_KEY", raising=False)


def test_the_quick_start_configs_map_to_one_application_named_after_the_agent(tmp_path: Path) -> None:
    apps = mapped(tmp_path, [paths(SINGLE_TOOL, OPENAI), *POLICY])
    (app,) = apps.values()
    assert app["name"] == "example_single_tool_call_simple_agent" == app["route_prefix"].lstrip("/")
    args = app["args"]
    assert args["environment"] == {"kind": "nemo_gym", "server": "example_single_tool_call", "config": {}}
    assert args["agent"] == {"max_steps": configs.MAX_STEPS}, "simple_agent as shipped: gym-serve's own loop"
    model = args["model"]
    assert (model["kind"], model["base_url"], model["model"], model["api"]) == (
        "openai",
        "http://127.0.0.1:9/v1",
        "gpt-x",
        "responses",
    )


def test_the_api_key_reaches_the_deploying_process_never_the_serve_config(tmp_path: Path) -> None:
    import os

    apps = mapped(tmp_path, [paths(SINGLE_TOOL, OPENAI), *POLICY])
    assert "sk-not-in-files" not in (tmp_path / "serve.yaml").read_text()
    variable = apps["example_single_tool_call_simple_agent"]["args"]["model"]["api_key_env"]
    assert os.environ[variable] == "sk-not-in-files"


def test_env_yaml_in_the_working_directory_supplies_the_policy_as_in_nemo_gyms_quick_start(tmp_path: Path) -> None:
    (tmp_path / "env.yaml").write_text(
        "policy_base_url: http://127.0.0.1:11/v1\npolicy_api_key: k\npolicy_model_name: m\n"
    )
    (app,) = mapped(tmp_path, [paths(SINGLE_TOOL, OPENAI)]).values()
    assert (app["args"]["model"]["base_url"], app["args"]["model"]["model"]) == ("http://127.0.0.1:11/v1", "m")
    (app,) = mapped(tmp_path, [paths(SINGLE_TOOL, OPENAI), "+policy_model_name=n"]).values()
    assert app["args"]["model"]["model"] == "n", "the command line overrides env.yaml"


def test_vllm_model_maps_to_chat_completions_or_with_token_ids_to_vllm_http(tmp_path: Path) -> None:
    (app,) = mapped(tmp_path, [paths(SINGLE_TOOL, VLLM), *POLICY]).values()
    assert app["args"]["model"] | {"api_key_env": None} == {
        "kind": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "gpt-x",
        "api": "chat",
        "api_key_env": None,
    }
    tokens = "+policy_model.responses_api_models.vllm_model.return_token_id_information=true"
    (app,) = mapped(tmp_path, [paths(SINGLE_TOOL, VLLM), *POLICY, tokens]).values()
    model = app["args"]["model"]
    assert (model["kind"], model["base_url"], model["tokenizer"]) == ("vllm_http", "http://127.0.0.1:9/v1", "gpt-x")


def test_a_judge_model_instance_becomes_a_model_application_the_server_calls(tmp_path: Path) -> None:
    judge = ["+judge_base_url=http://127.0.0.1:10/v1", "+judge_api_key=jk", "+judge_model_name=judge-x"]
    server = "resources_servers/over_refusal_detection/configs/over_refusal_detection.yaml"
    apps = mapped(tmp_path, [paths(server, OPENAI), *POLICY, *judge])
    assert set(apps) == {"over_refusal_detection_simple_agent", "judge_model"}
    assert apps["over_refusal_detection_simple_agent"]["args"]["environment"]["models"] == {
        "judge_model": "judge_model"
    }
    assert apps["judge_model"]["route_prefix"] is None and "environment" not in apps["judge_model"]["args"]
    assert apps["judge_model"]["args"]["model"]["base_url"] == "http://127.0.0.1:10/v1"


def test_a_judge_on_the_policy_stays_on_the_applications_own_model_tier(tmp_path: Path) -> None:
    server = "resources_servers/math_with_judge/configs/math_with_judge.yaml"
    (app,) = mapped(
        tmp_path,
        [paths(server), "+math_with_judge.resources_servers.math_with_judge.should_use_judge=true"],
        replay_policy=True,
    ).values()
    environment = app["args"]["environment"]
    assert environment["server"] == "math_with_judge" and environment["config"] == {"should_use_judge": True}
    assert "models" not in environment and app["args"]["model"] == {"kind": "replay"}


@pytest.mark.parametrize(
    ("server", "agent", "instance"),
    [
        ("blackjack", "gymnasium_agent", "blackjack_gymnasium_agent"),
        ("swe_pivot", "tool_simulation_agent", "swe_pivot_tool_simulation_agent"),
    ],
)
def test_other_agents_are_hosted_unchanged_with_their_config(
    tmp_path: Path, server: str, agent: str, instance: str
) -> None:
    config = f"resources_servers/{server}/configs/{server}.yaml"
    apps = mapped(tmp_path, [paths(config)], replay_policy=True)
    hosted = apps[instance]["args"]["agent"]["nemo_gym"]
    shipped = configs.read([paths(config)]).resolved(instance, configs.AGENTS)
    assert hosted["agent"] == agent and hosted["config"]["max_steps"] == shipped["max_steps"]
    assert apps[instance]["args"]["environment"]["server"] == server


def test_hosted_agents_hosts_simple_agent_too(tmp_path: Path) -> None:
    (app,) = mapped(tmp_path, [paths(SINGLE_TOOL)], replay_policy=True, hosted_agents=True).values()
    assert app["args"]["agent"] == {"nemo_gym": {"agent": "simple_agent", "config": {}}}


def test_files_resolve_from_the_working_directory_first_then_nemo_gyms_install_and_inherit_as_nemo_gym_does(
    tmp_path: Path,
) -> None:
    """A config in the working directory names a shipped one (nested config_paths, merged under it) and renames
    its agent with `_inherit_from` (the source block moves), setting a field: NeMo Gym's semantics."""
    (tmp_path / "mine.yaml").write_text(
        f"config_paths: [{SINGLE_TOOL}]\n"
        "weather_agent:\n"
        "  _inherit_from: example_single_tool_call_simple_agent\n"
        "  responses_api_agents: {simple_agent: {max_steps: 7}}\n"
    )
    config = configs.read([paths("mine.yaml")], cwd=tmp_path)
    assert (
        config.files[0] == nemo_gym.catalog.servers_root().parent / SINGLE_TOOL
        and config.files[1] == tmp_path / "mine.yaml"
    )
    apps = mapped(tmp_path, [paths("mine.yaml")], replay_policy=True)
    assert set(apps) == {"weather_agent"}
    assert apps["weather_agent"]["args"]["agent"] == {"max_steps": 7}


def test_ng_collect_rollouts_arguments_map_to_collects(tmp_path: Path) -> None:
    overrides = [
        paths(SINGLE_TOOL),
        "+agent_name=example_single_tool_call_simple_agent",
        "+input_jsonl_fpath=resources_servers/example_single_tool_call/data/example.jsonl",
        "+output_jsonl_fpath=results/out.jsonl",
        "+limit=2",
        "+num_repeats=3",
        "+num_samples_in_parallel=4",
        "+responses_create_params.temperature=0.5",
    ]
    found = configs.collect_arguments(configs.read(overrides, cwd=tmp_path))
    assert found == {
        "input": str(nemo_gym.data_dir("example_single_tool_call") / "example.jsonl"),
        "output": "results/out.jsonl",
        "agent": "example_single_tool_call_simple_agent",
        "limit": 2,
        "num_repeats": 3,
        "concurrency": 4,
        "temperature": 0.5,
    }


# ---- bad input ----------------------------------------------------------------------------------------------


def test_an_agent_that_is_not_installed_gets_the_near_matches(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown NeMo Gym agent `langgraph_agent`: did you mean") as caught:
        mapped(tmp_path, [paths("resources_servers/reasoning_gym/configs/reflection_agent.yaml")], replay_policy=True)
    assert caught.value.key == "reasoning_gym_langgraph_agent.responses_api_agents"


def test_up_shows_the_near_matches_on_the_terminal_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", paths("resources_servers/reasoning_gym/configs/reflection_agent.yaml"), "--replay-model"]) == 2
    err = capsys.readouterr().err
    assert "unknown NeMo Gym agent `langgraph_agent`: did you mean" in err and "Ray:" not in err


def test_a_server_that_is_not_installed_gets_the_near_matches(tmp_path: Path) -> None:
    (tmp_path / "typo.yaml").write_text(
        "weather: {resources_servers: {example_single_tool_cal: {entrypoint: app.py}}}\n"
        "weather_agent:\n"
        "  responses_api_agents:\n"
        "    simple_agent: {resources_server: {type: resources_servers, name: weather}}\n"
    )
    with pytest.raises(
        ConfigError,
        match=r"unknown NeMo Gym server `example_single_tool_cal`: did you mean `example_single_tool_call`",
    ):
        mapped(tmp_path, [paths("typo.yaml")], replay_policy=True)


def test_an_agent_naming_a_server_no_config_defines_gets_the_defined_near_ones(tmp_path: Path) -> None:
    agent = "example_single_tool_call_simple_agent.responses_api_agents.simple_agent"
    rename = f"+{agent}.resources_server.name=example_single_tool"
    with pytest.raises(
        ConfigError, match=r"names resources server `example_single_tool`.*did you mean `example_single_tool_call`"
    ):
        mapped(tmp_path, [paths(SINGLE_TOOL), rename], replay_policy=True)


def test_an_unmapped_judge_reference_names_it_and_the_key_that_maps_it(tmp_path: Path) -> None:
    server = "resources_servers/math_with_judge/configs/math_with_judge.yaml"
    judge = "+math_with_judge.resources_servers.math_with_judge.judge_model_server.name=judge_model"
    with pytest.raises(
        ConfigError, match=r"calls model server `judge_model` \(its config's `judge_model_server.name`\)"
    ) as caught:
        mapped(tmp_path, [paths(server), judge], replay_policy=True)
    assert "args.environment.models.judge_model" in str(caught.value)


def test_no_model_server_config_names_the_reference_and_the_two_ways_out(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"model server `policy_model` \(named by `example_single_tool_call_simple_agent\.responses_api_agents"
        r"\.simple_agent\.model_server\.name`\).*openai_model.yaml.*--replay-model",
    ):
        mapped(tmp_path, [paths(SINGLE_TOOL)])


def test_a_value_no_config_sets_names_its_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"policy_base_url.*\+KEY=VALUE") as caught:
        mapped(tmp_path, [paths(SINGLE_TOOL, OPENAI)])
    assert caught.value.key == "policy_model.responses_api_models.openai_model.openai_base_url"


def test_a_model_server_type_without_a_mapping_is_named(tmp_path: Path) -> None:
    local = "responses_api_models/local_vllm_model/configs/local_vllm_model.yaml"
    with pytest.raises(ConfigError, match=r"model server type `local_vllm_model` has no gym-serve mapping"):
        mapped(tmp_path, [paths(SINGLE_TOOL, local), *POLICY])


def test_malformed_yaml_names_file_and_line_on_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "broken.yaml").write_text("weather:\n  resources_servers: {example_single_tool_call: [\n")
    code = main(
        [
            "collect",
            paths(str(tmp_path / "broken.yaml")),
            "+input_jsonl_fpath=x.jsonl",
            f"+output_jsonl_fpath={tmp_path}/o.jsonl",
        ]
    )
    assert code == 2
    assert f"{tmp_path / 'broken.yaml'}, line 3" in capsys.readouterr().err


def test_a_missing_config_file_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file `nowhere.yaml` not found; looked in .*nowhere.yaml"):
        configs.read([paths("nowhere.yaml")], cwd=tmp_path)


def test_a_serve_config_and_nemo_gym_configs_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", "deployments/demo.yaml", paths(SINGLE_TOOL)]) == 2
    assert "not both" in capsys.readouterr().err


# ---- one real run -------------------------------------------------------------------------------------------


@pytest.mark.serve
@pytest.mark.timeout(700)
def test_the_readmes_collect_with_nemo_gyms_config_paths_gives_nemo_gyms_recorded_rewards(tmp_path: Path) -> None:
    """The README's `gym-serve collect "+config_paths=[...]" +input_jsonl_fpath=...`, as a user runs it (one
    Serve start): every example row's rollout, rewarded as NeMo Gym recorded it."""
    result = run_readme_command(readme_command('gym-serve collect "+config_paths='), tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    rollouts = read(tmp_path / "results" / "example_single_tool_call_rollouts.jsonl")
    recorded = read(nemo_gym.data_dir("example_single_tool_call") / "example_rollouts.jsonl")
    assert len(rollouts) == len(recorded) == 5
    assert {r["agent_ref"]["name"] for r in rollouts} == {"example_single_tool_call_simple_agent"}

    def question(row: dict[str, Any]) -> str:
        return str(row["responses_create_params"]["input"][-1]["content"])

    assert {question(r): r["reward"] for r in rollouts} == {question(r): r["reward"] for r in recorded}
    written = tmp_path / "results" / "example_single_tool_call_rollouts_serve_config.yaml"
    assert [s.name for s in load_serve_config(written)] == ["example_single_tool_call_simple_agent"]
