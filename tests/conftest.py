"""What tests that run the repository's files share: its root folder, and Ctrl-C for the processes they start."""

from __future__ import annotations

import signal
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def interruptible() -> None:
    """Ctrl-C's default in a child process (`Popen(preexec_fn=interruptible)`), as a terminal gives it.

    A suite started in the background by a non-interactive shell (`cmd &`, as a CI runner starts it) ignores
    SIGINT, and children inherit that: a server stopped with Ctrl-C would then never see it, and its stop
    would wait out its timeout (90 s) and kill it, leaving its Ray processes behind.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
