"""`gym-serve env test NAME`: does an environment hold together, the way a contributor needs to know?

1. Its `data/example.jsonl` parses, every row is a valid row (the protocol models of
   `gym_serve.wire.responses`) and fits the environment's `Task` fields (file, line and
   field on every problem).
2. Its `data/example_rollouts.jsonl` (the replay recordings) parses, and every
   example row has a recorded right answer and a recorded wrong one (a lower reward).
3. Its verifier scores non-answers 0 on every row (`gym_serve.verifiers.non_answer`:
   an empty or blank reply, "I don't know", the row's own question echoed back (alone,
   and followed by refusals), JSON with nothing in it (`{}`, `[]`, an object of null or
   empty values keyed by the question's words), the replay model's "no recording
   matches" reply), in this process, from a fresh `seed`; and every reward hack the
   environment names (`Environment.reward_hacks`: scripted episodes of tool calls, e.g.
   editing the tests of a software-engineering task) scores 0 on its first row.
4. Every row runs end to end through real deployments: the environment's own
   Serve config (`deployments/<name>.yaml`, helper applications such as a judge
   included) is deployed twice, with the replay model playing the right answers
   (`error_rate: 0`) and the wrong ones (`error_rate: 1`). Each rollout must score
   the reward its recording says, and its verify call must finish within the budget.

A hosted NeMo Gym server (`nemo_gym:<server>`) is checked the same way on its
own `data/example.jsonl` and NeMo Gym's recordings of it, through
`deployments/nemo_gym/<server>.yaml` where there is one. Its rows have no
`Task` model (the server validates them), and NeMo Gym did not record a wrong
answer for every prompt: a row's wrong answer is checked where one was recorded.
The deploy-time check's warnings (a dependency's version differs from the
server's pin) are reported as notes.
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gym_serve.environment import nemo_gym
from gym_serve.environment.core import Environment, Task
from gym_serve.environment.registry import load_environment_class
from gym_serve.environment.runner import EnvRunner
from gym_serve.errors import InputError
from gym_serve.rollout.local import run_local
from gym_serve.rollout.loop import AgentConfig
from gym_serve.rollout.replay import _conversation, _prompt, conversation_key
from gym_serve.rollout.scripted import ScriptedModel
from gym_serve.serving.config import BUILDER, AppSpec, load_serve_config
from gym_serve.verifiers.non_answer import non_answers
from gym_serve.wire.jsonl import read_jsonl, scan_jsonl
from gym_serve.wire.pieces import field_path
from gym_serve.wire.responses import row_problems

__all__ = ["EnvReport", "check_environment", "join_recordings", "recorded_rollouts"]

MIN_ROWS = 5
HOSTED_VERIFY_BUDGET_S = 10.0
"""The verify budget of a hosted NeMo Gym server (its verifiers were not written to ours)."""


@dataclass
class RowResult:
    line: int
    expected_right: float | None
    expected_wrong: float | None
    right: float | None = None
    wrong: float | None = None
    verify_s: float = 0.0
    problems: list[str] = field(default_factory=list)


@dataclass
class EnvReport:
    name: str
    problems: list[str] = field(default_factory=list)
    rows: list[RowResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(not r.problems for r in self.rows)

    def render(self) -> str:
        lines = [f"{'line':>4}  {'right':>11}  {'wrong':>11}  {'verify ms':>9}  result"]
        for r in self.rows:
            right = f"{_fmt(r.right)} ({_fmt(r.expected_right)})"
            wrong = f"{_fmt(r.wrong)} ({_fmt(r.expected_wrong)})"
            verdict = "ok" if not r.problems else "FAIL: " + "; ".join(r.problems)
            lines.append(f"{r.line:>4}  {right:>11}  {wrong:>11}  {1000 * r.verify_s:>9.1f}  {verdict}")
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"problem: {p}" for p in self.problems]
        passed = sum(not r.problems for r in self.rows)
        lines.append(
            f"{self.name}: {passed}/{len(self.rows)} rows pass (reward got (recorded))"
            + ("" if self.ok else f", {len(self.problems)} other problem(s)")
            + (" OK" if self.ok else " FAILED")
        )
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def check_environment(
    name: str, *, verify_budget_s: float | None = None, rollout_timeout_s: float = 120.0, address: str | None = None
) -> EnvReport:
    """Run every check on environment `name`; Ray and Serve are started (or joined at `address`) for step 3.

    `verify_budget_s` defaults to the environment's own `verify_budget_s`.
    """
    server = nemo_gym.server_name(name)
    report = EnvReport(name)
    if server is not None:
        report.notes += nemo_gym.check_server(server)
        data, task, budget = nemo_gym.data_dir(server), None, HOSTED_VERIFY_BUDGET_S
    else:
        cls = load_environment_class(name)
        data, task, budget = cls.data_dir(), cls.Task, cls.verify_budget_s
    verify_budget_s = verify_budget_s if verify_budget_s is not None else budget
    rows = _check_rows(data / "example.jsonl", task, report)
    expected = _recorded_rewards(data / "example_rollouts.jsonl", report)
    for line, row in rows:
        right, wrong = expected.get(_prompt_key(row), (None, None))
        result = RowResult(line, right, wrong)
        if right is None:
            result.problems.append("no recording for this row")
        elif wrong is None and server is None:
            result.problems.append("no recorded wrong answer (a lower reward) for this row")
        report.rows.append(result)
    if rows and server is None:  # a hosted server's verifier is NeMo Gym's, checked against its own recordings
        asyncio.run(_check_non_answers(cls, rows, report))
    if rows and not report.problems:
        asyncio.run(_through_serve(name, rows, report, verify_budget_s, rollout_timeout_s, address))
    return report


def recorded_rollouts(server: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """`(task row, recorded rollout)` for each of NeMo Gym's recordings of a server (`data/example_rollouts.jsonl`),
    each joined to its `data/example.jsonl` row by `join_recordings`."""
    data = nemo_gym.data_dir(server)
    examples = [row for _, row in read_jsonl(data / "example.jsonl")]
    return join_recordings(examples, [recorded for _, recorded in read_jsonl(data / "example_rollouts.jsonl")])


def join_recordings(
    examples: list[dict[str, Any]], recordings: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """`(task row, recorded rollout)` for each recording, its task row found among `examples`.

    A recorded rollout row is the server's verify response: it keeps only the
    fields the server's response model declares, so the task fields verify
    needs (a `seed`, the answer) are joined back from the example row it ran.
    That row is the one at the recording's `_ng_task_index` (NeMo Gym numbers
    the input rows in order) where the index is in range and its row has the
    recording's prompt, or, where no row has it, begins it: a Gymnasium-style
    recording's prompt holds the first observation too, and several rows may
    share one prompt with different seeds. Else it is the row with the
    recording's prompt. The task fields the recording kept are the values it
    ran with, so they replace the row's. A recording no row matches
    is its own task row (less `response` and `reward`, and less the request
    fields it recorded as null, which NeMo Gym's request models would refuse):
    the fields it kept are all there is.

    >>> rows = [{"responses_create_params": {"input": "Play."}, "seed": s} for s in (1, 2)]
    >>> [row["seed"] for row, _ in join_recordings(rows, [{**rows[0], "_ng_task_index": 1, "seed": 2}])]
    [2]
    """
    by_prompt: dict[str, list[int]] = defaultdict(list)
    for index, row in enumerate(examples):
        by_prompt[_prompt_key(row)].append(index)
    pairs = []
    for recorded in recordings:
        own = {k: v for k, v in recorded.items() if k not in ("response", "reward")}
        if isinstance(own.get("responses_create_params"), dict):
            own["responses_create_params"] = {k: v for k, v in own["responses_create_params"].items() if v is not None}
        same_prompt = by_prompt.get(_prompt_key(recorded), [])
        task_index = recorded.get("_ng_task_index")
        if isinstance(task_index, int) and 0 <= task_index < len(examples):
            if task_index in same_prompt or (not same_prompt and _begins(examples[task_index], recorded)):
                same_prompt = [task_index]
        row = examples[same_prompt[-1]] if same_prompt else own
        kept = {k: recorded[k] for k in row if k in recorded and k not in ("responses_create_params", "agent_ref")}
        pairs.append(({**row, **kept}, recorded))
    return pairs


def _begins(example: dict[str, Any], recorded: dict[str, Any]) -> bool:
    """Whether `example`'s prompt begins `recorded`'s (which may go on with the first observation)."""
    prompt = _prompt(_conversation(example["responses_create_params"]))
    recorded_prompt = _prompt(_conversation(recorded["responses_create_params"]))
    return conversation_key(recorded_prompt[: len(prompt)]) == conversation_key(prompt)


def _check_rows(path: Path, task: type[Task] | None, report: EnvReport) -> list[tuple[int, dict[str, Any]]]:
    """The valid rows of `path`; `task` validates their task fields (None: a hosted server validates its own)."""
    if not path.is_file():
        report.problems.append(f"{path}: missing")
        return []
    rows = []
    for line, row, error in scan_jsonl(path):
        if error is not None:
            report.problems.append(str(error))
            continue
        assert row is not None
        problems = row_problems(row)  # the protocol models, as every input row is checked
        if problems:
            field, problem = problems[0]
            report.problems.append(f"{path}, line {line}, field `{field}`: {problem}")
            continue
        try:
            if task is not None:
                task.model_validate(row)
        except ValidationError as e:
            err = e.errors()[0]
            report.problems.append(f"{path}, line {line}, field `{field_path(err['loc'])}`: {err['msg']}")
            continue
        rows.append((line, row))
    if len(rows) < MIN_ROWS:
        report.problems.append(f"{path}: {len(rows)} valid rows; an environment ships at least {MIN_ROWS}")
    return rows


async def _check_non_answers(
    cls: type[Environment], rows: list[tuple[int, dict[str, Any]]], report: EnvReport
) -> None:
    """Every non-answer must score 0 on every row: a verifier that pays for one teaches it. So must every reward hack
    the environment names (`Environment.reward_hacks`), played on its first row. A row's checks run a few at a time
    (one per CPU: a verifier may run a test suite)."""
    env = cls()
    runner = EnvRunner(env)
    slots = asyncio.Semaphore(max(2, os.cpu_count() or 1))

    async def one(name: str, row: dict[str, Any], text: str) -> str | None:
        async with slots:
            return await _non_answer(runner, name, row, text)

    async def hack(name: str, row: dict[str, Any], turns: list[list[dict[str, Any]]]) -> str | None:
        async with slots:
            return await _hack(env, name, row, turns)

    for index, ((_, row), result) in enumerate(zip(rows, report.rows, strict=True)):
        task = cls.Task.model_validate(row)
        checks = [one(name, row, text) for name, text in non_answers(task.prompt_text()).items()]
        if index == 0:
            checks += [hack(name, row, turns) for name, turns in cls.reward_hacks(task).items()]
        result.problems += [problem for problem in await asyncio.gather(*checks) if problem is not None]


async def _non_answer(runner: EnvRunner, name: str, row: dict[str, Any], text: str) -> str | None:
    """A text non-answer from a fresh `seed`: a problem when it scores above 0 (or verify breaks on it)."""
    message = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    try:
        state = await runner.seed(row) if runner.info.has_seed else None
        verdict = await runner.verify(row, {"output": [message]}, state)
    except Exception as e:  # noqa: BLE001 - a verifier that breaks on a non-answer is a finding too
        return f"non-answer `{name}` broke verify: {type(e).__name__}: {e}"
    reward = float(verdict["reward"])
    return f"non-answer `{name}` scored {reward:g}" if reward != 0.0 else None


async def _hack(env: Environment, name: str, row: dict[str, Any], turns: list[list[dict[str, Any]]]) -> str | None:
    """A reward hack played through the environment: a problem when it scores above 0 (or its rollout breaks)."""
    try:
        rollout = await run_local(row, env, ScriptedModel(turns), AgentConfig(max_steps=len(turns) + 1))
    except Exception as e:  # noqa: BLE001 - a verifier that breaks on a hack is a finding too
        return f"reward hack `{name}` broke the rollout: {type(e).__name__}: {e}"
    reward = float(rollout["reward"])
    return f"reward hack `{name}` scored {reward:g}" if reward != 0.0 else None


def _prompt_key(row: dict[str, Any]) -> str:
    return conversation_key(_prompt(_conversation(row["responses_create_params"])))


def _recorded_rewards(path: Path, report: EnvReport) -> dict[str, tuple[float, float | None]]:
    """Prompt key → (best recorded reward, worst recorded reward below it, or None)."""
    rewards: dict[str, list[float]] = defaultdict(list)
    try:
        for line, row in read_jsonl(path):
            try:
                rewards[_prompt_key(row)].append(float(row["reward"]))
            except (KeyError, TypeError, ValueError) as e:
                report.problems.append(f"{path}, line {line}: not a recorded rollout ({type(e).__name__}: {e})")
    except InputError as e:
        report.problems.append(str(e))
    return {key: (max(r), min(r) if min(r) < max(r) else None) for key, r in rewards.items()}


def config_path(name: str) -> Path | None:
    """The environment's own Serve config: `deployments/<name>.yaml` if built in, `deployments/nemo_gym/<server>.yaml`
    for a hosted NeMo Gym server, else `<name>.yaml` in its installed package."""
    deployments = resources.files("gym_serve.deployments")
    server = nemo_gym.server_name(name)
    if server is not None:
        candidates = [Path(str(deployments / "nemo_gym" / f"{server}.yaml"))]
    else:
        candidates = [
            Path(str(deployments / f"{name}.yaml")),
            load_environment_class(name).data_dir().parent / f"{name}.yaml",
        ]
    return next((config for config in candidates if config.is_file()), None)


def _specs(name: str, config: Path | None) -> tuple[list[AppSpec], str]:
    """The environment's own Serve config (helper apps included), or a plain one, and the env app's name."""
    server = nemo_gym.server_name(name)
    if config is not None:
        specs = load_serve_config(config)
        env_apps = [s for s in specs if s.import_path == BUILDER and _environment_of(s) == name]
        if len(env_apps) == 1:
            return specs, env_apps[0].name
    environment = {"kind": "nemo_gym", "server": server} if server is not None else {"name": name}
    app = server or name
    return [AppSpec(name=app, import_path=BUILDER, args={"environment": environment})], app


def _environment_of(spec: AppSpec) -> str | None:
    environment = spec.args.get("environment") or {}
    if environment.get("kind") == "nemo_gym":
        return nemo_gym.hosted_name(str(environment.get("server")))
    return environment.get("name")


def _variant(spec: AppSpec, suffix: str, error_rate: float) -> AppSpec:
    """The env app with the replay model of its own recordings at `error_rate`, under a name of its own."""
    args = {**spec.args, "model": {"kind": "replay", "error_rate": error_rate}}
    return spec.model_copy(update={"name": f"{spec.name}-{suffix}", "route_prefix": None, "args": args})


async def _through_serve(
    name: str,
    rows: list[tuple[int, dict[str, Any]]],
    report: EnvReport,
    verify_budget_s: float,
    rollout_timeout_s: float,
    address: str | None,
) -> None:
    from ray import serve

    from gym_serve.serving import deploy as serving

    config = config_path(name)
    specs, env_app = _specs(name, config)
    helpers = [s.model_copy(update={"route_prefix": None}) for s in specs if s.name != env_app]
    env_spec = next(s for s in specs if s.name == env_app)
    right, wrong = _variant(env_spec, "right", 0.0), _variant(env_spec, "wrong", 1.0)
    serving.connect(address)
    serving.deploy([*helpers, right, wrong], source=str(config or f"<a plain config for {name}>"))
    try:
        for variant, attr in ((right, "right"), (wrong, "wrong")):
            handle = serve.get_app_handle(variant.name)
            results = await asyncio.gather(
                *(asyncio.wait_for(handle.run.remote(row), rollout_timeout_s) for _, row in rows),
                return_exceptions=True,
            )
            for result_row, outcome in zip(report.rows, results, strict=True):
                _score(result_row, attr, outcome, verify_budget_s)
    finally:
        for spec in (right, wrong, *helpers):
            serve.delete(spec.name)


def _score(result: RowResult, attr: str, outcome: Any, verify_budget_s: float) -> None:
    if isinstance(outcome, BaseException):
        result.problems.append(f"{attr} rollout failed: {type(outcome).__name__}: {outcome}")
        return
    reward = float(outcome["reward"])
    setattr(result, attr, reward)
    expected = result.expected_right if attr == "right" else result.expected_wrong
    if expected is not None and reward != expected:
        result.problems.append(f"{attr} answer scored {reward:g}, its recording {expected:g}")
    verify_s = float(outcome.get("_gs_timings", {}).get("verify_s", 0.0))
    result.verify_s = max(result.verify_s, verify_s)
    if verify_s > verify_budget_s:
        result.problems.append(f"verify took {verify_s:.2f} s (budget {verify_budget_s:g} s)")
