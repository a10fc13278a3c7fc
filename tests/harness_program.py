"""A harness program for the tests (standard library only): it calls its gateway session once, and on request
misbehaves — leaves a daemon behind, prints its environment, writes its key to a file, or tries to reach other
ports and routes. It prints one JSON line of what it saw; `--write FILE TEXT` leaves an answer; `--exit N` ends
it with status N.

    python tests/harness_program.py [--daemon SECONDS] [--print-env] [--write-key FILE] [--write FILE TEXT]
                                    [--probe HOST:PORT ...]
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request


def call(path: str, body: dict | None, key: str | None) -> tuple[int, str]:
    """POST (or GET, without a body) to the session's OpenAI base URL + `path`."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def reach(address: str) -> str:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=3):
            return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, type(e).__name__)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--daemon", type=float)
    parser.add_argument("--print-env", action="store_true")
    parser.add_argument("--write-key")
    parser.add_argument("--write", nargs=2, metavar=("FILE", "TEXT"))
    parser.add_argument("--probe", nargs="*", default=[])
    parser.add_argument("--exit", type=int, default=0)
    args = parser.parse_args()
    key = os.environ["OPENAI_API_KEY"]
    seen: dict = {"probes": {address: reach(address) for address in args.probe}}
    seen["other_routes"] = {
        path: call(path, None, key)[0] for path in ("/../../healthz", "/../../../v1/rollouts", "/../../x/v1/models")
    }
    seen["no_key"] = call("/models", None, None)[0]
    body = {"model": os.environ["GYM_SERVE_MODEL"], "messages": [{"role": "user", "content": sys.stdin.read()}]}
    status, answer = call("/chat/completions", body, key)
    seen["call"] = status
    if args.daemon:  # left running in a session of its own: the rollout's end must take it down
        subprocess.Popen(["sleep", str(args.daemon)], start_new_session=True)
    if args.print_env:
        print("\n".join(f"{k}={v}" for k, v in sorted(os.environ.items())))
    if args.write_key:
        with open(args.write_key, "w") as f:
            f.write(f"the key is {key}\n")
    if args.write:
        with open(args.write[0], "w") as f:
            f.write(args.write[1])
    seen["cwd"] = os.getcwd()
    print(json.dumps(seen))
    sys.exit(args.exit)


if __name__ == "__main__":
    main()
