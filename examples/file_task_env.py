"""A workspace task for harness agents: leave the expected text in the named file of the rollout's workspace.

A harness agent (a coding CLI, an SDK agent with a shell) works in a workspace of its own; what it leaves
there is the answer. `verify` reads the workspace snapshot the harness agent took when the harness ended
(`response.harness.files`: regular files only, no links followed) and pays 1.0 when `file` holds exactly
`expected` (surrounding whitespace aside), else 0.0. What the harness *says* it did earns nothing: a reply
claiming the file is written, a file of another name, a link to another file, or an episode that was not
a harness run (no workspace) all score 0.
"""

from __future__ import annotations

from gym_serve import Environment, Response, Task, Verdict


class FileTask(Task):
    file: str
    expected: str


class FileTaskEnv(Environment[FileTask, None]):
    async def verify(self, task: FileTask, response: Response) -> Verdict:
        files = response.harness.files if response.harness is not None else {}
        written = files.get(task.file)
        reward = 1.0 if written is not None and written.strip() == task.expected else 0.0
        return Verdict(reward=reward, fields={"file_written": written is not None})
