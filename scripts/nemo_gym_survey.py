"""Try every resources server of the installed NeMo Gym under gym-serve's host, and say how far each gets.

For each server, in a process of its own (importing a server changes the process, and one may hang):
the deploy-time dependency check, building the server in-process (`NemoGymServer`), then replaying each of
NeMo Gym's own recordings of it (`data/example_rollouts.jsonl`) with the replay model and comparing the
reward with the recorded one. Rows go to a Markdown table, one line per server, with the first failure's
message where a step failed.

    python scripts/nemo_gym_survey.py [--servers NAME ...] [--out deployments/nemo_gym/SURVEY.md] [--timeout 180]
        [--jobs 2] [--judge-url URL --judge-model NAME] [--results FILE.json]
    python scripts/nemo_gym_survey.py --render-only --results FILE.json [--out ...]   # the table again, nothing run

A judge-backed server whose judge calls NeMo Gym did not record runs with a live judge where `--judge-url` names
an OpenAI-compatible server (e.g. `vllm serve` of the tiny model): such a recording *ran end to end*, its reward
not compared. That server also stands for a config's `${policy_base_url}` (`survey_config`), and a server with no
usable recordings runs its example tasks with it as policy and judge (`live_policy`). `--results` keeps every
server's result as JSON, so a run of some `--servers` updates the table.
Each server that does not pass gets one `reason` (`REASONS`): issue 31's fixed list first, a few named others
where none of those fits.

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
import threading
import traceback
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def survey_one(server: str) -> dict[str, Any]:
    """How far `server` gets (run in its own process: `--one SERVER`, or a Ray worker with its own packages)."""
    from gym_serve.analysis.check import recorded_rollouts
    from gym_serve.environment.nemo_gym import catalog
    from gym_serve.environment.nemo_gym.host import hosted_server
    from gym_serve.rollout.replay import recorded_judge_calls

    result: dict[str, Any] = {"server": server}
    try:
        os.chdir(catalog.data_dir(server).parent)  # as an Environment replica runs it: files are relative to it
        catalog.check_server(server)
    except Exception as e:
        return {**result, "stage": "dependencies", "error": str(e)}
    try:
        pairs, unusable = recorded_rollouts(server), "no data/example_rollouts.jsonl recordings"
        if pairs and not any("response" in recorded for _, recorded in pairs):
            pairs, unusable = [], "no recording has a `response`: task rows, not rollouts"
    except Exception as e:
        pairs, unusable = [], f"{type(e).__name__}: {e}"
    references = set(catalog.model_references(catalog.server_config_defaults(server)).values())
    models = {"policy_model", *references}
    endpoints = dict.fromkeys(references, model_address())
    config = survey_config(server)
    if not pairs and os.environ.get("SURVEY_JUDGE_URL"):
        try:
            ran = asyncio.run(live_policy(server, config, models, endpoints))
        except Exception as e:
            ran = {"stage": "recordings", "error": f"{type(e).__name__}: {e}"}
        if ran["stage"] == LIVE_POLICY:
            return {**result, **ran, "unusable": unusable}
        return {**result, "stage": "recordings", "error": f"{unusable}; with a live policy: {ran['error']}"}
    if not pairs:
        return {**result, "stage": "recordings", "error": unusable}
    judged = sum(bool(recorded_judge_calls(recorded)) for _, recorded in pairs)
    try:
        hosted_server(server, config, endpoints=endpoints)  # builds once here, so a server that cannot start says so
    except Exception as e:  # a package it imports only when it starts is still a missing dependency
        stage = "dependencies" if "is not installed here" in str(e) else "build"
        return {**result, "stage": stage, "error": f"{type(e).__name__}: {e}", "where": server_line(e)}

    async def replay_all() -> dict[str, Any]:
        agree, live, problems, agents, where = 0, 0, [], set(), None
        judge = live_model()
        with tempfile.TemporaryDirectory() as tmp:
            for i, (row, recorded) in enumerate(pairs):
                folder = Path(tmp) / str(i)
                outcome = await replay_one(server, config, row, recorded, models, endpoints, folder, judge)
                agents.add(outcome["agent"])
                if outcome["reward"] is not None and outcome["live_judge_calls"]:
                    live += 1  # its judge was live, not NeMo Gym's recorded verdict: it ran, nothing to compare
                elif outcome["reward"] is not None and outcome["reward"] == float(recorded.get("reward", "nan")):
                    agree += 1
                elif outcome["reward"] is not None:
                    problems.append(f"#{i}: reward {outcome['reward']}, recorded {recorded.get('reward')}")
                else:
                    where = where if problems else outcome.get("where")  # the line that goes with the first problem
                    problems.append(f"#{i}: {outcome['error']}")
        if judge is not None:
            await judge.close()
        return {"agree": agree, "live": live, "problems": problems, "agents": sorted(agents), "where": where}

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
        "where": done["where"],
    }


def server_line(error: BaseException) -> str | None:
    """`resources_servers/<server>/<file>.py:<line>`: the innermost frame of NeMo Gym's server code on the error's
    chain (gym-serve re-raises a server's error `from` it), so a bug in the server is named by its line."""
    where, seen = None, set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for frame in traceback.extract_tb(current.__traceback__):
            if "/resources_servers/" in frame.filename:
                where = f"resources_servers/{frame.filename.split('/resources_servers/', 1)[1]}:{frame.lineno}"
        current = current.__cause__ or current.__context__
    return where


def live_model() -> Any:
    """`--judge-url`'s model server as an `HTTPEndpoint` (the caller closes it); None without one."""
    from gym_serve.models.http_endpoint import HTTPEndpoint

    url = os.environ.get("SURVEY_JUDGE_URL")
    return HTTPEndpoint(url, timeout_s=300, max_retries=1) if url else None


async def live_policy(
    server: str, config: dict[str, Any], models: set[str], endpoints: dict[str, str], tasks: int = 5
) -> dict[str, Any]:
    """A server with no usable recordings, end to end: its first `tasks` example rows through gym-serve's loop
    with `--judge-url`'s model as the policy and as every model the server references (`models`). It ran;
    nothing is compared (there is nothing recorded to compare with)."""
    from gym_serve.environment.nemo_gym import catalog
    from gym_serve.environment.nemo_gym.host import hosted_server
    from gym_serve.environment.nemo_gym.routes import Routes
    from gym_serve.rollout.loop import AgentConfig, run_episode

    lines = (catalog.data_dir(server) / "example.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    judge = live_model()
    live = LiveJudge(None, judge, os.environ.get("SURVEY_JUDGE_MODEL", ""))
    routes = Routes(models=dict.fromkeys(models, live.responses))
    ran, problems = 0, []
    try:
        host = hosted_server(server, config, routes=routes, endpoints=endpoints)
        for i, row in enumerate(rows[:tasks]):
            try:
                rollout = await run_episode(
                    row, model=live, env=host, env_info=host.describe(), config=AgentConfig(max_steps=10)
                )
                float(rollout["reward"])  # scored: a rollout without a reward is a problem, not a run
                ran += 1
            except Exception as e:
                problems.append(f"#{i}: {type(e).__name__}: {e}")
    finally:
        await judge.close()
    stage = LIVE_POLICY if ran == len(rows[:tasks]) and ran else "recordings"
    return {"stage": stage, "live": ran, "agents": ["gym-serve, live policy"], "error": "; ".join(problems)}


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
            if self.recorded is not None:  # None: every call is live (a server with no recordings)
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


RECORDED_WITH: dict[str, dict[str, Any]] = {
    # server: the config its recordings were made with, where it is not the shipped one (each row shows it)
    "lc_niah": {"overlap_metric_rule": "lcs"},  # an older server's: each reasoning_overlap is its overlap_lcs
}

POLICY_VARIABLES = ("policy_base_url", "policy_api_key", "policy_model_name")
"""What NeMo Gym's env.yaml gives every server (`${policy_base_url}` in a shipped config): the policy's server."""


def survey_config(server: str) -> dict[str, Any]:
    """The config the survey hosts `server` with: `RECORDED_WITH`'s, and with `--judge-url`, each shipped field
    that is one of `POLICY_VARIABLES` (verifif's judge, speed_bench's /metrics) set to that model server (through
    `PolicyForwarder`), as a NeMo Gym user's env.yaml sets them; without it they stay unresolved and the server
    says so."""
    from gym_serve.environment.nemo_gym import catalog

    forwarder, judge = policy_forwarder(), os.environ.get("SURVEY_JUDGE_URL", "")
    url = forwarder.url + urllib.parse.urlsplit(judge).path if forwarder else None
    values = dict(zip(POLICY_VARIABLES, (url, "none", os.environ.get("SURVEY_JUDGE_MODEL", "")), strict=True))
    config: dict[str, Any] = {}
    for key, value in catalog.server_config_defaults(server).items():
        variable = re.fullmatch(r"\$\{(\w+)\}", value) if isinstance(value, str) else None
        if url and variable and variable.group(1) in values:
            config[key] = values[variable.group(1)]
    return {**config, **RECORDED_WITH.get(server, {})}


def recording_agent(server: str, recorded: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """`(instance, agent, config)` that made a recording: the agent instance its `agent_ref` names, else the one
    the server's own configs define (else the agent all their instances run, with its defaults), else
    simple_agent; the config is what the instance sets (e.g. circle_click_simple_agent's max_steps: 1)."""
    from gym_serve.environment.nemo_gym import catalog

    instance = str((recorded.get("agent_ref") or {}).get("name") or "")
    if not catalog.agent_of(instance):
        shipped = catalog.shipped_agent_instances(server)
        agents = {catalog.agent_of(name) for name in shipped}
        if len(shipped) == 1:
            instance = shipped[0]
        elif len(agents) == 1 and None not in agents:
            return "", str(agents.pop()), {}
    agent = catalog.agent_of(instance)
    if agent is None:
        return "", "simple_agent", {}
    config = {k: v for k, v in catalog.agent_instance_config(instance).items() if k not in INSTANCE_ONLY}
    return instance, agent, config


INSTANCE_ONLY = ("entrypoint", "resources_server", "model_server", "datasets")
"""What an agent instance's shipped block names that is not the agent's to take here: where it runs, the servers
it reaches (the survey routes them), the datasets NeMo Gym's CLI collects from."""


async def replay_one(
    server: str,
    config: dict[str, Any],
    row: dict[str, Any],
    recorded: dict[str, Any],
    models: set[str],
    endpoints: dict[str, str],
    folder: Path,
    judge: Any,
) -> dict[str, Any]:
    """One recording: gym-serve's own loop first; where the replay model misses (a recording another agent made),
    the NeMo Gym agent that made it, hosted unchanged. Judge calls go to the replay model over the recording's own
    judge calls, where NeMo Gym kept them; `endpoints` are the addresses a server may look its judges up by."""
    from gym_serve.environment.nemo_gym.agents import NemoGymAgent
    from gym_serve.environment.nemo_gym.host import hosted_server
    from gym_serve.environment.nemo_gym.routes import Routes
    from gym_serve.errors import FailureKind, failure_kind
    from gym_serve.rollout.loop import AgentConfig, run_episode
    from gym_serve.rollout.replay import ReplayModel, recorded_judge_calls

    folder.mkdir(parents=True)
    (folder / "policy.jsonl").write_text(json.dumps(recorded) + "\n")
    (folder / "judge.jsonl").write_text("".join(json.dumps(call) + "\n" for call in recorded_judge_calls(recorded)))

    def fresh() -> tuple[Any, Routes, LiveJudge]:
        verdicts = ReplayModel([folder / "judge.jsonl", folder / "policy.jsonl"])
        judging = LiveJudge(verdicts, judge, os.environ.get("SURVEY_JUDGE_MODEL", ""))
        routes = Routes(models={name: judging.responses for name in models})
        return ReplayModel([folder / "policy.jsonl"]), routes, judging

    forwarder = policy_forwarder()
    forwarded = forwarder.calls if forwarder else 0

    def live_calls(judging: LiveJudge) -> int:
        return judging.calls + (forwarder.calls - forwarded if forwarder else 0)

    policy, routes, judging = fresh()
    host = hosted_server(server, config, routes=routes, endpoints=endpoints)
    try:
        rollout = await run_episode(
            row, model=policy, env=host, env_info=host.describe(), config=AgentConfig(max_steps=50)
        )
        return {"agent": "gym-serve", "reward": float(rollout["reward"]), "live_judge_calls": live_calls(judging)}
    except Exception as e:
        first = f"{type(e).__name__}: {e}"
        if failure_kind(e) is not FailureKind.REPLAY_MISS:
            return {"agent": "gym-serve", "reward": None, "error": first, "where": server_line(e)}
    _, agent, agent_config = recording_agent(server, recorded)
    policy, routes, judging = fresh()
    routes.models["policy_model"] = policy.responses
    host = hosted_server(server, config, routes=routes, endpoints=endpoints)

    async def to_server(method: str, path: str, body: bytes, cookies: dict[str, str]) -> Any:
        return await host.http(path, body, cookies)

    routes.apps[server] = to_server
    try:
        hosted = NemoGymAgent(
            agent, instance="survey_agent", routes=routes, resources_server=server, config=agent_config
        )
        rollout = await hosted.run(row)
        return {"agent": agent, "reward": float(rollout["reward"]), "live_judge_calls": live_calls(judging)}
    except Exception as e:
        error = f"{first}; {agent}: {type(e).__name__}: {e}"
        return {"agent": agent, "reward": None, "error": error, "where": server_line(e)}


_started: dict[str, str] = {}
"""`model_address`'s one address per process (a plain dict: a Ray worker gets `survey_one` and what it calls by
value, and a `functools.cache` wrapper would be looked up by name in the worker's `__main__`)."""


def model_address() -> str:
    """The address a server finds its judge models at (`endpoints`), where it looks one up in NeMo Gym's global
    config instead of calling it by name (xstest polls its judge's address, and posts to it, before it starts):
    a local HTTP server, started once per process, that answers every request 404. The judge calls themselves go
    by name, and a name the host routes is never called over HTTP (`routes.routed_server_client`)."""

    class NotHere(QuietHandler):
        def answer(self) -> None:
            self.reply(404, b'{"detail":"the survey\'s models answer by name, through gym-serve\'s routes"}')

        do_GET = do_POST = answer

    if "address" not in _started:
        _started["address"] = serve_locally(NotHere)
    return _started["address"]


class QuietHandler(BaseHTTPRequestHandler):
    """A handler of the survey's local HTTP servers: JSON answers, no access log."""

    def reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


def serve_locally(handler: type[BaseHTTPRequestHandler]) -> str:
    """`handler` served on a free loopback port from a daemon thread: its base URL."""
    http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{http.server_address[1]}"


class PolicyForwarder:
    """The address the survey gives a server's `${policy_base_url}` (verifif's judge, speed_bench's /metrics):
    a local HTTP server that forwards every request to `--judge-url`'s server and counts the model calls (POSTs)
    it forwards, so a recording judged over HTTP, not through gym-serve's routes, counts as live too."""

    def __init__(self, target: str) -> None:
        self.target, self.calls = target.rstrip("/"), 0
        forwarder = self

        class Forward(QuietHandler):
            def forward(self) -> None:
                posted = self.command == "POST"
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if posted else None
                forwarder.calls += posted
                headers = {"Content-Type": self.headers.get("Content-Type") or "application/json"}
                request = urllib.request.Request(forwarder.target + self.path, body, headers, method=self.command)
                try:
                    with urllib.request.urlopen(request, timeout=300) as answer:
                        status, data = answer.status, answer.read()
                except urllib.error.HTTPError as e:
                    status, data = e.code, e.read()
                self.reply(status, data)

            do_GET = do_POST = forward

        self.url = serve_locally(Forward)


_forwarders: dict[str, PolicyForwarder] = {}


def policy_forwarder() -> PolicyForwarder | None:
    """This process's `PolicyForwarder` to `--judge-url`'s server; None without one."""
    url = os.environ.get("SURVEY_JUDGE_URL")
    if url and "policy" not in _forwarders:
        split = urllib.parse.urlsplit(url)
        _forwarders["policy"] = PolicyForwarder(f"{split.scheme}://{split.netloc}")
    return _forwarders.get("policy")


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
    from gym_serve.serving.cluster import start_local

    problems = requirements.problems(server)
    if problems:
        return {"server": server, "stage": "dependencies", "error": "; ".join(problems)}
    if not ray.is_initialized():
        start_local(num_cpus=2, include_dashboard=False, log_to_driver=False)
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


LIVE_POLICY = "end to end, no recordings"
"""The stage of a server with no usable recordings whose example tasks all ran with a live policy and judge."""

PASSING = ("replays", "end to end", LIVE_POLICY)
"""The stages the survey counts as a server that runs: every recording agrees, or ran end to end (with a live
judge where NeMo Gym recorded no verdicts, or, where it recorded nothing usable, a live policy too)."""

NETWORK = "needs network or a data download at start"
GPU = "needs a GPU"
SANDBOX = "needs a container image or a remote sandbox"
UNREGISTERED = "a package that is not on the registries"
SERVER_BUG = "a bug in the server itself"
ISSUE_REASONS = (NETWORK, GPU, SANDBOX, UNREGISTERED, SERVER_BUG)
"""Issue 31's fixed list of why a server does not pass."""

OTHER_AGENT = "recordings of an agent that does not run here"
UNSEEDED = "observations random and unseeded"
LOST_TASK = "recording's task not in example.jsonl"
NO_RECORDINGS = "no usable recordings"
LIBRARY = "not a server"
HOST_GAP = "a gap in gym-serve's host"
OLD_RECORDING = "recorded by an older NeMo Gym"
LOADED_CPU = "a time limit the loaded CPU misses"
NO_JUDGE = "needs a live judge"
UNEXPLAINED = "not yet explained"
FURTHER_REASONS = {
    OTHER_AGENT: "NeMo Gym recorded them with an agent that is not among its agents, or that fails or misses hosted",
    UNSEEDED: "each session draws its own observations, so no recording can be played again",
    LOST_TASK: "the recording's prompt is in no `example.jsonl` row, so task fields verify needs (or a seed) are lost",
    NO_RECORDINGS: "placeholder rows, or task rows that are not rollouts",
    LIBRARY: "a folder of `resources_servers/` that other servers import",
    HOST_GAP: "what gym-serve's host or this survey does not do yet: ours to close",
    OLD_RECORDING: "NeMo Gym 0.7.0 itself scores the recording otherwise",
    LOADED_CPU: "a check's own time limit, missed on a loaded CPU",
    NO_JUDGE: "model calls NeMo Gym did not record (a judge, a simulator), and the run had no `--judge-url`",
    UNEXPLAINED: "a replay miss or a reward nobody has traced yet",
}
"""Where none of the issue's five fits: each named for what it is, and what it means (the table's legend)."""

REASONS = ISSUE_REASONS + tuple(FURTHER_REASONS)


def _url_packages(found: re.Match[str], result: dict[str, Any]) -> str:
    """The names of the requirements the dependency check refused as URLs (`name @ git+...`, a bare git URL or a
    wheel's URL), each as its project is called."""
    names = []
    for line in re.findall(r"`([^`]+)`: a URL, not a package on the registries", str(result.get("error"))):
        if " @ " in line:
            names.append(line.split(" @ ")[0].strip())
        else:
            last = re.sub(r"(\.git)?(@[^/]*)?$", "", line.rstrip("/").rsplit("/", 1)[-1])
            names.append(last.split("-")[0] if last.endswith(".whl") else last)
    return f"{UNREGISTERED}: " + ", ".join(f"`{name}` (a URL)" for name in names)


def _bug_line(found: re.Match[str], result: dict[str, Any]) -> str:
    where = result.get("where") or "line not kept (the result has no traceback)"
    return f"{SERVER_BUG}: `{where}` passes `{found[1]}` twice"


SANDBOX_FIELDS = "workdir|image_ref|repo|docker_image|instance"
"""A task field that names the container image, repository or sandbox a task runs in."""

RULES: list[tuple[str, Any]] = [
    # (a pattern on the first problem, the reason: a string, or a function of the match and the result), in order
    (r"not a recorded rollout|not valid JSON|KeyError: 'responses_create_params'|task rows, not", NO_RECORDINGS),
    (r"a URL, not a package on the registries", _url_packages),
    (r"got multiple values for keyword argument '(\w+)'", _bug_line),
    (rf'"loc":\["body","({SANDBOX_FIELDS})"\]', lambda m, r: f"{SANDBOX}: the task's `{m[1]}`"),
    (r"Sandbox provider reference|module `docker`", lambda m, r: f"{SANDBOX}: {m[0]}"),
    (r"CUDA|NVIDIA driver|no GPU|GPUs? (?:is|are) not available", lambda m, r: f"{GPU}: {m[0]}"),
    (r"LocalEntryNotFoundError|Hugging Face dataset", lambda m, r: f"{NETWORK}: the Hugging Face Hub"),
    (r"git clone|'git', 'clone'", lambda m, r: f"{NETWORK}: `git clone`"),
    (r"NLTK Downloader", lambda m, r: f"{NETWORK}: NLTK data"),
    (
        r"URLError|Name or service not known|NameResolutionError|ENOTFOUND|Couldn't reach",
        lambda m, r: f"{NETWORK}: a host it cannot reach ({m[0]})",
    ),
    (r"cannot tell which class is the server", lambda m, r: f"{LIBRARY}: a library other servers import"),
    (r"\$(?:\{|%7B)([\w.]+)", lambda m, r: f"{HOST_GAP}: `${{{m[1]}...}}` in its config is not resolved"),
    (r"Missing key (\w+)", lambda m, r: f"{HOST_GAP}: model reference `{m[1]}` not mapped"),
    (r"ResolutionImpossible", lambda m, r: f"{HOST_GAP}: its requirements conflict with gym-serve's own packages"),
    (r"is not installed here", lambda m, r: f"{HOST_GAP}: its packages are not installed (`SURVEY_RUNTIME_ENV=1`)"),
    (r'"loc":\["body","(\w+)"\]', lambda m, r: f"{LOST_TASK}: its `{m[1]}` is lost"),
    (r"unknown NeMo Gym agent `([^`]+/[^`]+)`", lambda m, r: f"{HOST_GAP}: agent `{m[1]}`, a nested folder"),
    (r"unknown NeMo Gym agent `([^`]+)`", lambda m, r: f"{OTHER_AGENT}: `{m[1]}` is no NeMo Gym agent"),
    (r"ReplayMissError", lambda m, r: f"{UNEXPLAINED}: a conversation the recording does not hold"),
    (r"reward \S+, recorded", lambda m, r: f"{UNEXPLAINED}: a reward other than the recorded one"),
]

OVERRIDES: dict[str, tuple[str, str]] = {
    # server: (its reason, why its result's text is not enough), each read in NeMo Gym 0.7.0's source
    "bigcodebench": (f"{NETWORK}: builds its own venv", "the text names uv; setup_bcb_venv.py then pip-installs"),
    "deepswe": (f"{SANDBOX}: task images", "a missing folder; its tasks come from `prepare`, each runs in its image"),
    "google_search": (f"{NETWORK}: Google's search API", "an import error first; its one tool calls Google"),
    "openenv": (f"{UNREGISTERED}: `openenv-coding_env` (a URL)", "a missing module; requirements.txt has its git URL"),
    "terminal_bench_4": (f"{SANDBOX}: its `environment` config", "a config field: the container each task runs in"),
    "competitive_coding_challenges": (
        f"{SANDBOX}: a NeMo-Skills sandbox",
        "a timeout; ccc_eval.py runs code over HTTP",
    ),
    "critpt": (f"{NETWORK}: artificialanalysis.ai's API", "a timeout; its verify posts to that API (app.py:138)"),
    "ether0": (f"{UNREGISTERED}: `ether0`", "the text says unlisted; ether0 is on GitHub, not on PyPI"),
    "wordle": (f"{NETWORK}: its word list", "a missing file; generate_data.py, which makes it, downloads it"),
    "vibench": (f"{NETWORK}: a checkout of the VIBench repository", "a missing file under VIBENCH_REPO_ROOT"),
    "osworld": (f"{SANDBOX}: remote Docker/QEMU workers", "a 401 from its session service (its README)"),
    "math_formal_lean": (f"{SANDBOX}: a Lean sandbox over HTTP", "a reward; only the recording its sandbox proved"),
    "swerl_gen": (f"{SANDBOX}: the task's image", "a reward; only the recording its sandbox passed (its README)"),
    "blackjack": (UNSEEDED, "a replay miss; task_data.py: dealt from a fresh unseeded random.Random() per session"),
    "grl_tetris": (
        f"{UNSEEDED}: each piece after the first",
        "a replay miss; reset seeds the first board, tetris_env.py:134 draws later pieces from the unseeded `random`",
    ),
    "openair_congestion": (
        f"{NO_RECORDINGS}: written by a scripted policy",
        "a replay miss; generate_example_rollouts.py wrote them: one call, no observation in its input",
    ),
    "finance_sec_search": (f"{NETWORK}: SEC's company_tickers.json", "app.py:712 downloads it from sec.gov at start"),
    "gdpval": (f"{OTHER_AGENT}: `stirrup_agent` fails hosted", "the text is the hosted agent's own error"),
    "example_mcp_weather": (
        f"{OTHER_AGENT}: `claude_code_agent`, over MCP",
        "a replay miss; its one shipped agent is Claude Code reaching the tools over MCP: it saw the tool's text, "
        "the host's route answers JSON",
    ),
    "toolsandbox": (f"{OTHER_AGENT}: `toolsandbox_agent` misses", "a replay miss of that agent, hosted"),
    "conversational_tool_use_simulation": (
        f"{NO_JUDGE}: its `simulator_model` plays the user and the tools, and judges",
        "a reward; the calls it makes to `simulator_model` are not in the recordings (no judge calls kept)",
    ),
    "speed_bench": (
        f"{NO_JUDGE}: `${{policy_base_url}}`, the policy's vLLM /metrics",
        "its verify reads speculative-decoding counters from the policy server's /metrics; with `--judge-url` the "
        "survey gives it that server (as NeMo Gym's env.yaml would), without one its URL stays unresolved",
    ),
    "verifif": (
        f"{NO_JUDGE}: `${{policy_base_url}}`, its judge's URL",
        "its judge is the policy over HTTP, no verdict recorded; `--judge-url` gives it one (`survey_config`)",
    ),
    "deepsearchqa": (
        f"{NETWORK}: Exa web search, from Claude Code in a container (`harness_exa_search`)",
        "a replay miss; its recordings' agent runs Claude Code in a sandbox image with Exa's search API over MCP",
    ),
    "iheval": (f"{SERVER_BUG}: `resources_servers/iheval/app.py:769` passes `row_id` twice", "run kept no trace"),
    "omniscience": (f"{SERVER_BUG}: `resources_servers/omniscience/app.py:330` passes `verdict` twice", "idem"),
    "math_with_code": (
        f"{OLD_RECORDING}: its tool's answer since gained `success`, `error_message`",
        "a replay miss after the first tool call; app.py:49 answers both, the recorded tool outputs have neither",
    ),
    "mcqa": (f"{OLD_RECORDING}: 0.7.0 scores #2 1.0", "a reward; tests/test_nemo_gym_servers.py's KNOWN"),
    "math_with_judge": (f"{LOADED_CPU}: math-verify's 5 s", "a reward; tests/test_nemo_gym_servers.py's SLOW_MATH"),
}
"""Servers whose result's text does not say why (a timeout, a replay miss, a reward); each with the one-line why."""


def first_problem(result: dict[str, Any]) -> str:
    """The first recording's problem (`#0: ...; #1: ...` keeps only `#0`), or the whole error of an earlier stage."""
    error = result.get("error") or ""
    error = "; ".join(error) if isinstance(error, list) else str(error)
    return re.split(r"; (?=#\d+: )", error)[0]


def reason(result: dict[str, Any]) -> str:
    """Why a server the survey does not count as passing does not: one of `REASONS`, then `: ` and what names it
    (the package, the file and line, the agent, the field); "" for a server that passes.

    >>> reason({"server": "x", "stage": "build", "error": "URLError: <urlopen error [Errno -2] ...>"})
    'needs network or a data download at start: a host it cannot reach (URLError)'
    """
    if result["stage"] in PASSING:
        return ""
    if result["server"] in OVERRIDES:
        return OVERRIDES[result["server"]][0]
    problem = first_problem(result)
    for pattern, why in RULES:
        found = re.search(pattern, problem)
        if found:
            return why if isinstance(why, str) else str(why(found, result))
    return f"{UNEXPLAINED}: {result['stage']}"


def reason_of(text: str) -> str:
    """The reason a table cell names, less what it names after `: `."""
    return next((name for name in REASONS if text == name or text.startswith(name + ": ")), "")


def table(results: list[dict[str, Any]]) -> str:
    order = ["replays", "end to end", LIVE_POLICY, "replay", "recordings", "build", "dependencies", "timeout", "crash"]
    counts = {stage: sum(r["stage"] == stage for r in results) for stage in order}
    reasons = {name: 0 for name in REASONS}
    for r in results:
        if r["stage"] not in PASSING:
            reasons[reason_of(reason(r))] += 1
    lines = [
        "# NeMo Gym servers under gym-serve's host",
        "",
        f"Every resources server of the installed nemo-gym, tried by `scripts/nemo_gym_survey.py` "
        f"({len(results)} servers). *replays*: every recording gives its recorded reward; *replay*: some do not "
        "(the first problems shown); *end to end*: a judge-backed server NeMo Gym recorded no judge verdicts for, "
        "every recording ran with a live judge (a model server: its reward is not compared, `+N live judge`) or "
        f"agreed; *{LIVE_POLICY}*: no usable recordings, and its first five example tasks each ran through "
        "gym-serve's loop with the live model of `--judge-url` as policy and judge (`+N live`: nothing to compare); "
        "*recordings*: builds, but has no usable recordings; *build*: the server "
        "failed to start in-process; *dependencies*: the deploy-time check refused it (a package not installed "
        "here); *timeout*/*crash*: its process did not answer.",
        "",
        "Counts: " + ", ".join(f"{stage} {n}" for stage, n in counts.items() if n),
        "",
        "Reasons (the servers that neither replay nor run end to end): "
        + ", ".join(f"{name} {n}" for name, n in reasons.items() if n),
        "",
        "Reading the failures: judge models are Model-tier applications the server's references map to (here "
        "the replay model over the judge calls NeMo Gym recorded, else the live judge of `--judge-url`); "
        "Gymnasium-style servers run through gym-serve's `user_turn` and other agents' recordings through those "
        "agents hosted unchanged. Each server that does not pass has one *reason*: issue 31's list ("
        + "; ".join(ISSUE_REASONS)
        + ") where one fits, else one of these, which are not on that list: "
        + "; ".join(f"*{name}* ({meaning})" for name, meaning in FURTHER_REASONS.items())
        + ". The reason comes from the first problem's text (`RULES` in the script), or, where that text does not "
        "say why (a timeout, a replay miss, a reward), from `OVERRIDES`, each with its one-line why; a bug names "
        "the server's file and line. The servers "
        "`tests/test_nemo_gym_servers.py` proves (43, with a Serve config each in this folder) are among those "
        "that replay; the known exceptions there (`mcqa`, `math_with_judge`, `structured_outputs`) are explained "
        "in that test.",
        "",
        "| server | stage | recordings agreeing | agents | reason | first problem |",
        "|---|---|---:|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (order.index(r["stage"]), r["server"])):
        agree = f"{r['agree']} / {r['recordings']}" if "agree" in r else ""
        if r["stage"] == LIVE_POLICY:
            agree = f"+{r['live']} live"  # no recordings: nothing agrees or not
        elif r.get("live"):
            agree += f" (+{r['live']} live judge)"
        agents = ", ".join(r.get("agents") or []) + (" (own environment)" if r.get("installed") else "")
        problem = re.sub(r"\S*/site-packages/", "site-packages/", str(r.get("error") or ""))  # no machine's paths
        problem = re.sub(re.escape(tempfile.gettempdir()) + r"/[^/\s]+/", "", problem)
        cells = [problem, reason(r)]
        problem, why = (cell.replace("|", "\\|").replace("\n", " ") for cell in cells)
        lines.append(f"| `{r['server']}` | {r['stage']} | {agree} | {agents} | {why} | {problem[:200]} |")
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
    parser.add_argument("--render-only", action="store_true", help="write --out from --results; run no server")
    args = parser.parse_args()
    if args.render_only:
        if not args.results or not args.results.exists():
            parser.error(f"--render-only reads --results, and {args.results} is no file")
        args.out.write_text(table(list(json.loads(args.results.read_text()).values())))
        print(f"-> {args.out}")
        return
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
