"""Writes example.jsonl and the replay recordings (one right, one wrong answer per row) for `multiple_choice`.

python envs/multiple_choice/data/make_examples.py
"""

import asyncio

from gym_serve.envs.multiple_choice import MultipleChoice
from gym_serve.testing.recording import record, says

QUESTIONS = [
    (
        "Which technique detects a specific protein in a sample?",
        ["Karyotyping", "Western blot", "PCR", "Chromatography"],
        "B",
        "\\boxed{C}",
    ),
    ("Which planet is closest to the Sun?", ["Venus", "Earth", "Mercury", "Mars"], "C", "\\boxed{A}"),
    (
        "What is the time complexity of binary search?",
        ["O(n)", "O(log n)", "O(n log n)", "O(1)"],
        "B",
        "It is either \\boxed{B} or \\boxed{A}.",
    ),
    (
        "Which gas do plants absorb for photosynthesis?",
        ["Oxygen", "Nitrogen", "Carbon dioxide", "Helium"],
        "C",
        "Answer: A",
    ),
    (
        "Who wrote 'Pride and Prejudice'?",
        ["Charlotte Bronte", "Jane Austen", "Mary Shelley", "George Eliot"],
        "B",
        "\\boxed{D}",
    ),
    ("What is 2^10?", ["1000", "1024", "2048", "512"], "B", "Answer: C"),
]


def main() -> None:
    letters = "ABCD"
    examples = []
    for question, options, expected, wrong in QUESTIONS:
        listing = "\n".join(f"{letters[i]}) {option}" for i, option in enumerate(options))
        prompt = f"{question}\n{listing}\nThink, then give your final answer as \\boxed{{LETTER}}."
        row = {
            "responses_create_params": {"input": [{"role": "user", "content": prompt}]},
            "options": [{letters[i]: option} for i, option in enumerate(options)],
            "expected_answer": expected,
            "grading_mode": "strict_single_letter_boxed",
        }
        right = f"Going through the options, the answer is \\boxed{{{expected}}}."
        examples.append((row, says(right), says(wrong)))
    asyncio.run(record(MultipleChoice, examples))


if __name__ == "__main__":
    main()
