"""IFEval-style instructions: each one followed and broken, relations, strict vs loose, and bad rows."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gym_serve.verifiers.instruction_following import (
    INSTRUCTIONS,
    InstructionError,
    check_instructions,
    loose_variants,
    make_instruction,
    split_sentences,
    verify_instructions,
)

LESS, AT_LEAST = "less than", "at least"

# (instruction id, kwargs, a response that follows it, a response that does not)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("keywords:existence", {"keywords": ["Ray", "serve"]}, "ray SERVE scales.", "Ray scales."),
    ("keywords:forbidden_words", {"forbidden_words": ["cat"]}, "A category of dogs.", "My Cat sleeps."),
    ("keywords:frequency", {"keyword": "gym", "frequency": 2, "relation": AT_LEAST}, "Gym, gym.", "One gym."),
    ("keywords:frequency", {"keyword": "gym", "frequency": 2, "relation": LESS}, "One gym.", "Gym, gym."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 2, "let_relation": AT_LEAST}, "Zig zag", "Zag"),
    ("keywords:letter_frequency", {"letter": "Z", "let_frequency": 2, "let_relation": LESS}, "Zag", "Zig zag"),
    (
        "length_constraints:number_words",
        {"num_words": 4, "relation": LESS},
        "Three short words.",
        "Four words right here.",
    ),
    (
        "length_constraints:number_words",
        {"num_words": 4, "relation": AT_LEAST},
        "Four words right here.",
        "Three short words.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": AT_LEAST},
        "Mr. Smith came. He sat! Why?",
        "Mr. Smith came. He sat.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 2, "relation": LESS},
        "Dr. Who left at 3.30 today.",
        "One. Two.",
    ),
    (
        "length_constraints:number_paragraphs",
        {"num_paragraphs": 2},
        "First part.\n***\nSecond part.",
        "First part.\n***\n***\nSecond part.",
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "Then"},
        'First.\n\n"Then, later.',
        "First.\n\nNow then.",
    ),
    (
        "detectable_content:number_placeholders",
        {"num_placeholders": 2},
        "Send [name] to [address].",
        "Send [name] over.",
    ),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi.\n\nP.S. bring cake", "Hi. PS bring cake"),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\nP.P.S. more", "Hi.\nP.S. more"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n- two", "* one\n* two\n* three"),
    ("detectable_format:constrained_response", {}, "My answer is maybe.", "Maybe."),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and **two**", "*one* and ** **"),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "SECTION", "num_sections": 2},
        "SECTION 1\nintro\nSECTION 2\nbody",
        "SECTION 1\nonly one",
    ),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}\n```', '{"a": 1,}'),
    ("detectable_format:title", {}, "<<Poem of Joy>>\nLines", "<< >> no title"),
    ("combination:two_responses", {}, "Yes.\n******\nNo.", "Yes.\n******\nYes."),
    (
        "combination:repeat_prompt",
        {"prompt_to_repeat": "Write a haiku."},
        "write a haiku. Leaves fall...",
        "Leaves fall. Write a haiku.",
    ),
    (
        "startend:end_checker",
        {"end_phrase": "Any other questions?"},
        'Done. any other questions?"',
        "Any other questions? Bye.",
    ),
    ("startend:quotation", {}, '"Quoted answer."', 'Quoted "answer".'),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": AT_LEAST},
        "USE CAPS sometimes",
        "Use CAPS rarely",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": LESS},
        "Use CAPS rarely",
        "USE CAPS a lot",
    ),
    ("change_case:english_capital", {}, "ALL CAPS, 100%!", "ALL CAPS but one"),
    ("change_case:english_lowercase", {}, "all lower, 100%!", "all lower but One"),
    ("punctuation:no_comma", {}, "No commas here.", "One, two."),
]


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "follows", "breaks"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_each_instruction_is_followed_and_broken(
    instruction_id: str, kwargs: dict[str, Any], follows: str, breaks: str
) -> None:
    instruction = make_instruction(instruction_id, kwargs)
    assert instruction.check(follows) is True
    assert instruction.check(breaks) is False


def test_every_ifeval_instruction_has_a_case() -> None:
    from gym_serve.verifiers._instructions_open import Instruction  # noqa: F401  (the rest: test_instructions_open)
    from tests.verifiers.test_instructions_open import CASES as OPEN_CASES

    assert {case[0] for case in CASES} | {case[0] for case in OPEN_CASES} == set(INSTRUCTIONS)
    assert len(INSTRUCTIONS) == 54


@pytest.mark.parametrize(
    ("count", "relation", "threshold", "follows"),
    [
        (3, LESS, 4, True),
        (4, LESS, 4, False),
        (4, AT_LEAST, 4, True),
        (3, AT_LEAST, 4, False),
    ],
)
def test_relations_at_their_boundary(count: int, relation: str, threshold: int, follows: bool) -> None:
    words = make_instruction("length_constraints:number_words", {"num_words": threshold, "relation": relation})
    assert words.check(" ".join(["word"] * count)) is follows


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("One. Two! Three?", ["One.", "Two!", "Three?"]),
        (
            "Mr. Smith met Dr. Jones, e.g. at noon. Then left.",
            ["Mr. Smith met Dr. Jones, e.g. at noon.", "Then left."],
        ),
        (
            "J. K. Rowling wrote it. Pi is 3.14 and e is 2.72.",
            ["J. K. Rowling wrote it.", "Pi is 3.14 and e is 2.72."],
        ),
        ('He said "stop." She did...  Fine', ['He said "stop."', "She did...", "Fine"]),
        ("A heading\n\nThe body has no end mark", ["A heading", "The body has no end mark"]),
        ("", []),
    ],
)
def test_split_sentences(text: str, sentences: list[str]) -> None:
    assert split_sentences(text) == sentences


def test_loose_scoring_forgives_a_wrapper_line_and_markdown_but_strict_does_not() -> None:
    row = (
        ["startend:end_checker", "change_case:english_lowercase", "detectable_format:json_format"],
        [{"end_phrase": "is that all?"}, None, None],
    )
    lowercase_with_preamble = 'Sure! Here it is:\n"... is that all?"'
    result = verify_instructions(lowercase_with_preamble, row[0][:2], row[1][:2])
    assert [(r.strict, r.loose) for r in result.instructions] == [(True, True), (False, True)]
    assert (result.prompt_level_strict, result.prompt_level_loose) == (False, True)
    assert (result.instruction_level_strict, result.instruction_level_loose) == (0.5, 1.0)

    bold_json = verify_instructions('**{"a": 1}**', row[0][2:], row[1][2:])
    assert (bold_json.prompt_level_strict, bold_json.prompt_level_loose) == (False, True), "`*` removed"
    never = verify_instructions("Nope,\nstill, NOT\nlowercase", row[0][1:2], row[1][1:2])
    assert (never.prompt_level_strict, never.prompt_level_loose) == (False, False)


def test_loose_variants_are_ifevals_eight() -> None:
    variants = loose_variants("intro\n*body*\noutro")
    assert variants == [
        "intro\n*body*\noutro",
        "*body*\noutro",
        "intro\n*body*",
        "*body*",
        "intro\nbody\noutro",
        "body\noutro",
        "intro\nbody",
        "body",
    ]


def test_an_empty_response_follows_nothing_even_forbidding_instructions() -> None:
    result = verify_instructions(
        "  \n", ["punctuation:no_comma", "keywords:forbidden_words"], [{}, {"forbidden_words": ["x"]}]
    )
    assert [(r.strict, r.loose) for r in result.instructions] == [(False, False), (False, False)]
    assert result.instruction_level_loose == 0.0


def test_null_kwargs_are_dropped_as_in_the_hugging_face_copy() -> None:
    padded = {"num_words": 5, "relation": "at least", "keywords": None, "end_phrase": None}
    assert make_instruction("length_constraints:number_words", padded).check("one two three four five")
    assert make_instruction("punctuation:no_comma", None).check("fine")


def test_unknown_id_names_it_and_suggests_the_closest() -> None:
    with pytest.raises(InstructionError, match=r"`keywords:existance`.*did you mean `keywords:existence`") as info:
        make_instruction("keywords:existance", {})
    assert info.value.instruction_id == "keywords:existance"
    with pytest.raises(InstructionError, match="`paragraphs:paragraphz`: unknown instruction id; did you mean"):
        make_instruction("paragraphs:paragraphz", {})


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "field", "says"),
    [
        ("length_constraints:number_words", {"num_words": 5}, "relation", "required"),
        ("length_constraints:number_words", {"num_words": 5, "relation": "more than"}, "relation", "'at least'"),
        ("length_constraints:number_words", {"num_words": -1, "relation": "less than"}, "num_words", "greater than"),
        ("keywords:letter_frequency", {"letter": "ab", "let_frequency": 1, "let_relation": LESS}, "letter", "pattern"),
        ("punctuation:no_comma", {"comma": False}, "comma", "unexpected kwarg"),
        ("keywords:existence", {"keywords": []}, "keywords", "at least 1"),
    ],
)
def test_bad_kwargs_name_the_instruction_and_the_field(
    instruction_id: str, kwargs: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(InstructionError) as info:
        make_instruction(instruction_id, kwargs, index=1)
    message = str(info.value)
    assert f"instruction 1 `{instruction_id}`, kwarg `{field}`" in message and says in message
    assert info.value.field == field


def test_row_shape_errors() -> None:
    with pytest.raises(ValueError, match="2 ids but `kwargs` has 1"):
        verify_instructions("x", ["punctuation:no_comma", "startend:quotation"], [{}])
    with pytest.raises(ValueError, match="empty"):
        verify_instructions("x", [], [])
    with pytest.raises(InstructionError, match="kwargs must be an object"):
        make_instruction("punctuation:no_comma", ["not", "a", "dict"])  # type: ignore[arg-type]


def test_prompt_level_needs_every_instruction() -> None:
    instructions = [make_instruction("punctuation:no_comma"), make_instruction("startend:quotation")]
    half = check_instructions("no comma and no quotes", instructions)
    assert (half.prompt_level_strict, half.instruction_level_strict) == (False, 0.5)
    both = check_instructions('"no comma here"', instructions)
    assert (both.prompt_level_strict, both.instruction_level_strict) == (True, 1.0)


def test_hostile_responses_are_checked_in_linear_time() -> None:
    """Long runs that make naive regexes backtrack quadratically (IFEval's placeholder, title, postscript ones)."""
    hostile = [
        "[" * 100_000,
        "<<" * 50_000,
        " " * 100_000,
        "." * 100_000 + "x",
        "A. " * 30_000,
        "{" * 100_000,
        "*a" * 50_000,
        "P." * 50_000,
        "\n" * 100_000,  # IFEval's bullet regexes' `^\s*`: minutes, times the eight loose variants
        " \n" * 50_000,
    ]
    instructions = [make_instruction(i, k) for i, k, _, _ in CASES]
    started = time.monotonic()
    for text in hostile:
        check_instructions(text, instructions)
    assert time.monotonic() - started < 10
