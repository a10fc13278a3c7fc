"""Tokens regenerated after a collection is killed: `gym-serve collect --resume` with and without turn checkpoints.

    python benchmarks/kill_resume.py [--num-repeats 32] [--concurrency 32] [--kill-after 60]
                                     [--min-tokens 32] [--alpha 1.5] [--seconds-per-token 0.004]

For each mode, `gym-serve collect` runs `example_multi_step` (3 to 5 model turns per rollout) on the synthetic
model with heavy-tailed response lengths, and is SIGKILLed (the CLI, its Ray, the driver: the whole process
group) once `--kill-after` rollouts are written; then the same command with `--resume` finishes the collection,
once as it is (each unfinished rollout goes on from its last journaled turn) and once with
`--no-turn-checkpoints` (each starts over). Both kills leave a journal, read as the kill left it: it says which
turns of the unfinished rollouts had completed. Counted from the rows the resumed run writes (every model
call's token bundle is in them): the completed turns sampled again and their tokens, every token the resume
generated, and its model calls. Prints a table, writes `results/kill_resume-<date>.json` and a PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from harness import REPO, heavy_tailed_app, pyplot, table, write_result

ROWS = REPO / "envs" / "example_multi_step" / "data" / "example.jsonl"


def config(folder: Path, args: argparse.Namespace) -> Path:
    application = heavy_tailed_app(
        "example_multi_step",
        min_tokens=args.min_tokens,
        alpha=args.alpha,
        max_tokens=2048,
        seconds_per_token=args.seconds_per_token,
    )
    path = folder / "app.yaml"
    path.write_text(yaml.safe_dump({"applications": [application]}))
    return path


def whole_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a file a kill may have cut: its last line is dropped if it has no newline."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_bytes().splitlines(keepends=True) if line.endswith(b"\n")]


def key(row: dict[str, Any]) -> tuple[str, int, int]:
    return row["agent_ref"]["name"], int(row["_ng_task_index"]), int(row["_ng_rollout_index"])


def generated(calls: list[dict[str, Any]]) -> int:
    return sum(len(call["generation_token_ids"]) for call in calls)


def kill_and_resume(folder: Path, args: argparse.Namespace, checkpoints: bool) -> dict[str, Any]:
    from gym_serve.collect.job import journal_path
    from gym_serve.collect.journal import load_journal
    from gym_serve.wire.tokens import token_calls

    out = folder / "out.jsonl"
    command = [
        sys.executable, "-m", "gym_serve.cli", "collect", "--config", str(config(folder, args)),
        "--input", str(ROWS), "--output", str(out), "--num-repeats", str(args.num_repeats),
        "--concurrency", str(args.concurrency), "--address", "local",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    first = subprocess.Popen(
        command, cwd=REPO, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    while len(whole_rows(out)) < args.kill_after and first.poll() is None:
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    time.sleep(3)  # a worker of the killed Ray may write its last flushed line as it notices
    before = {key(row) for row in whole_rows(out)}
    shutil.copy(journal_path(out), folder / "journal-as-killed.jsonl")
    journal = load_journal(folder / "journal-as-killed.jsonl", before)
    flag = [] if checkpoints else ["--no-turn-checkpoints"]
    started = time.perf_counter()
    second = subprocess.run([*command, "--resume", *flag], cwd=REPO, env=env, capture_output=True, text=True)
    if second.returncode != 0:
        raise RuntimeError(second.stderr[-3000:])
    resume_s = time.perf_counter() - started
    regenerated_turns = regenerated_tokens = resumed_tokens = resumed_calls = 0
    for row in whole_rows(out):
        if key(row) in before:
            continue
        calls = token_calls(row["response"]["output"])
        ran_from = int(row.get("resumed_at_turn", 0))  # turns before this one came from the journal
        resumed_tokens += generated(calls[ran_from:])
        resumed_calls += len(calls) - ran_from
        done = journal.checkpoints.get(key(row))
        if done is not None and ran_from < done.turn:  # completed before the kill, sampled again
            regenerated_turns += done.turn - ran_from
            regenerated_tokens += generated(calls[ran_from : done.turn])
    return {
        "written_before_kill": len(before),
        "rollouts_unfinished_with_turns": len(journal.checkpoints),
        "completed_turns_at_kill": journal.turns,
        "tokens_in_completed_turns": sum(generated(token_calls(c.items)) for c in journal.checkpoints.values()),
        "completed_turns_regenerated": regenerated_turns,
        "tokens_regenerated": regenerated_tokens,
        "tokens_generated_by_resume": resumed_tokens,
        "model_calls_by_resume": resumed_calls,
        "resume_s": resume_s,
        "summary": second.stdout,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-repeats", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--kill-after", type=int, default=60, help="rollouts written before the SIGKILL")
    parser.add_argument("--min-tokens", type=int, default=32)
    parser.add_argument("--alpha", type=float, default=1.5)
    parser.add_argument("--seconds-per-token", type=float, default=0.004)
    args = parser.parse_args()
    runs = {}
    for mode, checkpoints in (("with turn checkpoints", True), ("without (--no-turn-checkpoints)", False)):
        with tempfile.TemporaryDirectory() as scratch:
            runs[mode] = kill_and_resume(Path(scratch), args, checkpoints)
        print(runs[mode]["summary"])
    base = write_result("kill_resume", {"options": vars(args), "runs": runs})
    plot(runs, base.with_suffix(".png"))
    headers = ["resume", "unfinished", "turns done", "turns redone", "tokens redone", "tokens by resume", "calls"]
    print(
        table(
            headers,
            [
                [
                    mode,
                    run["rollouts_unfinished_with_turns"],
                    run["completed_turns_at_kill"],
                    run["completed_turns_regenerated"],
                    run["tokens_regenerated"],
                    run["tokens_generated_by_resume"],
                    run["model_calls_by_resume"],
                ]
                for mode, run in runs.items()
            ],
        )
    )
    print(f"-> {base}.json")


def plot(runs: dict[str, dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3))
    names = list(runs)
    ax.barh(names, [runs[n]["tokens_generated_by_resume"] for n in names], label="generated by the resume")
    ax.barh(names, [runs[n]["tokens_regenerated"] for n in names], color="tab:red", label="of which: turns redone")
    ax.set_xlabel("tokens")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
