"""The commands the documentation shows, read from the documents themselves.

Every fenced block whose language is `bash`, `sh`, `shell` or `console` in a tracked Markdown file is a
*session*: its commands run in order, in one copy of the repository, as a newcomer would type them
(`tests/test_documented_commands.py` says how each kind runs). A command is one logical line: `\\`
continuations joined, a trailing `# comment` dropped. Nothing is registered anywhere: a command added to
a document is run by the next test run.

Commands in running text (inline code) are references, not sessions; `inline_commands` finds the ones
that are concrete enough to run (a repository path, no placeholder) so a test can insist that each is
also shown in a fenced block, where it is run.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Block", "Command", "blocks", "inline_commands", "split_chain", "strip_comment"]

SHELLS = {"bash", "sh", "shell", "console"}
CI_MARKER = "<!-- ci:test-command -->"


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    commands: tuple[Command, ...]
    ci: bool
    """The README's test command (after the `ci:test-command` marker), which CI itself runs."""

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def documents(repo: Path) -> list[str]:
    """The tracked Markdown files, repository-relative."""
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=repo, capture_output=True, text=True, check=True)
    return sorted(listed.stdout.split())


def blocks(repo: Path) -> list[Block]:
    found = []
    for doc in documents(repo):
        lines = (repo / doc).read_text().splitlines()
        i = 0
        while i < len(lines):
            fence = re.match(r"^(\s*)(`{3,})(\w*)", lines[i])
            if not fence:
                i += 1
                continue
            start, marker, language = i, fence[2], fence[3]
            i += 1
            body: list[tuple[int, str]] = []
            while i < len(lines) and not lines[i].strip().startswith(marker):
                body.append((i + 1, lines[i]))
                i += 1
            i += 1
            if language in SHELLS:
                ci = start > 0 and lines[start - 1].strip() == CI_MARKER
                found.append(Block(doc, start + 1, tuple(_commands(doc, body)), ci))
    return found


def _commands(doc: str, body: list[tuple[int, str]]) -> list[Command]:
    commands, pending, first = [], "", 0
    for number, raw in body:
        text = strip_comment(raw).rstrip()
        if not pending:
            first = number
        if text.endswith("\\"):
            pending += text[:-1].strip() + " "
            continue
        text = (pending + text.strip()).strip()
        pending = ""
        if text:
            commands.append(Command(doc, first, text.removeprefix("$ ")))
    return commands


def strip_comment(line: str) -> str:
    """`line` without a trailing shell comment: a `#` that starts a word outside quotes.

    >>> strip_comment("gym-serve up a.yaml   # deploy it")
    'gym-serve up a.yaml   '
    >>> strip_comment("echo '# not a comment' x#y")
    "echo '# not a comment' x#y"
    """
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def split_chain(text: str) -> list[str]:
    """`a && b && c` → the commands it chains; an `&&` inside quotes belongs to its word.

    >>> split_chain('ray exec c.yaml "cd x && ls" && echo done')
    ['ray exec c.yaml "cd x && ls"', 'echo done']
    """
    parts, start, quote = [], 0, None
    for i, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif text.startswith(" && ", i):
            parts.append(text[start:i].strip())
            start = i + 4
    return [*parts, text[start:].strip()]


_PLACEHOLDER = re.compile(r"<[^>]+>|\.\.\.|\b[A-Z]{2,}(/[A-Z])?\b|\bI/N\b")


def inline_commands(repo: Path) -> list[tuple[str, str]]:
    """(doc, code) for inline code in running text that is a concrete command: a program we ship or run
    (`gym-serve`, `serve run`, `python`), a path in this repository, and no placeholder (`NAME`, `<x>`, `...`)."""
    found = []
    for doc in documents(repo):
        text = re.sub(r"^\s*(`{3,}).*?^\s*\1", "", (repo / doc).read_text(), flags=re.M | re.S)  # fenced blocks out
        for code in (" ".join(span.split()) for span in re.findall(r"`([^`]+)`", text)):  # spans may wrap lines
            words = code.split()
            if not re.match(r"^(gym-serve|serve run|python3?) ", code) or _PLACEHOLDER.search(code):
                continue
            if code.startswith(("python benchmarks/", "python3 benchmarks/")):
                continue  # a measurement's recipe: benchmarks are run by hand, never by the suite (standards)
            if any((repo / word).exists() and "/" in word for word in words):
                found.append((doc, code))
    return found
