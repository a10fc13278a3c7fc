"""Driver memory: RSS of the `RolloutDriver` actor, sampled while it collects from a 1,000,000-row input.

The input is generated: the weather rows with a distinct `id` each, so every
row is its own task (the hardest case for NeMo Gym's numbering of identical
rows: `gym_serve.collect.task_index` moves its table to disk past 100k rows). The
instant replay model and 1,024 rollouts in flight make it as fast as this
machine allows. The driver's RSS must stay flat: the table reports it at the
start, at 10 % of the work, at the end, the largest, and the growth per
100,000 rollouts after the first 10 %.

    python benchmarks/memory.py [--rows 1000000] [--concurrency 1024]

Prints a table last; writes benchmarks/results/memory-<date>.json and .png.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import harness
import ray


def generate(path: Path, n: int) -> Path:
    rows = [json.loads(line) for line in harness.WEATHER_ROWS.read_text().splitlines()]
    with path.open("w") as out:
        for i in range(n):
            out.write(json.dumps({**rows[i % len(rows)], "id": i}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--concurrency", type=int, default=1024)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gym-serve-memory-"))
    source = generate(work / "in.jsonl", args.rows)
    harness.start()
    app = "memory"
    harness.deploy(harness.weather_app(app, model={"kind": "replay"}, env_name="example_single_tool_call"))
    summary, samples = harness.collect(
        {
            "input_path": str(source),
            "output_path": str(work / "out.jsonl"),
            "agents": [app],
            "default_agent": app,
            "concurrency": args.concurrency,
        },
        sample_every_s=1.0,
    )
    ray.shutdown()

    result = analyse(summary, samples)
    base = harness.write_result(
        "memory", {"rows": args.rows, "concurrency": args.concurrency, **result, "samples": samples}
    )
    plot(samples, base.with_suffix(".png"))
    print(
        "\n"
        + harness.table(
            [
                "rollouts",
                "failures",
                "rollouts/s",
                "RSS start MB",
                "RSS @10% MB",
                "RSS end MB",
                "RSS max MB",
                "MB per 100k after 10%",
            ],
            [
                [
                    result["rollouts"],
                    result["failures"],
                    result["rollouts_per_s"],
                    result["rss_start_mb"],
                    result["rss_at_10pct_mb"],
                    result["rss_end_mb"],
                    result["rss_max_mb"],
                    result["growth_mb_per_100k"],
                ]
            ],
        )
    )
    shutil.rmtree(work)  # gigabytes of rollouts at full size
    print(f"-> {base}.json, .png")


def analyse(summary: dict[str, Any], samples: list[dict[str, float]]) -> dict[str, Any]:
    running = [s for s in samples if s["rss_mb"] is not None and s["done"] > 0]
    total = running[-1]["done"]
    after = [s for s in running if s["done"] >= 0.1 * total]
    first, last = after[0], after[-1]
    growth = (last["rss_mb"] - first["rss_mb"]) / max(1.0, (last["done"] - first["done"]) / 100_000)
    return {
        "rollouts": summary["rollouts"],
        "failures": summary["failures"],
        "rollouts_per_s": summary["rollouts_per_s"],
        "rss_start_mb": running[0]["rss_mb"],
        "rss_at_10pct_mb": first["rss_mb"],
        "rss_end_mb": last["rss_mb"],
        "rss_max_mb": max(s["rss_mb"] for s in running),
        "growth_mb_per_100k": growth,
    }


def plot(samples: list[dict[str, float]], path: Path) -> None:
    plt = harness.pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.plot([s["done"] for s in samples], [s["rss_mb"] for s in samples])
    ax.set_xlabel("rollouts done")
    ax.set_ylabel("driver RSS (MB)")
    ax.set_ylim(bottom=0)
    ax.set_title("RolloutDriver memory while collecting")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
