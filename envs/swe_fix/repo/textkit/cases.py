"""Converting identifiers and titles between cases."""

import re

_BOUNDARY = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?=[A-Z][a-z]|[^A-Za-z]|$)")
_SMALL_WORDS = {"a", "an", "and", "as", "at", "but", "by", "for", "in", "of", "on", "or", "the", "to"}


def _words(text):
    return [w.lower() for w in _BOUNDARY.findall(text)]


def snake_case(text):
    """`HTTPServerError` -> `http_server_error`; `some text` -> `some_text`."""
    return "_".join(_words(text))


def kebab_case(text):
    """`someVariableName` -> `some-variable-name`."""
    return "-".join(_words(text))


def camel_case(text, upper_first=False):
    """`some_variable_name` -> `someVariableName` (`SomeVariableName` with `upper_first`)."""
    words = _words(text)
    if not words:
        return ""
    head = words[0].capitalize() if upper_first else words[0]
    return head + "".join(w.capitalize() for w in words[1:])


def title_case(text):
    """Title case in the English style: small words stay lowercase unless first or last."""
    words = text.split()
    titled = []
    for i, word in enumerate(words):
        lower = word.lower()
        if 0 < i < len(words) - 1 and lower in _SMALL_WORDS:
            titled.append(lower)
        else:
            titled.append(lower[:1].upper() + lower[1:])
    return " ".join(titled)
