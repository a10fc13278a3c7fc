import pytest
from textkit import from_roman, human_bytes, ordinal, parse_ranges, to_roman


@pytest.mark.parametrize(
    ("number", "numeral"),
    [
        (1, "I"),
        (4, "IV"),
        (9, "IX"),
        (14, "XIV"),
        (40, "XL"),
        (90, "XC"),
        (400, "CD"),
        (1994, "MCMXCIV"),
        (2024, "MMXXIV"),
        (3999, "MMMCMXCIX"),
    ],
)
def test_to_roman(number, numeral):
    assert to_roman(number) == numeral


def test_to_roman_out_of_range():
    with pytest.raises(ValueError):
        to_roman(0)
    with pytest.raises(ValueError):
        to_roman(4000)


@pytest.mark.parametrize("number", [1, 3, 4, 9, 19, 44, 99, 444, 1994, 3888])
def test_from_roman_round_trips(number):
    assert from_roman(to_roman(number)) == number


def test_from_roman_lowercase():
    assert from_roman("mcmxciv") == 1994


@pytest.mark.parametrize("bad", ["", "ABC", "IIII", "VV", "IC"])
def test_from_roman_rejects_malformed(bad):
    with pytest.raises(ValueError):
        from_roman(bad)


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (1, "1st"),
        (2, "2nd"),
        (3, "3rd"),
        (4, "4th"),
        (11, "11th"),
        (12, "12th"),
        (13, "13th"),
        (21, "21st"),
        (22, "22nd"),
        (101, "101st"),
        (111, "111th"),
        (112, "112th"),
    ],
)
def test_ordinal(number, text):
    assert ordinal(number) == text


def test_human_bytes_small():
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"


def test_human_bytes_units():
    assert human_bytes(1024) == "1.0 KiB"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(5 * 1024**3) == "5.0 GiB"


def test_human_bytes_precision():
    assert human_bytes(1234567, precision=2) == "1.18 MiB"


def test_human_bytes_negative():
    with pytest.raises(ValueError):
        human_bytes(-1)


def test_parse_ranges():
    assert parse_ranges("1-3,5,7-8") == [1, 2, 3, 5, 7, 8]


def test_parse_ranges_sorts_and_deduplicates():
    assert parse_ranges("5, 1-2, 2, 4-5") == [1, 2, 4, 5]


def test_parse_ranges_single_number_range():
    assert parse_ranges("3-3") == [3]


def test_parse_ranges_ignores_blanks():
    assert parse_ranges("1,,2, ") == [1, 2]


def test_parse_ranges_rejects_a_downward_range():
    with pytest.raises(ValueError):
        parse_ranges("5-1")
