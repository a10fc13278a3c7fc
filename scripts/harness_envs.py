"""The harnesses the tests run that cannot live in gym-serve's own environment, installed from their registries.

- `openai_agents`: the OpenAI Agents SDK needs openai >= 3, and gym-serve's environment keeps NeMo Gym's
  openai 2.44. It is a folder of exactly openai-agents, openai 3 and the two packages they add (`pip install
  --target --no-deps`), put first on `PYTHONPATH` of the harness Agent's replicas only (Ray's `runtime_env`),
  over gym-serve's environment for everything else. (A user can give those replicas `runtime_env: {pip:
  [openai-agents]}` instead; it builds a virtual environment per cluster, ~40 s here.)
- `claude_code`: Anthropic's Claude Code CLI from the npm registry (`npm install --prefix`; its package brings
  the native program for this platform), run unmodified as a black box.

(mini-swe-agent installs into gym-serve's own environment: the `harnesses` extra.)

    python3 scripts/harness_envs.py build [NAME ...]     # all by default; a cached one is reused
    python3 scripts/harness_envs.py path NAME [--wait S]  # where NAME is (waits for a build running)

Each lives in `$GYM_SERVE_ENV_CACHE` (default `~/.cache/gym-serve-ci`) as `<name>-<hash>` of its spec, beside
the trainers' environments (`scripts/trainer_envs.py`, whose cache and locking this shares), built in the
background by `.ci/run`. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_envs import CACHE, _building, cli, pyenv_python, wait_built  # noqa: E402  (a script beside this one)

SPECS: dict[str, list[list[str]]] = {
    "openai_agents": [
        ["{python}", "-m", "pip", "install", "-q", "--no-deps", "--target", "{target}",
         "openai==3.57.0", "openai-agents==0.24.0", "griffelib==2.4.1", "websockets==16.1.1"],
    ],
    "claude_code": [
        ["npm", "install", "--prefix", "{target}", "--no-audit", "--no-fund", "--foreground-scripts",
         "@anthropic-ai/claude-code@2.1.332"],
        ["{target}/node_modules/.bin/claude", "--version"],
    ],
}  # fmt: skip
"""Each harness's build: commands run in order (`{target}`: its folder, `{python}`: Python 3.11)."""

PROGRAMS = {"claude_code": "node_modules/.bin/claude"}
"""Where, inside a built folder, its program is."""


def env_dir(name: str) -> Path:
    digest = hashlib.sha256(json.dumps(SPECS[name]).encode()).hexdigest()[:12]
    return CACHE / f"{name}-{digest}"


def build(name: str) -> str:
    """Build `name` unless it is cached; a line saying what happened."""
    target = env_dir(name)
    if (target / "gym-serve-env.json").exists():
        return f"{name}: cached at {target}"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial, lock, log_path = (
        target.with_suffix(".partial"),
        target.with_suffix(".building"),
        target.with_suffix(".log"),
    )
    if _building(lock):
        return f"{name}: built by process {lock.read_text()} at {path(name, wait_s=3600)}"
    lock.write_text(str(os.getpid()))
    started = time.monotonic()
    try:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        places = {"{target}": str(partial), "{python}": pyenv_python("3.11")}
        with log_path.open("w") as log:
            for step in SPECS[name]:
                command = [_filled(word, places) for word in step]
                log.write(f"$ {' '.join(command)}\n")
                log.flush()
                if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
                    raise SystemExit(f"{name}: `{' '.join(command)}` failed; see {log_path}")
        seconds = round(time.monotonic() - started, 1)
        (partial / "gym-serve-env.json").write_text(json.dumps({"seconds": seconds}))
        partial.rename(target)  # npm's links are relative: the folder moves whole
        return f"{name}: built in {seconds} s at {target}"
    finally:
        lock.unlink(missing_ok=True)


def _filled(word: str, places: dict[str, str]) -> str:
    for placeholder, value in places.items():
        word = word.replace(placeholder, value)
    return word


def path(name: str, wait_s: float) -> Path:
    """`name`'s folder, waiting up to `wait_s` for a build in progress; SystemExit naming the log if none."""
    return wait_built(env_dir(name), wait_s, what=f"the {name} harness", script="harness_envs.py")


def main() -> None:
    cli(__doc__, list(SPECS), build, path, what="harness")


if __name__ == "__main__":
    main()
