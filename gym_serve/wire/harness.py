"""What a harness agent hands back, and how it reaches the environment's `verify`.

A harness agent runs its own loop (an SDK-built agent, a coding CLI) against a gateway session; when it
ends, its `HarnessResult` rides on the rollout's response as `response.harness`, so an environment's
`verify(task, response)` reads the harness's final reply, its exit status and output, and the files it
left in its workspace (`files`, a snapshot taken before the workspace is removed: a verifier on another
node reads them too).

>>> result = HarnessResult(reply="It is cold.", exit_status=0, files={"answer.txt": "42\\n"})
>>> result.failed, result.files["answer.txt"].strip()
(False, '42')
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["HarnessResult"]


class HarnessResult(BaseModel):
    """A harness's outcome: what an in-process harness returns, and what a program's run is read into."""

    model_config = ConfigDict(extra="forbid")

    reply: str = Field(default="", description="The harness's final answer (its last assistant text).")
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="The conversation as the harness ended it, if it reports one."
    )
    exit_status: int | None = Field(default=None, description="A program's exit status; None for a callable.")
    stdout: str = Field(default="", description="A program's standard output, cut at the configured cap.")
    stderr: str = Field(default="", description="Its standard error, cut at the cap.")
    output_truncated: bool = Field(default=False, description="True when stdout or stderr was cut.")
    workspace: str | None = Field(
        default=None, description="The workspace folder, on the Agent replica's node, while the rollout verifies."
    )
    files: dict[str, str] = Field(
        default_factory=dict,
        description="The workspace's regular files (no links), relative path → text, within the snapshot caps.",
    )
    info: dict[str, Any] = Field(default_factory=dict, description="Anything else the harness reports.")

    @property
    def failed(self) -> bool:
        """A program that exited non-zero."""
        return self.exit_status not in (None, 0)
