"""The 29 instruction ids NeMo Gym accepts beyond IFEval's 25, each on a response that follows it and one that doesn't.

The verdicts are those of the checks in NeMo Gym's `verifiable-instructions` (read from its
source; see `verifiers/_instructions_open.py` for the three deliberate differences).
"""

from __future__ import annotations

from typing import Any

import pytest
from langdetect.detector_factory import init_factory

from gym_serve.verifiers.instruction_following import INSTRUCTIONS, make_instruction
from gym_serve.verifiers.non_answer import is_non_answer

# langdetect's ~55 language profiles, loaded at collection: loading them later is a large allocation, and the
# garbage collection it starts would report, inside this module's tests, what earlier modules left unclosed
# (Ray's event loops after a Serve test)
init_factory()

PROMPT = "Write a poem about the sea"
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    # id, kwargs, a response that follows it, one that does not
    ("copy:repeat_phrase", {"phrase": "the quick brown fox", "small_n": 2},
     "the slow brown fox and then the quick red fox", "the quick brown fox and the quick brown fox"),
    ("copy:copy", {"prompt_to_repeat": PROMPT}, f"  {PROMPT.lower()} ", f"{PROMPT}. Here it is:"),
    ("copy:copying_simple", {"prompt_to_repeat": PROMPT}, PROMPT, "The sea, the sea."),
    ("copy:copying_multiple", {"prompt_to_repeat": PROMPT, "N": 2}, f"{PROMPT}******{PROMPT}", PROMPT),
    ("new:copy_span_idx", {"prompt_to_repeat": PROMPT, "n_start": 0, "n_end": 7}, "write a", "Write a poem"),
    ("detectable_format:sentence_hyphens", {}, "I sing.-You dance.", "I sing. - You dance."),
    ("detectable_format:square_brackets", {}, "[all] [words] [wrapped]", "[all] words"),
    ("detectable_format:bigram_wrapping", {}, "<<I am>> <<at home>>", "<<I am>> at home"),
    ("paragraphs:paragraphs", {}, "one\n***\ntwo", "one\n***\n\n***\ntwo"),
    ("paragraphs:paragraphs2", {}, "one\n\ntwo", "one\n\ntwo\n\nthree"),
    ("first_word:first_word_sent", {"first_word": "Yes"}, "Yes I will. Yes you can.", "Yes I will. No."),
    ("first_word:first_word_answer", {"first_word": "sure"}, "Sure here it is.", "Sure, here it is."),
    ("last_word:last_word_sent", {"last_word": "sea"}, "I love the sea. Blue is the sea!", "The sea is blue."),
    ("last_word:last_word_answer", {"last_word": "end"}, "This is the end!", "The end is near."),
    ("keywords:no_adjacent_consecutive", {}, "apple cherry egg", "apple banana"),
    ("keywords:word_once", {"keyword": "sea"}, "The Sea is blue.", "sea and sea"),
    ("keywords:word_count_different_numbers", {"keyword": "sea", "frequency": 2, "relation": "at least"},
     "sea SEA", "one sea"),
    ("keywords:exclude_word_harder", {"keyword": "sea"}, "the ocean, sea.", "the sea is blue"),
    ("keywords:palindrome", {}, "we saw a racecar", "no such thing here"),
    ("keywords:keyword_specific_position", {"keyword": "blue", "n": 2, "m": 3},
     "The sky. It is blue today.", "The sky is blue. It is grey."),
    ("keywords:start_end", {}, "Hello world, hello", "Hello world."),
    ("punctuation:punctuation_dot", {}, "No dots here", "A dot."),
    ("punctuation:punctuation_exclamation", {}, "Calm.", "Wow!"),
    ("count:lowercase_counting", {"N": 2}, "Two Words only", "three lower words"),
    ("letters:letter_counting", {"N": 5, "relation": "less than"}, "abcd 123", "abcde"),
    ("letters:letter_counting2", {"letter": "z", "let_frequency": 2, "let_relation": "at least"}, "zZ", "z"),
    ("count:counting_composition", {"n_sent": 1, "n_words": 4},  # a final "." is a word, as in NLTK
     "I love it.\n***\nYou love it.\n***\nWe love it.", "I love it.\n***\nYou love it."),
    ("count:count_unique", {}, "Every word here is unique", "the cat and the dog"),
    ("count:count_increment_word", {"keyword1": "sun", "keyword2": "sea"}, "sun, sea and sea", "sun sun sea sea"),
    ("language:response_language", {"language": "en"}, "The weather is lovely today and I am going out.",
     "El tiempo es muy bueno hoy y voy a salir a la calle."),
]  # fmt: skip


def test_every_id_nemo_gym_accepts_is_known() -> None:
    assert len(INSTRUCTIONS) == 54 and {case[0] for case in CASES} <= set(INSTRUCTIONS)
    assert len(CASES) == 30  # the 29 IFTrain ids and `language:response_language`


@pytest.mark.parametrize(("instruction_id", "kwargs", "follows", "breaks"), CASES, ids=[c[0] for c in CASES])
def test_each_instruction_on_a_following_and_a_breaking_response(
    instruction_id: str, kwargs: dict[str, Any], follows: str, breaks: str
) -> None:
    instruction = make_instruction(instruction_id, kwargs)
    assert instruction.check(follows) is True
    assert instruction.check(breaks) is False


def test_a_zero_kwarg_means_zero_and_a_language_verdict_is_stable() -> None:
    span = make_instruction("new:copy_span_idx", {"prompt_to_repeat": "abcdef", "n_start": 0, "n_end": 3})
    assert span.check("ABC") and not span.check("bcd")
    language = make_instruction("language:response_language", {"language": "en"})
    assert len({language.check("ok then") for _ in range(20)}) == 1, "seeded: one text, one verdict"


def test_non_answers_would_have_followed_some_instructions() -> None:
    """Why the environment refuses non-answers first: "i don't know" follows these by accident."""
    short = make_instruction("length_constraints:number_words", {"num_words": 50, "relation": "less than"})
    assert short.check("i don't know") and is_non_answer("i don't know")
