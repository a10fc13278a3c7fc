"""The bugs `swe_fix`'s tasks inject into `textkit`, one function each, in SWE-smith's manner.

Each is a small change to one function of the pristine library (`repo/`): an operator, a bound,
a dropped line or check, a swapped branch. `data/make_examples.py` turns each into a task row: the
gold patch (the fix, SWE-bench's `patch`), the tests the bug breaks (`FAIL_TO_PASS`, found by running
the suite with and without it) and those it leaves passing in the same test module (`PASS_TO_PASS`).
The problem statement says what a user sees, not where the bug is.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BUGS", "Bug"]


@dataclass(frozen=True)
class Bug:
    name: str
    file: str
    """The library module, relative to the repository."""
    pristine: str
    """The exact text of the pristine function the bug changes (it occurs once in the file)."""
    buggy: str
    statement: str


BUGS = [
    Bug(
        "slugify_accents",
        "textkit/slugs.py",
        'unicodedata.normalize("NFKD", text)',
        'unicodedata.normalize("NFC", text)',
        "`slugify` drops accented letters altogether instead of just their accents: `slugify('Crème Brûlée')` "
        "returns `'crme-brle'`. It should return `'creme-brulee'`.",
    ),
    Bug(
        "slugify_max_length",
        "textkit/slugs.py",
        "        slug = slug[:max_length].rstrip(sep)",
        "        slug = slug[:max_length]",
        "When `slugify` shortens a slug to `max_length`, the result can end with the separator: "
        "`slugify('one two three', max_length=8)` gives `'one-two-'`. A slug should never end with a separator.",
    ),
    Bug(
        "truncate_words_bound",
        "textkit/slugs.py",
        "    if len(words) <= count:",
        "    if len(words) < count:",
        "`truncate_words('a b c', 3)` returns `'a b c...'`, although nothing was cut. The ending should only be added "
        "when words were actually dropped.",
    ),
    Bug(
        "case_words_digits",
        "textkit/cases.py",
        '_BOUNDARY = re.compile(r"[A-Z]?[a-z0-9]+|',
        '_BOUNDARY = re.compile(r"[A-Z]?[a-z]+|',
        "Digits vanish when converting identifiers: `snake_case('version2Update')` returns `'version_update'` "
        "instead of `'version2_update'`.",
    ),
    Bug(
        "camel_case_upper_first",
        "textkit/cases.py",
        "    head = words[0].capitalize() if upper_first else words[0]",
        "    head = words[0] if upper_first else words[0].capitalize()",
        "`camel_case` gets the first letter backwards: `camel_case('some_variable_name')` returns "
        "`'SomeVariableName'`, and with `upper_first=True` it returns `'someVariableName'`.",
    ),
    Bug(
        "title_case_last_word",
        "textkit/cases.py",
        "        if 0 < i < len(words) - 1 and lower in _SMALL_WORDS:",
        "        if 0 < i and lower in _SMALL_WORDS:",
        "`title_case('what are you waiting for')` returns `'What Are You Waiting for'`: a small word at the end "
        "of a title must be capitalized too.",
    ),
    Bug(
        "to_roman_four",
        "textkit/numbers.py",
        '(5, "V"), (4, "IV"), (1, "I")',
        '(5, "V"), (1, "I")',
        "`to_roman(4)` returns `'IIII'` and `to_roman(1994)` returns `'MCMXCIIII'`; the standard forms are `'IV'` "
        "and `'MCMXCIV'`. Since then `from_roman('IIII')` is accepted as well.",
    ),
    Bug(
        "from_roman_canonical",
        "textkit/numbers.py",
        "    if to_roman(total) != numeral:\n"
        '        raise ValueError(f"not a canonical Roman numeral: {numeral!r}")\n',
        "",
        "`from_roman` accepts malformed numerals: `from_roman('IIII')` returns 4, `from_roman('VV')` 10 and "
        "`from_roman('IC')` 99. Each should raise `ValueError`.",
    ),
    Bug(
        "ordinal_teens",
        "textkit/numbers.py",
        "    if 10 <= number % 100 <= 20:",
        "    if 10 <= number % 10 <= 20:",
        "`ordinal(11)` returns `'11st'`, `ordinal(12)` `'12nd'` and `ordinal(113)` `'113rd'`; they should end in "
        "'th'.",
    ),
    Bug(
        "human_bytes_boundary",
        "textkit/numbers.py",
        "        if value < 1024 or unit == _UNITS[-1]:",
        "        if value <= 1024 or unit == _UNITS[-1]:",
        "`human_bytes(1024)` returns `'1024 B'` instead of `'1.0 KiB'` (and a size of exactly 1 GiB shows as "
        "'1024.0 MiB').",
    ),
    Bug(
        "human_bytes_precision",
        "textkit/numbers.py",
        '            return f"{value:.{precision}f} {unit}"',
        '            return f"{value:.1f} {unit}"',
        "`human_bytes` ignores its `precision` argument: `human_bytes(1234567, precision=2)` returns "
        "`'1.2 MiB'`, not `'1.18 MiB'`.",
    ),
    Bug(
        "parse_ranges_inclusive",
        "textkit/numbers.py",
        "            numbers.update(range(low, high + 1))",
        "            numbers.update(range(low, high))",
        "`parse_ranges('1-3,5')` returns `[1, 2, 5]`; ranges are inclusive, so it should be `[1, 2, 3, 5]`. "
        "`parse_ranges('3-3')` returns an empty list.",
    ),
    Bug(
        "luhn_doubling",
        "textkit/checksums.py",
        "        if i % 2 == 1:",
        "        if i % 2 == 0:",
        "`luhn_valid` rejects valid card numbers such as '4539 1488 0343 6467' and '79927398713', and accepts "
        "some invalid ones.",
    ),
    Bug(
        "isbn10_check_x",
        "textkit/checksums.py",
        '[10 if cleaned[9] == "X" else int(cleaned[9])]',
        '[0 if cleaned[9] == "X" else int(cleaned[9])]',
        "`isbn10_valid('0-8044-2957-X')` returns False, but this ISBN is valid: a final X stands for 10.",
    ),
    Bug(
        "isbn13_weights",
        "textkit/checksums.py",
        "    total = sum(d * (3 if i % 2 else 1) for i, d in enumerate(digits))",
        "    total = sum(d * (1 if i % 2 else 3) for i, d in enumerate(digits))",
        "`isbn13_check_digit('978030640615')` returns 3; the check digit of ISBN 978-0-306-40615-? is 7.",
    ),
    Bug(
        "wrap_exact_width",
        "textkit/strings.py",
        "        elif len(current) + 1 + len(word) <= width:",
        "        elif len(current) + 1 + len(word) < width:",
        "`wrap('aaaa bbbb', 9)` returns `['aaaa', 'bbbb']` although the whole text is 9 characters and fits in a "
        "line of width 9.",
    ),
    Bug(
        "word_count_case",
        "textkit/strings.py",
        "        word = word.lower()\n",
        "",
        "`word_count` counts 'The', 'the' and 'THE' as three different words; counting should ignore case.",
    ),
    Bug(
        "rle_encode_last_run",
        "textkit/strings.py",
        '            run, count = ch, 1\n    out.append(f"{count}{run}")\n',
        "            run, count = ch, 1\n",
        "`rle_encode('aaabcc')` returns `'3a1b'`: the last run is missing. It should be `'3a1b2c'`.",
    ),
    Bug(
        "rle_decode_counts",
        "textkit/strings.py",
        "            count += ch",
        "            count = ch",
        "`rle_decode('12x')` returns `'xx'` instead of twelve x's: counts with more than one digit are cut.",
    ),
    Bug(
        "palindrome_punctuation",
        "textkit/strings.py",
        "    letters = [ch.lower() for ch in text if ch.isalnum()]",
        "    letters = [ch.lower() for ch in text if not ch.isspace()]",
        "`is_palindrome('A man, a plan, a canal: Panama')` returns False; punctuation should be ignored like "
        "spaces and case.",
    ),
    Bug(
        "parse_duration_gaps",
        "textkit/durations.py",
        '        if match.start() != end:\n            raise ValueError(f"not a duration: {text!r}")\n',
        "",
        "`parse_duration('1h 30m')` and `parse_duration('-5s')` are accepted (5400 and 5) instead of raising "
        "`ValueError`: nothing may come between or before the parts.",
    ),
    Bug(
        "format_duration_zero_parts",
        "textkit/durations.py",
        "        if count:\n            parts.append",
        "        if count or parts:\n            parts.append",
        "`format_duration(3601)` returns `'1h0m1s'`; zero parts should be left out: `'1h1s'`.",
    ),
    Bug(
        "leap_year_400",
        "textkit/durations.py",
        "    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)",
        "    return year % 4 == 0 and year % 100 != 0",
        "`is_leap_year(2000)` returns False, and `days_in_month(2000, 2)` 28; 2000 was a leap year (divisible by "
        "400).",
    ),
    Bug(
        "prerelease_numeric_order",
        "textkit/versions.py",
        '        parts.append((0, int(part), "") if part.isdigit() else (1, 0, part))',
        "        parts.append((1, 0, part))",
        "`compare_versions('1.0.0-beta.11', '1.0.0-beta.2')` returns -1, but 11 > 2: numeric pre-release parts "
        "must compare as numbers.",
    ),
    Bug(
        "bump_minor_reset",
        "textkit/versions.py",
        '        return f"{major}.{minor + 1}.0"',
        '        return f"{major}.{minor + 1}.{patch}"',
        "`bump('1.2.3', 'minor')` returns `'1.3.3'`; bumping the minor version must reset the patch: `'1.3.0'`.",
    ),
]
