import pytest
from textkit import days_in_month, format_duration, is_leap_year, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h30m", 5400), ("45s", 45), ("2d", 172800), ("1d2h3m4s", 93784), ("90m", 5400), ("3m1h", 3780), (" 10S ", 10)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "10", "1x", "1h 30m", "-5s", "1h30"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59, "59s"), (60, "1m"), (5400, "1h30m"), (93784, "1d2h3m4s"), (86400, "1d"), (3601, "1h1s")],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [1, 61, 3599, 90061, 1000000])
def test_format_parse_round_trip(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


def test_format_duration_negative():
    with pytest.raises(ValueError):
        format_duration(-1)


@pytest.mark.parametrize(("year", "leap"), [(2024, True), (2023, False), (1900, False), (2000, True), (2100, False)])
def test_is_leap_year(year, leap):
    assert is_leap_year(year) is leap


def test_days_in_month():
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 4) == 30
    assert days_in_month(2023, 12) == 31


def test_days_in_february():
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2023, 2) == 28
    assert days_in_month(1900, 2) == 28


def test_days_in_month_rejects_month_13():
    with pytest.raises(ValueError):
        days_in_month(2023, 13)
