"""The instructions NeMo Gym accepts beyond IFEval's 25: open-instruct's IFTrain set and `language:response_language`.

NeMo Gym's `instruction_following` server scores these with the `verifiable-instructions`
package (GitHub only; it needs NLTK's `punkt` data, a download this project cannot depend on).
Each class here is a rewrite of that package's check, keeping its semantics, quirks included
(they are what NeMo Gym's rewards mean), with these differences, each because the original is
non-deterministic or depends on data we cannot ship:

- its "word tokenizer" is NLTK's `word_tokenize` (punkt sentences, then the Treebank tokenizer);
  here `word_tokens` uses NLTK's Treebank tokenizer on sentences from NLTK's *untrained* punkt
  tokenizer (no data file), which splits ordinary prose the same way and may differ after
  abbreviations the trained model knows (`Dr. Smith`);
- a kwarg the row gives as 0 (`n_start`, `N`) means 0 here; the original draws a random number
  whenever a kwarg is falsy;
- `language:response_language` asks `langdetect` with a fixed seed: the original's unseeded
  detector can give two answers for one short text.

Registered into `instruction_following.INSTRUCTIONS` on import (that module imports this one).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from .instruction_following import Count, Instruction, LetterFrequency, Relation, Text, _compare, _register

__all__ = ["sentences_by_rules", "word_tokens"]

# ---- the helpers the original's checks are written against ------------------------------------------------

_LETTER = "([A-Za-z])"
_STARTERS = (
    r"(Mr|Mrs|Ms|Dr|Prof|Capt|Cpt|Lt|He\s|She\s|It\s|They\s|Their\s|Our\s|We\s|But\s|However\s|That\s|This\s|Wherever)"
)


def sentences_by_rules(text: str) -> list[str]:
    """open-instruct's regex sentence splitter (what the original's `split_into_sentences` does).

    Dots that do not end a sentence (titles, websites, decimals, initials, acronyms, suffixes,
    ellipses) are protected first; then every `.`, `?` and `!` ends one.
    """
    text = f" {text}  ".replace("\n", " ")
    text = re.sub("(Mr|St|Mrs|Ms|Dr)[.]", "\\1<prd>", text)
    text = re.sub("[.](com|net|org|io|gov|edu|me)", "<prd>\\1", text)
    text = re.sub("([0-9])[.]([0-9])", "\\1<prd>\\2", text)
    text = re.sub(r"\.{2,}", lambda m: "<prd>" * len(m.group(0)) + "<stop>", text)
    text = text.replace("Ph.D.", "Ph<prd>D<prd>")
    text = re.sub(r"\s" + _LETTER + "[.] ", " \\1<prd> ", text)
    text = re.sub("([A-Z][.][A-Z][.](?:[A-Z][.])?) " + _STARTERS, "\\1<stop> \\2", text)
    text = re.sub(_LETTER + "[.]" + _LETTER + "[.]" + _LETTER + "[.]", "\\1<prd>\\2<prd>\\3<prd>", text)
    text = re.sub(_LETTER + "[.]" + _LETTER + "[.]", "\\1<prd>\\2<prd>", text)
    text = re.sub(" (Inc|Ltd|Jr|Sr|Co)[.] " + _STARTERS, " \\1<stop> \\2", text)
    text = re.sub(" (Inc|Ltd|Jr|Sr|Co)[.]", " \\1<prd>", text)
    text = re.sub(" " + _LETTER + "[.]", " \\1<prd>", text)
    for closing, moved in ((".”", "”."), ('."', '".'), ('!"', '"!'), ('?"', '"?')):
        text = text.replace(closing, moved)
    for mark in ".?!":
        text = text.replace(mark, mark + "<stop>")
    sentences = [s.strip() for s in text.replace("<prd>", ".").split("<stop>")]
    return sentences[:-1] if sentences and not sentences[-1] else sentences


def word_tokens(text: str) -> list[str]:
    """NLTK-style word tokens: punkt sentences (untrained: no data file), then the Treebank tokenizer."""
    from nltk.tokenize import NLTKWordTokenizer, PunktSentenceTokenizer

    words = NLTKWordTokenizer()
    return [token for sentence in PunktSentenceTokenizer().tokenize(text) for token in words.tokenize(sentence)]


def _occurrences(keyword: str, text: str) -> int:
    return len(re.findall(re.escape(keyword), text, re.IGNORECASE))


def _paragraph_count(parts: list[str]) -> int | None:
    """How many parts hold text; None if an empty one sits between two others (the original refuses that)."""
    count = len(parts)
    for index, part in enumerate(parts):
        if not part.strip():
            if index in (0, len(parts) - 1):
                count -= 1
            else:
                return None
    return count


def _same(a: str, b: str) -> bool:
    return a.strip().lower() == b.strip().lower()


# ---- copying -----------------------------------------------------------------------------------------------


@_register("copy:repeat_phrase")
class RepeatPhrase(Instruction):
    """The phrase, `small_n` times, each with one word in its middle changed."""

    phrase: Text
    small_n: Annotated[int, Field(ge=1)]

    def check(self, response: str) -> bool:
        reference = self.phrase.strip().split()
        found = re.findall(rf"{re.escape(reference[0])} .*? {re.escape(reference[-1])}", response)
        if len(found) != self.small_n:
            return False
        differences = 0
        for phrase in found:
            words = phrase.split()
            if len(words) != len(reference):
                return False
            differences = sum(a != b for a, b in zip(words, reference, strict=True))
            if differences > 1:
                return False
        return differences == 1  # as the original: the last repetition decides


@_register("copy:copy")
class Copy(Instruction):
    """Repeat the prompt exactly (case and outer whitespace aside), nothing else."""

    prompt_to_repeat: Text

    def check(self, response: str) -> bool:
        return _same(response, self.prompt_to_repeat)


@_register("copy:copying_simple")
class CopyingSimple(Copy):
    """Repeat the request without change and do not answer it."""


@_register("copy:copying_multiple")
class CopyingMultiple(Instruction):
    """The request `N` times, separated by `******`."""

    prompt_to_repeat: Text
    N: Annotated[int, Field(ge=1)]

    def check(self, response: str) -> bool:
        copies = response.split("******")
        return len(copies) == self.N and all(_same(copy, self.prompt_to_repeat) for copy in copies)


@_register("new:copy_span_idx")
class CopySpanIdx(Instruction):
    """Copy the characters `n_start` to `n_end` of the prompt, nothing else."""

    prompt_to_repeat: Text
    n_start: Count
    n_end: Count

    def check(self, response: str) -> bool:
        return _same(response, self.prompt_to_repeat[self.n_start : self.n_end])


# ---- format --------------------------------------------------------------------------------------------------


@_register("detectable_format:sentence_hyphens")
class SentenceHyphens(Instruction):
    """Sentences joined by hyphens, with no spaces around them."""

    def check(self, response: str) -> bool:
        gold = sentences_by_rules(response.replace("-", " "))
        for part, sentence in zip(response.split("-"), gold, strict=False):
            if part.strip() != part or part != sentence:
                return False
        return True


@_register("detectable_format:square_brackets")
class SquareBrackets(Instruction):
    """Every word wrapped in square brackets."""

    def check(self, response: str) -> bool:
        return all(word.startswith("[") and word.endswith("]") for word in response.split())


@_register("detectable_format:bigram_wrapping")
class BigramWrapping(Instruction):
    """Every word pair wrapped in `<<` `>>`."""

    def check(self, response: str) -> bool:
        words = response.split()
        return all(words[i].startswith("<<") and words[i + 1].endswith(">>") for i in range(0, len(words) - 1, 2))


@_register("paragraphs:paragraphs")
class TwoParagraphsByDivider(Instruction):
    """Exactly 2 paragraphs, separated by the markdown divider `***`."""

    def check(self, response: str) -> bool:
        return _paragraph_count(re.split(r"\s?\*\*\*\s?", response)) == 2


@_register("paragraphs:paragraphs2")
class TwoParagraphsByBlankLine(Instruction):
    """Exactly 2 paragraphs, separated by a blank line."""

    def check(self, response: str) -> bool:
        return _paragraph_count(re.split(r"\n\n", response)) == 2


# ---- words and sentences -------------------------------------------------------------------------------------


@_register("first_word:first_word_sent")
class FirstWordOfEverySentence(Instruction):
    first_word: Text

    def check(self, response: str) -> bool:
        for sentence in sentences_by_rules(response):
            if not sentence.strip() or sentence.split()[0].strip().lower() != self.first_word.strip().lower():
                return False
        return True


@_register("first_word:first_word_answer")
class FirstWordOfTheAnswer(Instruction):
    first_word: Text

    def check(self, response: str) -> bool:
        words = response.split()
        return bool(words) and words[0].strip().lower() == self.first_word.strip().lower()


def _bare(word: str) -> str:
    return re.sub(r"[^\w\s]", "", word.strip()).lower()


@_register("last_word:last_word_sent")
class LastWordOfEverySentence(Instruction):
    """The last word of every sentence, punctuation removed."""

    last_word: Text

    def check(self, response: str) -> bool:
        for sentence in sentences_by_rules(response):
            if not sentence.strip() or _bare(sentence.split()[-1]) != self.last_word.strip().lower():
                return False
        return True


@_register("last_word:last_word_answer")
class LastWordOfTheAnswer(Instruction):
    last_word: Text

    def check(self, response: str) -> bool:
        words = response.split()
        return bool(words) and _bare(words[-1]) == self.last_word.strip().lower()


@_register("keywords:no_adjacent_consecutive")
class NoAdjacentConsecutiveLetters(Instruction):
    """No two neighbouring words start with consecutive letters of the alphabet (`a` then `b`)."""

    def check(self, response: str) -> bool:
        words = response.split()
        return not any(ord(b[0].lower()) - ord(a[0].lower()) == 1 for a, b in zip(words, words[1:], strict=False))


@_register("keywords:word_once")
class WordOnce(Instruction):
    keyword: Text

    def check(self, response: str) -> bool:
        return _occurrences(self.keyword.strip(), response) == 1


@_register("keywords:word_count_different_numbers")
class WordCountDifferentNumbers(Instruction):
    keyword: Text
    frequency: Count
    relation: Relation

    def check(self, response: str) -> bool:
        return _compare(_occurrences(self.keyword.strip(), response), self.relation, self.frequency)


@_register("keywords:exclude_word_harder")
class ExcludeWordHarder(Instruction):
    """The keyword never appears between two spaces."""

    keyword: Text

    def check(self, response: str) -> bool:
        return f" {self.keyword.strip()} " not in response


@_register("keywords:palindrome")
class Palindrome(Instruction):
    """Some whitespace-separated word reads the same backwards (a one-letter word counts, as in the original)."""

    def check(self, response: str) -> bool:
        return any(word == word[::-1] for word in response.split())


@_register("keywords:keyword_specific_position")
class KeywordSpecificPosition(Instruction):
    """The keyword is word `m` of sentence `n` (both from 1; case-sensitive)."""

    keyword: Text
    n: Annotated[int, Field(ge=1)]
    m: Annotated[int, Field(ge=1)]

    def check(self, response: str) -> bool:
        sentences = sentences_by_rules(response)
        if len(sentences) < self.n:
            return False
        words = word_tokens(sentences[self.n - 1])
        return len(words) >= self.m and words[self.m - 1] == self.keyword.strip()


@_register("keywords:start_end")
class StartEnd(Instruction):
    """The answer starts and ends with the same word (a final punctuation mark is a word of its own)."""

    def check(self, response: str) -> bool:
        words = word_tokens(response)
        return len(words) >= 2 and words[0].lower() == words[-1].lower()


@_register("punctuation:punctuation_dot")
class NoDots(Instruction):
    def check(self, response: str) -> bool:
        return "." not in response


@_register("punctuation:punctuation_exclamation")
class NoExclamationMarks(Instruction):
    def check(self, response: str) -> bool:
        return "!" not in response


# ---- counting -------------------------------------------------------------------------------------------------


@_register("count:lowercase_counting")
class LowercaseCounting(Instruction):
    """At most `N` all-lowercase words."""

    N: Count

    def check(self, response: str) -> bool:
        return len(re.findall(r"\b[a-z]+\b", response)) <= self.N


@_register("letters:letter_counting")
class LetterCounting(Instruction):
    """Less than / at least `N` ASCII letters."""

    N: Count
    relation: Relation

    def check(self, response: str) -> bool:
        return _compare(len(re.findall(r"[a-zA-Z]", response)), self.relation, self.N)


@_register("letters:letter_counting2")
class LetterCounting2(LetterFrequency):
    """The same check as `keywords:letter_frequency`, under the IFTrain name."""


@_register("count:counting_composition")
class CountingComposition(Instruction):
    """3 paragraphs (`***` divided) of exactly `n_sent` sentences of exactly `n_words` words each."""

    n_sent: Annotated[int, Field(ge=1)]
    n_words: Annotated[int, Field(ge=1)]

    def check(self, response: str) -> bool:
        paragraphs = re.split(r"\s?\*\*\*\s?", response)
        if _paragraph_count(paragraphs) != 3:
            return False
        for paragraph in paragraphs:  # as the original: an empty first or last paragraph fails here too
            sentences = sentences_by_rules(paragraph)
            if len(sentences) != self.n_sent or any(len(word_tokens(s)) != self.n_words for s in sentences):
                return False
        return True


@_register("count:count_unique")
class CountUnique(Instruction):
    """No token (word or punctuation mark) used twice."""

    def check(self, response: str) -> bool:
        words = word_tokens(response)
        return len(words) == len(set(words))


@_register("count:count_increment_word")
class CountIncrementWord(Instruction):
    """`keyword1` exactly once and `keyword2` exactly twice."""

    keyword1: Text
    keyword2: Text

    def check(self, response: str) -> bool:
        once, twice = _occurrences(self.keyword1.strip(), response), _occurrences(self.keyword2.strip(), response)
        return once == 1 and twice == 2


# ---- language -------------------------------------------------------------------------------------------------


@_register("language:response_language")
class ResponseLanguage(Instruction):
    """The answer is in `language` (an ISO 639-1 code, as `langdetect` names it)."""

    language: Text

    def check(self, response: str) -> bool:
        from langdetect import DetectorFactory, LangDetectException, detect

        DetectorFactory.seed = 0  # the same text, the same verdict
        try:
            return detect(response) == self.language
        except LangDetectException:
            return True  # as IFEval: a text with no features to judge is not held against the answer
