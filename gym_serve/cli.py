"""The `gym-serve` command line: the parser, and one short function per command that reads its arguments and
calls the layer that does the work (a command that grows logic of its own moves it into that layer). Over 400
lines for that reason. What users see is `DESCRIPTION` and each command's help, never this docstring.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gym_serve.collect.job import CollectJob, CollectSummary
from gym_serve.errors import ConfigError, GymServeError, InputError
from gym_serve.serving.config import http_options, load_serve_config

__all__ = ["main"]

DESCRIPTION = """\
RL environments for LLMs and verified rollouts at scale, on Ray Serve.

`demo` runs the example environments end to end; `up` deploys a Serve config and prints its URLs;
`collect` writes rollouts for a file of tasks; `profile`, `health`, `export`, `reverify` and `view` work
on the files it wrote; `env init` / `env test` scaffold and check an environment; `list` shows the environments and the
applications running; `bench` runs a benchmark. `gym-serve COMMAND --help` for each."""

DEMO_CONFIG = "demo.yaml"
DEMO_ENVS = ("example_single_tool_call", "example_multi_step", "example_session_state")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    given = list(sys.argv[1:] if argv is None else argv)
    rest, overrides = _nemo_gym_overrides(given)
    args = parser.parse_args(rest)
    args.argv = given
    args.nemo_gym = overrides
    try:
        return args.func(args)
    except GymServeError as e:
        print(f"gym-serve: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gym-serve", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    up = _command(sub, "up", "deploy the applications of a Serve config and print what runs")
    up.add_argument(
        "config",
        nargs="?",
        help="a Serve config YAML (e.g. deployments/example_single_tool_call.yaml), or NeMo Gym's configs as "
        "`ng_run` takes them: +config_paths=[a.yaml,b.yaml] (and +key=value overrides)",
    )
    _nemo_gym_options(up)
    up.add_argument(
        "--address",
        help="Ray cluster address, e.g. `auto` for a running one (default: $RAY_ADDRESS, else a new local one)",
    )
    up.add_argument("--http-host", help="where Serve's HTTP proxy listens (default: the config's, else 127.0.0.1)")
    up.add_argument("--http-port", type=int, help="its port (default: the config's `http_options.port`, else 8000)")
    up.add_argument("--block", action="store_true", help="keep running until Ctrl-C (always, on a local cluster)")
    up.set_defaults(func=cmd_up)

    collect = _command(sub, "collect", "collect rollouts for a JSONL file of tasks")
    collect.add_argument(
        "--config",
        help="the Serve config whose applications run the rollouts; or, instead, NeMo Gym's configs and "
        "`ng_collect_rollouts`' arguments: +config_paths=[...] +input_jsonl_fpath=... +output_jsonl_fpath=...",
    )
    collect.add_argument("--input", help="input rows (JSONL, NeMo Gym format)")
    collect.add_argument("--output", help="rollouts JSONL; failures go to <output>_failures.jsonl")
    _nemo_gym_options(collect)
    collect.add_argument("--agent", help="agent (application) for rows without `agent_ref`")
    collect.add_argument("--limit", type=int, help="read at most this many input lines")
    collect.add_argument(
        "--num-repeats",
        type=_repeats,
        default=1,
        metavar="K|AGENT=K,...",
        help="rollouts per task, for all agents or per agent (e.g. math=8,code=4)",
    )
    collect.add_argument("--temperature", type=float, help="override responses_create_params.temperature")
    collect.add_argument("--top-p", type=float, help="override responses_create_params.top_p")
    collect.add_argument("--max-output-tokens", type=int, help="override responses_create_params.max_output_tokens")
    collect.add_argument("--concurrency", type=int, help="rollouts in flight (default: the agent tier's capacity)")
    collect.add_argument("--rollout-timeout", type=float, default=600.0, help="seconds one rollout attempt may take")
    collect.add_argument("--max-attempts", type=int, default=3, help="tries per rollout for retryable failures")
    collect.add_argument(
        "--max-policy-lag",
        type=int,
        help="run again a rollout whose oldest token is more than this many policy versions old",
    )
    collect.add_argument("--flag-stale", action="store_true", help="keep such rollouts, marked policy_stale")
    collect.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted collection from its files (finished rollouts are not rerun)",
    )
    collect.add_argument(
        "--no-turn-checkpoints",
        dest="turn_checkpoints",
        action="store_false",
        help="do not journal each rollout's completed turns: a retry or --resume reruns a rollout from its start",
    )
    collect.add_argument(
        "--ordered", action="store_true", help="also write <output>_ordered.jsonl in (task, rollout) order"
    )
    collect.add_argument(
        "--shard",
        type=_shard,
        default=(0, 1),
        metavar="I/N",
        help="run only tasks with index %% N == I (N collections, e.g. one per node, split a file)",
    )
    collect.add_argument(
        "--address",
        help="Ray cluster address, e.g. `auto` for a running one (default: $RAY_ADDRESS, else a new local one)",
    )
    collect.add_argument("--no-deploy", action="store_true", help="use applications already running")
    collect.add_argument(
        "--trace",
        metavar="FILE|URL",
        help="one OpenTelemetry trace per rollout across every tier, to a JSON-lines FILE or an OTLP/HTTP "
        "endpoint (http://collector:4318); `gym-serve profile --trace FILE` gives time per tier",
    )
    collect.add_argument(
        "--trace-sample",
        type=float,
        default=1.0,
        metavar="SHARE",
        help="trace this share of the rollouts, drawn at random (default 1: every rollout; a trace costs "
        "about a millisecond of CPU per rollout, see the README)",
    )
    collect.set_defaults(func=cmd_collect)

    prof = _command(sub, "profile", "per-task reward profile, aggregate metrics (pass@k) and a plot")
    prof.add_argument("--rollouts", help="the rollouts JSONL a collection wrote")
    prof.add_argument("--trace", help="a trace file of `collect --trace FILE`: time per tier and span (p50/p99)")
    prof.add_argument("--inputs", help="its materialized inputs (default: <rollouts>_materialized_inputs.jsonl)")
    prof.add_argument("--allow-partial", action="store_true", help="profile what completed; missing is no error")
    prof.add_argument("--config", help="the Serve config of the collection: adds each environment's own metrics")
    prof.set_defaults(func=cmd_profile)

    rev = _command(sub, "reverify", "re-score stored rollouts with the current verifiers (no model calls)")
    rev.add_argument("--rollouts", required=True, help="the rollouts JSONL to re-score, or an ATIF export of one")
    rev.add_argument("--inputs", help="materialized inputs: the task rows of ATIF trajectories another exporter wrote")
    group = rev.add_mutually_exclusive_group(required=True)
    group.add_argument("--env", help="the environment of every row")
    group.add_argument("--config", help="a Serve config: each row's agent_ref.name names its application")
    rev.set_defaults(func=cmd_reverify)

    health = _command(sub, "health", "named health checks over a rollout file: a report, one row per finding")
    health.add_argument(
        "rollouts", help="a rollouts JSONL (a collection's <out>_failures.jsonl beside it is read too)"
    )
    health.add_argument(
        "--verify-deadline",
        type=float,
        help="verify's deadline in seconds, for rows that do not record theirs (`verify_near_deadline`)",
    )
    health.add_argument(
        "--max-policy-lag", type=int, help="flag rollouts this many policy versions behind the newest seen"
    )
    health.set_defaults(func=cmd_health)

    export = _command(sub, "export", "write a rollout file in another format: ATIF v1.7 trajectories")
    export.add_argument("rollouts", help="the rollouts JSONL")
    export.add_argument("--format", choices=["atif"], required=True, help="atif: ATIF v1.7, as NeMo Gym 0.7 writes it")
    export.add_argument("--out", help="the folder to write (default: <rollouts>_atif beside the file)")
    export.add_argument("--session-id", help="ATIF's session_id (default: the file's name)")
    export.add_argument("--agent-version", help="ATIF's agent.version (default: this gym-serve's version)")
    export.add_argument(
        "--without-token-ids",
        action="store_true",
        help="leave token ids and log-probs out (NeMo Gym's ATIF reverify refuses them; their counts stay)",
    )
    export.set_defaults(func=cmd_export)

    view = _command(sub, "view", "see the rollouts of a file in the browser (a local web page)")
    view.add_argument("rollouts", help="a rollouts JSONL (a collection's <out>_failures.jsonl beside it is read too)")
    view.add_argument(
        "--profile", help="`gym-serve profile`'s <rollouts>_aggregate_metrics.json (default: the one beside the file)"
    )
    view.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)")
    view.set_defaults(func=cmd_view)

    env = _command(sub, "env", "work on an environment").add_subparsers(required=True, metavar="ACTION")
    env_test = _command(env, "test", "check an environment: its data, recordings, and every row through Serve")
    env_test.add_argument(
        "names",
        nargs="+",
        metavar="NAME",
        help="environments: built in, installed (`gym-serve list`), module:Class, or nemo_gym:<server>",
    )
    env_test.add_argument(
        "--verify-budget",
        type=float,
        help="seconds one verify call may take (default: the environment's `verify_budget_s`)",
    )
    env_test.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS, else a new local one)")
    env_test.set_defaults(func=cmd_env_test)
    env_init = _command(env, "init", "scaffold a new environment: a package of its own that passes `env test`")
    env_init.add_argument("name", metavar="NAME", help="the environment's (and its package's) name, e.g. letter_count")
    env_init.add_argument("--dir", help="where to write the package (default: ./gym-serve-NAME, `_` as `-`)")
    env_init.set_defaults(func=cmd_env_init)

    listing = _command(sub, "list", "the environments (built in and installed) and the applications running")
    listing.add_argument(
        "--address", help="the Ray cluster to ask (default: $RAY_ADDRESS, else the one running on this machine)"
    )
    listing.set_defaults(func=cmd_list)

    bench = _command(sub, "bench", "run a benchmark of benchmarks/ (in a source checkout)")
    bench.add_argument("name", help=", ".join(_benchmarks()) or "a script of benchmarks/ (in a source checkout)")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own options (see NAME --help)")
    bench.set_defaults(func=cmd_bench)

    demo = _command(sub, "demo", "run the example environments end to end on the replay model")
    demo.add_argument("--out", help="folder for the rollout files (default: ./gym-serve-demo-<time>)")
    demo.add_argument("--num-repeats", type=int, default=4)
    demo.set_defaults(func=cmd_demo)
    return parser


def _nemo_gym_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--replay-model",
        action="store_true",
        help="with NeMo Gym's configs: the policy is the replay model (NeMo Gym's recordings), not their model server",
    )
    parser.add_argument(
        "--hosted-agents",
        action="store_true",
        help="with NeMo Gym's configs: host NeMo Gym's simple_agent too, instead of gym-serve's own loop",
    )


def _nemo_gym_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """`up`/`collect`'s NeMo Gym overrides (`+config_paths=[...]`, `+key=value`) apart from the other arguments."""
    if not argv or argv[0] not in ("up", "collect"):
        return argv, []
    return [a for a in argv if not a.startswith("+")], [a for a in argv if a.startswith("+")]


def _command(sub: Any, name: str, summary: str) -> argparse.ArgumentParser:
    """A command: `summary` is its line in the list of commands and opens its own `--help`."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=summary, description=summary)
    return parser


def cmd_up(args: argparse.Namespace) -> int:
    from gym_serve.deployments.endpoints import describe_endpoints
    from gym_serve.serving import deploy as serving

    args.config = _serve_config(args, Path(tempfile.gettempdir()) / f"gym-serve-nemo-gym-{os.getpid()}.yaml")
    specs = load_serve_config(args.config)
    http = http_options(args.config)
    host = args.http_host or http.get("host") or "127.0.0.1"
    port = args.http_port or http.get("port") or 8000
    cluster = serving.connect(args.address)
    print(f"Ray: {cluster}")
    serving.deploy(specs, source=args.config, http=True, http_host=host, http_port=port)
    print(f"\nDeployed {len(specs)} application(s) from {args.config}:\n")
    print(serving.describe_status([s.name for s in specs]))
    print("\n" + describe_endpoints(specs, *serving.http_address()))
    if args.block or cluster.is_local:
        print("\nServing; Ctrl-C to stop" + (" (the local Ray instance stops with it)." if cluster.is_local else "."))
        while True:
            time.sleep(3600)
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    from gym_serve.serving import deploy as serving

    if args.nemo_gym:
        _collect_arguments(args)
    if not args.input or not args.output:
        raise ConfigError(
            "name the input and output files (--input/--output, or NeMo Gym's +input_jsonl_fpath/+output_jsonl_fpath)"
        )
    args.config = _serve_config(args, Path(args.output).with_name(Path(args.output).stem + "_serve_config.yaml"))
    specs = load_serve_config(args.config)
    overrides = _overrides(args)
    if not Path(args.input).is_file():
        raise InputError("cannot open: no such file", source=args.input)
    if _holds_no_rows(args.input):
        print(f"gym-serve: {args.input} holds no rows (it is empty, or only blank lines)", file=sys.stderr)
        return 1
    agents = serving.env_apps(specs) + (
        [args.agent] if args.agent and args.agent not in serving.env_apps(specs) else []
    )
    default_agent = args.agent or (agents[0] if len(agents) == 1 else None)
    if args.trace is not None:
        from gym_serve.calls.tracing import destination

        try:
            destination(args.trace)
        except ValueError as e:
            raise InputError(str(e), source="--trace") from None
    try:
        job = CollectJob(
            input_path=str(Path(args.input).resolve()),
            output_path=str(Path(args.output).resolve()),
            agents=agents,
            default_agent=default_agent,
            num_repeats=args.num_repeats,
            limit=args.limit,
            params_overrides=overrides,
            concurrency=args.concurrency or serving.agent_capacity(specs, args.config),
            attempt_timeout_s=args.rollout_timeout,
            max_attempts=args.max_attempts,
            resume=args.resume,
            ordered=args.ordered,
            shard_index=args.shard[0],
            shard_count=args.shard[1],
            max_policy_lag=args.max_policy_lag,
            flag_stale=args.flag_stale,
            trace=args.trace,
            trace_sample=args.trace_sample,
            turn_checkpoints=args.turn_checkpoints,
        )
    except ValidationError as e:  # before anything starts: the arguments do not fit this config
        raise ConfigError(str(e.errors()[0]["msg"]).removeprefix("Value error, "), source=args.config) from None
    print(f"Ray: {serving.connect(args.address)}")
    if not args.no_deploy:
        serving.deploy(specs, source=args.config)
    try:
        summary = _collect(job)
    except KeyboardInterrupt:
        print(_resume_hint(args.argv, job), file=sys.stderr)
        return 130
    if job.trace is not None:
        from gym_serve.calls.tracing import EXPORT_EVERY_S

        time.sleep(2 * EXPORT_EVERY_S)  # the replicas write their last spans within one export interval
        print(f"traces: {job.trace}")
    print(_format_summary(summary))
    _echo_bad_rows(summary)
    return 0 if summary.rollouts + summary.rollouts_resumed > 0 else 1


def _serve_config(args: argparse.Namespace, mapped: Path) -> str:
    """The Serve config to run: the one named, or NeMo Gym's configs (`+config_paths=[...]`) mapped to one, written
    at `mapped` (`gym_serve.environment.nemo_gym.configs`)."""
    if not any(a.lstrip("+").startswith("config_paths=") for a in args.nemo_gym):  # collection arguments only
        if not args.config:
            raise ConfigError("name a Serve config, or NeMo Gym's configs as +config_paths=[a.yaml,b.yaml]")
        return str(args.config)
    if args.config:
        raise ConfigError(f"give a Serve config ({args.config}) or NeMo Gym's +config_paths=[...], not both")
    from gym_serve.environment.nemo_gym import configs

    nemo_gym = configs.read(args.nemo_gym)
    configs.write_serve_config(nemo_gym, mapped, replay_policy=args.replay_model, hosted_agents=args.hosted_agents)
    print(f"NeMo Gym's configs ({nemo_gym.source}) run as the Serve config {mapped}")
    return str(mapped)


def _collect_arguments(args: argparse.Namespace) -> None:
    """`ng_collect_rollouts`' arguments among the overrides (`+input_jsonl_fpath=...`), where no option set them."""
    from gym_serve.environment.nemo_gym import configs

    for option, value in configs.collect_arguments(configs.read(args.nemo_gym)).items():
        if getattr(args, option) is None or (option == "num_repeats" and args.num_repeats == 1):
            setattr(args, option, value)


def _holds_no_rows(path: str) -> bool:
    with open(path, "rb") as handle:
        return not any(line.strip(b" \t\r\n\xef\xbb\xbf") for line in handle)


SHOWN_BAD_ROWS = 10


def _echo_bad_rows(summary: CollectSummary) -> None:
    """The first few bad-row errors on the terminal, where the user looks; where the rest are."""
    if not summary.rows_skipped:
        return
    from gym_serve.wire.jsonl import read_jsonl

    errors = [
        str(row.get("error"))
        for _, row in read_jsonl(summary.failures_path)
        if row.get("_ng_failure_class") == "bad_input"
    ]
    print(f"gym-serve: {summary.rows_skipped} input row(s) skipped as bad input:", file=sys.stderr)
    for error in errors[:SHOWN_BAD_ROWS]:
        print(f"  {error}", file=sys.stderr)
    rest = len(errors) - SHOWN_BAD_ROWS
    print(
        f"  ({'and ' + str(rest) + ' more; ' if rest > 0 else ''}all are in {summary.failures_path})", file=sys.stderr
    )


def _resume_hint(argv: list[str], job: CollectJob) -> str:
    """What to type to finish an interrupted collection: the same command with `--resume`."""
    command = shlex.join(["gym-serve", *argv, *([] if "--resume" in argv else ["--resume"])])
    return (
        f"\nInterrupted. The rollouts that finished are in {job.output_path} (failures in its _failures.jsonl);"
        f" to run only the rest:\n  {command}"
    )


def cmd_profile(args: argparse.Namespace) -> int:
    from gym_serve.analysis.profiling import profile

    if args.rollouts is None and args.trace is None:
        print("gym-serve profile: give --rollouts, --trace or both", file=sys.stderr)
        return 2
    if args.trace is not None:
        _print_tier_times(args.trace)
    if args.rollouts is None:
        return 0
    environments = _environments(args.config) if args.config else None
    result = profile(args.rollouts, args.inputs, allow_partial=args.allow_partial, environments=environments)
    print(f"rollouts: {result['completed']} of {result['expected']} expected ({result['missing']} missing)")
    for agent, metrics in result["key_metrics"].items():
        shown = ", ".join(f"{k} {v:.3f}" for k, v in metrics.items() if "/" in k and "std" not in k)
        print(f"{agent}: {shown}")
    print(f"wrote {result['reward_profiling']}\n      {result['aggregate_metrics']}\n      {result['plot']}")
    print(f"health: {result['health']['headline']}\n      {result['health']['summary']}")
    return 0


def _print_tier_times(trace: str) -> None:
    from gym_serve.analysis.trace_profile import trace_profile

    report = trace_profile(trace)
    print(f"traces: {report['traces']} ({report['spans']} spans)")
    print(f"{'tier':<12} {'span':<24} {'count':>7} {'p50 ms':>9} {'p99 ms':>9}")
    for tier, spans in report["tiers"].items():
        for name, times in spans.items():
            p50, p99 = times["p50_s"] * 1000, times["p99_s"] * 1000
            print(f"{tier:<12} {name:<24} {times['count']:>7} {p50:>9.2f} {p99:>9.2f}")
    if report["bad_lines"]:
        print(f"skipped {len(report['bad_lines'])} bad line(s): {report['bad_lines'][:10]}", file=sys.stderr)
    print(f"wrote {report['written']}")


def cmd_reverify(args: argparse.Namespace) -> int:
    from gym_serve.analysis.reverify import run

    environments = {"*": args.env} if args.env else _environments(args.config)
    result = run(args.rollouts, environments, args.inputs)
    print(f"{'agent':<28} {'rows':>6} {'changed':>8} {'mean before':>12} {'mean after':>11}")
    for agent, s in sorted(result["agents"].items()):
        print(f"{agent:<28} {int(s['rows']):>6} {int(s['changed']):>8} {s['before']:>12.3f} {s['after']:>11.3f}")
    for change in result["changed"][:20]:
        print(
            f"  line {change['line']}: task {change['_ng_task_index']} rollout {change['_ng_rollout_index']}: "
            f"{change['before']} -> {change['after']}"
        )
    print(f"wrote {result['output']}")
    if result["failures"]:
        print(f"gym-serve: {len(result['failures'])} row(s) could not be scored:", file=sys.stderr)
        for failure in result["failures"][:SHOWN_BAD_ROWS]:
            print(f"  line {failure['line']}: {failure['kind']}: {failure['error'][:300]}", file=sys.stderr)
        print(f"  (all are in {result['failures_path']})", file=sys.stderr)
    if not any(s["rows"] for s in result["agents"].values()):  # nothing re-scored: that is no success
        print(f"gym-serve: error: no row of {args.rollouts} could be scored", file=sys.stderr)
        return 1
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    from gym_serve.analysis.health_checks import HealthOptions
    from gym_serve.analysis.health_report import health, render

    options = HealthOptions(verify_deadline_s=args.verify_deadline, max_policy_lag=args.max_policy_lag)
    print(render(health(args.rollouts, options=options)))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from gym_serve.analysis.atif_export import export_atif

    result = export_atif(
        args.rollouts,
        args.out,
        session_id=args.session_id,
        agent_version=args.agent_version,
        token_ids=not args.without_token_ids,
    )
    print(f"wrote {result.trajectories} ATIF v1.7 trajectories to {result.out_dir}/")
    print("\n".join(f"  manifest: {path}" for path in result.manifests))
    if result.failure_rows:
        print(f"  {result.failure_rows} failure row(s) have no trajectory: not written")
    if result.errors:
        print(f"gym-serve: {len(result.errors)} row(s) not written:", file=sys.stderr)
        for error in result.errors[:SHOWN_BAD_ROWS]:
            print(f"  {error}", file=sys.stderr)
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from gym_serve.viewer.server import view

    view(args.rollouts, port=args.port, profile=args.profile)
    return 0


def cmd_env_test(args: argparse.Namespace) -> int:
    from gym_serve.analysis.check import check_environment
    from gym_serve.serving import deploy as serving

    print(f"Ray: {serving.connect(args.address)}")
    failed = []
    for name in args.names:
        print(f"Checking {name}: example data, recordings, then every row through Serve (replay model)...")
        report = check_environment(name, verify_budget_s=args.verify_budget, address=args.address)
        print(report.render() + "\n")
        if not report.ok:
            failed.append(name)
    if len(args.names) > 1:
        print(
            f"{len(args.names) - len(failed)}/{len(args.names)} environments pass"
            + (f"; failed: {', '.join(failed)}" if failed else "")
        )
    return 1 if failed else 0


def cmd_env_init(args: argparse.Namespace) -> int:
    from gym_serve.analysis.scaffold import distribution_name, scaffold

    directory = Path(args.dir or distribution_name(args.name))
    files = scaffold(args.name, directory)
    print(f"Wrote the environment `{args.name}` as a package of its own in {directory}/:")
    print("\n".join(f"  {path}" for path in files))
    print(f"\nNext:\n  pip install -e {directory}\n  gym-serve env test {args.name}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from gym_serve.environment.registry import available_environments, installed_environments

    installed = installed_environments()
    print(f"{'environment':<28} from")
    for name in available_environments():
        entry = installed.get(name)
        where = f"{entry.dist.name} {entry.dist.version} ({entry.value})" if entry and entry.dist else "built in"
        print(f"{name:<28} {where}")
    print()
    print(_running_applications(args.address))
    return 0


def _running_applications(address: str | None) -> str:
    """The Serve applications on the cluster at `address` (or the one running here), or why there are none."""
    from gym_serve.errors import ClusterError
    from gym_serve.serving import deploy as serving

    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    if address == "local":
        return "Applications: none (RAY_ADDRESS=local names no running cluster to ask)"
    try:
        cluster = serving.connect(address)
    except ClusterError as e:
        return f"Applications: none: {e}"
    try:
        table = serving.describe_status()
    except Exception as e:  # no Serve instance on that cluster
        return f"Applications on {cluster}: none ({type(e).__name__}: {e})"
    return f"Applications on {cluster}:\n" + (table if "\n" in table else "none")


def cmd_bench(args: argparse.Namespace) -> int:
    """Benchmarks are scripts beside the packages in a source checkout (they are not installed)."""
    import subprocess

    if args.name not in _benchmarks():
        raise InputError(
            f"no benchmark `{args.name}`; available: {', '.join(_benchmarks()) or 'none (not a source checkout)'}",
            source=str(_BENCHMARKS),
        )
    return subprocess.call([sys.executable, str(_BENCHMARKS / f"{args.name}.py"), *args.args])


_BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _benchmarks() -> list[str]:
    """The benchmark scripts beside the packages (none in an installed wheel); `harness` is their shared code."""
    return sorted(p.stem for p in _BENCHMARKS.glob("*.py") if p.stem != "harness") if _BENCHMARKS.is_dir() else []


def _environments(config: str) -> dict[str, str]:
    """Agent (application) name → environment name, from a Serve config (gym-serve's own environments: a hosted
    NeMo Gym server adds no metrics of its own to a profile, and is re-scored by serving it)."""
    environments = {}
    for spec in load_serve_config(config):
        environment = spec.app_args(config).environment
        if environment is not None and environment.kind == "gym_serve":
            environments[spec.name] = environment.name
    return environments


def _repeats(text: str) -> int | dict[str, int]:
    """`4`, or `math=8,code=4`."""
    try:
        if "=" not in text:
            return int(text)
        pairs = (part.split("=", 1) for part in text.split(","))
        return {name.strip(): int(k) for name, k in pairs}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K or AGENT=K,AGENT=K; got {text!r}") from None


def _shard(text: str) -> tuple[int, int]:
    """`I/N`, with 0 <= I < N."""
    index, _, count = text.partition("/")
    try:
        shard = int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N, e.g. 0/4; got {text!r}") from None
    if not 0 <= shard[0] < shard[1]:
        raise argparse.ArgumentTypeError(f"expected 0 <= I < N; got {text!r}")
    return shard


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling overrides, checked once here (not as one bad row per input line)."""
    from gym_serve.wire.responses import row_problems

    chosen = {"temperature": args.temperature, "top_p": args.top_p, "max_output_tokens": args.max_output_tokens}
    overrides = {key: value for key, value in chosen.items() if value is not None}
    for field, problem in row_problems({"responses_create_params": {"input": "-", **overrides}}):
        flag = "--" + field.rsplit(".", 1)[-1].replace("_", "-")
        raise ConfigError(problem, key=flag)
    return overrides


def cmd_demo(args: argparse.Namespace) -> int:
    from gym_serve.serving import deploy as serving

    started = time.perf_counter()
    out_dir = Path(args.out or f"gym-serve-demo-{datetime.now():%Y%m%d-%H%M%S}").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    config = resources.files("gym_serve.deployments") / DEMO_CONFIG
    specs = load_serve_config(str(config))
    print("Starting a local Ray instance and deploying the example environments (replay model, no GPU)...")
    print(f"Ray: {serving.connect()}")
    serving.deploy(specs, source=str(config))
    print(serving.describe_status([s.name for s in specs]) + "\n")
    results = {}
    for env in DEMO_ENVS:
        data = resources.files("gym_serve.envs") / env / "data" / "example.jsonl"
        results[env] = _collect(
            CollectJob(
                input_path=str(data),
                output_path=str(out_dir / f"{env}_rollouts.jsonl"),
                agents=[env],
                default_agent=env,
                num_repeats=args.num_repeats,
                concurrency=64,
            ),
            label=env,
        )
    print(_demo_report(results, out_dir, time.perf_counter() - started))
    return 0 if all(r.rollouts > 0 for r in results.values()) else 1


def _collect(job: CollectJob, label: str = "rollouts") -> CollectSummary:
    """Run one collection in a driver actor on this node, showing progress until it finishes."""
    from tqdm import tqdm

    from gym_serve.analysis.health_monitor import HealthMonitor
    from gym_serve.collect.driver import driver_on, follow

    monitor = HealthMonitor(job.output_path)
    total = _estimate_rollouts(job)
    with tqdm(desc=label, total=total, unit="rollout", dynamic_ncols=True, leave=False) as bar:

        def show(progress: CollectSummary) -> None:
            done = progress.rollouts + progress.failures + progress.rollouts_resumed + progress.failures_kept
            bar.total = max(total or 0, progress.rollouts_expected) or None
            bar.update(done - bar.n)
            reward = progress.mean_reward
            failed = ",".join(f"{k}:{v}" for k, v in sorted(progress.failures_by_class.items())) or "0"
            bar.set_postfix(
                in_flight=progress.in_flight,
                failed=failed,
                reward=f"{reward:.3f}" if reward is not None else "-",
                refresh=False,
            )
            for warning in monitor.poll():
                bar.write(warning, file=sys.stderr)

        with driver_on() as driver:
            return follow(driver, job, show)


def _estimate_rollouts(job: CollectJob) -> int | None:
    """Lines × repeats, for the progress bar (counting newlines is fast; the driver still reads lazily)."""
    if not isinstance(job.num_repeats, int):
        return None
    with open(job.input_path, "rb") as handle:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    if job.limit:
        lines = min(lines, job.limit)
    return lines * job.num_repeats


def _format_summary(s: CollectSummary) -> str:
    failures = ", ".join(f"{k}: {v}" for k, v in sorted(s.failures_by_class.items())) or "none"
    reward = f"{s.mean_reward:.3f}" if s.mean_reward is not None else "-"
    ms = lambda v: f"{v * 1000:.1f} ms" if v is not None else "-"  # noqa: E731
    split = s.time_split_s
    busy = sum(split.values()) or 1.0
    parts = ", ".join(f"{k.removesuffix('_s')} {100 * v / busy:.0f}%" for k, v in sorted(split.items())) or "-"
    resumed = f" (+{s.rollouts_resumed} from before)" if s.rollouts_resumed else ""
    kept = f" (+{s.failures_kept} from before)" if s.failures_kept else ""
    lines = [
        f"rows read        {s.rows_read}: {s.rows_read - s.rows_skipped} ran, {s.rows_skipped} skipped as bad input",
        f"rollouts         {s.rollouts_expected} expected = {s.rollouts} written{resumed} + {s.failures} failed{kept}",
        f"output           {s.output_path}",
        f"failures         {failures} -> {s.failures_path}",
        f"retries          {s.retries} (back-pressure waits: {s.backpressure_waits})",
        f"throughput       {s.rollouts_per_s:.1f} rollouts/s over {s.elapsed_s:.2f} s",
        f"latency          p50 {ms(s.latency_p50_s)}, p95 {ms(s.latency_p95_s)}, p99 {ms(s.latency_p99_s)}",
        f"time in calls    {parts}",
        f"mean reward      {reward}",
    ]
    if s.rollouts_resumed_mid_way:
        lines.append(
            f"resumed mid-way  {s.rollouts_resumed_mid_way} rollout(s) went on from their last completed turn "
            f"({s.turns_restored} turn(s) not run again)"
        )
    if s.journal_skipped:
        lines.append(f"journal          skipped what a crash broke: {'; '.join(s.journal_skipped)}")
    if s.ordered_path:
        lines.append(f"ordered copy     {s.ordered_path}")
    return "\n".join(lines)


def _demo_report(results: dict[str, CollectSummary], out_dir: Path, elapsed: float) -> str:
    lines = [f"{'environment':<26} {'rollouts':>8} {'failed':>6} {'mean reward':>11} {'rollouts/s':>10}"]
    for env, s in results.items():
        reward = f"{s.mean_reward:.3f}" if s.mean_reward is not None else "-"
        lines.append(f"{env:<26} {s.rollouts:>8} {s.failures:>6} {reward:>11} {s.rollouts_per_s:>10.1f}")
    example = _first_episode(out_dir / f"{DEMO_ENVS[0]}_rollouts.jsonl")
    return "\n".join(
        [
            "\n".join(lines),
            "",
            f"Rollout files are in {out_dir}/ (one <env>_rollouts.jsonl each, NeMo Gym's format).",
            "",
            "One episode from example_single_tool_call:",
            example,
            "",
            f"Done in {elapsed:.1f} s.",
        ]
    )


def _first_episode(path: Path) -> str:
    """The first rollout that called a tool (the interesting kind), as a short transcript."""
    from gym_serve.wire.jsonl import read_jsonl
    from gym_serve.wire.responses import output_text

    for _, row in read_jsonl(path):
        if not any(item["type"] == "function_call" for item in row["response"]["output"]):
            continue
        lines = [f"  user:      {row['responses_create_params']['input'][-1]['content']}"]
        for item in row["response"]["output"]:
            if item["type"] == "function_call":
                lines.append(f"  tool call: {item['name']}({item['arguments']})")
            elif item["type"] == "function_call_output":
                lines.append(f"  tool out:  {item['output']}")
            elif item["type"] == "message":
                lines.append(f"  assistant: {output_text([item])}")
        lines.append(f"  reward:    {row['reward']}")
        return "\n".join(lines)
    return "  (no rollout called a tool)"


if __name__ == "__main__":
    sys.exit(main())
