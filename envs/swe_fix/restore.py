"""The pristine repository put back around the library's modules, in one command (`verify` runs it in the sandbox).

`SOURCE` runs as `python -I -S -B -c SOURCE` in the repository after every process the rollout left running
has been ended, so nothing the agent wrote runs beside it. It reads, as JSON on stdin, the pristine files that
are not library modules (`restore`) and the library's module paths (`library`); deletes everything at the top
of the repository but the library and `.git`, and everything in the library that is not one of its modules as
a regular file (`__pycache__`, new modules, links); writes the pristine files back; and prints the library's
modules as the agent left them (JSON: path -> text, or null where deleted).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SOURCE", "read_library"]

SOURCE = r"""
import json, os, shutil, stat, sys
job = json.loads(sys.stdin.read())
library = set(job["library"])
package = job["package"]


def remove(path):
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
    else:
        shutil.rmtree(path)


for name in os.listdir("."):
    if name not in (package, ".git"):
        remove(name)
if os.path.islink(package) or not os.path.isdir(package):
    if os.path.lexists(package):
        remove(package)
    os.mkdir(package)
for name in os.listdir(package):
    path = package + "/" + name
    if path not in library or not stat.S_ISREG(os.lstat(path).st_mode):
        remove(path)
for path, text in job["restore"].items():
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
found = {}
for path in sorted(library):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            found[path] = f.read()
    except FileNotFoundError:
        found[path] = None
sys.stdout.write(json.dumps(found))
"""


def read_library(stdout: str, library: list[str]) -> dict[str, str] | None:
    """The library's modules as the restore printed them (a deleted one left out); None when it printed no answer."""
    try:
        found: Any = json.loads(stdout)
    except ValueError:
        return None
    if not isinstance(found, dict) or set(found) != set(library):
        return None
    return {path: text for path, text in found.items() if isinstance(text, str)}
