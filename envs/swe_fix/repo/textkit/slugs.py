"""URL slugs and word truncation."""

import re
import unicodedata

_NOT_WORD = re.compile(r"[^a-z0-9]+")


def slugify(text, sep="-", max_length=None):
    """A lowercase ASCII slug of `text`: accents dropped, runs of other characters as one `sep`.

    >>> slugify("Crème Brûlée, à la carte!")
    'creme-brulee-a-la-carte'
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = _NOT_WORD.sub(sep, ascii_text.lower()).strip(sep)
    if max_length is not None and len(slug) > max_length:
        slug = slug[:max_length].rstrip(sep)
    return slug


def truncate_words(text, count, ending="..."):
    """The first `count` words of `text`, with `ending` when words were dropped."""
    words = text.split()
    if len(words) <= count:
        return " ".join(words)
    return " ".join(words[:count]) + ending
