"""Try every resources server of the installed NeMo Gym under gym-serve's host, and say how far each gets.

For each server, in a process of its own (importing a server changes the process, and one may hang):
the deploy-time dependency check, building the server in-process (`NemoGymServer`), then replaying each of
NeMo Gym's own recordings of it (`data/example_rollouts.jsonl`) with the replay model and comparing the
reward with the recorded one. Rows go to a Markdown table, one line per server, with the first failure's
message where a step failed.

    python scripts/nemo_gym_survey.py [--servers NAME ...] [--out deployments/nemo_gym/SURVEY.md] [--timeout 180]
        [--jobs 2] [--judge-url URL --judge-model NAME] [--results FILE.json]

A judge-backed server whose judge calls NeMo Gym did not record runs with a live judge where `--judge-url` names
an OpenAI-compatible server (e.g. `vllm serve` of the tiny model): such a recording *ran end to end*, its reward
not compared. `--results` keeps every server's result as JSON, so a run of some `--servers` updates the table.

What is proven (with the known exceptions explained) is `tests/test_nemo_gym_servers.py`; this is the
survey behind the list of servers there and the README's "not supported" list.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def survey_one(server: str) -> dict[str, Any]:
    """How far `server` gets (run in its own process: `--one SERVER`, or a Ray worker with its own packages)."""
    from gym_serve.analysis.check import recorded_judge_calls, recorded_rollouts
    from gym_serve.environment.nemo_gym import catalog
    from gym_serve.environment.nemo_gym.host import hosted_server
    from gym_serve.models.http_endpoint import HTTPEndpoint

    result: dict[str, Any] = {"server": server}
    try:
        os.chdir(catalog.data_dir(server).parent)  # as an Environment replica runs it: files are relative to it
        catalog.check_server(server)
    except Exception as e:
        return {**result, "stage": "dependencies", "error": str(e)}
    try:
        pairs = recorded_rollouts(server)
    except Exception as e:
        return {**result, "stage": "recordings", "error": f"{type(e).__name__}: {e}"}
    if not pairs:
        return {**result, "stage": "recordings", "error": "no data/example_rollouts.jsonl recordings"}
    models = {"policy_model", *catalog.model_references(catalog.server_config_defaults(server)).values()}
    judged = sum(bool(recorded_judge_calls(recorded)) for _, recorded in pairs)
    try:
        hosted_server(server)  # builds once here, so a server that cannot start says so as such
    except Exception as e:  # a package it imports only when it starts is still a missing dependency
        stage = "dependencies" if "is not installed here" in str(e) else "build"
        return {**result, "stage": stage, "error": f"{type(e).__name__}: {e}"}

    async def replay_all() -> dict[str, Any]:
        agree, live, problems, agents = 0, 0, [], set()
        url = os.environ.get("SURVEY_JUDGE_URL")
        judge = HTTPEndpoint(url, timeout_s=300, max_retries=1) if url else None
        with tempfile.TemporaryDirectory() as tmp:
            for i, (row, recorded) in enumerate(pairs):
                outcome = await replay_one(server, row, recorded, models, Path(tmp) / str(i), judge)
                agents.add(outcome["agent"])
                if outcome["reward"] is not None and outcome["live_judge_calls"]:
                    live += 1  # its judge was live, not NeMo Gym's recorded verdict: it ran, nothing to compare
                elif outcome["reward"] is not None and outcome["reward"] == float(recorded.get("reward", "nan")):
                    agree += 1
                elif outcome["reward"] is not None:
                    problems.append(f"#{i}: reward {outcome['reward']}, recorded {recorded.get('reward')}")
                else:
                    problems.append(f"#{i}: {outcome['error']}")
        if judge is not None:
            await judge.close()
        return {"agree": agree, "live": live, "problems": problems, "agents": sorted(agents)}

    done = asyncio.run(replay_all())
    if any("ModuleNotFoundError: No module named" in problem for problem in done["problems"]):
        return {**result, "stage": "dependencies", "error": done["problems"][0]}  # imported only when it scores
    stage = "replays" if done["agree"] == len(pairs) else "replay"
    if stage == "replay" and done["live"] and done["agree"] + done["live"] == len(pairs):
        stage = "end to end"  # a judge-backed server whose judge calls NeMo Gym did not record: it ran, not agreed
    return {
        **result,
        "stage": stage,
        "agree": done["agree"],
        "live": done["live"],
        "recordings": len(pairs),
        "agents": done["agents"],
        "judged": judged,
        "error": "; ".join(done["problems"]),
    }


class LiveJudge:
    """A judge server's model calls: NeMo Gym's recorded verdicts where they answer, else (with `--judge-url`) a
    live OpenAI-compatible model over Chat Completions, each answer capped at `max_tokens`; `calls` counts those."""

    def __init__(self, recorded: Any, live: Any, model: str, max_tokens: int = 256) -> None:
        self.recorded, self.live, self.model, self.max_tokens = recorded, live, model, max_tokens
        self.calls = 0

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        from gym_serve.errors import FailureKind, failure_kind
        from gym_serve.models.http_endpoint import responses_over_chat
        from gym_serve.wire.chat import responses_request_to_chat

        try:
            return await self.recorded.responses(request, session)
        except Exception as e:
            if self.live is None or failure_kind(e) is not FailureKind.REPLAY_MISS:
                raise
        self.calls += 1
        chat = {**responses_request_to_chat(request), "model": self.model}
        chat["max_tokens"] = min(int(chat.get("max_tokens") or self.max_tokens), self.max_tokens)
        chat.pop("max_completion_tokens", None)
        if not chat.get("tools"):
            chat.pop("tool_choice", None)  # a judge request may name a choice among no tools; vLLM refuses that
        return await responses_over_chat(self.live, chat)


async def replay_one(
    server: str, row: dict[str, Any], recorded: dict[str, Any], models: set[str], folder: Path, judge: Any
) -> dict[str, Any]:
    """One recording: gym-serve's own loop first; where the replay model misses (a recording another agent made),
    the NeMo Gym agent that made it, hosted unchanged. Judge calls go to the replay model over the recording's own
    judge calls, where NeMo Gym kept them."""
    from gym_serve.analysis.check import recorded_judge_calls
    from gym_serve.environment.nemo_gym import catalog
    from gym_serve.environment.nemo_gym.agents import NemoGymAgent
    from gym_serve.environment.nemo_gym.host import hosted_server
    from gym_serve.environment.nemo_gym.routes import Routes
    from gym_serve.errors import FailureKind, failure_kind
    from gym_serve.rollout.loop import AgentConfig, run_episode
    from gym_serve.rollout.replay import ReplayModel

    folder.mkdir(parents=True)
    (folder / "policy.jsonl").write_text(json.dumps(recorded) + "\n")
    (folder / "judge.jsonl").write_text("".join(json.dumps(call) + "\n" for call in recorded_judge_calls(recorded)))

    def fresh() -> tuple[Any, Routes, LiveJudge]:
        verdicts = ReplayModel([folder / "judge.jsonl", folder / "policy.jsonl"])
        judging = LiveJudge(verdicts, judge, os.environ.get("SURVEY_JUDGE_MODEL", ""))
        routes = Routes(models={name: judging.responses for name in models})
        return ReplayModel([folder / "policy.jsonl"]), routes, judging

    policy, routes, judging = fresh()
    host = hosted_server(server, routes=routes)
    try:
        rollout = await run_episode(
            row, model=policy, env=host, env_info=host.describe(), config=AgentConfig(max_steps=50)
        )
        return {"agent": "gym-serve", "reward": float(rollout["reward"]), "live_judge_calls": judging.calls}
    except Exception as e:
        first = f"{type(e).__name__}: {e}"
        if failure_kind(e) is not FailureKind.REPLAY_MISS:
            return {"agent": "gym-serve", "reward": None, "error": first}
    agent = catalog.agent_of(str((recorded.get("agent_ref") or {}).get("name") or "")) or "simple_agent"
    policy, routes, judging = fresh()
    routes.models["policy_model"] = policy.responses
    host = hosted_server(server, routes=routes)

    async def to_server(method: str, path: str, body: bytes, cookies: dict[str, str]) -> Any:
        return await host.http(path, body, cookies)

    routes.apps[server] = to_server
    try:
        hosted = NemoGymAgent(agent, instance="survey_agent", routes=routes, resources_server=server)
        rollout = await hosted.run(row)
        return {"agent": agent, "reward": float(rollout["reward"]), "live_judge_calls": judging.calls}
    except Exception as e:
        return {"agent": agent, "reward": None, "error": f"{first}; {agent}: {type(e).__name__}: {e}"}


def run_isolated(server: str, timeout_s: float) -> dict[str, Any]:
    """`survey_one(server)` in a fresh interpreter, cut at `timeout_s`; a server whose packages are not installed
    here runs in a Ray worker whose environment Ray builds from its requirements.txt (`runtime_env`)."""
    command = [sys.executable, __file__, "--one", server]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"server": server, "stage": "timeout", "error": f"no answer within {timeout_s:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"server": server, "stage": "crash", "error": done.stderr.strip().splitlines()[-1:]}
    result = json.loads(lines[-1])
    if result["stage"] == "dependencies" and os.environ.get("SURVEY_RUNTIME_ENV"):
        return {**in_own_environment(server, timeout_s), "installed": True}
    return result


def in_own_environment(server: str, timeout_s: float) -> dict[str, Any]:
    """`survey_one(server)` in a Ray worker with the server's own packages (`runtime_env`), as a deployment with
    `dependencies: pip` runs it; a requirement that cannot be installed is named without trying."""
    import ray

    from gym_serve.environment.nemo_gym import requirements

    problems = requirements.problems(server)
    if problems:
        return {"server": server, "stage": "dependencies", "error": "; ".join(problems)}
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    runtime_env = requirements.runtime_env(server)
    judge = {k: v for k, v in os.environ.items() if k.startswith("SURVEY_JUDGE_")}
    runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **judge}
    task = ray.remote(survey_one).options(runtime_env=runtime_env, max_retries=0)
    ref = task.remote(server)
    try:
        return ray.get(ref, timeout=timeout_s * 4)  # the environment's build counts too
    except Exception as e:
        ray.cancel(ref, force=True)
        return {"server": server, "stage": "dependencies", "error": f"in its own environment: {type(e).__name__}: {e}"}


def table(results: list[dict[str, Any]]) -> str:
    order = ["replays", "end to end", "replay", "recordings", "build", "dependencies", "timeout", "crash"]
    counts = {stage: sum(r["stage"] == stage for r in results) for stage in order}
    lines = [
        "# NeMo Gym servers under gym-serve's host",
        "",
        f"Every resources server of the installed nemo-gym, tried by `scripts/nemo_gym_survey.py` "
        f"({len(results)} servers). *replays*: every recording gives its recorded reward; *replay*: some do not "
        "(the first problems shown); *end to end*: a judge-backed server NeMo Gym recorded no judge verdicts for, "
        "every recording ran with a live judge (a model server: its reward is not compared, `+N live judge`) or "
        "agreed; *recordings*: builds, but has no usable recordings; *build*: the server "
        "failed to start in-process; *dependencies*: the deploy-time check refused it (a package not installed "
        "here); *timeout*/*crash*: its process did not answer.",
        "",
        "Counts: " + ", ".join(f"{stage} {n}" for stage, n in counts.items() if n),
        "",
        "Reading the failures: judge models are Model-tier applications the server's references map to (here "
        "the replay model over the judge calls NeMo Gym recorded, else the live judge of `--judge-url`); "
        "Gymnasium-style servers run through gym-serve's `user_turn` and other agents' recordings through those "
        "agents hosted unchanged. What is left: `ReplayMissError` is a conversation no recording holds: a server "
        "whose observations are random and unseeded (`blackjack`, `grl_sokoban`, `grl_tetris`, "
        "`openair_congestion`), or an agent not hosted (`stirrup_agent`, `toolsandbox_agent`); a 422 naming "
        "`workdir`, `image_ref`, `repo` or `instance` is a sandbox or container task; a 422 naming a task field "
        "(`ground_truth`, `outputs`) is a recording whose prompt is in no `example.jsonl` row, so its task fields "
        "are lost; `URLError`, `LocalEntryNotFoundError` and `Couldn't reach` need the network or a download at "
        "start; `got multiple values for keyword argument` is a bug in the server's own verify. The servers "
        "`tests/test_nemo_gym_servers.py` proves (40, with a Serve config each in this folder) are among those "
        "that replay; the known exceptions there (`mcqa`, `math_with_judge`, `structured_outputs`) are explained "
        "in that test.",
        "",
        "| server | stage | recordings agreeing | agents | first problem |",
        "|---|---|---:|---|---|",
    ]
    for r in sorted(results, key=lambda r: (order.index(r["stage"]), r["server"])):
        agree = f"{r['agree']} / {r['recordings']}" if "agree" in r else ""
        agree += f" (+{r['live']} live judge)" if r.get("live") else ""
        agents = ", ".join(r.get("agents") or []) + (" (own environment)" if r.get("installed") else "")
        problem = re.sub(r"\S*/site-packages/", "site-packages/", str(r.get("error") or ""))  # no machine's paths
        problem = re.sub(re.escape(tempfile.gettempdir()) + r"/[^/\s]+/", "", problem)
        problem = problem.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{r['server']}` | {r['stage']} | {agree} | {agents} | {problem[:200]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--servers", nargs="+", help="only these servers (default: every one installed)")
    parser.add_argument("--out", type=Path, default=REPO / "deployments" / "nemo_gym" / "SURVEY.md")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per server")
    parser.add_argument("--jobs", type=int, default=2, help="servers tried at once")
    parser.add_argument("--judge-url", help="an OpenAI-compatible server for judge calls NeMo Gym did not record")
    parser.add_argument("--judge-model", default="", help="the model name to ask --judge-url for")
    parser.add_argument("--results", type=Path, help="every server's result as JSON: read, updated, written")
    args = parser.parse_args()
    if args.judge_url:
        os.environ.update(SURVEY_JUDGE_URL=args.judge_url, SURVEY_JUDGE_MODEL=args.judge_model)
    if args.one:
        print(json.dumps(survey_one(args.one)), flush=True)
        return
    from gym_serve.environment.nemo_gym import catalog

    servers = args.servers or catalog.available_servers()
    kept = json.loads(args.results.read_text()) if args.results and args.results.exists() else {}
    with ThreadPoolExecutor(args.jobs) as pool:
        for result in pool.map(lambda s: run_isolated(s, args.timeout), servers):
            print(f"{result['server']:<45} {result['stage']:<13} {str(result.get('error') or '')[:100]}", flush=True)
            kept[result["server"]] = result
            if args.results:
                args.results.write_text(json.dumps(kept, indent=1))  # a crash keeps what finished
    args.out.write_text(table(list(kept.values())))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
