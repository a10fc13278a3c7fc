"""Verifiable instructions in the IFEval style, keyed by IFEval's instruction ids.

A row of IFEval (google/IFEval) or of NeMo Gym's `instruction_following` data lists
`instruction_id_list` and, position by position, `kwargs` (one object per
instruction; `null` values are dropped, because the Hugging Face copy pads every
object with every key). Each id maps to a small pydantic model whose fields are that
instruction's kwargs, validated when it is made (`make_instruction`), and whose
`check(text)` says whether a response follows it. The checks keep the semantics of
IFEval's `instructions.py` (Zhou et al., 2023), rewritten without nltk or langdetect
so nothing is downloaded at run time:

- words are runs of letters, digits and `_` (IFEval's `RegexpTokenizer(r"\\w+")`);
- sentences come from `split_sentences`, a small rule-based splitter, not nltk's punkt;
- `change_case:english_capital/lowercase` check the case only (IFEval also asks
  langdetect whether the text is English, and langdetect calls all-capital English
  German or Dutch: `THIS IS AN ENGLISH SENTENCE` is `de`);
- keywords, forbidden words and section splitters are matched literally (IFEval
  passes them to `re` unescaped, so `c++` would be a regex there).

Scoring (`check_instructions`) is IFEval's. *Strict* checks the response as it is.
*Loose* passes an instruction when any of eight variants passes: the response; it with
its first line, its last line, or both removed; and each of those with every `*`
removed (so a markdown wrapper or a "Sure, here it is:" line does not fail it). An
empty response follows nothing. This module is long because it holds the whole
registry: one short class per instruction, each read on its own.

The registry holds all 54 ids NeMo Gym's `instruction_following` server accepts: IFEval's
25 here, and open-instruct's IFTrain set (`copy:*`, `count:*`, `first_word:*`, `letters:*`,
`paragraphs:*`, ...) plus `language:response_language` in `_instructions_open`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "INSTRUCTIONS",
    "FollowResult",
    "Instruction",
    "InstructionError",
    "InstructionResult",
    "check_instructions",
    "loose_variants",
    "make_instruction",
    "make_instructions",
    "split_sentences",
    "verify_instructions",
]

Relation = Literal["less than", "at least"]
"""IFEval's comparison relations: `count < N` and `count >= N`."""
Count = Annotated[int, Field(ge=0)]
Text = Annotated[str, Field(min_length=1)]

_WORD = re.compile(r"\w+")


class InstructionError(ValueError):
    """Raised when an instruction id is unknown or its kwargs do not fit it.

    The message names the instruction's position in the row (when known), its id
    and the offending kwarg; the same values stay available as attributes.
    """

    def __init__(
        self, instruction_id: str, problem: str, *, field: str | None = None, index: int | None = None
    ) -> None:
        self.instruction_id, self.problem, self.field, self.index = instruction_id, problem, field, index
        where = f"instruction {index} " if index is not None else "instruction "
        kwarg = f", kwarg `{field}`" if field else ""
        super().__init__(f"{where}`{instruction_id}`{kwarg}: {problem}")


class Instruction(BaseModel):
    """One verifiable instruction. Fields are its IFEval kwargs; `check` reads a response."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    instruction_id: ClassVar[str]

    def check(self, response: str) -> bool:
        raise NotImplementedError


INSTRUCTIONS: dict[str, type[Instruction]] = {}
"""Instruction id → its class."""


def _register(instruction_id: str) -> Callable[[type[Instruction]], type[Instruction]]:
    def decorate(cls: type[Instruction]) -> type[Instruction]:
        cls.instruction_id = instruction_id
        INSTRUCTIONS[instruction_id] = cls
        return cls

    return decorate


def _compare(count: int, relation: Relation, threshold: int) -> bool:
    return count < threshold if relation == "less than" else count >= threshold


_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e inc ltd co no fig approx dept est jan feb mar apr jun jul aug sep "
    "sept oct nov dec".split()
)
_SENTENCE_END = re.compile(r"(?<![.!?])[.!?]++['\"’”)\]]*+(?=\s|$)")  # possessive: linear on "!!!!..."


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`, by simple rules (no model, no download).

    A blank line always ends a sentence. Within a block, a sentence ends at a run of
    `.`, `!` or `?` (closing quotes or brackets may follow) that is followed by
    whitespace or the end — except a single `.` after a known abbreviation (`Mr.`,
    `e.g.`, `etc.` ...) or a one-letter initial (`J. K.`). Text after the last end
    mark is a sentence too. Decimals (`3.5`) never split: no whitespace follows.
    """
    sentences: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        start = 0
        for match in _SENTENCE_END.finditer(block):
            token_start = match.start()
            while token_start > start and not block[token_start - 1].isspace():  # only the last word: linear
                token_start -= 1
            last = block[token_start : match.start()].lower()
            single_dot = match.group().rstrip("'\"’”)]") == "."
            if single_dot and (last in _ABBREVIATIONS or re.fullmatch(r"[a-z]|(?:[a-z]\.)+[a-z]", last)):
                continue
            if block[start : match.end()].strip():
                sentences.append(block[start : match.end()].strip())
            start = match.end()
        if block[start:].strip():
            sentences.append(block[start:].strip())
    return sentences


# ---- keywords ----------------------------------------------------------------------------------------------


@_register("keywords:existence")
class KeywordsExistence(Instruction):
    """Include every keyword (case-insensitive, anywhere)."""

    keywords: list[Text] = Field(min_length=1)

    def check(self, response: str) -> bool:
        return all(re.search(re.escape(k), response, re.I) for k in self.keywords)


@_register("keywords:forbidden_words")
class ForbiddenWords(Instruction):
    """Do not use any of these words (whole words, case-insensitive)."""

    forbidden_words: list[Text] = Field(min_length=1)

    def check(self, response: str) -> bool:
        return not any(re.search(rf"\b{re.escape(w)}\b", response, re.I) for w in self.forbidden_words)


@_register("keywords:frequency")
class KeywordFrequency(Instruction):
    """The keyword appears less than / at least `frequency` times (case-insensitive occurrences)."""

    keyword: Text
    frequency: Count
    relation: Relation

    def check(self, response: str) -> bool:
        return _compare(len(re.findall(re.escape(self.keyword), response, re.I)), self.relation, self.frequency)


@_register("keywords:letter_frequency")
class LetterFrequency(Instruction):
    """The letter appears less than / at least `let_frequency` times (either case)."""

    letter: Annotated[str, Field(pattern=r"^[A-Za-z]$")]
    let_frequency: Count
    let_relation: Relation

    def check(self, response: str) -> bool:
        return _compare(response.lower().count(self.letter.lower()), self.let_relation, self.let_frequency)


# ---- length constraints ------------------------------------------------------------------------------------


@_register("length_constraints:number_words")
class NumberWords(Instruction):
    """Answer with less than / at least `num_words` words."""

    num_words: Count
    relation: Relation

    def check(self, response: str) -> bool:
        return _compare(len(_WORD.findall(response)), self.relation, self.num_words)


@_register("length_constraints:number_sentences")
class NumberSentences(Instruction):
    """Answer with less than / at least `num_sentences` sentences (`split_sentences`)."""

    num_sentences: Count
    relation: Relation

    def check(self, response: str) -> bool:
        return _compare(len(split_sentences(response)), self.relation, self.num_sentences)


def _divider_paragraphs(response: str) -> list[str] | None:
    """Paragraphs separated by the markdown divider `***`; None if one in the middle is empty."""
    parts = re.split(r"\s?\*\*\*\s?", response)
    kept = []
    for i, part in enumerate(parts):
        if part.strip():
            kept.append(part)
        elif 0 < i < len(parts) - 1:
            return None
    return kept


@_register("length_constraints:number_paragraphs")
class NumberParagraphs(Instruction):
    """Exactly `num_paragraphs` paragraphs, separated by the markdown divider `***`."""

    num_paragraphs: Annotated[int, Field(ge=1)]

    def check(self, response: str) -> bool:
        paragraphs = _divider_paragraphs(response)
        return paragraphs is not None and len(paragraphs) == self.num_paragraphs


@_register("length_constraints:nth_paragraph_first_word")
class NthParagraphFirstWord(Instruction):
    """Exactly `num_paragraphs` paragraphs (blank-line separated); paragraph `nth_paragraph` starts with
    `first_word`."""

    num_paragraphs: Annotated[int, Field(ge=1)]
    nth_paragraph: Annotated[int, Field(ge=1)]
    first_word: Text

    def check(self, response: str) -> bool:
        paragraphs = re.split(r"\n\n", response)
        count = sum(1 for p in paragraphs if p.strip())
        if self.nth_paragraph > count or not paragraphs[self.nth_paragraph - 1].strip():
            return False
        word = paragraphs[self.nth_paragraph - 1].split()[0].lstrip("'\"")
        first = re.split(r"[.,?!'\"]", word, maxsplit=1)[0].lower()  # IFEval: the letters up to the first punctuation
        return count == self.num_paragraphs and first == self.first_word.strip().lower()


# ---- detectable content and format -------------------------------------------------------------------------


@_register("detectable_content:number_placeholders")
class NumberPlaceholders(Instruction):
    """At least `num_placeholders` placeholders in square brackets, like `[address]`."""

    num_placeholders: Count

    def check(self, response: str) -> bool:
        return _count_placeholders(response) >= self.num_placeholders


def _count_placeholders(text: str) -> int:
    """What `len(re.findall(r"\\[.*?\\]", text))` counts (IFEval), in linear time.

    A line of `[[[[` is quadratic there.
    """
    count = 0
    for line in text.split("\n"):
        pos = line.find("[")
        while pos >= 0:
            close = line.find("]", pos + 1)
            if close < 0:
                break
            count += 1
            pos = line.find("[", close + 1)
    return count


@_register("detectable_content:postscript")
class Postscript(Instruction):
    """End with a postscript starting with `postscript_marker` (`P.S.`, `P.P.S` or another marker)."""

    postscript_marker: Text

    def check(self, response: str) -> bool:
        # IFEval's patterns, less their leading `\s*` and trailing `.*$`: the same yes/no, with no
        # quadratic backtracking on long runs of whitespace.
        if self.postscript_marker == "P.P.S":
            pattern = r"p\.\s?p\.\s?s"
        elif self.postscript_marker == "P.S.":
            pattern = r"p\.\s?s\."
        else:
            pattern = re.escape(self.postscript_marker.lower())
        return re.search(pattern, response.lower()) is not None


@_register("detectable_format:number_bullet_lists")
class NumberBulletLists(Instruction):
    """Exactly `num_bullets` markdown bullet points (lines starting with `* ` or `-`)."""

    num_bullets: Count

    def check(self, response: str) -> bool:
        # IFEval's `^\s*\*[^\*].*$` and `^\s*-.*$`, with the indentation read within the line (`[^\S\n]*`): as many
        # matches, but `\s*` crosses newlines, which is quadratic on a run of blank lines (minutes for 100,000)
        stars = re.findall(r"^[^\S\n]*\*[^\*].*$", response, flags=re.M)
        dashes = re.findall(r"^[^\S\n]*-.*$", response, flags=re.M)
        return len(stars) + len(dashes) == self.num_bullets


@_register("detectable_format:constrained_response")
class ConstrainedResponse(Instruction):
    """Answer with one of IFEval's fixed phrases: "My answer is yes/no/maybe."."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("My answer is yes.", "My answer is no.", "My answer is maybe.")

    def check(self, response: str) -> bool:
        return any(option in response.strip() for option in self.OPTIONS)


@_register("detectable_format:number_highlighted_sections")
class NumberHighlightedSections(Instruction):
    """At least `num_highlights` markdown-highlighted sections (`*text*` or `**text**`)."""

    num_highlights: Count

    def check(self, response: str) -> bool:
        single = [h for h in re.findall(r"\*[^\n\*]*\*", response) if h.strip("*").strip()]
        double = [h for h in re.findall(r"\*\*[^\n\*]*\*\*", response) if h[2:-2].strip()]
        return len(single) + len(double) >= self.num_highlights


@_register("detectable_format:multiple_sections")
class MultipleSections(Instruction):
    """At least `num_sections` sections, each starting with `section_spliter` and a number (`SECTION 1`)."""

    section_spliter: Text  # IFEval's spelling
    num_sections: Count

    def check(self, response: str) -> bool:
        sections = re.split(r"\s?" + re.escape(self.section_spliter) + r"\s?\d+\s?", response)
        return len(sections) - 1 >= self.num_sections


@_register("detectable_format:json_format")
class JsonFormat(Instruction):
    """The whole response is JSON (a ```json fence around it is allowed)."""

    def check(self, response: str) -> bool:
        text = response.strip()
        for fence in ("```json", "```Json", "```JSON", "```"):
            text = text.removeprefix(fence)
        try:
            json.loads(text.removesuffix("```").strip())
        except (ValueError, RecursionError):  # RecursionError: `[[[[...` nested past Python's stack
            return False
        return True


@_register("detectable_format:title")
class Title(Instruction):
    """Contains a title in double angular brackets, like `<<poem of joy>>`."""

    def check(self, response: str) -> bool:
        # IFEval: any of `re.findall(r"<<[^\n]+>>", text)` has text inside. That regex is quadratic on a line of
        # `<<<<`; per line its only candidate is first `<<` .. last `>>`, which this checks in linear time.
        for line in response.split("\n"):
            start, end = line.find("<<"), line.rfind(">>")
            if start >= 0 and end >= start + 3 and line[start : end + 2].lstrip("<").rstrip(">").strip():
                return True
        return False


# ---- combinations, start/end, case, punctuation -------------------------------------------------------------


@_register("combination:two_responses")
class TwoResponses(Instruction):
    """Two different responses separated by six asterisks `******`."""

    def check(self, response: str) -> bool:
        parts = response.split("******")
        kept = []
        for i, part in enumerate(parts):
            if part.strip():
                kept.append(part.strip())
            elif 0 < i < len(parts) - 1:
                return False
        return len(kept) == 2 and kept[0] != kept[1]


@_register("combination:repeat_prompt")
class RepeatPrompt(Instruction):
    """Start by repeating the request word for word (case-insensitive), then answer."""

    prompt_to_repeat: Text

    def check(self, response: str) -> bool:
        return response.strip().lower().startswith(self.prompt_to_repeat.strip().lower())


@_register("startend:end_checker")
class EndChecker(Instruction):
    """End with exactly `end_phrase` (case-insensitive; a closing quote may follow)."""

    end_phrase: Text

    def check(self, response: str) -> bool:
        return response.strip().strip('"').lower().endswith(self.end_phrase.strip().lower())


@_register("startend:quotation")
class Quotation(Instruction):
    """Wrap the whole response in double quotes."""

    def check(self, response: str) -> bool:
        text = response.strip()
        return len(text) > 1 and text[0] == '"' and text[-1] == '"'


@_register("change_case:capital_word_frequency")
class CapitalWordFrequency(Instruction):
    """Words in all capitals appear less than / at least `capital_frequency` times."""

    capital_frequency: Count
    capital_relation: Relation

    def check(self, response: str) -> bool:
        capitals = [w for w in _WORD.findall(response) if w.isupper()]
        return _compare(len(capitals), self.capital_relation, self.capital_frequency)


@_register("change_case:english_capital")
class AllCapitals(Instruction):
    """The whole response in capital letters (case only; no language detection)."""

    def check(self, response: str) -> bool:
        return response.isupper()


@_register("change_case:english_lowercase")
class AllLowercase(Instruction):
    """The whole response in lowercase letters (case only; no language detection)."""

    def check(self, response: str) -> bool:
        return response.islower()


@_register("punctuation:no_comma")
class NoComma(Instruction):
    """No commas at all."""

    def check(self, response: str) -> bool:
        return "," not in response


# ---- building and scoring ----------------------------------------------------------------------------------


def make_instruction(
    instruction_id: str, kwargs: Mapping[str, Any] | None = None, *, index: int | None = None
) -> Instruction:
    """The instruction `instruction_id` with its kwargs validated (`None` values are dropped)."""
    cls = INSTRUCTIONS.get(instruction_id)
    if cls is None:
        close = difflib.get_close_matches(str(instruction_id), INSTRUCTIONS, n=1)
        hint = f"did you mean `{close[0]}`?" if close else f"known ids: {', '.join(sorted(INSTRUCTIONS))}"
        raise InstructionError(str(instruction_id), f"unknown instruction id; {hint}", index=index)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InstructionError(instruction_id, f"kwargs must be an object, got {type(kwargs).__name__}", index=index)
    given = {key: value for key, value in (kwargs or {}).items() if value is not None}
    try:
        return cls.model_validate(given)
    except ValidationError as e:
        error = e.errors()[0]
        takes = ", ".join(f"`{name}`" for name in cls.model_fields) or "no kwargs"
        if error["type"] == "missing":
            problem = f"required; this instruction takes {takes}"
        elif error["type"] == "extra_forbidden":
            problem = f"unexpected kwarg (got {error['input']!r}); this instruction takes {takes}"
        else:
            problem = f"{error['msg']} (got {error['input']!r})"
        field = ".".join(str(part) for part in error["loc"]) or None
        raise InstructionError(instruction_id, problem, field=field, index=index) from e


def make_instructions(instruction_ids: Sequence[str], kwargs: Sequence[Mapping[str, Any] | None]) -> list[Instruction]:
    """The row's instructions, paired by position with their kwargs; at least one."""
    if not instruction_ids:
        raise ValueError("`instruction_id_list` is empty: a row needs at least one instruction")
    if len(instruction_ids) != len(kwargs):
        raise ValueError(
            f"`instruction_id_list` has {len(instruction_ids)} ids but `kwargs` has {len(kwargs)} "
            "entries; they pair up by position (use {} or null for an instruction without kwargs)"
        )
    return [make_instruction(i, k, index=n) for n, (i, k) in enumerate(zip(instruction_ids, kwargs, strict=True))]


def loose_variants(response: str) -> list[str]:
    """IFEval's eight loose variants: as is, without first/last/both lines, each also with `*` removed."""
    lines = response.split("\n")
    cut = [response, "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return [*cut, *(text.replace("*", "") for text in cut)]


@dataclass(frozen=True)
class InstructionResult:
    """Whether one instruction was followed, strictly and loosely."""

    instruction_id: str
    strict: bool
    loose: bool


@dataclass(frozen=True)
class FollowResult:
    """Per-instruction results of one response and IFEval's prompt- and instruction-level scores."""

    instructions: tuple[InstructionResult, ...]

    @property
    def prompt_level_strict(self) -> bool:
        return all(r.strict for r in self.instructions)

    @property
    def prompt_level_loose(self) -> bool:
        return all(r.loose for r in self.instructions)

    @property
    def instruction_level_strict(self) -> float:
        return sum(r.strict for r in self.instructions) / len(self.instructions)

    @property
    def instruction_level_loose(self) -> float:
        return sum(r.loose for r in self.instructions) / len(self.instructions)


def check_instructions(response: str, instructions: Sequence[Instruction]) -> FollowResult:
    """Check `response` against each instruction, strictly and loosely (see the module docstring)."""
    if not instructions:
        raise ValueError("no instructions to check")
    variants = [v for v in loose_variants(response) if v.strip()]
    results = []
    for instruction in instructions:
        strict = bool(response.strip()) and instruction.check(response)
        loose = strict or any(instruction.check(v) for v in variants)
        results.append(InstructionResult(instruction.instruction_id, strict, loose))
    return FollowResult(tuple(results))


def verify_instructions(
    response: str, instruction_ids: Sequence[str], kwargs: Sequence[Mapping[str, Any] | None]
) -> FollowResult:
    """`check_instructions` on a row's `instruction_id_list` and `kwargs`."""
    return check_instructions(response, make_instructions(instruction_ids, kwargs))


from . import _instructions_open  # noqa: E402,F401  (registers NeMo Gym's ids beyond IFEval's)
