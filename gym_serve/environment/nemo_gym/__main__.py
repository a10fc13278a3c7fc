"""`python -m gym_serve.environment.nemo_gym data SERVER`: where a server's data is (for `--input` and scripts).

`python -m gym_serve.environment.nemo_gym list` names the servers installed here.
"""

from __future__ import annotations

import argparse
import sys

from gym_serve.environment.nemo_gym.catalog import available_servers, data_dir
from gym_serve.errors import EnvError


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m gym_serve.environment.nemo_gym", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the servers installed here")
    data = commands.add_parser("data", help="a server's data folder (example.jsonl, example_rollouts.jsonl)")
    data.add_argument("server")
    args = parser.parse_args()
    if args.command == "list":
        print("\n".join(available_servers()))
    else:
        try:
            print(data_dir(args.server))
        except EnvError as e:
            sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
