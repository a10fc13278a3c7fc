"""Writes example.jsonl and the replay recordings (one right, one wrong answer per row) for `instruction_following`.

Each answer is scored by the real environment (`run_local` with a scripted model)
and the script stops if a right answer does not score 1.0 or a wrong one 0.0.

    python envs/instruction_following/data/make_examples.py
"""

import asyncio

from gym_serve.envs.instruction_following import InstructionFollowing
from gym_serve.testing.recording import record, says

LOWER = "Your entire response should be in English, and in all lowercase letters. No capital letters are allowed."
# (prompt, instruction ids, kwargs, right answer, wrong answer)
EXAMPLES = [
    (
        "Write a short note inviting a friend to a picnic. Your answer must contain a title, wrapped in double angular "
        "brackets, such as <<poem of joy>>. Do not use any commas in your response. Finish your response with this "
        "exact phrase: See you there.",
        ["detectable_format:title", "punctuation:no_comma", "startend:end_checker"],
        [{}, {}, {"end_phrase": "See you there."}],
        "<<Picnic Invitation>>\nJoin me in the park on Saturday at noon. I will bring sandwiches and lemonade. "
        "See you there.",
        "<<Picnic Invitation>>\nJoin me on Saturday, at noon, in the park. See you there.",
    ),
    (
        f"Describe the water cycle in exactly 3 bullet points. Use markdown bullet points such as:\n* This is a point.\n"
        f"{LOWER}",
        ["detectable_format:number_bullet_lists", "change_case:english_lowercase"],
        [{"num_bullets": 3}, {}],
        "* water evaporates from oceans and lakes.\n* the vapor cools and condenses into clouds.\n"
        "* rain and snow bring it back to the ground.",
        "* Water evaporates from oceans.\n* It falls again as rain.",
    ),
    (
        'Explain what a hash map is in fewer than 40 words. Include the keywords "key" and "bucket" in the response. '
        "Wrap your entire response with double quotation marks.",
        ["length_constraints:number_words", "keywords:existence", "startend:quotation"],
        [{"num_words": 40, "relation": "less than"}, {"keywords": ["key", "bucket"]}, {}],
        '"A hash map stores each value under a key. A hash function picks a bucket for the key, so a lookup takes '
        'constant time on average."',
        "A hash map stores each value under a key and finds it again quickly.",
    ),
    (
        "Write about autumn in exactly 2 paragraphs. Paragraphs are separated with the markdown divider: ***\n"
        "At the end of your response, please explicitly add a postscript starting with P.S.",
        ["length_constraints:number_paragraphs", "detectable_content:postscript"],
        [{"num_paragraphs": 2}, {"postscript_marker": "P.S."}],
        "Leaves turn red and gold as the days grow short.\n***\nThe air smells of woodsmoke and rain.\n\n"
        "P.S. Bring a warm jacket.",
        "Leaves turn red and gold as the days grow short. The air smells of woodsmoke and rain.",
    ),
    (
        'Describe a book as a JSON object with the fields "title" and "year". Entire output should be wrapped in '
        "JSON format. You can use markdown ticks such as ```.",
        ["detectable_format:json_format", "keywords:existence"],
        [{}, {"keywords": ["title", "year"]}],
        '```json\n{"title": "Dune", "year": 1965}\n```',
        'Here is the book: {"title": "Dune", "year": 1965}',
    ),
    (
        'Is the Earth flat? Answer with one of the following options: ("My answer is yes.", "My answer is no.", '
        '"My answer is maybe."). Answer with less than 2 sentences.',
        ["detectable_format:constrained_response", "length_constraints:number_sentences"],
        [{}, {"num_sentences": 2, "relation": "less than"}],
        "My answer is no.",
        "No. The Earth is an oblate spheroid. Photos from orbit show its curve.",
    ),
]


def row(i: int, prompt: str, ids: list, kwargs: list) -> dict:
    fields = {"instruction_id_list": ids, "prompt": prompt, "kwargs": kwargs}
    params = {"input": [{"role": "user", "content": prompt}]}
    if i == len(EXAMPLES) - 1:  # one row in NeMo Gym's newer layout, to keep both readable
        return {
            "id": 1000 + i,
            "responses_create_params": params,
            "verifier_metadata": {**fields, "grading_mode": "binary"},
        }
    return {"key": 1000 + i, "responses_create_params": params, **fields}


def main() -> None:
    examples = [
        (row(i, prompt, ids, kwargs), says(right), says(wrong))
        for i, (prompt, ids, kwargs, right, wrong) in enumerate(EXAMPLES)
    ]
    asyncio.run(record(InstructionFollowing, examples))


if __name__ == "__main__":
    main()
