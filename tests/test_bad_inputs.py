"""Every kind of bad input, in one place: the corpus `tests/data/bad_inputs/` through `gym-serve collect` and
through `POST /v1/rollouts` (`make_corpus.py` there writes it; the 20 MB row is written here).

For each file the test states what must come of it. Through `collect` (the command itself, joined to this
module's cluster): which lines become rollouts (reward 1: they are the weather task's example rows, which the
replay model answers right), which are `bad_input` failure rows, and that the terminal names each bad line's
file, line and field. Through the ingress: the file's rows as one batch, one row per line of the body; a body
that is not strict JSON is refused (400) naming the line and column, or the field (`rows.N...`), and the rows
that parse are then sent again with `on_bad_row: fail`, each bad one answered by a `bad_input` line naming
its row and field, the good ones run.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import ray
from ray import serve

from gym_serve.cli import SHOWN_BAD_ROWS
from gym_serve.deployments.app import build_app
from gym_serve.deployments.ingress.api import build_ingress
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs
from gym_serve.testing.fixtures import example_rows
from gym_serve.wire.jsonl import strict_loads
from tests.conftest import REPO
from tests.ray_start_cluster import free_port, plain_env

pytestmark = [pytest.mark.serve, pytest.mark.timeout(600)]

CORPUS = REPO / "tests" / "data" / "bad_inputs"
APP = "example_single_tool_call"
CONFIG = REPO / "deployments" / f"{APP}.yaml"
RCP = "responses_create_params"


@dataclass(frozen=True)
class Case:
    """What must come of one file of the corpus."""

    good: list[int]
    """Lines that become rollouts (reward 1)."""
    bad: dict[int, str | None] = field(default_factory=dict)
    """Lines that are `bad_input` failure rows → the field their error names (None: the line names no field)."""
    says: dict[int, str] = field(default_factory=dict)
    """What the error of a bad line says, in part."""
    body: tuple[int, str] | None = None
    """Through the ingress, the whole file as one body: (400, what the answer names) when it is not strict JSON."""


TOO_DEEP = "nested more than 100 levels deep"
CASES: dict[str, Case] = {
    "malformed_json.jsonl": Case(
        good=[1, 4],
        bad={2: None, 3: None, 5: None, 6: None},
        says={2: "not valid JSON: Expecting ','", 3: "not valid JSON", 6: "expected a JSON object, got list"},
        body=(400, "at line 3, column 1"),  # line 2's row never closes: the parser finds out where line 3 begins
    ),
    "wrong_types.jsonl": Case(
        good=[7],
        bad={
            1: f"{RCP}.input",
            2: f"{RCP}.temperature",
            3: f"{RCP}.tools",
            4: "agent_ref.name",
            5: "_ng_task_index",
            6: RCP,
        },
        says={1: "must be a string or a non-empty list of items", 2: "valid number", 3: "valid list"},
    ),
    "byte_order_mark.jsonl": Case(good=[1, 2, 3]),
    "crlf.jsonl": Case(good=[1, 2, 4]),
    "nan_and_infinity.jsonl": Case(
        good=[4],
        bad={1: f"{RCP}.temperature", 2: "score", 3: "score"},
        says={1: "`NaN` is not JSON", 2: "`Infinity` is not JSON", 3: "`-Infinity` is not JSON"},
        body=(400, f"rows.0.{RCP}.temperature"),
    ),
    "duplicate_keys.jsonl": Case(
        good=[3],
        bad={1: RCP, 2: f"{RCP}.input"},
        says={1: f"the key `{RCP}` is given twice", 2: "the key `input` is given twice"},
        body=(400, f"rows.0.{RCP}"),
    ),
    "deep_nesting.jsonl": Case(
        good=[4],
        bad={1: "notes" + ".0" * 99, 2: None, 3: f"{RCP}.tools.0.parameters" + ".properties.inner" * 48},
        says={1: TOO_DEEP, 2: "nested too deeply to read", 3: TOO_DEEP},
        body=(400, "nested too deeply to read"),
    ),
    "invalid_utf8.jsonl": Case(
        good=[2],
        bad={1: None, 3: None},
        says={1: "can't decode byte 0xff", 3: "can't decode byte 0xc3"},
        body=(400, "not valid UTF-8 at line 1, column"),
    ),
    "control_characters.jsonl": Case(
        good=[2],
        bad={1: None, 3: None, 4: None},
        says={1: "Invalid control character", 3: "Invalid control character", 4: "Invalid control character"},
        body=(400, "at line 1, column"),
    ),
    "empty.jsonl": Case(good=[], body=(400, "`rows`")),
    "blank_lines.jsonl": Case(good=[], body=(400, "`rows`")),
    "all_bad.jsonl": Case(
        good=[],
        bad={
            1: None,
            2: None,
            3: None,
            4: f"{RCP}.input",
            5: f"{RCP}.input",
            6: f"{RCP}.input",
            7: f"{RCP}.top_p",
            8: f"{RCP}.max_output_tokens",
            9: "_ng_task_index",
            10: "agent_ref.name",
            11: RCP,
            12: f"{RCP}.temperature",
        },
        says={2: "expected a JSON object, got NoneType", 3: "got str", 5: "at least 1 item", 12: "`NaN` is not JSON"},
        body=(400, "at line 1, column"),
    ),
    "wrong_roles.jsonl": Case(
        good=[5],
        bad={1: f"{RCP}.input.1.role", 2: f"{RCP}.input.1.role", 3: RCP, 4: f"{RCP}.input.1.role"},
        says={
            1: "Input should be 'user', 'system', 'developer' or 'assistant'",
            3: "`input[1]` is a `function_call_output` for call_id `c9`, which no earlier `function_call`",
            4: "Field required",
        },
    ),
    "wrong_tool_schemas.jsonl": Case(
        good=[6],
        bad={
            1: f"{RCP}.tools.0.parameters",
            2: f"{RCP}.tools.0.parameters",
            3: f"{RCP}.tools.0.name",
            4: f"{RCP}.tools.0.name",
            5: f"{RCP}.tools.0.type",
        },
        says={1: "describe an object; got type 'string'", 2: "not a valid JSON Schema at $.properties.city.type"},
    ),
    "big_row.jsonl": Case(good=[1, 2]),  # written here: a 20 MB task field, and a plain row after it
}


def test_the_corpus_is_what_its_script_writes(tmp_path: Path) -> None:
    """Each case above has its file, and the files are exactly what `make_corpus.py` writes (nothing edited by
    hand, where a byte-order mark or a CR would be lost without a trace)."""
    subprocess.run([sys.executable, str(CORPUS / "make_corpus.py"), str(tmp_path)], check=True, capture_output=True)
    copy = tmp_path
    written = {p.name for p in copy.glob("*.jsonl")}
    assert written == {name for name in CASES if name != "big_row.jsonl"}
    for name in written:
        assert (copy / name).read_bytes() == (CORPUS / name).read_bytes(), name


# ---- the cluster: the weather app and an ingress over HTTP ----------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """(Ray's address, the ingress's URL, a folder holding the corpus and the 20 MB row)."""
    port = free_port()
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(AppArgs.model_validate({"environment": {"name": APP}})), name=APP, route_prefix=None)
    serve.run(
        build_ingress(
            {"agents": [APP], "default_agent": APP, "max_body_bytes": 64 << 20, "token_env": "NO_TOKEN_HERE"}
        ),
        name="ingress",
        route_prefix="/",
    )
    files = tmp_path_factory.mktemp("bad_inputs")
    for source in CORPUS.glob("*.jsonl"):
        (files / source.name).write_bytes(source.read_bytes())
    big = {**example_rows(APP)[0], "notes": "x" * (20 << 20)}
    (files / "big_row.jsonl").write_text(json.dumps(big) + "\n" + json.dumps(example_rows(APP)[1]) + "\n")
    yield ray.get_runtime_context().gcs_address, f"http://127.0.0.1:{port}", files
    serve.shutdown()
    ray.shutdown()


# ---- through `gym-serve collect` ------------------------------------------------------------------------------


def collect(address: str, source: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = source.with_name(source.stem + "_out.jsonl")
    command = [sys.executable, "-m", "gym_serve.cli", "collect", "--config", str(CONFIG), "--no-deploy"]
    command += ["--input", str(source), "--output", str(out), "--address", address, "--concurrency", "8"]
    env = {**plain_env(), "PYTHONPATH": str(REPO)}
    if "RAY_AUTH_MODE" in os.environ:  # this process's local instance turned Ray's token auth on (its token: ~/.ray)
        env["RAY_AUTH_MODE"] = os.environ["RAY_AUTH_MODE"]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300), out


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def collected(cluster: tuple[str, str, Path]) -> dict[str, tuple[subprocess.CompletedProcess[str], Path]]:
    """Every file collected, three commands at a time (each joins the cluster: a few seconds of start-up)."""
    address, _, files = cluster

    async def all_files() -> list[tuple[subprocess.CompletedProcess[str], Path]]:
        slots = asyncio.Semaphore(3)

        async def one(name: str) -> tuple[subprocess.CompletedProcess[str], Path]:
            async with slots:
                return await asyncio.to_thread(collect, address, files / name)

        return await asyncio.gather(*(one(name) for name in CASES))

    return dict(zip(CASES, asyncio.run(all_files()), strict=True))


@pytest.mark.parametrize("name", CASES)
def test_collect_runs_the_good_lines_and_names_each_bad_ones_file_line_and_field(
    name: str, cluster: tuple[str, str, Path], collected: dict[str, Any]
) -> None:
    case, (result, out) = CASES[name], collected[name]
    source = cluster[2] / name
    if not case.good and not case.bad:  # nothing to read
        assert result.returncode == 1 and f"{source} holds no rows" in result.stderr
        return
    assert result.returncode == (0 if case.good else 1), result.stderr[-3000:]
    rollouts = read_rows(out)
    assert sorted(r["_ng_task_index"] for r in rollouts) == list(range(len(case.good))), "each good line once"
    assert all(r["reward"] == 1.0 for r in rollouts)
    failures = read_rows(out.with_name(out.stem + "_failures.jsonl"))
    assert {f["line"]: f["_ng_failure_class"] for f in failures} == dict.fromkeys(case.bad, "bad_input")
    for failure in failures:
        line, wanted = failure["line"], case.bad[failure["line"]]
        where = f"{source}, line {line}" + (f", field `{wanted}`: " if wanted else ": ")
        assert failure["error"].startswith(where), failure["error"]
        assert case.says.get(line, "") in failure["error"]
        assert failure["mask_sample"] is True and failure["source"] == str(source)
        if line <= SHOWN_BAD_ROWS:  # the first ten on the terminal, then where all of them are
            assert where in result.stderr, f"the terminal does not name line {line}:\n{result.stderr[-3000:]}"
    if case.bad:
        assert f"{len(case.bad)} input row(s) skipped as bad input" in result.stderr
    if len(case.bad) > SHOWN_BAD_ROWS:
        rest = len(case.bad) - SHOWN_BAD_ROWS
        assert f"(and {rest} more; all are in {out.with_name(out.stem + '_failures.jsonl')})" in result.stderr
    assert f"rows read        {len(case.good) + len(case.bad)}: {len(case.good)} ran" in result.stdout
    if name == "big_row.jsonl":
        assert len(next(r for r in rollouts if "notes" in r)["notes"]) == 20 << 20, "the 20 MB field kept whole"
    if name == "control_characters.jsonl":  # escaped control characters are JSON: kept as they were
        assert rollouts[0]["notes"] == "tab\there, nul\x00 and escape\x1b, escaped"


# ---- through POST /v1/rollouts --------------------------------------------------------------------------------


def lines_of(path: Path) -> list[tuple[int, bytes]]:
    """(line number, bytes) of the file's lines that are not blank; a byte-order mark stays on its line."""
    raw = path.read_bytes().split(b"\n")
    return [(n, line.rstrip(b"\r")) for n, line in enumerate(raw, 1) if line.strip(b" \t\r")]


def batch(lines: list[bytes], **options: Any) -> bytes:
    """A `/v1/rollouts` body holding `lines` as its rows, row N on line N of the body."""
    head = json.dumps(options)[:-1] + (", " if options else "") + '"rows": ['
    return head.encode() + b",\n".join(lines) + b"]}"


async def post(url: str, body: bytes) -> tuple[int, list[Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/rollouts", data=io.BytesIO(body)) as response,
    ):
        text = await response.read()
    if response.status != 200:
        return response.status, [json.loads(text)]
    return 200, [json.loads(line) for line in text.splitlines() if line.strip()]


def parsed(line: bytes) -> Any:
    """The line's value if it is strict JSON (what a body must be), else `...`."""
    try:
        return strict_loads(line)
    except ValueError:
        return ...


@pytest.mark.parametrize("name", CASES)
async def test_the_ingress_refuses_a_body_naming_line_or_field_and_answers_each_bad_row(
    name: str, cluster: tuple[str, str, Path]
) -> None:
    case, url = CASES[name], cluster[1]
    numbered = lines_of(cluster[2] / name)
    if name == "byte_order_mark.jsonl":  # a client's BOM comes before its body, not inside it
        numbered[0] = (1, numbered[0][1].removeprefix(b"\xef\xbb\xbf"))
        status, answers = await post(url, b"\xef\xbb\xbf" + batch([line for _, line in numbered]))
        assert status == 200 and sorted(a["reward"] for a in answers) == [1.0, 1.0, 1.0]
        return

    status, answers = await post(url, batch([line for _, line in numbered], on_bad_row="fail"))
    if case.body is not None:
        wanted_status, named = case.body
        assert status == wanted_status and named in json.dumps(answers[0]), answers[0]
        assert set(answers[0]) <= {"error", "field", "problems"}, "gym-serve's error shape"
        for _, line in [
            (n, line) for n, line in numbered if parsed(line) is not ... and not isinstance(parsed(line), dict)
        ]:
            alone, (answer,) = await post(url, batch([line]))  # JSON, not a row: the body's `rows.0` is named
            assert alone == 400 and answer["field"] == "rows.0" and "valid dictionary" in answer["error"], answer
        numbered = [(n, line) for n, line in numbered if isinstance(parsed(line), dict)]
        if not numbered:
            return
        status, answers = await post(url, batch([line for _, line in numbered], on_bad_row="fail"))
    assert status == 200, answers
    at = {position: n for position, (n, _) in enumerate(numbered, 1)}  # the batch's row → the file's line
    rollouts = [a for a in answers if "_ng_failure_class" not in a]
    failures = {at[a["line"]]: a for a in answers if "_ng_failure_class" in a}
    assert len(rollouts) == len(case.good) and all(r["reward"] == 1.0 for r in rollouts)
    row_level = {n: f for n, f in case.bad.items() if n in dict(numbered)}
    assert set(failures) == set(row_level), failures
    for line, failure in failures.items():
        assert failure["_ng_failure_class"] == "bad_input"
        position = next(p for p, n in at.items() if n == line)
        assert failure["error"].startswith(f"rows, line {position}, field `{case.bad[line]}`: "), failure["error"]
        assert case.says.get(line, "") in failure["error"]

    if row_level:  # by default a batch with a bad row is refused, naming its first problem
        refused, (answer,) = await post(url, batch([line for _, line in numbered]))
        first = next(p for p, n in at.items() if n in row_level)
        assert refused == 422 and answer["field"] == f"rows.{first - 1}.{case.bad[at[first]]}", answer
