import pytest
from textkit import isbn10_valid, isbn13_check_digit, luhn_valid


@pytest.mark.parametrize(
    "number", ["4539 1488 0343 6467", "79927398713", "4111-1111-1111-1111", "0000 0000 0000 0000"]
)
def test_luhn_accepts_valid_numbers(number):
    assert luhn_valid(number)


@pytest.mark.parametrize("number", ["4539 1488 0343 6468", "79927398710", "1234567812345678"])
def test_luhn_rejects_invalid_numbers(number):
    assert not luhn_valid(number)


@pytest.mark.parametrize("number", ["", "0", "12a4", "abcd"])
def test_luhn_rejects_non_numbers(number):
    assert not luhn_valid(number)


@pytest.mark.parametrize("isbn", ["0-306-40615-2", "0306406152", "0-8044-2957-X", "0 19 853453 1"])
def test_isbn10_valid(isbn):
    assert isbn10_valid(isbn)


@pytest.mark.parametrize("isbn", ["0-306-40615-3", "0-8044-2957-9", "030640615", "X306406152", "03064061522"])
def test_isbn10_invalid(isbn):
    assert not isbn10_valid(isbn)


@pytest.mark.parametrize(("prefix", "digit"), [("978030640615", 7), ("978-0-13-468599", 1), ("979000000000", 1)])
def test_isbn13_check_digit(prefix, digit):
    assert isbn13_check_digit(prefix) == digit


def test_isbn13_check_digit_needs_twelve_digits():
    with pytest.raises(ValueError):
        isbn13_check_digit("97803064061")
