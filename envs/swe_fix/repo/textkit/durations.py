"""Durations like '1h30m', and calendar helpers."""

import re

_PART = re.compile(r"(\d+)([dhms])")
_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def parse_duration(text):
    """'1h30m' -> 5400 seconds; units d, h, m, s, in any order; raises ValueError for anything else."""
    text = text.strip().lower()
    if not text:
        raise ValueError("an empty duration")
    total, end = 0, 0
    for match in _PART.finditer(text):
        if match.start() != end:
            raise ValueError(f"not a duration: {text!r}")
        total += int(match.group(1)) * _SECONDS[match.group(2)]
        end = match.end()
    if end != len(text):
        raise ValueError(f"not a duration: {text!r}")
    return total


def format_duration(seconds):
    """5400 -> '1h30m'; 0 -> '0s'; the largest units first, zero parts left out."""
    if seconds < 0:
        raise ValueError("a duration is not negative")
    if seconds == 0:
        return "0s"
    parts = []
    for unit in "dhms":
        count, seconds = divmod(seconds, _SECONDS[unit])
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def is_leap_year(year):
    """Gregorian leap years: every 4th year, but not centuries, unless divisible by 400."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    """Days in `month` (1..12) of `year`."""
    if not 1 <= month <= 12:
        raise ValueError(f"no month {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return _DAYS[month - 1]
