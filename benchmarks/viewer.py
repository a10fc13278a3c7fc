"""The rollout viewer at scale: `gym-serve view` on 100,000 synthetic rollouts, from start to first page and per page.

The file is generated: 25,000 tasks × 4 rollouts of a two-tool-call episode
with token bundles and policy versions (about 2.5 kB a row, like the weather
task's rows from a token-returning tier), rewards varied so that some tasks
never pass, a few hollow turns and failures so the health checks find something.

It measures, each in a fresh `gym-serve view` process (what a user waits for):

- *cold start*: no index yet. The server answers at once with a progress page while it reads every line
  and runs every check; timed from launching the command to that first page, and to the task table;
- *warm start*: the index kept beside the file by the cold start; launch to the task table;

and, against the warm server, the time of each page (median and slowest of `--repeat` requests): the task
table (plain, sorted by pass rate, filtered), a task page, a rollout page, the rollouts of one check, a diff.
Also the RSS of the server and the size of the kept index. The issue's target: a first page in under 2 s.

    python benchmarks/viewer.py [--rollouts 100000] [--repeat 5]

Prints a table last; writes benchmarks/results/viewer-<date>.json and .png.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import harness
import psutil

REPEATS = 4


def pages(rollouts: int) -> dict[str, str]:
    """The pages timed: one of each kind, about the middle of the file."""
    rid = rollouts // 2 + 1
    return {
        "task table": "/",
        "sorted by pass rate": "/?sort=pass_rate&dir=asc",
        "filtered (q=77)": "/?q=77&show=never",
        "task page": f"/task?agent=bench&task={rid // REPEATS}",
        "rollout page": f"/rollout/{rid}",
        "rollouts of a check": "/findings?check=agent_turn_hollow",
        "diff of two": f"/diff?a={rid - 1}&b={rid}",
    }


def generate(path: Path, rollouts: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    system = "You are a weather assistant. Use the tools; answer in one sentence. " * 6
    pool = [_tokens(rng) for _ in range(64)]  # token bundles to draw from: making each anew is the slow part
    with path.open("w") as out:
        for n in range(rollouts):
            task, k = divmod(n, REPEATS)
            out.write(json.dumps(_row(task, k, rng, system, rng.choice(pool))) + "\n")
    return path


def _tokens(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two calls' bundles whose prompts extend each other, as a token-exact tier records them."""
    prompt = [rng.randrange(50_000) for _ in range(120)]
    first = [rng.randrange(50_000) for _ in range(24)]
    second_prompt = [*prompt, *first, *(rng.randrange(50_000) for _ in range(30))]
    second = [rng.randrange(50_000) for _ in range(16)]
    return _bundle(rng, prompt, first), _bundle(rng, second_prompt, second)


def _bundle(rng: random.Random, prompt: list[int], generated: list[int]) -> dict[str, Any]:
    logprobs = [round(-rng.random(), 4) for _ in generated]
    return {"prompt_token_ids": prompt, "generation_token_ids": generated, "generation_log_probs": logprobs,
            "policy_version": 7}  # fmt: skip


def _row(
    task: int, k: int, rng: random.Random, system: str, bundles: tuple[dict[str, Any], dict[str, Any]]
) -> dict[str, Any]:
    hardness = (task * 7919 % 100) / 100  # the same for every rollout of a task
    row: dict[str, Any] = {
        "responses_create_params": {"input": [{"role": "system", "content": system},
                                              {"role": "user", "content": f"What is the weather in city {task}?"}]},
        "agent_ref": {"name": "bench"}, "_ng_task_index": task, "_ng_rollout_index": k,
    }  # fmt: skip
    if rng.random() < 0.01:
        return {**row, "_ng_failure_class": "model_error", "error": "model `responses` failed: 503", "attempts": 3}
    answer = "" if rng.random() < 0.01 else f"It is sunny in city {task}, 21 degrees."
    first, second = bundles
    output = [
        {"type": "function_call", "id": f"fc_{task}_{k}", "call_id": f"c_{task}_{k}", "name": "get_weather",
         "arguments": json.dumps({"city": f"city {task}"}), "status": "completed", **first},
        {"type": "function_call_output", "call_id": f"c_{task}_{k}", "output": json.dumps({"sky": "sunny", "c": 21})},
        {"type": "message", "id": f"msg_{task}_{k}", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": answer, "annotations": []}], **second},
    ]  # fmt: skip
    usage = {
        "input_tokens": len(first["prompt_token_ids"]) + len(second["prompt_token_ids"]),
        "output_tokens": len(first["generation_token_ids"]) + len(second["generation_token_ids"]),
    }
    reward = 1.0 if answer and rng.random() > hardness else 0.0
    response = {"id": f"r_{task}_{k}", "model": "policy", "status": "completed", "output": output, "usage": usage}
    return {
        **row,
        "response": response,
        "reward": reward, "mask_sample": False, "policy_version_min": 7, "policy_version_max": 7,
        "_gs_timings": {"model_s": 0.4, "tool_s": 0.01, "verify_s": 0.002, "verify_deadline_s": 60.0},
    }  # fmt: skip


def launch(path: Path) -> tuple[subprocess.Popen[str], str, float, float]:
    """Start `gym-serve view`: it, its URL, the seconds from launch to its first page and to the task table."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gym_serve.cli", "view", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if found := re.search(r"at (http://127\.0\.0\.1:\d+/)", line):
            url = found[1]
            break
    else:
        raise SystemExit(f"gym-serve view stopped: {proc.wait()}")
    first = None
    while True:  # while it indexes, every page is a progress page (503)
        status = get(url, expect=None)[1]
        first = first or time.perf_counter() - started
        if status == 200:
            return proc, url, first, time.perf_counter() - started
        time.sleep(0.1)


def get(url: str, expect: int | None = 200) -> tuple[float, int]:
    """Seconds for one GET, and its status."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as e:
        status = e.code
    assert expect is None or status == expect, (url, status)
    return time.perf_counter() - started, status


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.wait(timeout=30)
    if proc.stdout is not None:
        proc.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5, help="requests per page")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gym-serve-viewer-"))
    try:
        made = time.perf_counter()
        source = generate(work / "rollouts.jsonl", args.rollouts)
        print(f"generated {args.rollouts:,} rollouts ({source.stat().st_size / 1e6:,.0f} MB) in "
              f"{time.perf_counter() - made:.1f} s", flush=True)  # fmt: skip
        proc, _, cold_first_s, cold_s = launch(source)
        stop(proc)
        proc, url, warm_first_s, warm_s = launch(source)
        timed = {}
        for name, path in pages(args.rollouts).items():
            times = [get(url.rstrip("/") + path)[0] for _ in range(args.repeat)]
            timed[name] = {"first_s": times[0], "median_s": statistics.median(times), "max_s": max(times)}
        rss_mb = psutil.Process(proc.pid).memory_info().rss / 1e6
        stop(proc)
        index_mb = (work / "rollouts_viewer_index.json").stat().st_size / 1e6
        file_mb = source.stat().st_size / 1e6
    finally:
        shutil.rmtree(work, ignore_errors=True)

    result = {
        "rollouts": args.rollouts,
        "file_mb": file_mb,
        "cold_start_to_first_page_s": cold_first_s,
        "cold_start_to_task_table_s": cold_s,
        "warm_start_to_first_page_s": warm_first_s,
        "warm_start_to_task_table_s": warm_s,
        "pages": timed,
        "server_rss_mb": rss_mb,
        "kept_index_mb": index_mb,
        "target_first_page_s": 2.0,
    }
    base = harness.write_result("viewer", result)
    plot(result, base.with_suffix(".png"))
    rows = [
        ["cold start → first page (progress)", cold_first_s, None, None],
        ["cold start → task table", cold_s, None, None],
        ["warm start → task table", warm_s, None, None],
    ]
    rows += [[name, p["first_s"], p["median_s"], p["max_s"]] for name, p in timed.items()]
    print(
        f"\n{args.rollouts:,} rollouts, {file_mb:,.0f} MB; server RSS {rss_mb:,.0f} MB; kept index {index_mb:,.1f} MB"
    )
    print(harness.table(["", "first s", "median s", "max s"], rows))
    print(f"wrote {base.with_suffix('.json')}")


def plot(result: dict[str, Any], path: Path) -> None:
    plt = harness.pyplot()
    names = ["cold start: first page", "cold start: task table", "warm start: task table", *result["pages"]]
    values = [result["cold_start_to_first_page_s"], result["cold_start_to_task_table_s"],
              result["warm_start_to_task_table_s"], *(p["median_s"] for p in result["pages"].values())]  # fmt: skip
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.barh(names[::-1], values[::-1], color=["#5b7fd6"] * len(result["pages"]) + ["#55a868", "#c44e52", "#dd8452"])
    ax.axvline(result["target_first_page_s"], color="#333", linestyle="--", linewidth=1, label="2 s target")
    ax.set_xlabel("seconds (starts: launch to first page; pages: median request)")
    ax.set_title(f"gym-serve view, {result['rollouts']:,} rollouts ({result['file_mb']:,.0f} MB)", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
