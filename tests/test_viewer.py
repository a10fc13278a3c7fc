"""The rollout viewer in a real browser: Playwright (from PyPI) driving Debian's Chromium through `gym-serve view`.

One `gym-serve view` process serves a file holding tasks that trip every
health check, turns of every shape, answers and tool outputs full of `<script>`,
a rollout of 10,000 turns with a 20 MB tool output, and lines that are not
rollouts. The tests click through the task table, a task, a diff and rollouts,
and assert what the pages show. Screenshots of the pages land in
`test-artifacts/viewer/` (git-ignored) for a person to look at.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.conftest import REPO
from tests.health_rows import AGENT, call, clean_rows, episode, message, row, tool_call, tool_output, tripping_rows

GYM_SERVE = [sys.executable, "-m", "gym_serve.cli"]
ARTIFACTS = REPO / "test-artifacts" / "viewer"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
PAYLOAD = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2"><b>bold?</b>'
HUGE_OUTPUT = 20 * 1024 * 1024
TURNS = 10_000


def payload_row(task: int, rollout: int, reward: float) -> dict[str, Any]:
    think = {"type": "reasoning", "id": "rs_x", "summary": [{"type": "summary_text", "text": f"thinking {PAYLOAD}"}]}
    output = [
        think,
        tool_call(
            "x1", name="search", arguments=json.dumps({"q": PAYLOAD}), **call([1, 2, 3], [4, 5], policy_version=3)
        ),
        tool_output("x1", f"result: {PAYLOAD}"),
        message(f"The answer is {PAYLOAD}", **call([1, 2, 3, 4, 5, 6], [7, 8])),
    ]
    made = row(task, rollout, reward, output, usage={"input_tokens": 9, "output_tokens": 4},
               reward_components={"correct": reward, "format <i>": 0.5})  # fmt: skip
    made["responses_create_params"]["input"] = [
        {"role": "system", "content": f"You are careful. {PAYLOAD}"},
        {"role": "user", "content": f"Find it. {PAYLOAD}"},
    ]
    return made


def huge_row(task: int) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    for n in range(TURNS - 1):
        output += [tool_call(f"h{n}", name="step", arguments=json.dumps({"n": n})), tool_output(f"h{n}", f"ok {n}")]
    output[1]["output"] = "x" * HUGE_OUTPUT  # the first tool output: 20 MB
    output.append(message("done"))
    return row(task, 0, 1.0, output, usage={"input_tokens": 100, "output_tokens": 50})


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("viewer")
    rows, failures, _ = tripping_rows()
    rows += [payload_row(40, 0, 1.0), payload_row(40, 1, 0.0), huge_row(41)]
    lines = [json.dumps(r) for r in rows]
    lines[4] = "{this is not json"
    lines.insert(7, json.dumps({"responses_create_params": {"input": "an input row, not a rollout"}}))
    path = folder / "rollouts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    (folder / "rollouts_failures.jsonl").write_text("".join(json.dumps(f) + "\n" for f in failures))
    return path


@pytest.fixture(scope="module")
def url(rollouts: Path) -> Iterator[str]:
    proc = subprocess.Popen([*GYM_SERVE, "view", str(rollouts)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    seen = []
    try:
        for line in proc.stdout:  # it serves at once, and says when the index is built
            seen.append(line)
            if line.startswith("Indexed"):
                break
        else:
            pytest.fail(f"`gym-serve view` stopped before it indexed the file:\n{''.join(seen)}")
        found = re.search(r"Serving the rollout viewer at (http://127\.0\.0\.1:\d+/)", "".join(seen))
        assert found, seen
        assert re.match(
            r"Indexed \d+ rollouts \(\d+ tasks\) in [\d.]+ s; 2 bad line\(s\) listed on the page", seen[-1]
        )
        yield found[1]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    yield tab
    context.close()


def test_the_task_table_sorts_filters_and_plots(page: Page, url: str) -> None:
    page.goto(url)
    expect(page.locator("#rollout-count")).to_have_text(re.compile(r"^\d+$"))
    rows = page.locator("#tasks tbody tr")
    assert rows.count() > 20
    expect(page.locator("#reward-plot svg rect")).to_have_count(20)
    findings_bars = page.locator("#findings-plot a")
    assert findings_bars.count() == 19, "one bar per check, each a link to what it found"
    page.screenshot(path=ARTIFACTS / "tasks.png", full_page=True)

    page.click("th.pass_rate a")  # ascending: the tasks that never pass first
    expect(page.locator("th.pass_rate")).to_have_class(re.compile("sorted asc"))
    assert page.locator("#tasks tbody tr").first.locator("td").nth(3).inner_text().strip().endswith("0%")
    page.click("th.pass_rate a")
    expect(page.locator("th.pass_rate")).to_have_class(re.compile("sorted desc"))
    assert page.locator("#tasks tbody tr").first.locator("td").nth(3).inner_text().strip().endswith("100%")

    page.select_option("select[name=check]", "token_contiguity_break")  # applies itself
    expect(page.locator("#tasks tbody tr")).to_have_count(1)
    expect(page.locator("#tasks tbody tr td").nth(1)).to_have_text("23")
    page.select_option("select[name=check]", "")
    page.fill("input[name=q]", "41")
    page.press("input[name=q]", "Enter")
    expect(page.locator("#tasks tbody tr")).to_have_count(1)
    assert "sort=pass_rate" in page.url and "dir=desc" in page.url, "the sort stays while filtering"

    page.goto(url)
    page.click("#findings-plot a >> nth=0")  # the first check with findings
    expect(page.locator("h1")).to_have_text("check_execution_error")
    expect(page.locator("#flagged tbody tr")).to_have_count(1)


def test_bad_lines_are_listed_with_their_line_numbers(page: Page, url: str, rollouts: Path) -> None:
    page.goto(url)
    listed = page.locator("#bad-lines li")
    expect(listed).to_have_count(2)
    expect(listed.nth(0)).to_have_text(re.compile(rf"^{re.escape(str(rollouts))}, line 5: not valid JSON"))
    expect(listed.nth(1)).to_have_text(re.compile(r"line 8: an input row \(it has `responses_create_params`"))


def test_a_task_shows_its_rollouts_side_by_side_and_diffs_two(page: Page, url: str) -> None:
    page.goto(url + "?q=40")
    page.click("#tasks tbody tr >> nth=0 >> td >> nth=1 >> a")
    expect(page.locator("h1")).to_have_text(f"{AGENT} · task 40")
    columns = page.locator("#side-by-side article")
    expect(columns).to_have_count(2)
    expect(columns.nth(0).locator(".reward")).to_have_text("1.000")
    expect(columns.nth(1).locator(".reward")).to_have_text("0.000")
    expect(columns.nth(0)).to_have_class(re.compile("passed"))
    expect(columns.nth(0).locator(".facts")).to_contain_text("2 turn(s)")
    expect(columns.nth(0).locator(".block.assistant pre")).to_contain_text("The answer is")
    page.screenshot(path=ARTIFACTS / "task.png", full_page=True)

    page.click("#diff-form button")
    expect(page.locator("h1")).to_contain_text("rollout 0 against rollout 1")
    expect(page.locator("#changed")).to_have_text("1")  # the two episodes say the same; their rewards differ
    expect(page.locator("#diff tr.replace")).to_have_text(re.compile(r"\[reward\] 1.0\s*\[reward\] 0.0"))
    page.goto(url + "?q=15")  # a task whose first rollout said nothing in its last turn
    page.click("#tasks tbody tr >> nth=0 >> td >> nth=1 >> a")
    page.click("#diff-form button")
    expect(page.locator("#changed")).to_have_text("2")
    expect(page.locator("#diff tr.replace").last).to_have_text(re.compile(r"\[assistant\]\s*\[assistant\] 42"))
    page.screenshot(path=ARTIFACTS / "diff.png", full_page=True)


def test_a_rollout_reads_as_a_conversation(page: Page, url: str) -> None:
    page.goto(url + "?q=40")
    page.click("#tasks tbody tr >> nth=0 >> td >> nth=1 >> a")
    page.click("#side-by-side article >> nth=0 >> h2 a")
    conversation = page.locator("#conversation")
    expect(conversation.locator(".block.system pre")).to_contain_text("You are careful.")
    expect(conversation.locator(".block.user pre")).to_contain_text("Find it.")
    reasoning = conversation.locator("details.reasoning")
    expect(reasoning).to_have_count(1)
    expect(reasoning.locator("pre")).to_be_hidden()  # collapsed
    expect(conversation.locator(".block.tool_call .who")).to_contain_text("calls search")
    expect(conversation.locator(".block.tool_output pre")).to_contain_text("result:")
    expect(conversation.locator(".block.assistant pre")).to_contain_text("The answer is")
    expect(conversation.locator("section.turn h3").nth(0)).to_contain_text("prompt 3 → 2 generated tokens")
    expect(conversation.locator("section.turn h3").nth(0)).to_contain_text("policy v3")
    facts = page.locator("#facts")
    expect(facts.locator(".reward").first).to_have_text("1.000")
    expect(facts.locator(".components")).to_contain_text("format <i>")
    expect(page.locator("#tokens")).to_contain_text("input 9 · output 4")
    expect(page.locator("#policy")).to_contain_text("policy_version_min: 3")
    expect(page.locator("#timings")).to_contain_text("verify_deadline_s")
    page.screenshot(path=ARTIFACTS / "rollout.png", full_page=True)
    reasoning.locator("summary").click()
    expect(reasoning.locator("pre")).to_be_visible()

    page.goto(url + "?check=model_call_failed")  # a failure row: its kind and error, no turns
    page.click("#tasks tbody tr >> nth=0 >> td >> nth=1 >> a")
    page.click("#side-by-side article.failed h2 a")
    expect(page.locator("#facts .failure")).to_have_text("model_error")
    expect(page.locator("#facts pre.error")).to_contain_text("503 from the endpoint")
    expect(page.locator("#findings")).to_contain_text("rollout_ended_on_failed_model_call")


def test_script_in_any_text_is_shown_as_text_and_never_runs(page: Page, url: str) -> None:
    page.goto(url + "?q=40")
    page.click("#tasks tbody tr >> nth=0 >> td >> nth=1 >> a")
    expect(page.locator("#side-by-side")).to_contain_text("<script>window.__pwned = 1</script>")
    page.click("#diff-form button")
    page.goto(url + "?q=40")
    page.click("#tasks tbody tr >> nth=0 >> td >> nth=1 >> a")
    page.click("#side-by-side article >> nth=0 >> h2 a")
    page.click("details.reasoning summary")
    for where in (".block.system", ".block.user", "details.reasoning", ".block.tool_output", ".block.assistant"):
        expect(page.locator(f"#conversation {where} pre").first).to_contain_text(PAYLOAD)
    expect(page.locator("#conversation .block.tool_call pre")).to_contain_text("<script>window.__pwned = 1</script>")
    assert page.locator("#conversation img, #conversation b, #conversation script").count() == 0
    time.sleep(0.3)  # an onerror would have fired by now
    assert page.evaluate("window.__pwned") is None
    raw = page.request.get(url + "rollout/0/text/out-0")
    assert raw.headers["content-type"].startswith("text/plain") and raw.headers["x-content-type-options"] == "nosniff"


def test_a_huge_rollout_is_shown_cut_with_a_way_to_the_whole(page: Page, url: str) -> None:
    page.goto(url + "?q=41")
    page.click("#tasks tbody tr >> nth=0 >> td >> nth=1 >> a")
    started = time.perf_counter()
    expect(page.locator("#side-by-side article p.cut").last).to_contain_text(f"and {TURNS - 12:,} more turn(s)")
    response = page.goto(url.rstrip("/") + (page.locator("#side-by-side article h2 a").get_attribute("href") or ""))
    seconds = time.perf_counter() - started
    assert response is not None and len(response.body()) < 1_000_000, "a page, not the file"
    expect(page.locator("section.turn")).to_have_count(40)
    expect(page.locator("#conversation")).to_contain_text(f"Turns 1–40 of {TURNS:,}.")
    cut = page.locator("p.cut").first
    expect(cut).to_contain_text(f"Showing 4,000 of {HUGE_OUTPUT:,} characters.")
    whole = page.request.get(url.rstrip("/") + (cut.locator("a.whole").get_attribute("href") or ""))
    assert whole.ok and len(whole.text()) == HUGE_OUTPUT
    page.click("nav.pager a[rel=next]")
    expect(page.locator("section.turn h3").first).to_contain_text("turn 41")
    page.goto(page.url.split("?")[0] + f"?page={TURNS // 40}")
    expect(page.locator("section.turn").last.locator(".block.assistant pre")).to_have_text("done")
    print(f"10,000-turn rollout page: {seconds:.2f} s")  # for the report; its target is in benchmarks/viewer.py


def test_unknown_pages_say_what_is_missing_as_text(page: Page, url: str) -> None:
    response = page.goto(url + "rollout/99999")
    assert response is not None and response.status == 404
    expect(page.locator("p.error")).to_contain_text("No rollout '99999': this file holds rollouts 0 to")
    page.goto(url + "task?agent=<script>x</script>&task=1")
    expect(page.locator("p.error")).to_contain_text("of agent '<script>x</script>'")
    page.goto(url + "findings?check=nope")
    expect(page.locator("p.error")).to_contain_text("No check 'nope'; the checks are: check_execution_error")


def test_a_file_that_is_not_rollouts_is_a_clear_error(tmp_path: Path) -> None:
    tasks = REPO / "envs" / "example_single_tool_call" / "data" / "example.jsonl"
    result = subprocess.run([*GYM_SERVE, "view", str(tasks)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Serving" not in result.stdout
    assert f"gym-serve: error: {tasks}: not a rollouts file: none of its 6 line(s) is a rollout" in result.stderr
    assert "an input row (it has `responses_create_params` but no `response`): collect it first" in result.stderr
    missing = subprocess.run([*GYM_SERVE, "view", str(tmp_path / "nope.jsonl")], capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    assert missing.returncode == 2 and "nope.jsonl: cannot open: no such file" in missing.stderr


def test_the_index_is_kept_and_used_again_until_the_file_changes(rollouts: Path, url: str) -> None:
    from gym_serve.viewer.index import RolloutIndex

    kept = rollouts.with_name("rollouts_viewer_index.json")
    assert kept.is_file(), "the server kept its index"
    index = RolloutIndex.open(rollouts)
    assert index.bad_lines and len(index) == len(RolloutIndex.build([rollouts, rollouts.with_name(
        "rollouts_failures.jsonl")]))  # fmt: skip
    scratch = rollouts.with_name("copy.jsonl")
    scratch.write_text("".join(json.dumps(r) + "\n" for r in clean_rows()))
    first = RolloutIndex.open(scratch)
    with scratch.open("a") as handle:
        handle.write(json.dumps(episode(9, 0, 1.0)) + "\n")
    assert len(RolloutIndex.open(scratch)) == len(first) + 1, "a changed file is indexed again"


def test_until_the_index_is_built_every_page_says_how_far_it_got(rollouts: Path) -> None:
    """The app in this process, on a real server, while the state says 20 of 50 MB are read (then a failure)."""
    from aiohttp.test_utils import TestClient, TestServer

    from gym_serve.viewer.server import Indexing, build_app

    state = Indexing(source=str(rollouts), total_bytes=50_000_000, done_bytes=20_000_000)

    async def pages() -> None:
        async with TestClient(TestServer(build_app(state))) as client:
            for path in ("/", "/task?agent=a&task=1", "/rollout/3"):
                response = await client.get(path)
                page = await response.text()
                assert response.status == 503 and response.headers["Retry-After"] == "1"
                assert "20.0 of 50.0 MB read" in page and '<meta http-equiv="refresh" content="1">' in page
            state.error = "OSError: <disk> went away"
            page = await (await client.get("/")).text()
            assert "Indexing failed" in page and "OSError: &lt;disk&gt; went away" in page

    with ThreadPoolExecutor(1) as thread:  # its own event loop, apart from Playwright's in this thread
        thread.submit(asyncio.run, pages()).result()


def test_the_profile_beside_the_file_is_shown_and_a_wrong_one_named(tmp_path: Path) -> None:
    """`gym-serve profile` writes `<rollouts>_aggregate_metrics.json`; the task table shows its key metrics."""
    from aiohttp.test_utils import TestClient, TestServer

    from gym_serve.analysis.profiling import profile
    from gym_serve.errors import InputError
    from gym_serve.viewer.index import RolloutIndex
    from gym_serve.viewer.server import Indexing, _profile, build_app

    rows = clean_rows()[:6]
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    inputs = tmp_path / "rollouts_materialized_inputs.jsonl"
    inputs.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "response"}) + "\n" for r in rows))
    profile(path)
    shown = _profile(str(path), None)
    assert shown[0]["agent"] == AGENT and "pass@1[avg-of-2]/accuracy" in shown[0]["metrics"]
    state = Indexing(source=str(path), index=RolloutIndex.open(path))

    async def page() -> str:
        async with TestClient(TestServer(build_app(state, shown))) as client:
            return await (await client.get("/")).text()

    with ThreadPoolExecutor(1) as thread:
        text = thread.submit(asyncio.run, page()).result()
    assert "<h2>Profile</h2>" in text and "pass@1[avg-of-2]/accuracy <b>50.00</b>" in text
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"not": "a profile"}')
    with pytest.raises(InputError, match="not a profile's aggregate metrics"):
        _profile(str(path), str(wrong))
