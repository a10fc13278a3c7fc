"""Math answers: extract the final answer, decide equivalence with `math-verify`, never stall the caller.

Extraction, in order: the last `\\boxed{...}` (nested braces allowed), then
"the answer is X", then the last number in the text. Equivalence is
math-verify's (fractions, LaTeX, numbers, intervals, sets). Parsing an
adversarial expression can take unbounded time, so it runs in a worker
process with a deadline; a worker that overruns is killed and replaced, and
the answer scores 0 with `timed_out` set.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

__all__ = ["MathResult", "extract_answer", "is_equivalent", "verify_math"]

_ANSWER_IS = re.compile(r"answer\s*(?:is|:)\s*\$?([^\n$]+?)\$?\s*(?:\.|$)", re.I | re.M)
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")


@dataclass(frozen=True)
class MathResult:
    reward: float
    extracted_answer: str | None
    timed_out: bool = False


def extract_answer(text: str) -> str | None:
    """The final answer in a model's text, or None."""
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    said = _ANSWER_IS.findall(text)
    if said:
        return said[-1].strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed{") - 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def is_equivalent(expected: str, answer: str) -> bool:
    """math-verify's judgement (runs in the calling process: use `verify_math` from servers)."""
    from math_verify import parse, verify

    gold = parse(f"${expected}$")
    guess = parse(f"${answer}$")
    return bool(gold) and bool(guess) and bool(verify(gold, guess))


class _Workers:
    """A process pool that is thrown away and rebuilt when a call overruns its deadline.

    Workers come from a fork server, never from forking the caller: a Serve
    replica (or any process that has started Ray) runs gRPC threads, and a
    child forked from it can die on their locks. The server preloads
    `math_verify` (so a replacement worker starts fast) and not the caller's
    `__main__`, which multiprocessing would otherwise re-import there.
    """

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    def pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["math_verify"])
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=context)
        return self._pool

    def reset(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.kill()
            pool.shutdown(wait=False, cancel_futures=True)


_workers = _Workers()


async def verify_math(text: str, expected: str, *, timeout_s: float = 5.0) -> MathResult:
    """Reward 1.0 when the final answer in `text` equals `expected` (math-verify), else 0.0."""
    answer = extract_answer(text)
    if answer is None:
        return MathResult(0.0, None)
    loop = asyncio.get_running_loop()
    try:
        same = await asyncio.wait_for(
            loop.run_in_executor(_workers.pool(), is_equivalent, expected, answer), timeout_s
        )
    except TimeoutError:
        _workers.reset()
        return MathResult(0.0, answer, timed_out=True)
    return MathResult(1.0 if same else 0.0, answer)
