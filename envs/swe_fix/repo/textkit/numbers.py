"""Roman numerals, ordinals, byte sizes and number ranges."""

_ROMAN = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]  # fmt: skip
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


def to_roman(number):
    """`number` (1..3999) in Roman numerals."""
    if not 0 < number < 4000:
        raise ValueError(f"Roman numerals cover 1..3999, not {number}")
    parts = []
    for value, symbol in _ROMAN:
        count, number = divmod(number, value)
        parts.append(symbol * count)
    return "".join(parts)


def from_roman(numeral):
    """The value of a Roman numeral (`MCMXCIV` -> 1994); raises ValueError for a malformed one."""
    numeral = numeral.upper()
    if not numeral or any(ch not in _ROMAN_VALUES for ch in numeral):
        raise ValueError(f"not a Roman numeral: {numeral!r}")
    total = 0
    for i, ch in enumerate(numeral):
        value = _ROMAN_VALUES[ch]
        if i + 1 < len(numeral) and _ROMAN_VALUES[numeral[i + 1]] > value:
            total -= value
        else:
            total += value
    if to_roman(total) != numeral:
        raise ValueError(f"not a canonical Roman numeral: {numeral!r}")
    return total


def ordinal(number):
    """1 -> '1st', 2 -> '2nd', 11 -> '11th', 23 -> '23rd'."""
    if 10 <= number % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def human_bytes(size, precision=1):
    """A byte count in binary units: 1536 -> '1.5 KiB'; below 1024, whole bytes ('512 B')."""
    if size < 0:
        raise ValueError("a size is not negative")
    value = float(size)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.{precision}f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def parse_ranges(text):
    """'1-3,5,7-8' -> [1, 2, 3, 5, 7, 8] (sorted, no duplicates); blanks are ignored."""
    numbers = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = (int(x) for x in part.split("-", 1))
            if low > high:
                raise ValueError(f"a range runs upwards: {part!r}")
            numbers.update(range(low, high + 1))
        else:
            numbers.add(int(part))
    return sorted(numbers)
