"""Try every resources server of the installed NeMo Gym under gym-serve's host, and say how far each gets.

For each server, in a process of its own (importing a server changes the process, and one may hang):
the deploy-time dependency check, building the server in-process (`NemoGymServer`), then replaying each of
NeMo Gym's own recordings of it (`data/example_rollouts.jsonl`) with the replay model and comparing the
reward with the recorded one. Rows go to a Markdown table, one line per server, with the first failure's
message where a step failed.

    python scripts/nemo_gym_survey.py [--servers NAME ...] [--out deployments/nemo_gym/SURVEY.md] [--timeout 180]
        [--jobs 2]

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
    """How far `server` gets (run in its own process: `--one SERVER`)."""
    from gym_serve.analysis.check import recorded_rollouts
    from gym_serve.environment.nemo_gym import catalog
    from gym_serve.environment.nemo_gym.host import NemoGymServer
    from gym_serve.rollout.loop import AgentConfig, run_episode
    from gym_serve.rollout.replay import ReplayModel

    result: dict[str, Any] = {"server": server}
    try:
        os.chdir(catalog.data_dir(server).parent)  # as an Environment replica runs it: files are relative to it
        catalog.check_server(server)
    except Exception as e:
        return {**result, "stage": "dependencies", "error": str(e)}
    try:
        host = NemoGymServer(server)
    except Exception as e:  # a package it imports only when it starts is still a missing dependency
        stage = "dependencies" if "is not installed here" in str(e) else "build"
        return {**result, "stage": stage, "error": f"{type(e).__name__}: {e}"}
    try:
        pairs = recorded_rollouts(server)
    except Exception as e:
        return {**result, "stage": "recordings", "error": f"{type(e).__name__}: {e}"}
    if not pairs:
        return {**result, "stage": "recordings", "error": "no data/example_rollouts.jsonl recordings"}

    async def replay_all() -> tuple[int, list[str]]:
        agree, problems = 0, []
        with tempfile.TemporaryDirectory() as tmp:
            for i, (row, recorded) in enumerate(pairs):
                recording = Path(tmp) / f"{i}.jsonl"
                recording.write_text(json.dumps(recorded) + "\n")
                try:
                    rollout = await run_episode(
                        row,
                        model=ReplayModel([recording]),
                        env=host,
                        env_info=host.describe(),
                        config=AgentConfig(max_steps=50),
                    )
                except Exception as e:
                    problems.append(f"#{i}: {type(e).__name__}: {e}")
                    continue
                if float(rollout["reward"]) == float(recorded.get("reward", float("nan"))):
                    agree += 1
                else:
                    problems.append(f"#{i}: reward {rollout['reward']}, recorded {recorded.get('reward')}")
        return agree, problems

    agree, problems = asyncio.run(replay_all())
    stage = "replays" if agree == len(pairs) else "replay"
    return {**result, "stage": stage, "agree": agree, "recordings": len(pairs), "error": "; ".join(problems)}


def run_isolated(server: str, timeout_s: float) -> dict[str, Any]:
    """`survey_one(server)` in a fresh interpreter, cut at `timeout_s`."""
    command = [sys.executable, __file__, "--one", server]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"server": server, "stage": "timeout", "error": f"no answer within {timeout_s:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"server": server, "stage": "crash", "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(lines[-1])


def table(results: list[dict[str, Any]]) -> str:
    order = ["replays", "replay", "recordings", "build", "dependencies", "timeout", "crash"]
    counts = {stage: sum(r["stage"] == stage for r in results) for stage in order}
    lines = [
        "# NeMo Gym servers under gym-serve's host",
        "",
        f"Every resources server of the installed nemo-gym, tried by `scripts/nemo_gym_survey.py` "
        f"({len(results)} servers). *replays*: every recording gives its recorded reward; *replay*: some do not "
        "(the first problems shown); *recordings*: builds, but has no usable recordings; *build*: the server "
        "failed to start in-process; *dependencies*: the deploy-time check refused it (a package not installed "
        "here); *timeout*/*crash*: its process did not answer.",
        "",
        "Counts: " + ", ".join(f"{stage} {n}" for stage, n in counts.items() if n),
        "",
        "Reading the failures: `Missing key judge_model` (or `policy_model`, `genrm_model`) is a server that calls "
        'a judge model by name, which runs once `endpoints` names it (README, "NeMo Gym\'s environments"); a 404 '
        "from `/seed_session` is a Gymnasium-style server (`/step`, `/reset`), not hosted; a 422 naming a field "
        "(`workdir`, `image_ref`, `repo`) is a sandbox or container task; `ReplayMissError` is a recording made by "
        "another agent than `simple_agent` (its conversation is not the one simple_agent's turns build); "
        "`not a recorded rollout` is a recording file without responses. The servers `tests/test_nemo_gym_servers.py` "
        "proves (27, with a Serve config each in this folder) are among those that replay; the known exceptions "
        "there (`mcqa`, `math_with_judge`, `structured_outputs`) are explained in that test.",
        "",
        "| server | stage | recordings agreeing | first problem |",
        "|---|---|---:|---|",
    ]
    for r in sorted(results, key=lambda r: (order.index(r["stage"]), r["server"])):
        agree = f"{r['agree']} / {r['recordings']}" if "agree" in r else ""
        problem = re.sub(r"\S*/site-packages/", "site-packages/", str(r.get("error") or ""))  # no machine's paths
        problem = re.sub(re.escape(tempfile.gettempdir()) + r"/[^/\s]+/", "", problem)
        problem = problem.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{r['server']}` | {r['stage']} | {agree} | {problem[:200]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--servers", nargs="+", help="only these servers (default: every one installed)")
    parser.add_argument("--out", type=Path, default=REPO / "deployments" / "nemo_gym" / "SURVEY.md")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per server")
    parser.add_argument("--jobs", type=int, default=2, help="servers tried at once")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(survey_one(args.one)), flush=True)
        return
    from gym_serve.environment.nemo_gym import catalog

    servers = args.servers or catalog.available_servers()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = []
        for result in pool.map(lambda s: run_isolated(s, args.timeout), servers):
            print(f"{result['server']:<45} {result['stage']:<13} {str(result.get('error') or '')[:100]}", flush=True)
            results.append(result)
    args.out.write_text(table(results))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
