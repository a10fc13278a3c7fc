"""Every command the documentation shows, run as a newcomer runs it; and `serve run` of every shipped config.

The commands come from the documents (`tests.documented`): each fenced shell block is one session, run in
order in one copy of the repository (so the repository itself is never written to). How a command runs
depends on what it is, never on a list of commands:

- Setting up the environment (`python3 -m venv .venv`, `.venv/bin/pip install -e '.[...]'`, the uninstall
  of torch's extras, PrimeIntellect's `verifiers`): these built the environment this test runs in (CI
  runs the README's test command from nothing), so each is checked against it rather than run again.
  The README's test command is CI's own: the test checks `.ci/run` runs exactly that block.
- `scripts/check` and `pytest`: CI's test command runs them.
- Servers run until the next server of the session or its end, as in a second terminal: `serve run
  CONFIG` and `gym-serve up CONFIG` are ready when every HTTP application of CONFIG answers a real request
  (a rollout of one of its environment's example rows), `gym-serve view FILE --port P` when its task table
  answers; then they are stopped with Ctrl-C (SIGINT).
- What needs a resource this machine lacks runs against a local stand-in: `vllm serve MODEL --port P`
  is an OpenAI-compatible stand-in on P (`tests.fake_openai`), the OpenAI API is one too (OPENAI_BASE_URL
  and a made-up OPENAI_API_KEY), `ray up CONFIG` is a `ray start` cluster here with CONFIG's `file_mounts`
  linked into a home folder where `ray exec CONFIG "CMD"` runs CMD.
- Everything else runs to completion and must exit 0.

Ports in commands and configs (8000, 8001, ...) are mapped to free ones, consistently within the run, and
the tiny model's path to a folder of this run; packages a session installs with pip are uninstalled after.
Sessions that start a vLLM engine (a config with `kind: vllm`) are marked slow.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_serve.serving.config import BUILDER, load_serve_config
from gym_serve.testing.fixtures import example_rows
from tests.conftest import REPO, interruptible
from tests.documented import Block, blocks, inline_commands, split_chain
from tests.fake_openai import FakeOpenAI, serving
from tests.ray_start_cluster import (
    STARTS,
    RayStartCluster,
    free_port,
    never_came_up,
    plain_env,
    ray_start_cluster,
)

pytestmark = [pytest.mark.serve, pytest.mark.timeout(900)]

INGRESS = "gym_serve.deployments.ingress:build_ingress"
TINY_MODEL = "/tmp/gym-serve-tiny-model"
COMMAND_TIMEOUT_S = 400
READY_TIMEOUT_S = 300

ALREADY_RUN = {
    "python cluster/local_cluster.py --nodes 2": (
        "tests/test_cluster.py::test_two_nodes_two_driver_shards_every_rollout_once"
    ),
    'gym-serve collect "+config_paths=[resources_servers/example_single_tool_call/configs/'
    'example_single_tool_call.yaml]"'
    " +agent_name=example_single_tool_call_simple_agent"
    " +input_jsonl_fpath=resources_servers/example_single_tool_call/data/example.jsonl"
    " +output_jsonl_fpath=results/example_single_tool_call_rollouts.jsonl --replay-model": (
        "tests/test_nemo_gym_configs.py::test_the_readmes_collect_with_nemo_gyms_config_paths_gives_nemo_gyms_recorded_rewards"
    ),
}
"""Documented commands another test runs (the same script, with the same arguments or a smaller load)."""


# ---- the copy of the repository the commands run in ----------------------------------------------------------


@dataclass
class Sandbox:
    root: Path
    """A copy of the repository (tracked files and files git does not ignore): the commands' working folder."""
    work: Path
    env: dict[str, str] = field(default_factory=dict)
    ports: dict[int, int] = field(default_factory=dict)
    stack: ExitStack = field(default_factory=ExitStack)

    def local(self, text: str) -> str:
        """`text` with this run's ports and paths: what a doc or config says, made to fit this machine."""
        text = text.replace(TINY_MODEL, str(self.work / "tiny-model"))
        return re.sub(
            r"(?<=127\.0\.0\.1:)\d{4,5}\b|(?<=localhost:)\d{4,5}\b|(?<=--port[ =])\d{4,5}\b"
            r"|(?<=--http-port )\d{4,5}\b|(?<=port: )\d{4,5}\b",
            lambda m: str(self.port(int(m[0]))),
            text,
        )

    def port(self, documented: int) -> int:
        if documented not in self.ports:
            self.ports[documented] = free_port()
        return self.ports[documented]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    work = tmp_path_factory.mktemp("documented")
    box = Sandbox(root=work / "repo", work=work)
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True)
    for name in filter(None, listed.stdout.decode().split("\0")):
        source, target = REPO / name, box.root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_file():
            shutil.copy2(source, target)
    (box.root / ".venv").symlink_to(sys.prefix)  # `.venv/bin/...` in a doc: this environment (never modified)
    for config in box.root.rglob("*.yaml"):
        text = box.local(config.read_text())
        if "applications:" in text and "http_options:" not in text:
            text = f"http_options: {{host: 127.0.0.1, port: {box.port(8000)}}}\n{text}"
        config.write_text(text)
    box.env = {
        **plain_env(),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(box.root / "scripts" / "source_tree"), str(box.root)]),  # the copy's code
        "RAY_ADDRESS": "local",  # `serve run` and `ray.init()` would otherwise join another `ray start` here
        "OPENAI_API_KEY": "sk-stand-in",
        "PYTHONUNBUFFERED": "1",
    }
    before = {d.metadata["Name"] for d in metadata.distributions()}
    with box.stack:
        box.env["OPENAI_BASE_URL"] = box.stack.enter_context(serving(FakeOpenAI()))  # the OpenAI API's stand-in
        yield box
    added = {d.metadata["Name"] for d in metadata.distributions()} - before
    if added:  # what a session's `pip install` added leaves with it
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", *sorted(added)], capture_output=True)


# ---- servers ------------------------------------------------------------------------------------------------


@dataclass
class Server:
    command: str
    stop: Callable[[], None]
    output: Callable[[], str] = lambda: ""


def start_process(command: str, box: Sandbox, cwd: Path, log: Path) -> tuple[subprocess.Popen[bytes], Server]:
    out = log.open("wb")
    proc = subprocess.Popen(
        ["bash", "-c", command], cwd=cwd, env=box.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=interruptible,  # a suite run in the background ignores Ctrl-C: the server must not
    )  # fmt: skip

    def stop() -> None:
        _signal_group(proc, signal.SIGINT)  # Ctrl-C, to the terminal's process group
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait(timeout=30)
        out.close()

    return proc, Server(command, stop, lambda: log.read_text(errors="replace")[-6000:])


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def wait_ready(proc: subprocess.Popen[bytes] | None, server: Server, probe: Callable[[], str | None]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    problem = probe()
    while problem is not None:
        if proc is not None and proc.poll() is not None:
            pytest.fail(
                f"`{server.command}` exited ({proc.returncode}) before it served: {problem}\n{server.output()}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"`{server.command}` did not serve within {READY_TIMEOUT_S} s: {problem}\n{server.output()}")
        time.sleep(0.5)
        problem = probe()


def serve_config_probe(config: Path, port: int, token: str | None = None) -> Callable[[], str | None]:
    """A real request to every HTTP application of `config`: None once each answers it, else what did not.

    An environment application gets one of its environment's example rows and must return a rollout; an
    environment without `data/example.jsonl` gets an empty row and must refuse it with our 400 or 422 (the
    application, not the proxy, answered). The ingress must pass `/healthz`, run a rollout the same way,
    and answer a model call when it serves a model. With `token` (the session exported GYM_SERVE_TOKEN, as
    a user does before serving an ingress with auth), every request carries it.
    """
    specs = load_serve_config(config)
    environments = {
        s.name: s.app_args(str(config)).environment.name  # type: ignore[union-attr]
        for s in specs
        if s.import_path == BUILDER and s.args.get("environment")
    }

    def rollout(url: str, agent: str) -> str | None:
        try:
            row = example_row(environments[agent])
        except FileNotFoundError:
            status, body = http(url, {}, token)
            refused = status in (400, 422) and "responses_create_params" in body  # our refusal of a bad row
            return None if refused else f"POST {url} {{}}: {status} {body}"
        status, body = http(url, row, token)
        return None if status == 200 and "reward" in body else f"POST {url}: {status} {body[:300]}"

    def probe() -> str | None:
        for spec in specs:
            if spec.route_prefix is None:
                continue
            url = f"http://127.0.0.1:{port}{spec.route_prefix.rstrip('/')}"
            if spec.import_path == INGRESS:
                if (status := http(f"{url}/healthz", None, token)[0]) != 200:
                    return f"{url}/healthz: {status}"
                agent = spec.args.get("default_agent") or spec.args["agents"][0]
                if spec.args.get("model_app"):  # a prompt the model has an answer to (a replay model: a recorded one)
                    status, body = http(f"{url}/v1/responses", model_call(environments.get(agent)), token)
                    if status != 200:
                        return f"POST {url}/v1/responses: {status} {body[:300]}"
                problem = rollout(f"{url}/run", agent)
            elif spec.name in environments:
                problem = rollout(url, spec.name)
            else:
                continue
            if problem is not None:
                return problem
        return None

    return probe


def example_row(environment: str) -> dict[str, Any]:
    """The first example row of one of gym-serve's environments or of a hosted NeMo Gym server (`nemo_gym:NAME`)."""
    from gym_serve.environment import nemo_gym

    server = nemo_gym.server_name(environment)
    if server is None:
        return example_rows(environment)[0]
    first = (nemo_gym.data_dir(server) / "example.jsonl").read_text().splitlines()[0]
    return dict(json.loads(first))


def model_call(environment: str | None) -> dict[str, Any]:
    """The first example row's request of `environment`, else a plain prompt."""
    try:
        return dict(example_rows(environment)[0]["responses_create_params"]) if environment else {"input": "Say hi."}
    except FileNotFoundError:
        return {"input": "Say hi."}


def http(url: str, body: Any = None, token: str | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)


# ---- one session ---------------------------------------------------------------------------------------------


@dataclass
class Session:
    box: Sandbox
    block: Block
    cwd: Path
    server: Server | None = None
    cluster: ExitStack = field(default_factory=ExitStack)
    started: RayStartCluster | None = None
    head_home: Path | None = None
    notes: list[str] = field(default_factory=list)

    def run(self, command: str) -> None:
        for part in split_chain(self.box.local(command)):
            words = shlex.split(part)
            program = [w for w in words if not re.match(r"^\w+=", w)][:2]
            if self._setup(part, words):
                continue
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                self.box.env[name] = value
            elif program[0] in ("scripts/check", ".venv/bin/pytest", "pytest"):
                assert program[0].removeprefix(".venv/bin/") in ci_command(), f"CI does not run `{part}`"
                self.notes.append(f"{part}: run by CI's test command")
            elif program == ["ray", "up"]:
                self._stand_in_cluster(words[2])
            elif program == ["serve", "run"] or (program[0].endswith("gym-serve") and program[1:] == ["up"]
                                                 and "--address" not in words):  # fmt: skip
                self._serve(part, words)
            elif program == ["vllm", "serve"]:
                self._stand_in_model_server(part, words)
            elif program[0].endswith("gym-serve") and program[1:] == ["view"]:
                self._viewer(part, words)
            elif program == ["ray", "exec"]:
                assert self.head_home is not None, f"`{part}` before `ray up`"
                self._complete(words[3], cwd=self.head_home)
            else:
                self._complete(part, cwd=self.cwd)

    def _setup(self, part: str, words: list[str]) -> bool:
        """A set-up step of the environment: checked against the one this runs in. False for anything else."""
        if words[:3] == ["python3", "-m", "venv"]:
            assert sys.prefix != sys.base_prefix, "the tests run in a virtual environment, as the README makes one"
            return True
        if not words[0].endswith("pip") or len(words) < 3:
            return False
        if words[1] == "install" and "-e" in words and re.fullmatch(r"\.(\[[\w,-]+\])?", words[-1]):
            extras = re.findall(r"[\w-]+", words[-1])
            defined = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
            assert set(extras) <= set(defined), f"`{part}`: pyproject.toml has no extra {set(extras) - set(defined)}"
            installed = [
                json.loads(d.read_text("direct_url.json") or "{}") for d in metadata.distributions(name="gym-serve")
            ]
            assert any(i.get("dir_info", {}).get("editable") for i in installed), "installed editable, as `pip -e`"
            return True
        if words[1] == "uninstall":
            for name in words[3:]:
                with pytest.raises(metadata.PackageNotFoundError):
                    metadata.version(name)
            return True
        pinned = [w for w in words[3:] if "==" in w]
        if words[1:3] == ["install", "--no-deps"] and len(pinned) == 1:  # e.g. also --ignore-requires-python
            name, version = pinned[0].split("==")
            assert metadata.version(name) == version, f"`{part}`: {name} {metadata.version(name)} is installed"
            return True
        return False

    def _complete(self, command: str, cwd: Path) -> None:
        env = {**self.box.env, **self.cluster_env()}
        result = subprocess.run(["bash", "-eo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
                                text=True, timeout=COMMAND_TIMEOUT_S)  # fmt: skip
        assert result.returncode == 0, (
            f"`{command}` exited {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )

    def _serve(self, part: str, words: list[str]) -> None:
        self.stop_server()
        config = self._nemo_gym_mapped(words) or self.cwd / next(w for w in words if w.endswith(".yaml"))
        port = int(words[words.index("--http-port") + 1]) if "--http-port" in words else _http_port(config)
        probe = serve_config_probe(config, port, self.box.env.get("GYM_SERVE_TOKEN"))
        for attempt in range(1, STARTS + 1):
            log = self.box.work / f"server-{time.monotonic_ns()}.log"
            proc, self.server = start_process(part, self.box, self.cwd, log)
            try:
                wait_ready(proc, self.server, probe)
                return
            except pytest.fail.Exception:
                if attempt == STARTS or not never_came_up(self.server.output()):
                    raise
                self.stop_server()  # `serve run`'s own Ray start met a failure `start_local` retries

    def _nemo_gym_mapped(self, words: list[str]) -> Path | None:
        """`gym-serve up "+config_paths=[...]"`: the Serve config NeMo Gym's configs map to, for the probe."""
        from gym_serve.environment.nemo_gym import configs

        overrides = [w for w in words if w.startswith("+")]
        if not overrides:
            return None
        path = self.box.work / f"nemo-gym-{time.monotonic_ns()}.yaml"
        read = configs.read(overrides, cwd=self.cwd)
        return configs.write_serve_config(read, path, replay_policy="--replay-model" in words)

    def _viewer(self, part: str, words: list[str]) -> None:
        """`gym-serve view FILE --port P`: ready when its task table answers (not its page saying it indexes)."""
        self.stop_server()
        url = f"http://127.0.0.1:{words[words.index('--port') + 1]}/"
        log = self.box.work / f"viewer-{time.monotonic_ns()}.log"
        proc, self.server = start_process(part, self.box, self.cwd, log)
        wait_ready(proc, self.server, lambda: None if http(url)[0] == 200 else f"GET {url}: not the task table yet")
        _, page = http(url)
        assert "rollouts</div>" in page and '<table class="tasks"' in page, f"`{part}` served:\n{page[:2000]}"

    def _stand_in_model_server(self, part: str, words: list[str]) -> None:
        self.stop_server()
        port = int(words[words.index("--port") + 1])
        stack = ExitStack()
        base_url = stack.enter_context(serving(FakeOpenAI(), port=port))
        self.server = Server(part, stack.close)
        self.notes.append(f"{part}: an OpenAI-compatible stand-in at {base_url}")

    def _stand_in_cluster(self, launcher: str) -> None:
        """`ray up`: a `ray start` cluster here, and the launcher's `file_mounts` linked into the head's home."""
        self.started = self.cluster.enter_context(ray_start_cluster(self.box.work))
        self.head_home = self.box.work / "head-home"
        self.head_home.mkdir(exist_ok=True)
        mounts = yaml.safe_load((self.cwd / launcher).read_text()).get("file_mounts", {})
        for remote, local in mounts.items():
            target = self.head_home / remote.removeprefix("~/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to((self.cwd / local).resolve())

    def cluster_env(self) -> dict[str, str]:
        """A `ray exec` on the head: Ray's address and token auth are the cluster's."""
        started = self.started
        if started is None:
            return {}
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": started.token, "RAY_ADDRESS": started.address}

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def close(self) -> None:
        self.stop_server()
        self.cluster.close()


def _http_port(config: Path) -> int:
    return int((yaml.safe_load(config.read_text()).get("http_options") or {}).get("port", 8000))


def ci_command() -> str:
    """The command `.ci/run` runs: its own extraction of the README's test command."""
    script = (REPO / ".ci" / "run").read_text()
    extraction = re.search(r"^command=\$\((awk .*)\)$", script, flags=re.M)
    assert extraction, ".ci/run no longer reads its command from the README"
    return subprocess.run(["bash", "-c", extraction[1]], cwd=REPO, capture_output=True, text=True).stdout.strip()


# ---- the tests ---------------------------------------------------------------------------------------------


def _engine(config: Path) -> bool:
    """Is this a Serve config that starts a vLLM engine (a `kind: vllm` model tier)?"""
    raw = yaml.safe_load(config.read_text())
    apps = raw.get("applications", []) if isinstance(raw, dict) else []
    return any(((app.get("args") or {}).get("model") or {}).get("kind") == "vllm" for app in apps)


def _uses_vllm(block: Block) -> bool:
    words = [w for command in block.commands for w in command.text.split()]
    return any(w.endswith(".yaml") and (REPO / w).is_file() and _engine(REPO / w) for w in words)


BLOCKS = blocks(REPO)


@pytest.mark.parametrize(
    "block", [pytest.param(b, id=b.id, marks=[pytest.mark.slow] if _uses_vllm(b) else []) for b in BLOCKS]
)
def test_a_documented_session_runs(block: Block, sandbox: Sandbox) -> None:
    if block.ci:
        assert ci_command() == block.commands[0].text, "CI runs the README's test command verbatim"
        return
    session = Session(sandbox, block, cwd=sandbox.root)
    try:
        for command in block.commands:
            if command.text in ALREADY_RUN:
                continue
            session.run(command.text)
    finally:
        session.close()


def test_commands_in_running_text_are_shown_in_a_block_where_they_run() -> None:
    fenced = {" ".join(c.text.split()) for b in BLOCKS for c in b.commands}
    missing = [f"{doc}: `{code}`" for doc, code in inline_commands(REPO) if " ".join(code.split()) not in fenced]
    assert not missing, "show these in a fenced ```bash block (where they are run):\n" + "\n".join(missing)


def test_commands_run_by_other_tests_are_still_documented_and_those_tests_exist() -> None:
    fenced = {c.text for b in BLOCKS for c in b.commands}
    for command, test in ALREADY_RUN.items():
        assert command in fenced, f"`{command}` is no longer documented: drop it from ALREADY_RUN"
        path, _, name = test.partition("::")
        source = (REPO / path).read_text()
        script = Path(command.split()[1]).name
        assert f"def {name}(" in source and script in source, f"{test} does not run `{command}`"


# ---- every shipped Serve config through `serve run` -------------------------------------------------------------


def _served_by_a_session() -> set[str]:
    return {
        word
        for block in BLOCKS
        for command in block.commands
        if command.text.startswith("serve run ")
        for word in command.text.split()
        if word.endswith(".yaml")
    }


CONFIGS = [
    pytest.param(path, id=path, marks=[pytest.mark.slow] if _engine(REPO / path) else [])
    for path in sorted(str(p.relative_to(REPO)) for p in (REPO / "deployments").glob("*.yaml"))
    if path not in _served_by_a_session()
]


@pytest.fixture(scope="module")
def serve_cluster(sandbox: Sandbox) -> Iterator[RayStartCluster]:
    """One `ray start` cluster for the configs: `serve run --address` deploys each in turn, replacing the last."""
    model_server = {k: sandbox.env[k] for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}  # as on a real cluster's nodes
    with ray_start_cluster(sandbox.work, node_env=model_server) as started:
        yield started


@pytest.mark.parametrize("config", CONFIGS)
def test_serve_run_of_a_shipped_config_serves_every_application(
    config: str, sandbox: Sandbox, serve_cluster: RayStartCluster
) -> None:
    """What `serve run CONFIG` does, on a cluster shared by the configs (one Ray start instead of twenty)."""
    env = {**sandbox.env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": serve_cluster.token}
    path = sandbox.root / config
    stand_ins = ExitStack()  # the model servers the config names on this machine (`vllm serve`): stand-ins
    for port in re.findall(r"base_url: \"?http://127\.0\.0\.1:(\d+)", path.read_text()):
        stand_ins.enter_context(serving(FakeOpenAI(), port=int(port)))
    command = ["serve", "run", "--non-blocking", "--address", serve_cluster.address, config]
    submitted = subprocess.run(command, cwd=sandbox.root, env=env, capture_output=True, text=True,
                               timeout=COMMAND_TIMEOUT_S)  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr[-4000:]

    def status() -> str:
        shown = subprocess.run(["serve", "status", "-a", serve_cluster.dashboard_url], env=env,
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        return shown.stdout[-4000:]

    with stand_ins:
        wait_ready(
            None, Server(f"serve run {config}", lambda: None, status), serve_config_probe(path, _http_port(path))
        )
