"""textkit: small helpers for text, numbers, dates and versions."""

from textkit.cases import camel_case, kebab_case, snake_case, title_case
from textkit.checksums import isbn10_valid, isbn13_check_digit, luhn_valid
from textkit.durations import days_in_month, format_duration, is_leap_year, parse_duration
from textkit.numbers import from_roman, human_bytes, ordinal, parse_ranges, to_roman
from textkit.slugs import slugify, truncate_words
from textkit.strings import caesar, is_palindrome, rle_decode, rle_encode, word_count, wrap
from textkit.versions import bump, compare_versions, parse_version

__all__ = [
    "bump",
    "caesar",
    "camel_case",
    "compare_versions",
    "days_in_month",
    "format_duration",
    "from_roman",
    "human_bytes",
    "is_leap_year",
    "is_palindrome",
    "isbn10_valid",
    "isbn13_check_digit",
    "kebab_case",
    "luhn_valid",
    "ordinal",
    "parse_duration",
    "parse_ranges",
    "parse_version",
    "rle_decode",
    "rle_encode",
    "slugify",
    "snake_case",
    "title_case",
    "to_roman",
    "truncate_words",
    "word_count",
    "wrap",
]
