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
    held_out: str
    """Held-out tests (one or more `test_held_out_<name>` functions) that `verify` appends to the test module of
    `file`: the same behaviour on other inputs than the statement's and the visible tests', so that hard-coding
    the expectations the agent can see does not pass them. Each passes on the pristine library, fails with the bug."""


BUGS = [
    Bug(
        "slugify_accents",
        "textkit/slugs.py",
        'unicodedata.normalize("NFKD", text)',
        'unicodedata.normalize("NFC", text)',
        "`slugify` drops accented letters altogether instead of just their accents: `slugify('Crème Brûlée')` "
        "returns `'crme-brle'`. It should return `'creme-brulee'`.",
        held_out="""\
def test_held_out_slugify_accents():
    from textkit import slugify

    assert slugify("Fiancée à Noël") == "fiancee-a-noel"
    assert slugify("São Tomé") == "sao-tome"
    assert slugify("Ångström", sep="_") == "angstrom"
    assert slugify("résumé 2024") == "resume-2024"
""",
    ),
    Bug(
        "slugify_max_length",
        "textkit/slugs.py",
        "        slug = slug[:max_length].rstrip(sep)",
        "        slug = slug[:max_length]",
        "When `slugify` shortens a slug to `max_length`, the result can end with the separator: "
        "`slugify('one two three', max_length=8)` gives `'one-two-'`. A slug should never end with a separator.",
        held_out="""\
def test_held_out_slugify_max_length():
    from textkit import slugify

    assert slugify("alpha beta gamma", max_length=6) == "alpha"
    assert slugify("red green blue", max_length=10) == "red-green"
    assert slugify("a b c d", max_length=4) == "a-b"
    assert slugify("foo bar", sep="_", max_length=4) == "foo"
""",
    ),
    Bug(
        "truncate_words_bound",
        "textkit/slugs.py",
        "    if len(words) <= count:",
        "    if len(words) < count:",
        "`truncate_words('a b c', 3)` returns `'a b c...'`, although nothing was cut. The ending should only be added "
        "when words were actually dropped.",
        held_out="""\
def test_held_out_truncate_words_bound():
    from textkit import truncate_words

    assert truncate_words("x y", 2) == "x y"
    assert truncate_words("one two three four five", 5) == "one two three four five"
    assert truncate_words("solo", 1, ending=" [more]") == "solo"
    assert truncate_words("  spaced   out  ", 2) == "spaced out"
    assert truncate_words("", 0) == ""
""",
    ),
    Bug(
        "case_words_digits",
        "textkit/cases.py",
        '_BOUNDARY = re.compile(r"[A-Z]?[a-z0-9]+|',
        '_BOUNDARY = re.compile(r"[A-Z]?[a-z]+|',
        "Digits vanish when converting identifiers: `snake_case('version2Update')` returns `'version_update'` "
        "instead of `'version2_update'`.",
        held_out="""\
def test_held_out_case_words_digits():
    from textkit import camel_case, kebab_case, snake_case

    assert snake_case("utf8Decoder") == "utf8_decoder"
    assert snake_case("x86Cpu") == "x86_cpu"
    assert kebab_case("level3Boss") == "level3-boss"
    assert camel_case("route 66 west") == "route66West"
""",
    ),
    Bug(
        "camel_case_upper_first",
        "textkit/cases.py",
        "    head = words[0].capitalize() if upper_first else words[0]",
        "    head = words[0] if upper_first else words[0].capitalize()",
        "`camel_case` gets the first letter backwards: `camel_case('some_variable_name')` returns "
        "`'SomeVariableName'`, and with `upper_first=True` it returns `'someVariableName'`.",
        held_out="""\
def test_held_out_camel_case_upper_first():
    from textkit import camel_case

    assert camel_case("first_name") == "firstName"
    assert camel_case("HTTP response code") == "httpResponseCode"
    assert camel_case("x") == "x"


def test_held_out_camel_case_upper_first_2():
    from textkit import camel_case

    assert camel_case("user-id", upper_first=True) == "UserId"
    assert camel_case("max value", upper_first=True) == "MaxValue"
    assert camel_case("z", upper_first=True) == "Z"
""",
    ),
    Bug(
        "title_case_last_word",
        "textkit/cases.py",
        "        if 0 < i < len(words) - 1 and lower in _SMALL_WORDS:",
        "        if 0 < i and lower in _SMALL_WORDS:",
        "`title_case('what are you waiting for')` returns `'What Are You Waiting for'`: a small word at the end "
        "of a title must be capitalized too.",
        held_out="""\
def test_held_out_title_case_last_word():
    from textkit import title_case

    assert title_case("something to look forward to") == "Something to Look Forward To"
    assert title_case("log in") == "Log In"
    assert title_case("on and on") == "On and On"
    assert title_case("who are you looking AT") == "Who Are You Looking At"
""",
    ),
    Bug(
        "to_roman_four",
        "textkit/numbers.py",
        '(5, "V"), (4, "IV"), (1, "I")',
        '(5, "V"), (1, "I")',
        "`to_roman(4)` returns `'IIII'` and `to_roman(1994)` returns `'MCMXCIIII'`; the standard forms are `'IV'` "
        "and `'MCMXCIV'`. Since then `from_roman('IIII')` is accepted as well.",
        held_out="""\
def test_held_out_to_roman_four():
    from textkit import to_roman

    assert to_roman(24) == "XXIV"
    assert to_roman(54) == "LIV"
    assert to_roman(1444) == "MCDXLIV"
    assert to_roman(3704) == "MMMDCCIV"


def test_held_out_to_roman_four_2():
    from textkit import from_roman

    assert from_roman("CCIV") == 204
    assert from_roman("xxxiv") == 34
""",
    ),
    Bug(
        "from_roman_canonical",
        "textkit/numbers.py",
        "    if to_roman(total) != numeral:\n"
        '        raise ValueError(f"not a canonical Roman numeral: {numeral!r}")\n',
        "",
        "`from_roman` accepts malformed numerals: `from_roman('IIII')` returns 4, `from_roman('VV')` 10 and "
        "`from_roman('IC')` 99. Each should raise `ValueError`.",
        held_out="""\
def test_held_out_from_roman_canonical():
    import pytest
    from textkit import from_roman

    for bad in ["XXXX", "IL", "VX", "DD", "MCMC", "iiv"]:
        with pytest.raises(ValueError):
            from_roman(bad)
""",
    ),
    Bug(
        "ordinal_teens",
        "textkit/numbers.py",
        "    if 10 <= number % 100 <= 20:",
        "    if 10 <= number % 10 <= 20:",
        "`ordinal(11)` returns `'11st'`, `ordinal(12)` `'12nd'` and `ordinal(113)` `'113rd'`; they should end in "
        "'th'.",
        held_out="""\
def test_held_out_ordinal_teens():
    from textkit import ordinal

    assert ordinal(211) == "211th"
    assert ordinal(512) == "512th"
    assert ordinal(813) == "813th"
    assert ordinal(1011) == "1011th"
""",
    ),
    Bug(
        "human_bytes_boundary",
        "textkit/numbers.py",
        "        if value < 1024 or unit == _UNITS[-1]:",
        "        if value <= 1024 or unit == _UNITS[-1]:",
        "`human_bytes(1024)` returns `'1024 B'` instead of `'1.0 KiB'` (and a size of exactly 1 GiB shows as "
        "'1024.0 MiB').",
        held_out="""\
def test_held_out_human_bytes_boundary():
    from textkit import human_bytes

    assert human_bytes(1024**2) == "1.0 MiB"
    assert human_bytes(1024**4) == "1.0 TiB"
    assert human_bytes(1024**5) == "1.0 PiB"
    assert human_bytes(1024**2, precision=2) == "1.00 MiB"
""",
    ),
    Bug(
        "human_bytes_precision",
        "textkit/numbers.py",
        '            return f"{value:.{precision}f} {unit}"',
        '            return f"{value:.1f} {unit}"',
        "`human_bytes` ignores its `precision` argument: `human_bytes(1234567, precision=2)` returns "
        "`'1.2 MiB'`, not `'1.18 MiB'`.",
        held_out="""\
def test_held_out_human_bytes_precision():
    from textkit import human_bytes

    assert human_bytes(1536, precision=3) == "1.500 KiB"
    assert human_bytes(5000000, precision=0) == "5 MiB"
    assert human_bytes(123456789, precision=3) == "117.738 MiB"
    assert human_bytes(10**12, precision=2) == "931.32 GiB"
""",
    ),
    Bug(
        "parse_ranges_inclusive",
        "textkit/numbers.py",
        "            numbers.update(range(low, high + 1))",
        "            numbers.update(range(low, high))",
        "`parse_ranges('1-3,5')` returns `[1, 2, 5]`; ranges are inclusive, so it should be `[1, 2, 3, 5]`. "
        "`parse_ranges('3-3')` returns an empty list.",
        held_out="""\
def test_held_out_parse_ranges_inclusive():
    from textkit import parse_ranges

    assert parse_ranges("10-12") == [10, 11, 12]
    assert parse_ranges("0-0,4") == [0, 4]
    assert parse_ranges("7-9, 2") == [2, 7, 8, 9]
    assert parse_ranges(" 20-21 ") == [20, 21]
""",
    ),
    Bug(
        "luhn_doubling",
        "textkit/checksums.py",
        "        if i % 2 == 1:",
        "        if i % 2 == 0:",
        "`luhn_valid` rejects valid card numbers such as '4539 1488 0343 6467' and '79927398713', and accepts "
        "some invalid ones.",
        held_out="""\
def test_held_out_luhn_doubling():
    from textkit import luhn_valid

    assert luhn_valid("4012 8888 8888 1881")
    assert luhn_valid("378282246310005")
    assert luhn_valid("3056-9309-0259-04")
    assert luhn_valid("6011000990139424")
    assert not luhn_valid("5105105105105107")
""",
    ),
    Bug(
        "isbn10_check_x",
        "textkit/checksums.py",
        '[10 if cleaned[9] == "X" else int(cleaned[9])]',
        '[0 if cleaned[9] == "X" else int(cleaned[9])]',
        "`isbn10_valid('0-8044-2957-X')` returns False, but this ISBN is valid: a final X stands for 10.",
        held_out="""\
def test_held_out_isbn10_check_x():
    from textkit import isbn10_valid

    assert isbn10_valid("0-201-61622-X")
    assert isbn10_valid("039480001X")
    assert isbn10_valid("3-16-148410-x")
    assert not isbn10_valid("0-7167-0344-X")
""",
    ),
    Bug(
        "isbn13_weights",
        "textkit/checksums.py",
        "    total = sum(d * (3 if i % 2 else 1) for i, d in enumerate(digits))",
        "    total = sum(d * (1 if i % 2 else 3) for i, d in enumerate(digits))",
        "`isbn13_check_digit('978030640615')` returns 3; the check digit of ISBN 978-0-306-40615-? is 7.",
        held_out="""\
def test_held_out_isbn13_weights():
    from textkit import isbn13_check_digit

    assert isbn13_check_digit("978316148410") == 0
    assert isbn13_check_digit("978-1-86197-876") == 9
    assert isbn13_check_digit("978026203384") == 8
    assert isbn13_check_digit("979 1234 5678 9") == 6
""",
    ),
    Bug(
        "wrap_exact_width",
        "textkit/strings.py",
        "        elif len(current) + 1 + len(word) <= width:",
        "        elif len(current) + 1 + len(word) < width:",
        "`wrap('aaaa bbbb', 9)` returns `['aaaa', 'bbbb']` although the whole text is 9 characters and fits in a "
        "line of width 9.",
        held_out="""\
def test_held_out_wrap_exact_width():
    from textkit import wrap

    assert wrap("ab cd", 5) == ["ab cd"]
    assert wrap("one two three", 7) == ["one two", "three"]
    assert wrap("x y z", 3) == ["x y", "z"]
    assert wrap("hello world again", 11) == ["hello world", "again"]
""",
    ),
    Bug(
        "word_count_case",
        "textkit/strings.py",
        "        word = word.lower()\n",
        "",
        "`word_count` counts 'The', 'the' and 'THE' as three different words; counting should ignore case.",
        held_out="""\
def test_held_out_word_count_case():
    from textkit import word_count

    assert word_count("Go go GO") == {"go": 3}
    assert word_count("Rain, RAIN, go away") == {"rain": 2, "go": 1, "away": 1}
    assert word_count("It's it's IT'S") == {"it's": 3}
    assert word_count("Abc") == {"abc": 1}
""",
    ),
    Bug(
        "rle_encode_last_run",
        "textkit/strings.py",
        '            run, count = ch, 1\n    out.append(f"{count}{run}")\n',
        "            run, count = ch, 1\n",
        "`rle_encode('aaabcc')` returns `'3a1b'`: the last run is missing. It should be `'3a1b2c'`.",
        held_out="""\
def test_held_out_rle_encode_last_run():
    from textkit import rle_encode

    assert rle_encode("z") == "1z"
    assert rle_encode("aab") == "2a1b"
    assert rle_encode("hello") == "1h1e2l1o"
    assert rle_encode("qqqq") == "4q"
""",
    ),
    Bug(
        "rle_decode_counts",
        "textkit/strings.py",
        "            count += ch",
        "            count = ch",
        "`rle_decode('12x')` returns `'xx'` instead of twelve x's: counts with more than one digit are cut.",
        held_out="""\
def test_held_out_rle_decode_counts():
    from textkit import rle_decode

    assert rle_decode("10a") == "a" * 10
    assert rle_decode("2b15c") == "bb" + "c" * 15
    assert rle_decode("3x10y") == "xxx" + "y" * 10
    assert rle_decode("100z") == "z" * 100
""",
    ),
    Bug(
        "palindrome_punctuation",
        "textkit/strings.py",
        "    letters = [ch.lower() for ch in text if ch.isalnum()]",
        "    letters = [ch.lower() for ch in text if not ch.isspace()]",
        "`is_palindrome('A man, a plan, a canal: Panama')` returns False; punctuation should be ignored like "
        "spaces and case.",
        held_out="""\
def test_held_out_palindrome_punctuation():
    from textkit import is_palindrome

    assert is_palindrome("Was it a car or a cat I saw?")
    assert is_palindrome("Madam, I'm Adam")
    assert is_palindrome("Step on no pets!")
    assert is_palindrome("No 'x' in Nixon")
""",
    ),
    Bug(
        "parse_duration_gaps",
        "textkit/durations.py",
        '        if match.start() != end:\n            raise ValueError(f"not a duration: {text!r}")\n',
        "",
        "`parse_duration('1h 30m')` and `parse_duration('-5s')` are accepted (5400 and 5) instead of raising "
        "`ValueError`: nothing may come between or before the parts.",
        held_out="""\
def test_held_out_parse_duration_gaps():
    import pytest
    from textkit import parse_duration

    for bad in ["2h,15m", "+10s", "4d 1s", "about 5m", "1m_30s"]:
        with pytest.raises(ValueError):
            parse_duration(bad)
""",
    ),
    Bug(
        "format_duration_zero_parts",
        "textkit/durations.py",
        "        if count:\n            parts.append",
        "        if count or parts:\n            parts.append",
        "`format_duration(3601)` returns `'1h0m1s'`; zero parts should be left out: `'1h1s'`.",
        held_out="""\
def test_held_out_format_duration_zero_parts():
    from textkit import format_duration

    assert format_duration(7200) == "2h"
    assert format_duration(120) == "2m"
    assert format_duration(86401) == "1d1s"
    assert format_duration(172860) == "2d1m"
    assert format_duration(90000) == "1d1h"
""",
    ),
    Bug(
        "leap_year_400",
        "textkit/durations.py",
        "    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)",
        "    return year % 4 == 0 and year % 100 != 0",
        "`is_leap_year(2000)` returns False, and `days_in_month(2000, 2)` 28; 2000 was a leap year (divisible by "
        "400).",
        held_out="""\
def test_held_out_leap_year_400():
    from textkit import days_in_month, is_leap_year

    assert is_leap_year(1600) is True
    assert is_leap_year(2400) is True
    assert is_leap_year(400) is True
    assert days_in_month(1600, 2) == 29
""",
    ),
    Bug(
        "prerelease_numeric_order",
        "textkit/versions.py",
        '        parts.append((0, int(part), "") if part.isdigit() else (1, 0, part))',
        "        parts.append((1, 0, part))",
        "`compare_versions('1.0.0-beta.11', '1.0.0-beta.2')` returns -1, but 11 > 2: numeric pre-release parts "
        "must compare as numbers.",
        held_out="""\
def test_held_out_prerelease_numeric_order():
    from textkit import compare_versions

    assert compare_versions("2.0.0-rc.10", "2.0.0-rc.9") == 1
    assert compare_versions("1.0.0-alpha.3", "1.0.0-alpha.20") == -1
    assert compare_versions("0.1.0-100", "0.1.0-99") == 1
    assert compare_versions("3.0.0-2.b", "3.0.0-10.a") == -1
""",
    ),
    Bug(
        "bump_minor_reset",
        "textkit/versions.py",
        '        return f"{major}.{minor + 1}.0"',
        '        return f"{major}.{minor + 1}.{patch}"',
        "`bump('1.2.3', 'minor')` returns `'1.3.3'`; bumping the minor version must reset the patch: `'1.3.0'`.",
        held_out="""\
def test_held_out_bump_minor_reset():
    from textkit import bump

    assert bump("0.4.7", "minor") == "0.5.0"
    assert bump("2.9.1-beta", "minor") == "2.10.0"
    assert bump("v1.0.12", "minor") == "1.1.0"
""",
    ),
]
