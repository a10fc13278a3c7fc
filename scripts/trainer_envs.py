"""The trainers' own virtual environments (verl, SkyRL, NeMo Gym for NeMo RL, Unsloth), cached by content.

The trainers pin packages that clash with gym-serve's (verl: transformers<5.11; SkyRL: Python 3.12, ray 2.57;
NeMo Gym 0.7.0: Python 3.13, openai 2.44; Unsloth: trl<=1.15, transformers<=5.17), so the tests that drive
their real rollout-side classes run in an environment of each one's own, with its Python from pyenv. Each is
the trainer's package installed `--no-deps` plus exactly the packages its rollout-side modules import (found by
importing them), never its full dependency set, which drags in CUDA kernels, flash-attn, vLLM and training
back-ends. `LEFT_OUT` says what that leaves out.

    python3 scripts/trainer_envs.py build [NAME ...]     # all by default, in parallel; a cached one is reused
    python3 scripts/trainer_envs.py path NAME [--wait S]  # where NAME's environment is (waits for a build running)

An environment lives in `$GYM_SERVE_ENV_CACHE` (default `~/.cache/gym-serve-ci`) as `<name>-<hash>`, the hash
of its spec: a changed spec is a new environment, an unchanged one is reused by every later run (`.ci/run`
builds them in the background while it installs gym-serve). Each build writes `<name>-<hash>.log` beside it
and, when done, `gym-serve-env.json` inside it (seconds taken, size). Standard library only: it runs before
any environment exists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

CACHE = Path(os.environ.get("GYM_SERVE_ENV_CACHE", Path.home() / ".cache" / "gym-serve-ci"))
GYM_SERVE_IMPORTS = ["pydantic>=2.7,<3", "orjson>=3.10", "aiohttp>=3.10", "pyyaml>=6", "jsonschema>=4.18"]
"""What gym-serve's trainer adapters and client import (gym-serve itself comes from the repository, on
PYTHONPATH with scripts/source_tree: it is not installed, so its own pins do not meet the trainer's)."""


@dataclass(frozen=True)
class Spec:
    python: str
    """The pyenv Python `major.minor` the trainer supports."""
    steps: tuple[tuple[str, ...], ...]
    """`pip install` argument lists, in order."""
    imports: str
    """The modules the tests import: the build fails unless they import."""


SPECS: dict[str, Spec] = {
    "verl": Spec(
        python="3.11",
        steps=(
            ("torch==2.13.0+cpu", "transformers==5.10.4"),
            ("--no-deps", "verl==0.9.1"),
            (
                "ray==2.60.0",
                "tensordict>=0.8,<=0.10.0",
                "omegaconf",
                "hydra-core",
                "pillow",
                "codetiming",
                "datasets",
                "cachetools",
                "fastapi",
                "uvicorn",
                "numpy",
                *GYM_SERVE_IMPORTS,
            ),
        ),  # fmt: skip
        imports="verl.experimental.agent_loop.agent_loop",
    ),
    "skyrl": Spec(
        python="3.12",
        steps=(
            ("torch==2.13.0",),  # PyPI's build for 3.12 (CUDA libraries included; it runs on CPU)
            ("--no-deps", "skyrl==0.4.0"),
            (
                "ray==2.57.0",
                "transformers==5.16.1",
                "cloudpathlib",
                "loguru",
                "tqdm",
                "skyrl-gym",
                "pybase64",
                "rich",
                "torchdata",
                "jaxtyping",
                "datasets",
                *GYM_SERVE_IMPORTS,
            ),
        ),  # fmt: skip
        imports="skyrl.train.generators.base, skyrl.train.utils.trainer_utils",
    ),
    "nemo_gym": Spec(
        python="3.13",
        steps=(
            ("--no-deps", "--ignore-requires-python", "nemo-gym==0.7.0"),
            (
                "openai==2.44.0",
                "ray==2.60.0",
                "omegaconf",
                "hydra-core",
                "tqdm",
                "fastapi",
                "uvicorn",
                "rich",
                "requests",
                "itsdangerous",
                "httptools",
                "yappi",
                "pydot",
                "pandas",
                "scipy",
                "wandb",
                "anthropic<=0.109.2",
                "transformers",
                *GYM_SERVE_IMPORTS,
            ),
        ),  # fmt: skip
        imports="nemo_gym.rollout_collection, nemo_gym.server_utils, nemo_gym.base_resources_server",
    ),
    "unsloth": Spec(
        python="3.11",
        steps=(
            ("torch==2.13.0+cpu", "transformers==5.17.0", "trl==1.15.0", "datasets<5", "peft", "bitsandbytes"),
            ("--no-deps", "unsloth==2026.10.9", "unsloth_zoo==2026.10.9"),
            tuple(GYM_SERVE_IMPORTS),
        ),
        imports="unsloth, peft, trl",
    ),
}

LEFT_OUT = {
    "unsloth": "xformers, triton and bitsandbytes' GPU kernels, vLLM, diffusers (Unsloth's GPU path); CUDA torch",
    "verl": "CUDA torch (the CPU build instead), vLLM/SGLang, flash-attn, Megatron, peft, wandb, tensorboard",
    "skyrl": "vLLM, flash-attn, flashinfer, Megatron, JAX, ray[default]'s dashboard extras",
    "nemo_gym": "mlflow, the sandbox and telemetry extras, MCP, uvloop, the resources servers' own packages",
}


def env_dir(name: str) -> Path:
    digest = hashlib.sha256(json.dumps(asdict(SPECS[name]), sort_keys=True).encode()).hexdigest()[:12]
    return CACHE / f"{name}-{digest}"


def log_path(name: str) -> Path:
    return env_dir(name).with_suffix(".log")


def pyenv_python(version: str) -> str:
    """The newest pyenv Python of `major.minor` (pyenv lists them; `python3.X` on PATH otherwise)."""
    try:
        listed = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, check=True).stdout
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        found = shutil.which(f"python{version}")
        if found is None:
            raise SystemExit(f"no Python {version}: install it with pyenv (`pyenv install {version}`)") from None
        return found
    matching = [v for v in listed.split() if v == version or v.startswith(version + ".")]
    if not matching:
        raise SystemExit(f"pyenv has no Python {version} (it has {', '.join(listed.split())})")
    newest = max(matching, key=lambda v: [int(p) for p in v.split(".") if p.isdigit()])
    return f"{root}/versions/{newest}/bin/python"


def build(name: str) -> str:
    """Build `name`'s environment unless it is cached; a line saying what happened."""
    spec, target = SPECS[name], env_dir(name)
    if (target / "gym-serve-env.json").exists():
        return f"{name}: cached at {target}"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial, lock = target.with_suffix(".partial"), target.with_suffix(".building")
    if _building(lock):  # another process builds it (CI's background build, a test): wait for that one
        return f"{name}: built by process {lock.read_text()} at {path(name, wait_s=3600)}"
    lock.write_text(str(os.getpid()))
    started = time.monotonic()
    try:
        shutil.rmtree(partial, ignore_errors=True)
        with log_path(name).open("w") as log:
            run = [pyenv_python(spec.python), "-m", "venv", str(partial)]
            steps = [run] + [[str(partial / "bin" / "pip"), "install", "-q", *step] for step in spec.steps]
            steps.append([str(partial / "bin" / "python"), "-c", f"import {spec.imports}"])
            for command in steps:
                log.write(f"$ {' '.join(command)}\n")
                log.flush()
                if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
                    raise SystemExit(f"{name}: `{' '.join(command[1:])}` failed; see {log_path(name)}")
        seconds = round(time.monotonic() - started, 1)
        size = sum(f.stat().st_size for f in partial.rglob("*") if f.is_file() and not f.is_symlink())
        info = {"seconds": seconds, "bytes": size, "python": spec.python, "left_out": LEFT_OUT[name]}
        (partial / "gym-serve-env.json").write_text(json.dumps(info))
        partial.rename(target)  # venv scripts name their folder; nothing run from here uses them
        return f"{name}: built in {seconds} s, {size / 2**30:.2f} GiB, at {target}"
    finally:
        lock.unlink(missing_ok=True)


def _building(lock: Path) -> bool:
    """Is the process that wrote `lock` still running?"""
    try:
        os.kill(int(lock.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def path(name: str, wait_s: float) -> Path:
    """`name`'s environment, waiting up to `wait_s` for a build in progress; SystemExit naming the log if none."""
    return wait_built(env_dir(name), wait_s, what=f"the {name} trainer environment", script="trainer_envs.py")


def wait_built(target: Path, wait_s: float, *, what: str, script: str) -> Path:
    """`target`, waiting up to `wait_s` for a build in progress; SystemExit naming the log if it is not built."""
    lock = target.with_suffix(".building")
    deadline = time.monotonic() + wait_s
    while not (target / "gym-serve-env.json").exists() and _building(lock) and time.monotonic() < deadline:
        time.sleep(2)
    if not (target / "gym-serve-env.json").exists():
        state = "is still building" if _building(lock) else "was not built (or its build failed)"
        raise SystemExit(
            f"{what} {state}: expected at {target}; build log {target.with_suffix('.log')}; "
            f"build it with `python3 scripts/{script} build {target.name.rsplit('-', 1)[0]}`"
        )
    return target


def main() -> None:
    cli(__doc__, list(SPECS), build, path, what="trainer environment")


def cli(doc: str | None, names: list[str], build: Callable[[str], str], path: Callable[[str, float], Path], *,
        what: str) -> None:  # fmt: skip
    """`build [NAME ...]` (in parallel; exit 1 if any failed) and `path NAME [--wait S]`, over `names`."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build")
    build_parser.add_argument("names", nargs="*", help=f"of {', '.join(names)} (all by default)")
    path_parser = commands.add_parser("path")
    path_parser.add_argument("name", choices=names)
    path_parser.add_argument("--wait", type=float, default=0.0)
    args = parser.parse_args()
    if args.command == "path":
        print(path(args.name, args.wait))
        return
    chosen = args.names or names
    unknown = set(chosen) - set(names)
    if unknown:
        parser.error(f"no {what} {', '.join(sorted(unknown))} (there are {', '.join(names)})")
    with ThreadPoolExecutor(len(chosen)) as pool:
        futures = [pool.submit(build, name) for name in chosen]
    failed = False
    for future in futures:
        try:
            print(future.result(), flush=True)
        except SystemExit as e:
            print(e, file=sys.stderr, flush=True)
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
