"""NeMo Gym itself vs gym-serve hosting NeMo Gym's own `example_single_tool_call` server, same model, same rows.

The same resources server code (NeMo Gym 0.7.0's `example_single_tool_call`), on
NeMo Gym's own rows (`data/example.jsonl`), against the same instant
OpenAI-compatible model server (`gym_serve.testing.instant_openai_server`, a
process of its own: what is measured is each system, not a model):

- `nemo_gym`: NeMo Gym as its users run it: `gym env start` (its head server
  and four server processes: the resources server, `simple_agent`,
  `openai_model`, the `legacy_agent` environment server), and its rollout
  collection `gym eval run --no-serve`, in a Python >= 3.13 virtual environment
  this script makes (NeMo Gym installed with `--ignore-requires-python`, it
  declares 3.13.14);
- `gym_serve`: `deployments/nemo_gym/example_single_tool_call.yaml` (the server
  hosted unchanged in the Environment deployment) with `model: {kind: openai}`
  pointed at the same server, and gym-serve's rollout driver.

Per point: N rollouts at a concurrency (rollouts in flight), the systems
alternating run by run so that load from elsewhere hits both alike, the median
of R runs. rollouts/s is each system's collection phase (NeMo Gym's own
"Finished N / N rollouts ... rollouts/min"; gym-serve's driver). CPU-ms per
rollout is the CPU of the system's own processes during the run (NeMo Gym: the
`gym env start` process tree and the `gym eval run` process less its fixed
start-up, measured once on one row; gym-serve: this process and every process
of its Ray instance), the model server's apart.

    python benchmarks/nemo_gym_side_by_side.py [--concurrency 1 16 64 256 1024] [--rollouts 2000] [--repeats 3]
        [--python PYTHON3.13] [--nemo-venv DIR] [--serve-throughput-optimized]

Prints a table last and writes benchmarks/results/nemo_gym_side_by_side-<date>.json and .png.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
import psutil
import ray
import yaml

from gym_serve.collect.driver import RolloutDriver
from gym_serve.collect.job import CollectJob
from gym_serve.environment import nemo_gym
from gym_serve.testing.instant_openai_server import start_instant_server

NEMO_GYM = "nemo-gym==0.7.0"
SERVER = "example_single_tool_call"
AGENT = f"{SERVER}_simple_agent"  # NeMo Gym's name for the server's agent, and our application's
SYSTEMS = ("nemo_gym", "gym_serve")
CONFIG = harness.REPO / "deployments" / "nemo_gym" / f"{SERVER}.yaml"


# ---- NeMo Gym ---------------------------------------------------------------------------------------------------


def find_python313(given: str | None) -> str:
    """A Python >= 3.13: `--python`, else python3.13+ on PATH, else pyenv's newest 3.13+."""
    candidates = [given] if given else []
    candidates += [shutil.which(f"python3.{minor}") for minor in range(13, 20)]
    candidates += sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / "3.1[3-9]*" / "bin" / "python3")))[::-1]
    for candidate in filter(None, candidates):
        version = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info >= (3, 13))"], capture_output=True, text=True
        )
        if version.stdout.strip() == "True":
            return candidate
    raise SystemExit("NeMo Gym needs Python >= 3.13: pass --python")


def nemo_venv(path: Path, python: str) -> Path:
    """A virtual environment with NeMo Gym and all its dependencies (made once, ~4 min; reused after)."""
    if (path / "bin" / "gym").is_file():
        return path
    print(f"making {path} with {python} and {NEMO_GYM} (once)...", flush=True)
    subprocess.run([python, "-m", "venv", str(path)], check=True)
    subprocess.run([str(path / "bin" / "pip"), "install", "-q", "--ignore-requires-python", NEMO_GYM], check=True)
    return path


class NemoGym:
    """NeMo Gym's servers for the server, started with `gym env start` in a work folder of their own."""

    def __init__(self, venv: Path, base_url: str, work: Path) -> None:
        self.venv, self.work = venv, work
        (work / "env.yaml").write_text(
            yaml.safe_dump({"policy_base_url": base_url, "policy_api_key": "none", "policy_model_name": "instant"})
        )
        # `gym env start` runs each server from <cwd>/<type>/<name>/.venv; pre-made ones skip its `uv` setup
        for folder in ("resources_servers/" + SERVER, "responses_api_agents/simple_agent",
                       "responses_api_models/openai_model", "environment_servers/legacy_agent"):  # fmt: skip
            (work / folder).mkdir(parents=True, exist_ok=True)
            (work / folder / ".venv").symlink_to(venv)
        command = [str(venv / "bin" / "gym"), "env", "start", "--resources-server", SERVER]
        command += ["--model-type", "openai_model", "+skip_venv_if_present=true"]
        self.log = (work / "gym_env.log").open("w")
        env = {**_without_serve_settings(), "RAY_ADDRESS": "local"}  # its own Ray instance, never another one
        self.process = subprocess.Popen(
            command, cwd=work, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        ready = re.compile(r"All (\d+) / \1 servers ready")
        deadline = time.monotonic() + 600
        while not ready.search((work / "gym_env.log").read_text(errors="replace")):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gym env start did not come up:\n{_tail(work / 'gym_env.log', 3000)}")
            time.sleep(1)
        # what every `gym eval run` costs before it collects anything (imports, config): the median of three
        self.startup_cpu_s = sorted(self._collect(self._rows(1), 1)[0] for _ in range(3))[1]

    def processes(self) -> list[psutil.Process]:
        root = psutil.Process(self.process.pid)
        return [root, *root.children(recursive=True)]

    def run(self, n: int, concurrency: int) -> dict[str, Any]:
        source = self._rows(n)
        servers = _cpu(self.processes())
        started = time.perf_counter()
        collector_s, output = self._collect(source, concurrency)
        wall = time.perf_counter() - started
        by_process = _cpu_since(servers, self.processes())
        servers_s = sum(by_process.values())
        finished = re.findall(r"Finished (\d+) / (\d+) rollouts \(100%\) in [\d:]+ \(([\d.]+) rollouts/min\)", output)
        if not finished:
            raise RuntimeError(f"gym eval run did not finish:\n{output[-3000:]}")
        done, _, per_minute = finished[-1]
        rollouts = read_rows(self.work / "out.jsonl")
        cpu_s = servers_s + max(0.0, collector_s - self.startup_cpu_s)
        return {
            "rollouts": int(done),
            "failures": n - int(done),
            "mean_reward": sum(r["reward"] for r in rollouts) / max(len(rollouts), 1),
            "seconds": int(done) / (float(per_minute) / 60),
            "command_seconds": wall,
            "rollouts_per_s": float(per_minute) / 60,
            "cpu_ms_per_rollout": 1000 * cpu_s / max(int(done), 1),
            "servers_cpu_ms_per_rollout": 1000 * servers_s / max(int(done), 1),
            "collector_cpu_ms_per_rollout": 1000 * collector_s / max(int(done), 1),
            "collector_startup_cpu_s": self.startup_cpu_s,
            "cpu_ms_per_rollout_by_process": _per_rollout(by_process, int(done)),
        }

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGINT)  # it stops its servers and its Ray instance
            self.process.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.log.close()

    def _rows(self, n: int) -> Path:
        return harness.rows_file(self.work / f"in-{n}.jsonl", n, source=nemo_gym.data_dir(SERVER) / "example.jsonl")

    def _collect(self, source: Path, concurrency: int) -> tuple[float, str]:
        """Run `gym eval run`; its CPU seconds (it and the children it waited for) and its output."""
        command = [str(self.venv / "bin" / "gym"), "eval", "run", "--no-serve", "--agent", AGENT]
        command += ["--input", str(source), "--output", str(self.work / "out.jsonl"), "--num-repeats", "1"]
        command += ["--concurrency", str(concurrency)]
        (self.work / "out.jsonl").unlink(missing_ok=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            command, cwd=self.work, env=_without_serve_settings(), capture_output=True, text=True, check=False
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return cpu_s, done.stdout + done.stderr


# ---- gym-serve --------------------------------------------------------------------------------------------------


class GymServe:
    """The server hosted by gym-serve: the repository's Serve config for it, the model tier over HTTP."""

    def __init__(self, base_url: str, work: Path, foreign: Callable[[], set[int]], throughput_mode: bool) -> None:
        self.work, self.foreign = work, foreign
        if throughput_mode:  # read by every process of the Ray instance started below, and by no NeMo Gym process
            os.environ["RAY_SERVE_THROUGHPUT_OPTIMIZED"] = "1"
        (spec,) = yaml.safe_load(CONFIG.read_text())["applications"]
        spec["args"]["model"] = {"kind": "openai", "base_url": base_url, "model": "instant", "api_key_env": "NO_KEY"}
        spec["route_prefix"] = None
        harness.start()
        harness.deploy(spec)

    def processes(self) -> list[psutil.Process]:
        """This process and its descendants (its Ray instance), less NeMo Gym's and the model server's."""
        me, foreign = psutil.Process(), self.foreign()
        return [p for p in [me, *me.children(recursive=True)] if p.pid not in foreign]

    def run(self, n: int, concurrency: int) -> dict[str, Any]:
        source = harness.rows_file(self.work / f"in-{n}.jsonl", n, source=nemo_gym.data_dir(SERVER) / "example.jsonl")
        out = self.work / "out.jsonl"
        out.unlink(missing_ok=True)
        job = CollectJob(
            input_path=str(source), output_path=str(out), agents=[AGENT], default_agent=AGENT, concurrency=concurrency
        )
        driver = RolloutDriver.remote()
        ray.get(driver.progress.remote())  # the driver actor is up: its start-up is not the collection's CPU
        before = _cpu(self.processes())
        summary = ray.get(driver.collect.remote(job)).model_dump()
        by_process = _cpu_since(before, self.processes())
        ray.kill(driver)
        cpu_s = sum(by_process.values())
        done = summary["rollouts"]
        return {
            "rollouts": done,
            "failures": summary["failures"],
            "mean_reward": summary["mean_reward"],
            "seconds": summary["elapsed_s"],
            "rollouts_per_s": done / summary["elapsed_s"],
            "cpu_ms_per_rollout": 1000 * cpu_s / max(done, 1),
            "cpu_ms_per_rollout_by_process": _per_rollout(by_process, done),
            "p50_ms": 1000 * (summary["latency_p50_s"] or 0.0),
            "p99_ms": 1000 * (summary["latency_p99_s"] or 0.0),
        }


# ---- both -------------------------------------------------------------------------------------------------------


def _cpu(processes: list[psutil.Process]) -> dict[int, tuple[str, float]]:
    """pid → (what the process is, CPU seconds so far)."""
    times = {}
    for process in processes:
        try:
            t = process.cpu_times()
            times[process.pid] = (_command(process.cmdline()), t.user + t.system)
        except psutil.NoSuchProcess:
            pass
    return times


def _cpu_since(before: dict[int, tuple[str, float]], processes: list[psutil.Process]) -> dict[str, float]:
    """CPU seconds since `before`, summed by what the processes are."""
    spent: dict[str, float] = {}
    for pid, (name, now) in _cpu(processes).items():
        spent[name] = spent.get(name, 0.0) + max(0.0, now - before.get(pid, ("", 0.0))[1])
    return spent


def _per_rollout(by_process: dict[str, float], rollouts: int) -> dict[str, float]:
    """The processes that spent the most, in CPU-ms per rollout."""
    top = sorted(by_process.items(), key=lambda item: -item[1])[:8]
    return {name: round(1000 * seconds / max(rollouts, 1), 3) for name, seconds in top}


def _without_serve_settings() -> dict[str, str]:
    """This process's environment less Ray Serve's settings (`--serve-throughput-optimized` is gym-serve's alone)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}


def _tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median rollouts/s, plus min and max of the rate."""
    ordered = sorted(runs, key=lambda r: r["rollouts_per_s"])
    rates = [r["rollouts_per_s"] for r in ordered]
    return {**ordered[len(ordered) // 2], "rollouts_per_s_min": rates[0], "rollouts_per_s_max": rates[-1]}


def _command(words: list[str]) -> str:
    """A process's command line for the results, paths cut to their last part (no machine's folders in results)."""
    return re.sub(r"(?<![\w.])/(?:[^\s/]+/)+", "", " ".join(words))[:80]  # /a/b/c -> c, also in --dir=/a/b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256, 1024])
    parser.add_argument("--rollouts", type=int, default=2000, help="rollouts per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per point and system; the median is reported")
    parser.add_argument("--python", help="a Python >= 3.13 for NeMo Gym's virtual environment (default: found)")
    parser.add_argument(
        "--nemo-venv",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gym-serve" / "nemo-gym-0.7.0",
        help="NeMo Gym's virtual environment (made here if it has no `gym`)",
    )
    parser.add_argument(
        "--serve-throughput-optimized",
        action="store_true",
        help="run gym-serve's Ray with RAY_SERVE_THROUGHPUT_OPTIMIZED=1 (gRPC handle transport, router and user "
        "code on one loop): a Serve-wide mode gym-serve does not set by default",
    )
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    made = (args.nemo_venv / "bin" / "gym").is_file()
    venv = nemo_venv(args.nemo_venv, "" if made else find_python313(args.python))
    base_url, model_process = start_instant_server()
    work = Path(tempfile.mkdtemp(prefix="nemo-gym-side-by-side-"))
    (work / "nemo").mkdir()
    (work / "gym_serve").mkdir()
    nemo: NemoGym | None = None
    results: list[dict[str, Any]] = []
    try:
        nemo = NemoGym(venv, base_url, work / "nemo")
        running = nemo

        def foreign() -> set[int]:  # processes of this one's tree that are not gym-serve's
            return {model_process.pid} | {p.pid for p in running.processes()}

        systems: dict[str, NemoGym | GymServe] = {
            "nemo_gym": nemo,
            "gym_serve": GymServe(base_url, work / "gym_serve", foreign, args.serve_throughput_optimized),
        }
        for concurrency in args.concurrency:
            warm = min(args.rollouts, 2 * concurrency + 20)
            for system in systems.values():  # warm up: connections, caches, replicas
                system.run(warm, concurrency)
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
            for _ in range(args.repeats):
                for name, system in systems.items():  # alternate, so load from elsewhere hits both alike
                    runs[name].append(system.run(args.rollouts, concurrency))
            point: dict[str, Any] = {"concurrency": concurrency}
            point.update({name: {"median": median_run(r), "runs": r} for name, r in runs.items()})
            ours, theirs = point["gym_serve"]["median"], point["nemo_gym"]["median"]
            point["rollouts_per_s_ratio"] = ours["rollouts_per_s"] / theirs["rollouts_per_s"]
            point["cpu_ms_ratio"] = ours["cpu_ms_per_rollout"] / theirs["cpu_ms_per_rollout"]
            results.append(point)
            for name in systems:
                m = point[name]["median"]
                print(
                    f"{name:>9} c={concurrency:<5} {m['rollouts_per_s']:8.1f} rollouts/s "
                    f"({m['rollouts_per_s_min']:.1f}-{m['rollouts_per_s_max']:.1f}), "
                    f"{m['cpu_ms_per_rollout']:.2f} CPU-ms/rollout, mean reward {m['mean_reward']:.3f}, "
                    f"failures {m['failures']}",
                    flush=True,
                )
    finally:
        if nemo is not None:
            nemo.stop()
        model_process.terminate()
        model_process.wait(timeout=10)
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)

    base = harness.write_result(
        "nemo_gym_side_by_side",
        {
            "workload": f"NeMo Gym's {SERVER} rows (weather: 2 model turns, 1 tool call, verify), instant model",
            "nemo_gym": NEMO_GYM,
            "rollouts_per_run": args.rollouts,
            "repeats": args.repeats,
            "serve_throughput_optimized": args.serve_throughput_optimized,
            "load_average_at_start": load_at_start,
            "results": results,
        },
    )
    plot(results, base.with_suffix(".png"))
    rows = [
        [
            p["concurrency"],
            p["nemo_gym"]["median"]["rollouts_per_s"],
            p["gym_serve"]["median"]["rollouts_per_s"],
            p["rollouts_per_s_ratio"],
            p["nemo_gym"]["median"]["cpu_ms_per_rollout"],
            p["gym_serve"]["median"]["cpu_ms_per_rollout"],
            p["cpu_ms_ratio"],
        ]
        for p in results
    ]
    headers = ["in flight", "NeMo Gym r/s", "gym-serve r/s", "r/s ratio", "NeMo CPU-ms", "gym-serve CPU-ms"]
    print("\n" + harness.table([*headers, "CPU ratio"], rows))
    print(f"load average at start {load_at_start}, at end {os.getloadavg()}")
    print(f"-> {base.with_suffix('.json')}")


def plot(results: list[dict[str, Any]], path: Path) -> None:
    plt = harness.pyplot()
    fig, (rate, cpu) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [p["concurrency"] for p in results]
    for system, label in (("nemo_gym", "NeMo Gym 0.7.0"), ("gym_serve", "gym-serve hosting its server")):
        rate.plot(xs, [p[system]["median"]["rollouts_per_s"] for p in results], marker="o", label=label)
        cpu.plot(xs, [p[system]["median"]["cpu_ms_per_rollout"] for p in results], marker="o", label=label)
    for axis, label in ((rate, "rollouts/s (median)"), (cpu, "CPU-ms per rollout")):
        axis.set_xscale("log")
        axis.set_xlabel("rollouts in flight")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend()
    rate.set_title(f"NeMo Gym's {SERVER}: NeMo Gym vs gym-serve")
    cpu.set_title("CPU per rollout (model server apart)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
