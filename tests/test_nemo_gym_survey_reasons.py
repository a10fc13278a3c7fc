"""The survey's reason for each NeMo Gym server that does not pass (`scripts/nemo_gym_survey.py`, `reason`): issue
31's fixed list where one fits, a few named others where none does, and the committed SURVEY.md gives one to every
server that neither replays nor runs end to end. Pure logic over results: no server, no Ray."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import REPO


def load_survey() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nemo_gym_survey", REPO / "scripts" / "nemo_gym_survey.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


survey = load_survey()


def failed(stage: str, error: str, **more: Any) -> dict[str, Any]:
    return {"server": "some_server", "stage": stage, "error": error, **more}


MISSING_IMAGE = (
    "#0: RolloutError: environment `seed` failed: EnvError: NeMo Gym server `x`: /seed_session answered 422: "
    '{"detail":[{"type":"missing","loc":["body","image_ref"],"msg":"Field required"}]}'
)
MISSING_TASK_FIELD = MISSING_IMAGE.replace("image_ref", "ground_truth")
MISS = "RolloutError: model `responses` failed: ReplayMissError: [replay model] No recording matches"
TWICE = "#1: RolloutError: environment `verify` failed: VerifyError: /verify raised TypeError: X() got multiple "
TWICE += "values for keyword argument 'row_id'; #4: " + MISS

CASES = [
    (failed("build", "URLError: <urlopen error [Errno -2] Name or service not known>"), survey.NETWORK),
    (failed("build", "CalledProcessError: Command '['git', 'clone', 'https://x/y']' returned 128."), survey.NETWORK),
    (failed("build", "AssertionError: Torch not compiled with CUDA enabled"), survey.GPU),
    (failed("replay", MISSING_IMAGE + "; #1: " + MISS), survey.SANDBOX),
    (failed("dependencies", "module `docker`: imported by the server, provided by no line"), survey.SANDBOX),
    (failed("dependencies", "`pkg @ git+https://h/o/r.git@abc`: a URL, not a package on the registries"), None),
    (failed("replay", TWICE, where="resources_servers/x/app.py:769"), survey.SERVER_BUG),
    (failed("replay", MISSING_TASK_FIELD), survey.LOST_TASK),
    (failed("replay", f"#0: {MISS}; other_agent: EnvError: unknown NeMo Gym agent `other_agent`"), survey.OTHER_AGENT),
    (failed("crash", ["InputError: x.jsonl, line 1: not a recorded rollout: KeyError: 'response'"]), None),
    (failed("build", "EnvError: x/base.py: cannot tell which class is the server"), survey.LIBRARY),
    (failed("replay", "#0: VerifyError: /verify raised InvalidUrlClientError: $%7Bpolicy_base_url%7D/metrics"), None),
    (failed("replay", f"#0: {MISS}; simple_agent: ReplayMissError: No recording matches"), survey.UNEXPLAINED),
    (failed("timeout", "no answer within 240 s"), survey.UNEXPLAINED),
]


@pytest.mark.parametrize(("result", "expected"), CASES, ids=lambda case: str(case)[:40] if case else "")
def test_each_kind_of_failure_gets_its_reason(result: dict[str, Any], expected: str | None) -> None:
    got = survey.reason(result)
    named = survey.reason_of(got)
    assert named in survey.REASONS, got
    if expected is not None:
        assert named == expected, got
    if result["stage"] == "dependencies" and "a URL" in result["error"]:
        assert got == f"{survey.UNREGISTERED}: `pkg` (a URL)"
    if result["stage"] == "crash":
        assert named == survey.NO_RECORDINGS
    if "%7B" in str(result["error"]):
        assert got == f"{survey.HOST_GAP}: `${{policy_base_url...}}` in its config is not resolved"


def test_the_packages_a_url_names_are_each_named() -> None:
    error = (
        "`git+https://github.com/o/verifiable-instructions.git`: a URL, not a package on the registries; "
        "`https://h/releases/download/en_core_web_sm-3.8.0/en_core_web_sm-3.8.0-py3-none-any.whl`: a URL, not a "
        "package on the registries; `git+https://github.com/o/tale-suite.git@train_test_splits`: a URL, not a "
        "package on the registries"
    )
    got = survey.reason(failed("dependencies", error))
    assert got == (
        f"{survey.UNREGISTERED}: `verifiable-instructions` (a URL), `en_core_web_sm` (a URL), `tale-suite` (a URL)"
    )


def test_a_passing_server_has_no_reason() -> None:
    assert survey.reason({"server": "x", "stage": "replays", "error": ""}) == ""
    assert survey.reason({"server": "x", "stage": "end to end", "error": "", "live": 5}) == ""


def test_a_bug_in_the_server_is_named_by_the_line_its_traceback_shows(tmp_path: Path) -> None:
    """A real traceback: a server module under a `resources_servers/` folder raises, gym-serve re-raises it `from`
    it (as the host does), and the survey keeps the server's own line, not gym-serve's."""
    app = tmp_path / "resources_servers" / "broken" / "app.py"
    app.parent.mkdir(parents=True)
    app.write_text("def verify(**body):\n    return dict(**body, verdict='correct')\n")
    spec = importlib.util.spec_from_file_location("broken_app", app)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        try:
            module.verify(verdict="recorded")
        except TypeError as e:
            raise RuntimeError(f"/verify raised TypeError: {e}") from e
    except RuntimeError as wrapped:
        where = survey.server_line(wrapped)
    assert where == "resources_servers/broken/app.py:2"
    result = failed(
        "replay",
        "#0: VerifyError: /verify raised TypeError: dict() got multiple values for keyword argument 'verdict'",
        where=where,
    )
    assert survey.reason(result) == f"{survey.SERVER_BUG}: `resources_servers/broken/app.py:2` passes `verdict` twice"
    without = survey.reason({**result, "where": None})
    assert survey.reason_of(without) == survey.SERVER_BUG and "no traceback" in without


def test_every_override_names_a_reason_and_says_why() -> None:
    for server, (named, why) in survey.OVERRIDES.items():
        assert survey.reason_of(named) in survey.REASONS, server
        assert why.strip(), server


def committed_rows() -> list[dict[str, str]]:
    text = (REPO / "deployments" / "nemo_gym" / "SURVEY.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| server |"))
    names = [cell.strip() for cell in header.strip("|").split("|")]
    rows = []
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").replace("\\|", "\x00").split("|")]
            rows.append(dict(zip(names, cells, strict=True)))
    return rows


def test_every_server_of_the_committed_survey_that_does_not_pass_has_one_allowed_reason() -> None:
    rows = committed_rows()
    assert len(rows) == 145
    for row in rows:
        if row["stage"] in survey.PASSING:
            assert row["reason"] == "", row["server"]
        else:
            assert survey.reason_of(row["reason"]) in survey.REASONS, (row["server"], row["reason"])
    text = (REPO / "deployments" / "nemo_gym" / "SURVEY.md").read_text()
    counts = next(line for line in text.splitlines() if line.startswith("Reasons ("))
    listed = sum(int(part.rsplit(" ", 1)[1]) for part in counts.split(": ", 1)[1].split(", "))
    assert listed == sum(row["stage"] not in survey.PASSING for row in rows)


def test_render_only_writes_the_table_from_stored_results_and_runs_no_server(tmp_path: Path) -> None:
    results, out = tmp_path / "results.json", tmp_path / "survey.md"
    stored = {
        "a": {"server": "a", "stage": "replays", "agree": 5, "recordings": 5, "agents": ["gym-serve"], "error": ""},
        "b": failed("build", "URLError: <urlopen error [Errno -2] Name or service not known>") | {"server": "b"},
    }
    results.write_text(json.dumps(stored))
    command = [sys.executable, "scripts/nemo_gym_survey.py", "--render-only", "--results", str(results)]
    done = subprocess.run([*command, "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    table = out.read_text()
    assert (
        "| `b` | build |  |  | needs network or a data download at start: a host it cannot reach (URLError) |" in table
    )
    assert "Counts: replays 1, build 1" in table and "needs network or a data download at start 1" in table
    assert json.loads(results.read_text()) == stored  # read, never rewritten
    missing = subprocess.run(
        [*command[:3], "--results", str(tmp_path / "none.json")], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 2 and "none.json is no file" in missing.stderr


def test_the_address_a_server_looks_its_judge_up_by_answers_every_request_and_is_started_once() -> None:
    """xstest polls its judge's address and posts to it before it starts (any HTTP answer will do); its judge calls
    go by name through the host's routes, so the address answers each request 404, saying so."""
    import urllib.error
    import urllib.request

    address = survey.model_address()
    assert address == survey.model_address() and address.startswith("http://127.0.0.1:")
    for request in (urllib.request.Request(address), urllib.request.Request(f"{address}/v1/responses", b"{}")):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=10)
        assert e.value.code == 404 and b"through gym-serve's routes" in e.value.read()


def test_a_recording_is_replayed_by_the_agent_instance_that_made_it() -> None:
    """Named by `agent_ref`; else the server's one shipped instance; else the one agent all its instances run."""
    sokoban = {"agent_ref": {"type": "responses_api_agents", "name": "grl_sokoban_gymnasium_agent"}}
    instance, agent, config = survey.recording_agent("grl_sokoban", sokoban)
    assert (instance, agent, config["max_steps"]) == ("grl_sokoban_gymnasium_agent", "gymnasium_agent", 20)
    assert not set(config) & set(survey.INSTANCE_ONLY)
    circle_click = survey.recording_agent("circle_click", {})
    assert circle_click == ("circle_click_simple_agent", "simple_agent", {"max_steps": 1})
    single_step = "single_step_tool_use_with_argument_comparison"
    assert survey.recording_agent(single_step, {}) == ("", "tool_simulation_agent", {})
