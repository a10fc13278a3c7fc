"""Writes example.jsonl and the replay recordings (one right, one wrong answer per row) for `math`.

python envs/math/data/make_examples.py
"""

import asyncio

from gym_serve.envs.math import Math
from gym_serve.testing.recording import record, says

PROBLEMS = [
    (
        "What is 3/4 + 1/4 - 1/2? Put the final answer in \\boxed{}.",
        "\\frac{1}{2}",
        "3/4 + 1/4 = 1, and 1 - 1/2 = 1/2. \\boxed{\\frac{1}{2}}",
        "3/4 + 1/4 = 1, so \\boxed{1}",
    ),
    (
        "A train travels 120 km in 1.5 hours. What is its average speed in km/h?",
        "80",
        "Speed = 120 / 1.5 = 80 km/h, so \\boxed{80}.",
        "Speed = 120 * 1.5 = 180. The answer is 180.",
    ),
    (
        "Solve for x: 2x + 7 = 19. Put the final answer in \\boxed{}.",
        "6",
        "2x = 12, so x = \\boxed{6}.",
        "2x = 26, so x = \\boxed{13}.",
    ),
    (
        "What is the probability of rolling a sum of 7 with two fair dice? Answer in \\boxed{}.",
        "\\frac{1}{6}",
        "6 of 36 outcomes give 7: \\boxed{\\frac{6}{36}}",
        "There are 11 sums, so \\boxed{\\frac{1}{11}}",
    ),
    (
        "For which x is x^2 - 4 < 0? Give the interval in \\boxed{}.",
        "(-2, 2)",
        "x^2 < 4 means -2 < x < 2: \\boxed{(-2, 2)}",
        "x^2 < 4 means x < 2: \\boxed{(-\\infty, 2)}",
    ),
    (
        "How many positive divisors does 36 have?",
        "9",
        "36 = 2^2 * 3^2, so (2+1)(2+1) = 9 divisors. \\boxed{9}",
        "36 = 6 * 6, so \\boxed{2} divisors.",
    ),
]


def main() -> None:
    examples = [
        (
            {
                "responses_create_params": {"input": [{"role": "user", "content": question}]},
                "expected_answer": expected,
            },
            says(right),
            says(wrong),
        )
        for question, expected, right, wrong in PROBLEMS
    ]
    asyncio.run(record(Math, examples))


if __name__ == "__main__":
    main()
