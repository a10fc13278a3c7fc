"""Wrapping, counting, run-length encoding, palindromes and the Caesar cipher."""

import re

_WORD = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")


def wrap(text, width):
    """Greedy word wrap: lines of at most `width` characters (a longer word gets a line of its own)."""
    if width < 1:
        raise ValueError("width must be positive")
    lines, current = [], ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def word_count(text):
    """How often each word occurs, case-insensitively (contractions like "don't" are one word)."""
    counts = {}
    for word in _WORD.findall(text):
        word = word.lower()
        counts[word] = counts.get(word, 0) + 1
    return counts


def rle_encode(text):
    """'aaabcc' -> '3a1b2c'."""
    if not text:
        return ""
    out, run, count = [], text[0], 1
    for ch in text[1:]:
        if ch == run:
            count += 1
        else:
            out.append(f"{count}{run}")
            run, count = ch, 1
    out.append(f"{count}{run}")
    return "".join(out)


def rle_decode(encoded):
    """'3a1b2c' -> 'aaabcc' (counts may have several digits: '12x')."""
    out, count = [], ""
    for ch in encoded:
        if ch.isdigit():
            count += ch
        else:
            if not count:
                raise ValueError(f"a run without a count before {ch!r}")
            out.append(ch * int(count))
            count = ""
    if count:
        raise ValueError("a count without a character at the end")
    return "".join(out)


def is_palindrome(text):
    """Whether `text` reads the same backwards, ignoring case, spaces and punctuation."""
    letters = [ch.lower() for ch in text if ch.isalnum()]
    return letters == letters[::-1]


def caesar(text, shift):
    """Shift letters by `shift` places (wrapping around), keeping case; other characters stay."""
    out = []
    for ch in text:
        if "a" <= ch <= "z":
            out.append(chr((ord(ch) - ord("a") + shift) % 26 + ord("a")))
        elif "A" <= ch <= "Z":
            out.append(chr((ord(ch) - ord("A") + shift) % 26 + ord("A")))
        else:
            out.append(ch)
    return "".join(out)
