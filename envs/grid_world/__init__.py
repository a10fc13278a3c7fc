"""A Gymnasium-style grid puzzle played over turns: reach the goal, avoid walls.

Each row holds a `grid` (lines of `.` floor, `#` wall, `S` start, `G` goal)
and `max_moves`. The model answers each turn with a move (`up`, `down`,
`left`, `right`); the environment's `step` applies it and replies with the new
board (via the `user_turn` hook, so the tool-loop agent is the step agent).
`reset`/`step` follow Gymnasium's contract: `step` returns
`(observation, reward, terminated, truncated)`.

Per-step reward (in the rollout's `step_rewards`): -0.05 per move, -0.1 more
for bumping into a wall or an unreadable move, +1.0 on reaching the goal.
Final reward (from `verify`): 1.0 if the goal was reached, else 0.0.
The examples are hand-made; procedurally generated grids (or Gymnasium's
FrozenLake maps) fit the same row format.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from gym_serve import Environment, Response, Task, Turn

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


class GridTask(Task):
    grid: list[str]
    max_moves: int = 12


class Board(BaseModel):
    row: int = 0
    col: int = 0
    moves: int = 0
    reached_goal: bool = False


def find(grid: list[str], mark: str) -> tuple[int, int]:
    for r, line in enumerate(grid):
        if mark in line:
            return r, line.index(mark)
    raise ValueError(f"the grid has no `{mark}`")


def render(grid: list[str], board: Board) -> str:
    lines = [
        "".join("A" if (r, c) == (board.row, board.col) else ("." if ch == "S" else ch) for c, ch in enumerate(line))
        for r, line in enumerate(grid)
    ]
    return "\n".join(lines)


def parse_move(text: str) -> str | None:
    found = re.findall(r"\b(up|down|left|right)\b", text.lower())
    return found[-1] if found else None


class GridWorld(Environment[GridTask, Board]):
    async def reset(self, task: GridTask) -> Board:
        return self.start(task)[0]

    def start(self, task: GridTask) -> tuple[Board, str]:
        """Gymnasium's `reset` as a pure function: the start state and its observation."""
        row, col = find(task.grid, "S")
        board = Board(row=row, col=col)
        return board, render(task.grid, board)

    def step(self, task: GridTask, board: Board, action: str | None) -> tuple[str, float, bool, bool]:
        """Gymnasium's `step`: apply one move to `board` (in place)."""
        board.moves += 1
        reward = -0.05
        note = ""
        if action is None:
            reward -= 0.1
            note = "I did not understand the move; answer with up, down, left or right.\n"
        else:
            dr, dc = MOVES[action]
            r, c = board.row + dr, board.col + dc
            if 0 <= r < len(task.grid) and 0 <= c < len(task.grid[r]) and task.grid[r][c] != "#":
                board.row, board.col = r, c
            else:
                reward -= 0.1
                note = "You bumped into a wall.\n"
        terminated = task.grid[board.row][board.col] == "G"
        if terminated:
            board.reached_goal = True
            reward += 1.0
        truncated = not terminated and board.moves >= task.max_moves
        status = "You reached the goal!" if terminated else ("Out of moves." if truncated else "Your move?")
        return f"{note}{render(task.grid, board)}\n{status}", reward, terminated, truncated

    async def user_turn(self, task: GridTask, response: Response, state: Board) -> Turn:
        observation, reward, terminated, truncated = self.step(task, state, parse_move(response.output_text()))
        return Turn(message=observation, reward=reward, terminated=terminated or truncated)

    async def verify(self, task: GridTask, response: Response, state: Board) -> float:
        return 1.0 if state.reached_goal else 0.0
