"""Check digits: Luhn (card numbers), ISBN-10 and ISBN-13."""


def _digits(text):
    return [int(ch) for ch in text if ch.isdigit()]


def luhn_valid(number):
    """Whether a card number (spaces and dashes allowed) passes the Luhn check."""
    cleaned = number.replace(" ", "").replace("-", "")
    if len(cleaned) < 2 or not cleaned.isdigit():
        return False
    total = 0
    for i, digit in enumerate(reversed(_digits(cleaned))):
        if i % 2 == 1:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def isbn10_valid(isbn):
    """Whether an ISBN-10 (dashes allowed; a final X is 10) has the right check digit."""
    cleaned = isbn.replace("-", "").replace(" ", "").upper()
    if len(cleaned) != 10 or not cleaned[:9].isdigit() or not (cleaned[9].isdigit() or cleaned[9] == "X"):
        return False
    values = [int(ch) for ch in cleaned[:9]] + [10 if cleaned[9] == "X" else int(cleaned[9])]
    return sum((10 - i) * v for i, v in enumerate(values)) % 11 == 0


def isbn13_check_digit(first12):
    """The check digit that completes a 12-digit ISBN-13 prefix."""
    digits = _digits(first12)
    if len(digits) != 12:
        raise ValueError("an ISBN-13 prefix has 12 digits")
    total = sum(d * (3 if i % 2 else 1) for i, d in enumerate(digits))
    return (10 - total % 10) % 10
